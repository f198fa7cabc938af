"""Splitting a global batch into micro-batches of any sizes.

``sizes_for`` turns the public ways of naming a split (``micro_batch_size``,
``num_micro_batches`` or explicit ``sizes``; none of them: one batch) into sizes, checked
once at each public entry; ``parts`` then slices a checked batch into ``MicroBatch`` records
that carry their samples' global positions (``positions``), which key the dropout masks.
"""

from dataclasses import dataclass

from minigrad.accumulate.guard import as_batch
from minigrad.engine import validate
from minigrad.nn.dropout import positions


def split_sizes(n, micro_batch_size=None, num_micro_batches=None):
    """Sizes of the micro-batches that split ``n`` items, in order.

    By ``micro_batch_size`` (the last one may be smaller) or into ``num_micro_batches``
    near-equal parts (the first ``n % k`` get one more); neither: one batch of ``n``.

    >>> split_sizes(10, micro_batch_size=4)
    [4, 4, 2]
    >>> split_sizes(10, num_micro_batches=4)
    [3, 3, 2, 2]
    """
    n = validate.positive_int("n", n)
    if micro_batch_size is not None and num_micro_batches is not None:
        raise ValueError("give micro_batch_size or num_micro_batches, not both")
    if micro_batch_size is not None:
        m = validate.positive_int("micro_batch_size", micro_batch_size)
        return [min(m, n - start) for start in range(0, n, m)]
    if num_micro_batches is not None:
        k = validate.integer("num_micro_batches", num_micro_batches, low=1, high=max(n, 1))
        q, r = divmod(n, k)
        return [q + 1] * r + [q] * (k - r)
    return [n]


def check_sizes(sizes, n):
    """``sizes`` as a list of positive Python ints that sum to ``n``."""
    if isinstance(sizes, (str, bytes)) or not hasattr(sizes, "__iter__"):
        raise TypeError(f"sizes must be a sequence of positive ints, got {type(sizes).__name__}")
    sizes = [validate.positive_int(f"sizes[{i}]", s) for i, s in enumerate(sizes)]
    if sum(sizes) != n:
        raise ValueError(f"micro-batch sizes {sizes} must be positive and sum to the "
                         f"batch size {n}")
    return sizes


def one_way(micro_batch_size=None, num_micro_batches=None, sizes=None):
    """``ValueError`` unless at most one of the three ways of naming a split is given."""
    given = {name: value for name, value in (("micro_batch_size", micro_batch_size),
                                             ("num_micro_batches", num_micro_batches),
                                             ("sizes", sizes)) if value is not None}
    if len(given) > 1:
        shown = ", ".join(f"{name}={value!r}" for name, value in given.items())
        raise ValueError(f"give at most one of micro_batch_size, num_micro_batches, sizes; "
                         f"got {shown}")


def sizes_for(n, *, micro_batch_size=None, num_micro_batches=None, sizes=None):
    """The split of ``n`` samples named by at most one of the three ways, checked.

    >>> sizes_for(10, micro_batch_size=4), sizes_for(5, sizes=[1, 4]), sizes_for(3)
    ([4, 4, 2], [1, 4], [3])
    >>> sizes_for(10, micro_batch_size=4, sizes=[5, 5])  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: give at most one of micro_batch_size, num_micro_batches, sizes; got ...
    """
    one_way(micro_batch_size, num_micro_batches, sizes)
    if sizes is not None:
        return check_sizes(sizes, n)
    return split_sizes(n, micro_batch_size, num_micro_batches)


@dataclass(frozen=True)
class MicroBatch:
    """One checked micro-batch: inputs ``x``, targets ``y`` and ``index``, the global
    positions of its samples (what keys the dropout masks, so they do not depend on the
    split). Made by ``parts`` from a batch checked once; strategies trust it."""

    x: object
    y: object
    index: object
    items: int | None = None  # its item count, when the batch's were read at once


def parts(x, y, sizes, offset=0, counts=None):
    """The ``MicroBatch`` records of a checked ``(x, y)`` split by checked ``sizes``; the
    first sample's global position is ``offset`` (non-zero for a shard of a larger batch).
    ``counts``: the items of each sample, on the host (a loss's ``for_batch``), or None."""
    out, start = [], 0
    for size in sizes:
        stop = start + size
        xj = x[start:stop, ...]
        items = None
        if counts is not None:
            part = counts[start:stop]
            items = int(part.sum()) if hasattr(part, "sum") else sum(part)
        out.append(MicroBatch(xj, y[start:stop, ...], positions(xj, offset + start), items))
        start = stop
    return out


def micro_batches(x, y, sizes):
    """Yield ``(start, x_j, y_j)`` for consecutive slices of the given ``sizes``.

    >>> import numpy as np
    >>> x, y = np.zeros((5, 2)), np.arange(5)
    >>> [(start, y_j.tolist()) for start, x_j, y_j in micro_batches(x, y, [2, 3])]
    [(0, [0, 1]), (2, [2, 3, 4])]
    """
    x, y = as_batch(x, y)
    sizes = check_sizes(sizes, x.shape[0])
    start = 0
    for size in sizes:
        stop = start + size
        yield start, x[start:stop, ...], y[start:stop, ...]
        start = stop
