"""Primitives that gather by integer index: ``take_along_axis`` (one element per index along
an axis) and ``embedding`` (one row of a table per index, as
``torch.nn.functional.embedding``).

Each derivative is written right under its forward: a gather's backward scatters ``g``
back, and where an index repeats, the gradients of its copies ADD. The array API has no
scatter-add (and a fancy-indexed ``+=`` keeps one of several repeated indices), so the
backwards build it from portable operations: a one-hot product (``take_along_axis``) and
sorted runs summed in doubling steps (``index_add``, for ``embedding``).

>>> import numpy as np
>>> from minigrad.engine import Tensor
>>> table = Tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
>>> embedding(np.array([1, 0, 1]), table).sum().backward()
>>> table.grad  # row 1 was picked twice
array([[1., 1.],
       [2., 2.]])
"""

from minigrad.engine import backend, shapes, validate
from minigrad.engine.tensor import Tensor, primitive


def take_along_axis(x, indices, axis=-1):
    """Gather ``x`` along ``axis`` at integer ``indices`` (no gradient for the indices).

    The backward scatters ``g`` back with a one-hot product, since the array API has no
    scatter-add: cost O(indices.size * x.shape[axis]), fine for cross-entropy's one index.
    """
    xp = x.xp
    idx = indices.data if isinstance(indices, Tensor) else indices
    if not backend.is_array(idx):
        raise TypeError(f"indices must be an integer array, got {type(idx).__name__}")
    backend.get_namespace(x.data, idx)
    if not xp.isdtype(idx.dtype, "integral"):
        raise TypeError(f"indices must have an integer dtype, got {idx.dtype}")
    (axis,) = shapes.axes(axis, x.ndim, "take_along_axis")
    n = x.shape[axis]
    if backend.size(idx) and bool(xp.any((idx < 0) | (idx >= n))):
        raise IndexError(f"indices must lie in [0, {n}) along axis {axis} of a tensor of "
                         f"shape {x.shape}")
    # A copy in int64: the backward never reads an index the caller has changed since, and
    # its class numbers 0..n-1 fit (in uint8 they would wrap above 255).
    idx = xp.astype(idx, xp.int64)

    def backward(g):
        g_last = xp.moveaxis(g, axis, -1)[..., None]
        idx_last = xp.moveaxis(idx, axis, -1)[..., None]
        classes = xp.arange(n, dtype=idx.dtype, device=backend.device(idx))
        onehot = xp.astype(idx_last == classes, g.dtype)
        scattered = xp.sum(g_last * onehot, axis=-2)
        return xp.moveaxis(scattered, -1, axis)

    return primitive(xp.take_along_axis(x.data, idx, axis=axis), (x,), backward,
                     name="take_along_axis")


def embedding(indices, weight, padding_idx=None):
    """Row ``indices[...]`` of the (V, D) table ``weight``: shape indices.shape + (D,), as
    ``torch.nn.functional.embedding``. ``indices``: an integer array (or Tensor) of any
    shape, of ``weight``'s namespace, each in [0, V) (``IndexError`` otherwise, after one
    read of their minimum and maximum). No gradient for the indices.

    Backward: row v of the weight's gradient is the sum of g[n] over the positions n with
    indices[n] == v (``index_add``), 0 for a row never picked and for ``padding_idx``
    (negative counts from the end), whose row gets no gradient however often it is picked.
    """
    xp, W = weight.xp, weight.data
    if W.ndim != 2:
        raise ValueError(f"embedding needs a weight of shape (num_embeddings, embedding_dim),"
                         f" got shape {tuple(W.shape)}")
    rows, width = W.shape
    idx = indices.data if isinstance(indices, Tensor) else indices
    if not backend.is_array(idx):
        idx = xp.asarray(idx, device=backend.device(W))
    backend.get_namespace(W, idx)
    if not backend.is_integral(xp, idx):
        raise TypeError(f"indices must be an integer array, got dtype {idx.dtype}")
    padding_idx = validate.optional(validate.integer, "padding_idx", padding_idx,
                                    low=-rows, high=rows - 1)
    if padding_idx is not None and padding_idx < 0:
        padding_idx += rows
    shape = tuple(idx.shape)
    if backend.size(idx):
        low, high = backend.int_range(xp, idx)
        if low < 0 or high >= rows:
            raise IndexError(f"indices must lie in [0, {rows}) (the rows of a weight of "
                             f"shape {tuple(W.shape)}), got {low if low < 0 else high}")
    # A flat copy in int64: the backward never reads an index the caller has changed since.
    flat = xp.reshape(xp.astype(idx, xp.int64), (-1,))
    out = xp.reshape(xp.take(W, flat, axis=0), shape + (width,))

    def backward(g):
        values = xp.reshape(g, (flat.shape[0], width))
        sums = backend.add_at(flat, values, rows)  # NumPy's own route; None elsewhere
        if sums is None:
            sums = index_add(xp, flat, values, rows)
        if padding_idx is None:
            return sums
        picked = xp.arange(rows, dtype=flat.dtype, device=backend.device(flat)) != padding_idx
        return xp.where(xp.reshape(picked, (-1, 1)), sums, xp.zeros_like(sums))

    return primitive(out, (weight,), backward, name="embedding")


def index_add(xp, index, values, rows):
    """The (rows, D) array whose row v is the sum of ``values[n]`` over the n with
    ``index[n] == v`` (0 where v never occurs): ``out.index_add_(0, index, values)`` into
    zeros, in torch's words; ``index`` (N,) of integers in [0, rows), ``values`` (N, D).

    Sorted runs, summed in doubling steps, with portable operations only: a stable sort
    puts the copies of each index next to each other, in their order; then, for step = 1,
    2, 4, ..., every row adds the partial sum ``step`` rows above it when that row is of
    the same run (a segmented scan), so after ceil(log2 N) steps the last row of each run
    holds the run's sum, which a binary search finds. Each sum is a tree of the run's values
    of depth ceil(log2 n) for a run of n: exact where every partial sum is exact, else
    within the summation bound gamma_(ceil log2 n) * sum |values| (a sequential sum's bound
    has n - 1 in place of ceil log2 n); the same additions in the same order on every
    namespace, so the same values; and a non-finite value reaches its own row only (a
    one-hot product would make 0 * inf = NaN everywhere). Cost: O(N log N) for the sort and
    O(N D log N) additions, O(N D) memory (a one-hot product takes O(N V D) time and O(N V)
    memory).

    >>> import numpy as np
    >>> index_add(np, np.array([2, 0, 2, 2]), np.array([[1.0], [2.0], [4.0], [8.0]]), 3)
    array([[ 2.],
           [ 0.],
           [13.]])
    """
    device = backend.device(values)
    rows_of = xp.arange(rows, dtype=index.dtype, device=device)
    zero = xp.zeros((rows, values.shape[1]), dtype=values.dtype, device=device)
    n = index.shape[0]
    if n == 0:
        return zero
    order = xp.argsort(index, stable=True)
    keys = xp.take(index, order)
    sums = xp.take(values, order, axis=0)
    step = 1
    while step < n:
        same = xp.reshape(keys[step:] == keys[:-step], (-1, 1))
        above = xp.where(same, sums[step:, ...] + sums[:-step, ...], sums[step:, ...])
        sums = xp.concat([sums[:step, ...], above])
        step *= 2
    last = xp.searchsorted(keys, rows_of, side="right") - 1  # the last row of each run
    found = xp.take(keys, xp.clip(last, 0, n - 1)) == rows_of
    taken = xp.take(sums, xp.clip(last, 0, n - 1), axis=0)
    # Added into zeros, as torch and np.add.at do: a run of one -0.0 gives +0.0 there too.
    return zero + xp.where(xp.reshape(found, (-1, 1)), taken, zero)


__all__ = ["embedding", "index_add", "take_along_axis"]
