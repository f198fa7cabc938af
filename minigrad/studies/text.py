"""Text for token-level losses: the US Census 1990 first names, a character vocabulary, and
the windows of the neural probabilistic language model (Bengio et al. 2003).

A name is a sequence of tokens: its characters, then the boundary token ``"."`` (id 0, as in
makemore), which also pads the context at the start. For context length C, position t of a
sequence gives one item: the previous C token ids, and the next token id (its target).
"emma" with C = 3 gives five: ``...`` -> e, ``..e`` -> m, ``.em`` -> m, ``emm`` -> a,
``mma`` -> ``.``. Two layouts (``minigrad.nn.windows``, which holds ``Windows`` and
``IGNORE_INDEX``, -100) put many sequences into arrays that ``accumulate.step`` splits by
rows, to train with ``nn.CrossEntropyLoss(ignore_index=-100)``:

* ``padded_windows``: one sequence per row, rows padded to the longest; a padding
  position's target is ``IGNORE_INDEX``, so the items are the real tokens;
* ``packed_windows``: sequences placed one after another into rows of a fixed length;
  ``reset=True`` starts each sequence's context afresh at its boundary, ``reset=False`` lets
  the context run on from the sequence before it in the row (it leaks).

>>> vocab = vocabulary(["emma", "ava"])
>>> w = padded_windows(["emma", "ava"], vocab, context=3)
>>> w.x.shape, w.y.tolist()[1], w.num_tokens
((2, 5, 3), [1, 4, 1, 0, -100], 9)
"""

import importlib.resources
from dataclasses import dataclass

from minigrad import nn
from minigrad.engine import Tensor, backend, validate

IGNORE_INDEX = nn.windows.IGNORE_INDEX
"""The target of a padding position, ``nn.CrossEntropyLoss``'s default ``ignore_index``."""
BOUNDARY = "."
"""The boundary token (id 0): the end of every name, and the padding of a context's start."""
LISTS = ("female", "male")
"""The Census lists ``names_corpus`` reads (files ``dist.<list>.first`` of ``names``)."""


def names_corpus(lists=LISTS, *, seed=None):
    """The first names of the US Census 1990 lists, lowercase and deduplicated: sorted, or
    in a random order drawn from ``seed``. Offline: the lists ship with the ``names``
    package (0.3.0, MIT licence), read with ``importlib.resources``.

    >>> corpus = names_corpus()
    >>> len(corpus), corpus[:3], len(names_corpus("male"))
    (5163, ['aaron', 'abbey', 'abbie'], 1219)
    """
    if isinstance(lists, str):
        lists = (lists,)
    if not isinstance(lists, (tuple, list)) or not lists:
        raise TypeError(f"lists must be one of {LISTS} or a non-empty tuple of them, "
                        f"got {lists!r}")
    lists = tuple(validate.choice("lists", name, LISTS) for name in lists)
    generator = None if seed is None else backend.rng(seed)
    try:
        files = importlib.resources.files("names")
    except (ModuleNotFoundError, TypeError) as err:  # TypeError: a names.py of one's own
        raise ImportError("names_corpus() needs the names package (0.3.0), which ships the "
                          "Census lists: pip install names==0.3.0 (in minigrad[test]); got: "
                          f"{err}") from err
    words = set()
    for name in lists:
        for line in (files / f"dist.{name}.first").read_text().splitlines():
            if line.strip():
                words.add(line.split()[0].lower())
    words = sorted(words)
    if generator is not None:
        words = [words[i] for i in generator.permutation(len(words))]
    return words


def _words(words):
    """``words`` as a list of non-empty strings without the boundary token."""
    if isinstance(words, str) or not isinstance(words, (list, tuple)) or not words:
        raise TypeError(f"words must be a non-empty list of strings, got {words!r:.60}")
    for i, word in enumerate(words):
        if not isinstance(word, str) or not word or BOUNDARY in word:
            raise ValueError(f"words[{i}] must be a non-empty string without {BOUNDARY!r}, "
                             f"got {word!r}")
    return list(words)


@dataclass(frozen=True)
class Vocabulary:
    """Token strings and their ids: ``tokens[i]`` has id i, ``tokens[0]`` is ``BOUNDARY``.

    >>> vocab = vocabulary(["ab", "ba"])
    >>> vocab.tokens, vocab.encode("ab"), vocab.decode([1, 2, 0]), len(vocab)
    (('.', 'a', 'b'), [1, 2], 'ab.', 3)
    """

    tokens: tuple

    def __post_init__(self):
        tokens = self.tokens
        if not isinstance(tokens, tuple) or not tokens or tokens[0] != BOUNDARY \
                or len(set(tokens)) != len(tokens):
            raise ValueError(f"tokens must be a tuple of distinct strings that starts with "
                             f"{BOUNDARY!r}, got {tokens!r:.80}")
        object.__setattr__(self, "ids", {t: i for i, t in enumerate(tokens)})

    def __len__(self):
        return len(self.tokens)

    def encode(self, word):
        """The ids of ``word``'s characters (without the boundary)."""
        unknown = sorted(set(word) - set(self.ids))
        if unknown:
            raise ValueError(f"{word!r} holds characters outside the vocabulary: {unknown}")
        return [self.ids[c] for c in word]

    def decode(self, ids):
        """The string of token ``ids``."""
        return "".join(self.tokens[validate.integer("id", i, low=0, high=len(self) - 1)]
                       for i in ids)


def vocabulary(words):
    """``BOUNDARY``, then every character of ``words``, sorted."""
    return Vocabulary((BOUNDARY, *sorted(set("".join(_words(words))))))


def _encoded(words, vocab):
    """Each word's token ids, then the boundary's: the targets of its positions."""
    words = _words(words)
    if not isinstance(vocab, Vocabulary):
        raise TypeError(f"vocab must be a Vocabulary (text.vocabulary(words)), got "
                        f"{type(vocab).__name__}")
    return [[*vocab.encode(word), 0] for word in words]


def padded_windows(words, vocab, context):
    """One name per row, rows padded to the longest (len(word) + 1 positions): a padding
    position's context is boundary tokens and its target ``IGNORE_INDEX``
    (``nn.windows.padded``)."""
    return nn.windows.padded(_encoded(words, vocab), context)


def packed_windows(words, vocab, context, row_length, *, reset=True):
    """Names one after another in rows of ``row_length`` positions, never cut
    (``nn.windows.packed``): ``reset=True`` starts each name's context from boundary tokens,
    ``reset=False`` lets it run on from the name before it in the row (the boundary token
    between the two is in both contexts).

    >>> vocab = vocabulary(["emma", "ava"])
    >>> leak = packed_windows(["emma", "ava"], vocab, 3, row_length=9, reset=False)
    >>> vocab.decode(leak.x[0, 5]), vocab.decode(leak.x[0, 6])  # the contexts of "a", "v"
    ('ma.', 'a.a')
    """
    return nn.windows.packed(_encoded(words, vocab), context, row_length, reset=reset)


class SequenceMeanLoss(nn.Module):
    """Per-sequence averaging: each sequence's mean token cross-entropy, averaged over the
    sequences, a different objective from the mean over tokens (short names weigh more):

        L = (1/S) sum_s (1/n_s) sum_{t in s} CE_t,    ``num_items`` = S, the sequences

    So token t's loss is weighed 1/n_s in the sum, and the window divides once by its
    sequences. Targets: ``Windows.sequence_targets()`` (..., 2), the next-token id and the
    sequence index (-1 at padding); n_s is counted in the targets given, so a micro-batch
    must hold whole sequences, as a split by rows does (a sequence never spans two rows).

    >>> import numpy as np
    >>> w = padded_windows(["ab", "b"], vocabulary(["ab", "b"]), context=2)
    >>> loss, logits = SequenceMeanLoss(), Tensor(np.zeros((2, 3, 3)))  # all 1/3
    >>> loss.num_items(w.sequence_targets()), round(loss(logits, w.sequence_targets()).item(), 6)
    (2, 1.098612)
    """

    def __init__(self, reduction="mean", ignore_index=IGNORE_INDEX):
        super().__init__()
        self.reduction = validate.choice("reduction", reduction, ("mean", "sum", "none"))
        self.ignore_index = validate.integer("ignore_index", ignore_index)

    def forward(self, logits, target, reduction=None):
        reduction = self.reduction if reduction is None else reduction
        target = target.data if isinstance(target, Tensor) else target
        if target.ndim < 2 or target.shape[-1] != 2:
            raise ValueError(f"target must be (..., 2) (Windows.sequence_targets()), got "
                             f"shape {tuple(target.shape)}")
        per_token = nn.functional.cross_entropy(logits, target[..., 0], "none",
                                                self.ignore_index)
        weighed = per_token * self._weights(target[..., 1], per_token)
        if reduction == "none":
            return weighed
        total = weighed.sum()
        return total if reduction == "sum" else total / self.num_items(target)

    def _weights(self, sequence, like):
        """1 / n_s at each position of sequence s (its count in ``sequence``), 0 at -1, in
        ``like``'s dtype. Counted by sorting (``unique_all`` is missing from some
        namespaces): n_s is the width of s's run among the sorted ids."""
        xp = backend.get_namespace(sequence)
        flat = xp.reshape(xp.astype(sequence, xp.int64, copy=True), (-1,))  # contiguous
        ordered = xp.sort(flat)
        n = xp.searchsorted(ordered, flat, side="right") - xp.searchsorted(ordered, flat)
        weights = xp.where(flat >= 0, 1.0 / xp.astype(n, xp.float64), 0.0)
        return xp.reshape(xp.astype(weights, like.dtype), sequence.shape)

    def num_items(self, target):
        """The sequences: the distinct sequence indices (>= 0) in ``target[..., 1]``."""
        target = target.data if isinstance(target, Tensor) else target
        xp = backend.get_namespace(target)
        ordered = xp.sort(xp.reshape(target[..., 1], (-1,)))
        starts = xp.concat([ordered[:1] >= 0, (ordered[1:] != ordered[:-1]) & (ordered[1:] >= 0)])
        return int(xp.sum(xp.astype(starts, xp.int64)))
