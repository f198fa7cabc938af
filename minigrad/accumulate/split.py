"""Splitting a global batch into micro-batches of any sizes."""

from minigrad.accumulate.guard import as_batch
from minigrad.engine import validate


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
