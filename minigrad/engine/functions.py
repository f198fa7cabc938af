"""Primitives of two inputs that are functions rather than Tensor methods."""

from minigrad.engine import backend, shapes
from minigrad.engine.tensor import Tensor, primitive


def maximum(a, b):
    """Elementwise max; at ties the gradient is split in half between both, as in PyTorch.

    The backward multiplies ``g`` by each input's share (as ``relu`` multiplies by its mask):
    an inf or NaN upstream gradient gives NaN for the smaller input, where torch gives 0.
    """
    if not isinstance(a, Tensor):  # a scalar takes b's namespace and dtype, as in a + b
        a = b._lift(a) if isinstance(b, Tensor) else Tensor(a)
    b = a._lift(b)
    xp, x, y = a.xp, a.data, b.data

    def backward(g):  # each input gets its share: 1 where it is larger, 1/2 at ties
        return g * _share(xp, x, y), g * _share(xp, y, x)

    return primitive(xp.maximum(x, y), (a, b), backward)


def linear(x, weight, bias=None):
    """y = x @ weight^T + bias, one primitive, as ``torch.nn.functional.linear``.

    ``weight`` has shape (out, in); ``x`` any shape (..., in); ``bias`` shape (out,) or None.
    Backward, with G and X the gradient and the input flattened to (-1, out) and (-1, in):
    dx = g @ weight, dweight = G^T X, dbias = the sum of G over its rows.

    One node instead of three (transpose, matmul, add): the graph keeps y alone, not also
    x @ weight^T, and dweight = G^T X comes out row-major like the weight itself.
    """
    if not isinstance(x, Tensor):
        x = weight._lift(x)
    xp, X, W = x.xp, x.data, weight.data
    if W.ndim != 2 or X.ndim < 1 or X.shape[-1] != W.shape[1]:
        raise ValueError(f"linear needs x of shape (..., in) and weight of shape (out, in), "
                         f"got x {tuple(X.shape)} and weight {tuple(W.shape)}")
    if bias is not None and tuple(bias.shape) != (W.shape[0],):
        raise ValueError(f"linear's bias must have shape ({W.shape[0]},) for a weight of "
                         f"shape {tuple(W.shape)}, got {tuple(bias.shape)}")
    for name, t in (("x", x), ("bias", bias)):
        if t is not None and t.dtype != W.dtype:  # as torch: no silent promotion
            raise TypeError(f"linear's {name} has dtype {t.dtype}, its weight {W.dtype}; "
                            "they must be the same")
    y = X @ xp.matrix_transpose(W)
    if bias is not None:
        y += bias.data  # in place: y is the product's fresh array, no second (N, out) array
    inputs = (x, weight) if bias is None else (x, weight, bias)

    def backward(g):
        rows = xp.reshape(g, (-1, g.shape[-1]))
        gx = g @ W if x.requires_grad else None
        gw = xp.matrix_transpose(rows) @ xp.reshape(X, (-1, X.shape[-1])) \
            if weight.requires_grad else None
        if bias is None:
            return gx, gw
        return gx, gw, xp.sum(rows, axis=0) if bias.requires_grad else None

    return primitive(y, inputs, backward)


def _share(xp, x, y):
    """1 where x > y, 1/2 where x == y, 0 elsewhere, in x's dtype."""
    return (xp.astype(x > y, x.dtype) + xp.astype(x >= y, x.dtype)) * 0.5


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

    return primitive(xp.take_along_axis(x.data, idx, axis=axis), (x,), backward)
