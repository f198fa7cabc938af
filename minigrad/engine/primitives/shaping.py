"""Primitives that change a tensor's shape: ``sum`` over axes, ``reshape`` and
``transpose``.

Each derivative is written right under its forward: it puts ``g`` back into the input's
shape (broadcasts a sum's gradient, reshapes, permutes back).

>>> from minigrad.engine import Tensor
>>> x = Tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
>>> sum(transpose(x), axis=0).backward(Tensor([1.0, 10.0]))
>>> x.grad
array([[ 1.,  1.],
       [10., 10.]])
"""

from minigrad.engine import graph, shapes, validate
from minigrad.engine.tensor import primitive


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


__all__ = ["reshape", "sum", "transpose"]
