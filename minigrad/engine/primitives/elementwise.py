"""Elementwise function primitives: ``exp``, ``log``, ``sqrt``, ``tanh``, ``relu``,
``sigmoid`` and the binary ``maximum``.

Each derivative is written right under its forward; where the derivative can be written
with the result (``exp``, ``sqrt``, ``tanh``, ``relu``, ``sigmoid``) the backward keeps the
output, not the input.

>>> from minigrad.engine import Tensor
>>> x = Tensor([-1.0, 0.0, 2.0], requires_grad=True)
>>> relu(x).sum().backward()
>>> x.grad  # relu'(0) = 0, as in PyTorch
array([0., 0., 1.])
"""

from minigrad.engine import backend
from minigrad.engine.tensor import Tensor, lift, primitive


def exp(t):
    """e^x: d(e^x)/dx = e^x, the output itself."""
    out = t.xp.exp(t.data)
    return primitive(out, (t,), lambda g: g * out, name="exp")


def log(t):
    """The natural logarithm: d(log x)/dx = 1 / x."""
    x = t.data
    return primitive(t.xp.log(x), (t,), lambda g: g / x, name="log")


def sqrt(t):
    """The square root: d(sqrt x)/dx = 1 / (2 sqrt x)."""
    out = t.xp.sqrt(t.data)
    return primitive(out, (t,), lambda g: g / (2.0 * out), name="sqrt")


def tanh(t):
    """tanh x: d(tanh x)/dx = 1 - tanh(x)^2."""
    out = t.xp.tanh(t.data)

    def backward(g):
        return g * (1.0 - out * out)

    return primitive(out, (t,), backward, name="tanh")


def relu(t):
    """max(x, 0); relu'(0) = 0 as in PyTorch.

    The backward multiplies by a 0/1 mask instead of calling ``where``: NumPy's
    ``where`` is ~10x slower than a multiply (see benchmarks/). The one difference from
    torch: an inf or NaN upstream gradient at an inactive unit gives NaN here, 0 there.
    The mask is made from the output (out > 0 exactly where x > 0) when the backward
    runs, as torch's threshold_backward does: the graph keeps no mask beside the output.
    """
    xp, x = t.xp, t.data
    # A 0-d zero, broadcast: no array of zeros the size of x
    out = xp.maximum(x, xp.zeros((), dtype=x.dtype, device=backend.device(x)))

    def backward(g):
        mask = xp.astype(out > 0, xp.result_type(g, out))
        mask *= g  # in place: the product takes the mask's memory, no third array
        return mask

    return primitive(out, (t,), backward, name="relu")


def sigmoid(t):
    """1 / (1 + exp(-x)): d(s)/dx = s (1 - s).

    A primitive of its own, for accuracy at both ends: with e = exp(-|x|) <= 1 it is
    1 / (1 + e) for x >= 0 and e / (1 + e) for x < 0, so nothing overflows and
    sigmoid(-40) is 4.2e-18 as in torch, not 0.
    """
    xp, x = t.xp, t.data
    e = xp.exp(-xp.abs(x))
    out = xp.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e))

    def backward(g):
        return g * (out * (1.0 - out))

    return primitive(out, (t,), backward, name="sigmoid")


def maximum(a, b):
    """Elementwise max; at ties the gradient is split in half between both, as in PyTorch.

    The backward multiplies ``g`` by each input's share (as ``relu`` multiplies by its mask):
    an inf or NaN upstream gradient gives NaN for the smaller input, where torch gives 0.
    """
    if not isinstance(a, Tensor):  # a scalar takes b's namespace and dtype, as in a + b
        a = lift(a, like=b) if isinstance(b, Tensor) else Tensor(a)
    b = lift(b, like=a)
    xp, x, y = a.xp, a.data, b.data

    def backward(g):  # each input gets its share: 1 where it is larger, 1/2 at ties
        return g * _share(xp, x, y), g * _share(xp, y, x)

    return primitive(xp.maximum(x, y), (a, b), backward, name="maximum")


def _share(xp, x, y):
    """1 where x > y, 1/2 where x == y, 0 elsewhere, in x's dtype."""
    return (xp.astype(x > y, x.dtype) + xp.astype(x >= y, x.dtype)) * 0.5


__all__ = ["exp", "log", "maximum", "relu", "sigmoid", "sqrt", "tanh"]
