"""Splitting a global batch into micro-batches of any sizes."""


def split_sizes(n, micro_batch_size=None, num_micro_batches=None):
    """Sizes of the micro-batches that split ``n`` items, in order.

    By ``micro_batch_size`` (the last one may be smaller) or into ``num_micro_batches``
    near-equal parts (the first ``n % k`` get one more); neither: one batch of ``n``.

    >>> split_sizes(10, micro_batch_size=4)
    [4, 4, 2]
    >>> split_sizes(10, num_micro_batches=4)
    [3, 3, 2, 2]
    """
    if micro_batch_size is not None and num_micro_batches is not None:
        raise ValueError("give micro_batch_size or num_micro_batches, not both")
    if micro_batch_size is not None:
        if not isinstance(micro_batch_size, int) or micro_batch_size < 1:
            raise ValueError(f"micro_batch_size must be a positive int, got {micro_batch_size!r}")
        return [min(micro_batch_size, n - start) for start in range(0, n, micro_batch_size)]
    if num_micro_batches is not None:
        if not isinstance(num_micro_batches, int) or not 1 <= num_micro_batches <= n:
            raise ValueError(f"num_micro_batches must be an int in [1, {n}], "
                             f"got {num_micro_batches!r}")
        q, r = divmod(n, num_micro_batches)
        return [q + 1] * r + [q] * (num_micro_batches - r)
    return [n]


def micro_batches(x, y, sizes):
    """Yield ``(start, x_j, y_j)`` for consecutive slices of the given ``sizes``."""
    if sum(sizes) != x.shape[0] or any(s < 1 for s in sizes):
        raise ValueError(f"micro-batch sizes {list(sizes)} must be positive and sum to the "
                         f"batch size {x.shape[0]}")
    start = 0
    for size in sizes:
        stop = start + size
        yield start, x[start:stop, ...], y[start:stop, ...]
        start = stop
