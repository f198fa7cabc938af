"""The items of a token-level language model (``CharMLP``): token-id sequences as
(context, next token) windows, padded or packed into rows that ``accumulate.step`` splits.

A sequence is a list of token ids, the targets in order (a character model ends each with
its boundary token). For context length C, position t of a sequence gives one item: the
previous C ids (``pad`` before the start) and id t, its target. [5, 6, 0] with C = 2 and
``pad`` 0 gives three: (0, 0) -> 5, (0, 5) -> 6, (5, 6) -> 0. Two layouts put many
sequences into arrays, to train with ``nn.CrossEntropyLoss(ignore_index=-100)``:

* ``padded``: one sequence per row, rows padded to the longest (or to ``length``); a
  padding position's target is ``IGNORE_INDEX``, so the items are the real tokens;
* ``packed``: sequences placed one after another into rows of a fixed length;
  ``reset=True`` starts each sequence's context afresh at its start, ``reset=False`` lets
  the context run on from the sequence before it in the row (it leaks).

>>> w = padded([[5, 6, 0], [7, 0]], context=2)
>>> w.x.shape, w.y.tolist(), w.num_tokens
((2, 3, 2), [[5, 6, 0], [7, 0, -100]], 5)
"""

from dataclasses import dataclass

import numpy as np

from minigrad.engine import validate

IGNORE_INDEX = -100
"""The target of a padding position, ``nn.CrossEntropyLoss``'s default ``ignore_index``."""


@dataclass(frozen=True)
class Windows:
    """Items of a layout, row by row. ``x`` (rows, L, C): each position's context, token
    ids; ``y`` (rows, L): its target, ``IGNORE_INDEX`` at padding; ``sequence`` (rows, L):
    the index of the sequence it belongs to, -1 at padding (a boundary between two
    sequences is where it changes). All int64 NumPy arrays."""

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
        """``y`` and ``sequence`` stacked on a last axis, (..., 2): the targets of a
        per-sequence loss (``studies.text.SequenceMeanLoss``)."""
        return np.stack([self.y, self.sequence], axis=-1)


def _sequences(sequences, context, pad):
    """Each sequence's (contexts (n, C), targets (n,)) of its n positions."""
    if isinstance(sequences, (str, bytes)) or not isinstance(sequences, (list, tuple)) \
            or not sequences:
        raise TypeError(f"sequences must be a non-empty list of token-id lists, got "
                        f"{sequences!r:.60}")
    context = validate.positive_int("context", context)
    pad = validate.integer("pad", pad, low=0)
    out = []
    for i, ids in enumerate(sequences):
        targets = np.asarray(ids) if not isinstance(ids, (str, bytes)) else np.array(())
        if targets.ndim != 1 or targets.size == 0 or targets.dtype.kind not in "iu" \
                or np.any(targets < 0):
            raise ValueError(f"sequences[{i}] must be a non-empty list of token ids (ints "
                             f">= 0), got {ids!r:.60}")
        targets = targets.astype(np.int64)
        stream = np.concatenate([np.full(context, pad, dtype=np.int64), targets])
        windows = np.stack([stream[t:t + context] for t in range(len(targets))])
        out.append((windows, targets))
    return out, context, pad


def _layout(rows, length, context, pad):
    """Empty arrays of ``rows`` rows of ``length`` padding positions."""
    return (np.full((rows, length, context), pad, dtype=np.int64),
            np.full((rows, length), IGNORE_INDEX, dtype=np.int64),
            np.full((rows, length), -1, dtype=np.int64))


def padded(sequences, context, *, length=None, pad=0):
    """One sequence per row, rows of ``length`` positions (default: the longest sequence's);
    a padding position's context is ``pad`` tokens and its target ``IGNORE_INDEX``."""
    items, context, pad = _sequences(sequences, context, pad)
    longest = max(len(t) for _, t in items)
    length = longest if length is None else validate.positive_int("length", length)
    if length < longest:
        raise ValueError(f"length must be >= {longest} (the longest sequence), got {length}")
    x, y, sequence = _layout(len(items), length, context, pad)
    for i, (windows, targets) in enumerate(items):
        n = len(targets)
        x[i, :n], y[i, :n], sequence[i, :n] = windows, targets, i
    return Windows(x, y, sequence)


def packed(sequences, context, row_length, *, reset=True, pad=0):
    """Sequences one after another in rows of ``row_length`` positions: each goes into the
    current row if it fits, else it starts the next (it is never cut), and what is left at a
    row's end is padding.

    ``reset=True``: each sequence's context starts from ``pad`` tokens, as in ``padded``
    (its items are the same). ``reset=False``: the context runs on across the boundary from
    the sequence before it in the row (each row starts from ``pad`` tokens): the first
    C - 1 positions of a sequence see the end of the one before.

    >>> leak = packed([[5, 6, 0], [7, 0]], 2, row_length=5, reset=False)
    >>> leak.x[0].tolist()  # the contexts of 5, 6, 0, then of 7 (after "6, 0") and 0
    [[0, 0], [0, 5], [5, 6], [6, 0], [0, 7]]
    """
    items, context, pad = _sequences(sequences, context, pad)
    row_length = validate.positive_int("row_length", row_length)
    reset = validate.boolean("reset", reset)
    longest = max(len(t) for _, t in items)
    if row_length < longest:
        raise ValueError(f"row_length must be >= {longest} (the longest sequence), got "
                         f"{row_length}")
    placed, row, used = [], 0, 0
    for i, (_, targets) in enumerate(items):
        if used + len(targets) > row_length:
            row, used = row + 1, 0
        placed.append((i, row, used))
        used += len(targets)
    x, y, sequence = _layout(row + 1, row_length, context, pad)
    for i, row, start in placed:
        windows, targets = items[i]
        stop = start + len(targets)
        y[row, start:stop], sequence[row, start:stop] = targets, i
        if reset:
            x[row, start:stop] = windows
    if not reset:  # the context of each row's stream: pad tokens, then its targets
        for r in range(row + 1):
            stream = np.concatenate([np.full(context, pad, dtype=np.int64),
                                     np.where(sequence[r] >= 0, y[r], pad)])
            x[r] = np.stack([stream[t:t + context] for t in range(row_length)])
    return Windows(x, y, sequence)
