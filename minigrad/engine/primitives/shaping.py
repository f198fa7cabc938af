"""Primitives that change a tensor's shape: ``sum`` over axes, ``reshape``, ``transpose``
and ``take_along_axis`` (a gather along one axis).

Each derivative is written right under its forward: it puts ``g`` back into the input's
shape (broadcasts a sum's gradient, reshapes, permutes back, scatters a gather's).

>>> from minigrad.engine import Tensor
>>> x = Tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
>>> sum(transpose(x), axis=0).backward(Tensor([1.0, 10.0]))
>>> x.grad
array([[ 1.,  1.],
       [10., 10.]])
"""

from minigrad.engine import backend, graph, shapes, validate
from minigrad.engine.tensor import Tensor, primitive


def sum(t, axis=None, keepdims=False):
    """The sum over ``axis`` (all axes when None); each element gets the g of its sum."""
    xp, shape = t.xp, t.shape
    axis = shapes.reduced_axes(axis, t.ndim, "sum")
    keepdims = validate.boolean("keepdims", keepdims)

    def backward(g):
        if not keepdims:
            g = xp.reshape(g, graph.kept_shape(shape, axis))
        return xp.broadcast_to(g, shape)

    return primitive(xp.sum(t.data, axis=axis, keepdims=keepdims), (t,), backward, name="sum")


def reshape(t, *shape):
    """The same elements in ``shape`` (ints with at most one -1, or one tuple of them); the
    gradient is g reshaped back."""
    xp, old = t.xp, t.shape
    shape = shapes.reshaped(shape, t.size, old)
    return primitive(xp.reshape(t.data, shape), (t,), lambda g: xp.reshape(g, old),
                     name="reshape")


def transpose(t, axes=None):
    """Permute the axes (reverse them when ``axes`` is None), like ``numpy.transpose``; the
    gradient is g permuted back."""
    xp = t.xp
    axes = shapes.permutation(axes, t.ndim)
    inverse = shapes.inverse(axes)
    return primitive(xp.permute_dims(t.data, axes), (t,),
                     lambda g: xp.permute_dims(g, inverse), name="transpose")


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


__all__ = ["reshape", "sum", "take_along_axis", "transpose"]
