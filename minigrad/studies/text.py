"""Text for token-level losses: the US Census 1990 first names, a character vocabulary, and
the windows of the neural probabilistic language model (Bengio et al. 2003).

A name is a sequence of tokens: its characters, then the boundary token ``"."`` (id 0, as in
makemore), which also pads the context at the start. For context length C, position t of a
sequence gives one item: the previous C token ids, and the next token id (its target).
"emma" with C = 3 gives five: ``...`` -> e, ``..e`` -> m, ``.em`` -> m, ``emm`` -> a,
``mma`` -> ``.``. Two layouts put many sequences into arrays that ``accumulate.step``
splits by rows, to train with ``nn.CrossEntropyLoss(ignore_index=-100)``:

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

import numpy as np

from minigrad import nn
from minigrad.engine import Tensor, backend, validate

BOUNDARY = "."
"""The boundary token (id 0): the end of every name, and the padding of a context's start."""
IGNORE_INDEX = -100
"""The target of a padding position, ``nn.CrossEntropyLoss``'s default ``ignore_index``."""
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


@dataclass(frozen=True)
class Windows:
    """Items of a layout, row by row. ``x`` (rows, L, C): each position's context, token
    ids; ``y`` (rows, L): its target, ``IGNORE_INDEX`` at padding; ``sequence`` (rows, L):
    the index in ``words`` of the sequence it belongs to, -1 at padding (a boundary between
    two sequences is where it changes). All int64 NumPy arrays."""

    x: np.ndarray
    y: np.ndarray
    sequence: np.ndarray

    @property
    def num_tokens(self):
        """The items: real (not padding) positions."""
        return int(np.sum(self.y != IGNORE_INDEX))

    def flatten(self):
        """One position per row: x (rows * L, C), y and sequence (rows * L,)."""
        return Windows(self.x.reshape(-1, self.x.shape[-1]), self.y.reshape(-1),
                       self.sequence.reshape(-1))

    def tokens(self):
        """The real positions only, in row order: x (T, C), y and sequence (T,)."""
        flat = self.flatten()
        kept = flat.y != IGNORE_INDEX
        return Windows(flat.x[kept], flat.y[kept], flat.sequence[kept])

    def sequence_targets(self):
        """``y`` and ``sequence`` stacked on a last axis, (..., 2): the targets of
        ``SequenceMeanLoss``."""
        return np.stack([self.y, self.sequence], axis=-1)


def _sequences(words, vocab, context):
    """Each word's (contexts (n, C), targets (n,)) of its n = len(word) + 1 positions."""
    words = _words(words)
    if not isinstance(vocab, Vocabulary):
        raise TypeError(f"vocab must be a Vocabulary (text.vocabulary(words)), got "
                        f"{type(vocab).__name__}")
    context = validate.positive_int("context", context)
    out = []
    for word in words:
        targets = np.array([*vocab.encode(word), 0], dtype=np.int64)
        stream = np.concatenate([np.zeros(context, dtype=np.int64), targets])
        windows = np.stack([stream[t:t + context] for t in range(len(targets))])
        out.append((windows, targets))
    return out, context


def _layout(rows, length, context):
    """Empty arrays of ``rows`` rows of ``length`` padding positions."""
    return (np.zeros((rows, length, context), dtype=np.int64),
            np.full((rows, length), IGNORE_INDEX, dtype=np.int64),
            np.full((rows, length), -1, dtype=np.int64))


def padded_windows(words, vocab, context):
    """One sequence per row, rows padded to the longest (len(word) + 1 positions): a padding
    position's context is boundary tokens and its target ``IGNORE_INDEX``."""
    sequences, context = _sequences(words, vocab, context)
    x, y, sequence = _layout(len(sequences), max(len(t) for _, t in sequences), context)
    for i, (windows, targets) in enumerate(sequences):
        n = len(targets)
        x[i, :n], y[i, :n], sequence[i, :n] = windows, targets, i
    return Windows(x, y, sequence)


def packed_windows(words, vocab, context, row_length, *, reset=True):
    """Sequences one after another in rows of ``row_length`` positions: each goes into the
    current row if it fits, else it starts the next (it is never cut), and what is left at a
    row's end is padding.

    ``reset=True``: each sequence's context starts from boundary tokens, as in
    ``padded_windows`` (its items are the same). ``reset=False``: the context runs on across
    the boundary from the sequence before it in the row (each row starts from boundary
    tokens): the first C - 1 positions of a sequence see the end of the one before (the
    boundary token between the two is in both contexts).

    >>> vocab = vocabulary(["emma", "ava"])
    >>> leak = packed_windows(["emma", "ava"], vocab, 3, row_length=9, reset=False)
    >>> vocab.decode(leak.x[0, 5]), vocab.decode(leak.x[0, 6])  # the contexts of "a", "v"
    ('ma.', 'a.a')
    """
    sequences, context = _sequences(words, vocab, context)
    row_length = validate.positive_int("row_length", row_length)
    reset = validate.boolean("reset", reset)
    longest = max(len(t) for _, t in sequences)
    if row_length < longest:
        raise ValueError(f"row_length must be >= {longest} (the longest sequence: its word "
                         f"and the boundary), got {row_length}")
    placed, row, used = [], 0, 0
    for i, (_, targets) in enumerate(sequences):
        if used + len(targets) > row_length:
            row, used = row + 1, 0
        placed.append((i, row, used))
        used += len(targets)
    x, y, sequence = _layout(row + 1, row_length, context)
    for i, row, start in placed:
        windows, targets = sequences[i]
        stop = start + len(targets)
        y[row, start:stop], sequence[row, start:stop] = targets, i
        if reset:
            x[row, start:stop] = windows
    if not reset:  # the context of each row's stream: boundary tokens, then its targets
        for r in range(row + 1):
            stream = np.concatenate([np.zeros(context, dtype=np.int64),
                                     np.where(sequence[r] >= 0, y[r], 0)])
            x[r] = np.stack([stream[t:t + context] for t in range(row_length)])
    return Windows(x, y, sequence)


class SequenceMeanLoss(nn.Module):
    """Per-sequence averaging: each sequence's mean token cross-entropy, averaged over the
    sequences, a different objective from the mean over tokens (short names weigh more):

        L = (1/S) sum_s (1/n_s) sum_{t in s} CE_t,    ``num_items`` = S, the sequences

    So token t's loss is weighed 1/n_s in the sum, and the window divides once by its
    sequences. Targets: ``Windows.sequence_targets()`` (..., 2), the next-token id and the
    sequence index (-1 at padding); n_s is counted in the targets given, so a micro-batch
    must hold whole sequences, as a split by rows does (a sequence never spans two rows).

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
