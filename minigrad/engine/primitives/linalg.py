"""Matrix-product primitives: ``matmul`` (``x @ y``) and ``linear`` (``x @ W^T + b``, fused).

Each derivative is written right under its forward: for out = x @ y, x gets g @ y^T and
y gets x^T @ g.

>>> from minigrad.engine import Tensor
>>> x = Tensor([[1.0, 2.0]], requires_grad=True)
>>> matmul(x, Tensor([[3.0], [4.0]])).sum().backward()
>>> x.grad
array([[3., 4.]])
"""

from minigrad.engine import backend, shapes
from minigrad.engine.tensor import Tensor, lift, primitive


def matmul(a, b):
    """``a @ b`` as in NumPy: (..., n, k) @ (..., k, m) -> (..., n, m), the batch axes
    broadcast. A 1-d operand is a (1, k) row or a (k, 1) column (a reshape before the
    product), and that axis is dropped after (a reshape after it)."""
    b = lift(b, like=a)
    shape = shapes.matmul(a.shape, b.shape)
    x = a if a.ndim > 1 else a.reshape(1, a.shape[0])
    y = b if b.ndim > 1 else b.reshape(b.shape[0], 1)
    out = _matmul(x, y)
    return out.reshape(shape) if a.ndim == 1 or b.ndim == 1 else out


def _matmul(a, b):
    """The primitive ``matmul`` of two operands with at least 2 dimensions each."""
    xp = a.xp
    x, y = a.data, b.data

    def backward(g):
        gx = g @ xp.matrix_transpose(y) if a.requires_grad else None
        if not b.requires_grad:
            return gx, None
        if x.ndim == 2 and backend.is_column_major(y):
            # PyTorch's rule (mm_mat2_backward): a column-major y, such as the W.T of a
            # Linear layer, gets a column-major gradient (g^T x)^T, the same products, so
            # that W's own gradient is row-major like W. Mixing layouts makes NumPy's
            # elementwise ops in the optimizer run through a buffer: slower, and bigger.
            return gx, xp.matrix_transpose(xp.matrix_transpose(g) @ x)
        return gx, xp.matrix_transpose(x) @ g

    return primitive(x @ y, (a, b), backward, name="matmul")


def linear(x, weight, bias=None):
    """y = x @ weight^T + bias, one primitive, as ``torch.nn.functional.linear``.

    ``weight`` has shape (out, in); ``x`` any shape (..., in); ``bias`` shape (out,) or None.
    Backward, with G and X the gradient and the input flattened to (-1, out) and (-1, in):
    dx = g @ weight, dweight = G^T X, dbias = the sum of G over its rows.

    One node instead of three (transpose, matmul, add): the graph keeps y alone, not also
    x @ weight^T, and dweight = G^T X comes out row-major like the weight itself.
    """
    if not isinstance(x, Tensor):
        x = lift(x, like=weight)
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
    # (..., in) as rows (-1, in): one matrix product. NumPy runs a stacked product of a
    # transposed view outside BLAS, several times slower (x of shape (N, L, in) in a
    # language model); rows and stacks add the same terms, in BLAS's order.
    stacked = X.ndim > 2
    y = _rows(xp, X) @ xp.matrix_transpose(W) if stacked else X @ xp.matrix_transpose(W)
    if bias is not None:
        y += bias.data  # in place: y is the product's fresh array, no second (N, out) array
    if stacked:
        y = xp.reshape(y, (*X.shape[:-1], W.shape[0]))
    inputs = (x, weight) if bias is None else (x, weight, bias)

    def backward(g):
        rows = xp.reshape(g, (-1, g.shape[-1]))
        gx = None
        if x.requires_grad:
            gx = xp.reshape(rows @ W, X.shape) if stacked else g @ W
        gw = xp.matrix_transpose(rows) @ xp.reshape(X, (-1, X.shape[-1])) \
            if weight.requires_grad else None
        if bias is None:
            return gx, gw
        return gx, gw, xp.sum(rows, axis=0) if bias.requires_grad else None

    return primitive(y, inputs, backward, name="linear")


def _rows(xp, a):
    """``a`` of shape (..., n) as rows (-1, n)."""
    return xp.reshape(a, (-1, a.shape[-1]))


__all__ = ["linear", "matmul"]
