"""The engine's primitives, one module per family, each derivative right under its forward:

* ``arithmetic``: ``add``, ``neg``, ``mul``, ``div``, ``pow``, ``rpow``;
* ``elementwise``: ``exp``, ``log``, ``sqrt``, ``tanh``, ``relu``, ``sigmoid``, ``maximum``;
* ``shaping``: ``sum``, ``reshape``, ``transpose``;
* ``indexing``: ``take_along_axis``, ``embedding`` (gathers: their backwards add the
  gradients of repeated indices);
* ``linalg``: ``matmul``, ``linear``;
* ``softmax``: ``log_softmax``, ``cross_entropy`` (fused, for finite values at +-1e4).

Each makes its node with ``primitive(out, inputs, backward, name=...)``; the name is what
``minigrad.engine.introspect`` lists and a drawn graph shows. Names inside: ``t`` is the
input Tensor of one, ``a`` and ``b`` those of two; ``x`` and ``y`` their arrays, ``out`` the
result's, ``g`` the gradient reaching it. Everything else is composed of these and needs no
backward code, except a strategy's or a layer's own special node (``nn.recompute``, exact
BatchNorm's ``standardize``, mixed precision's ``rounded``).

Tensor's operators are these functions, attached below by name: ``x * y`` is
``arithmetic.mul(x, y)``, ``x.sum()`` is ``shaping.sum(x)``.

>>> from minigrad.engine import Tensor, introspect
>>> x = Tensor([1.0, 2.0], requires_grad=True)
>>> introspect.op_name(x * x), introspect.op_name(elementwise.sigmoid(x))
('mul', 'sigmoid')
"""

from minigrad.engine.primitives import (
    arithmetic,
    elementwise,
    indexing,
    linalg,
    shaping,
    softmax,
)
from minigrad.engine.tensor import Tensor

Tensor.__add__ = arithmetic.add
Tensor.__neg__ = arithmetic.neg
Tensor.__mul__ = arithmetic.mul
Tensor.__truediv__ = arithmetic.div
Tensor.__pow__ = arithmetic.pow
Tensor.__rpow__ = arithmetic.rpow
Tensor.exp = elementwise.exp
Tensor.log = elementwise.log
Tensor.sqrt = elementwise.sqrt
Tensor.tanh = elementwise.tanh
Tensor.relu = elementwise.relu
Tensor.sum = shaping.sum
Tensor.reshape = shaping.reshape
Tensor.transpose = shaping.transpose
Tensor.__matmul__ = linalg.matmul

__all__ = ["arithmetic", "elementwise", "indexing", "linalg", "shaping", "softmax"]
