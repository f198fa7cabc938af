"""Arithmetic primitives: ``x + y``, ``-x``, ``x * y``, ``x / y``, ``x ** p`` and ``c ** x``.

Each derivative is written right under its forward. ``a - b`` is ``a + (-b)`` (negation is
exact: the same bits), so it needs no primitive of its own. Where an input was broadcast,
its gradient comes back in the result's shape: the reverse walk (``minigrad.engine.graph``)
sums it back, never a primitive.

>>> from minigrad.engine import Tensor
>>> x = Tensor([1.0, 2.0], requires_grad=True)
>>> mul(x, 3.0).sum().backward()
>>> x.grad
array([3., 3.])
"""

import numbers
import operator

from minigrad.engine import shapes
from minigrad.engine.tensor import lift, primitive


def add(a, b):
    """a + b; both inputs get g."""
    b = lift(b, like=a)
    out = shapes.broadcasting(operator.add, a.data, b.data, "+")
    return primitive(out, (a, b), lambda g: (g, g), name="add")


def neg(t):
    """-t; the input gets -g."""
    return primitive(-t.data, (t,), lambda g: -g, name="neg")


def mul(a, b):
    """a * b: d(xy)/dx = y, d(xy)/dy = x."""
    b = lift(b, like=a)
    x, y = a.data, b.data
    out = shapes.broadcasting(operator.mul, x, y, "*")

    def backward(g):
        return g * y, g * x

    return primitive(out, (a, b), backward, name="mul")


def div(a, b):
    """a / b: d(x/y)/dx = 1/y, d(x/y)/dy = -(x/y)/y. A primitive, not a * (1 / b): that
    would round twice."""
    b = lift(b, like=a)
    y = b.data
    out = shapes.broadcasting(operator.truediv, a.data, y, "/")

    def backward(g):
        gx = g / y
        return gx, -gx * out

    return primitive(out, (a, b), backward, name="div")


def pow(t, p):
    """t ** p for a real number p: d(x^p)/dx = p x^(p-1) (0 for p = 0)."""
    if isinstance(p, bool) or not isinstance(p, numbers.Real):
        raise TypeError(f"exponent must be a real number, got {type(p).__name__} (a "
                        "Tensor exponent works as base ** tensor with a number base)")
    p = int(p) if isinstance(p, numbers.Integral) else float(p)
    x = t.data
    return primitive(_power(x, p), (t,),
                     lambda g: g * (p * _power(x, p - 1)) if p != 0 else g * 0.0, name="pow")


def rpow(t, base):
    """``base ** t`` for a real number ``base``: d/dx c^x = c^x log c."""
    if isinstance(base, bool) or not isinstance(base, numbers.Real):
        raise TypeError(f"base must be a real number, got {type(base).__name__}")
    xp = t.xp
    c = xp.asarray(float(base), dtype=t.dtype, device=t.device)
    out = c**t.data
    return primitive(out, (t,), lambda g: g * out * xp.log(c), name="rpow")


def _power(x, p):
    """``x ** p``, exact for p = 1 and correctly rounded for p = 2 on every namespace, as
    NumPy computes them (a copy and ``square``): CUDA's ``pow`` is only within 2 ulps, so on
    CuPy ``3.0 ** 1`` need not be 3.0, nor the gradient of ``x ** 2`` exactly ``2 x``."""
    if p == 1:
        return x * 1
    if p == 2:
        return x * x
    return x**p


__all__ = ["add", "div", "mul", "neg", "pow", "rpow"]
