"""Tensor: an array plus the reverse-mode graph that produced it.

Each primitive computes its forward value and, right beside it, a ``backward(g)`` that
maps the gradient ``g`` of the output to one gradient per input (``None`` where an input
needs none). The reverse walk itself is in ``minigrad.engine.graph``, and so is the ONE place
where broadcasting is undone; no primitive sums over broadcast axes itself.

>>> x = Tensor([1.0, 2.0, 3.0], requires_grad=True)
>>> (x * x).sum().backward()
>>> x.grad
array([2., 4., 6.])
"""

import numbers
import operator
from functools import partialmethod

from minigrad.engine import backend, graph, shapes, validate
from minigrad.engine.graph import is_grad_enabled, no_grad

__all__ = ["Parameter", "Tensor", "is_grad_enabled", "no_grad", "primitive"]


def _power(x, p):
    """``x ** p``, exact for p = 1 and correctly rounded for p = 2 on every namespace, as
    NumPy computes them (a copy and ``square``): CUDA's ``pow`` is only within 2 ulps, so on
    CuPy ``3.0 ** 1`` need not be 3.0, nor the gradient of ``x ** 2`` exactly ``2 x``."""
    if p == 1:
        return x * 1
    if p == 2:
        return x * x
    return x**p


class Tensor:
    """An array of any array-API namespace, with ``.grad`` and a node in the graph.

    >>> x = Tensor([1.0, 2.0, 3.0], requires_grad=True)
    >>> y = (x * x).sum()  # y = sum x_i^2, so dy/dx = 2x
    >>> y.backward()
    >>> y.item(), x.grad.tolist()
    (14.0, [2.0, 4.0, 6.0])
    """

    _version = 0  # bumped when an optimizer writes the array in place (see graph._walk)
    _versions = ()  # a node's: its inputs' versions when it was computed

    def __init__(self, data, requires_grad=False, *, dtype=None, xp=None, device=None):
        if isinstance(data, Tensor):
            data = data.data
        data = backend.as_array(data, xp=xp, dtype=dtype, device=device)
        self.xp = backend.get_namespace(data)
        if requires_grad is True and not backend.is_differentiable(self.xp, data):
            raise TypeError(f"only floating-point (or exact Fraction) tensors can require grad,"
                            f" got {data.dtype}")
        self.data = data
        self.requires_grad = validate.boolean("requires_grad", requires_grad)
        self.grad = None
        self._parents = ()
        self._backward = None

    # ----- graph construction ---------------------------------------------------------
    def _lift(self, other):
        """``other`` as a Tensor of this namespace and device. Python numbers and lists take
        this tensor's dtype when it is floating (no float32 -> float64 promotion); next to an
        integer tensor they keep their own kind, so ``int_tensor * 0.5`` is floating."""
        if not isinstance(other, Tensor):
            keep = backend.is_differentiable(self.xp, self.data)
            try:
                if isinstance(other, (int, float)) or not backend.is_array(other):
                    other = backend.as_array(other, xp=self.xp, device=self.device,
                                             dtype=self.dtype if keep else None)
            except TypeError as err:
                raise TypeError(f"cannot combine a Tensor with {type(other).__name__}: "
                                f"{err}") from None
            other = Tensor(other)
        if other.xp is not self.xp:
            backend.get_namespace(self.data, other.data)  # raises TypeError naming both
        return other

    # ----- properties ------------------------------------------------------------------
    shape = property(lambda self: tuple(self.data.shape))
    dtype = property(lambda self: self.data.dtype)
    ndim = property(lambda self: self.data.ndim)
    size = property(lambda self: backend.size(self.data))
    device = property(lambda self: backend.device(self.data))
    is_leaf = property(lambda self: self._backward is None)
    T = property(lambda self: self.transpose())

    def __repr__(self):
        flag = ", requires_grad=True" if self.requires_grad else ""
        return f"Tensor({self.data!r}{flag})"

    def __len__(self):
        if self.ndim == 0:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    def item(self):
        if self.size != 1:
            raise ValueError(f"item() needs a tensor with one element, got shape {self.shape}")
        if backend.is_exact(self.data):
            return self.data.item()
        return float(self.data) if backend.is_floating(self.xp, self.data) else int(self.data)

    def numpy(self):
        return backend.to_numpy(self.data)

    def detach(self):
        """The same array, cut from the graph."""
        return Tensor(self.data)

    # ----- elementwise arithmetic --------------------------------------------------------
    def __add__(self, other):
        other = self._lift(other)
        out = shapes.broadcasting(operator.add, self.data, other.data, "+")
        return primitive(out, (self, other), lambda g: (g, g))

    def __sub__(self, other):
        return self + (-self._lift(other))  # negation is exact: the same bits as x - y

    def __mul__(self, other):
        other = self._lift(other)
        x, y = self.data, other.data
        out = shapes.broadcasting(operator.mul, x, y, "*")

        def backward(g):
            return g * y, g * x

        return primitive(out, (self, other), backward)

    def __truediv__(self, other):
        # A primitive, not self * (1 / other): that would round twice.
        other = self._lift(other)
        y = other.data
        out = shapes.broadcasting(operator.truediv, self.data, y, "/")

        def backward(g):
            gx = g / y
            return gx, -gx * out

        return primitive(out, (self, other), backward)

    def __neg__(self):
        return primitive(-self.data, (self,), lambda g: -g)

    def __pow__(self, p):
        if isinstance(p, bool) or not isinstance(p, numbers.Real):
            raise TypeError(f"exponent must be a real number, got {type(p).__name__} (a "
                            "Tensor exponent works as base ** tensor with a number base)")
        p = int(p) if isinstance(p, numbers.Integral) else float(p)
        x = self.data
        return primitive(_power(x, p), (self,),
                         lambda g: g * (p * _power(x, p - 1)) if p != 0 else g * 0.0)

    def __rpow__(self, base):
        """``base ** self`` for a number ``base``: d/dt c^t = c^t log c."""
        if isinstance(base, bool) or not isinstance(base, numbers.Real):
            raise TypeError(f"base must be a real number, got {type(base).__name__}")
        xp = self.xp
        c = xp.asarray(float(base), dtype=self.dtype, device=self.device)
        out = c**self.data
        return primitive(out, (self,), lambda g: g * out * xp.log(c))

    def __radd__(self, other):
        return self._lift(other) + self

    def __rsub__(self, other):
        return self._lift(other) - self

    def __rmul__(self, other):
        return self._lift(other) * self

    def __rtruediv__(self, other):
        return self._lift(other) / self

    # ----- elementwise functions ---------------------------------------------------------
    def exp(self):
        out = self.xp.exp(self.data)
        return primitive(out, (self,), lambda g: g * out)

    def log(self):
        x = self.data
        return primitive(self.xp.log(x), (self,), lambda g: g / x)

    def sqrt(self):
        out = self.xp.sqrt(self.data)
        return primitive(out, (self,), lambda g: g / (2.0 * out))

    def tanh(self):
        out = self.xp.tanh(self.data)

        def backward(g):
            return g * (1.0 - out * out)

        return primitive(out, (self,), backward)

    def relu(self):
        """max(x, 0); relu'(0) = 0 as in PyTorch.

        The backward multiplies by a 0/1 mask instead of calling ``where``: NumPy's
        ``where`` is ~10x slower than a multiply (see benchmarks/). The one difference from
        torch: an inf or NaN upstream gradient at an inactive unit gives NaN here, 0 there.
        The mask is made from the output (out > 0 exactly where x > 0) when the backward
        runs, as torch's threshold_backward does: the graph keeps no mask beside the output.
        """
        xp, x = self.xp, self.data
        # A 0-d zero, broadcast: no array of zeros the size of x
        out = xp.maximum(x, xp.zeros((), dtype=x.dtype, device=backend.device(x)))

        def backward(g):
            mask = xp.astype(out > 0, xp.result_type(g, out))
            mask *= g  # in place: the product takes the mask's memory, no third array
            return mask

        return primitive(out, (self,), backward)

    # ----- reductions and shape ------------------------------------------------------------
    def sum(self, axis=None, keepdims=False):
        xp, shape = self.xp, self.shape
        axis = shapes.reduced_axes(axis, self.ndim, "sum")
        keepdims = validate.boolean("keepdims", keepdims)

        def backward(g):
            if not keepdims:
                g = xp.reshape(g, graph.kept_shape(shape, axis))
            return xp.broadcast_to(g, shape)

        return primitive(xp.sum(self.data, axis=axis, keepdims=keepdims), (self,), backward)

    def mean(self, axis=None, keepdims=False):
        axis = shapes.reduced_axes(axis, self.ndim, "mean")
        count = graph.reduced_count(self.shape, axis)
        return self.sum(axis=axis, keepdims=keepdims) / count

    def reshape(self, *shape):
        xp, old = self.xp, self.shape
        shape = shapes.reshaped(shape, self.size, old)
        return primitive(xp.reshape(self.data, shape), (self,), lambda g: xp.reshape(g, old))

    def transpose(self, axes=None):
        """Permute the axes (reverse them when ``axes`` is None), like ``numpy.transpose``."""
        xp = self.xp
        axes = shapes.permutation(axes, self.ndim)
        inverse = shapes.inverse(axes)
        return primitive(xp.permute_dims(self.data, axes), (self,),
                         lambda g: xp.permute_dims(g, inverse))

    def __matmul__(self, other):
        other = self._lift(other)
        shape = shapes.matmul(self.shape, other.shape)
        # A 1-d operand is a (1, k) row or a (k, 1) column, and that axis is dropped after.
        a = self if self.ndim > 1 else self.reshape(1, self.shape[0])
        b = other if other.ndim > 1 else other.reshape(other.shape[0], 1)
        out = _matmul(a, b)
        return out.reshape(shape) if self.ndim == 1 or other.ndim == 1 else out

    def __rmatmul__(self, other):
        return self._lift(other) @ self

    # ----- comparisons (no gradient) -------------------------------------------------------
    def _compare(self, other, op):
        return Tensor(shapes.broadcasting(op, self.data, self._lift(other).data, op.__name__))

    __lt__ = partialmethod(_compare, op=operator.lt)
    __le__ = partialmethod(_compare, op=operator.le)
    __gt__ = partialmethod(_compare, op=operator.gt)
    __ge__ = partialmethod(_compare, op=operator.ge)
    eq = partialmethod(_compare, op=operator.eq)
    ne = partialmethod(_compare, op=operator.ne)

    # ----- reverse mode ----------------------------------------------------------------------
    def backward(self, gradient=None, retain_graph=False):
        """Add d(self)/d(leaf) . gradient into ``.grad`` of every leaf that requires grad.

        ``gradient`` defaults to ones for a single-element output; any other output needs
        an explicit seed of its own shape. The graph's saved arrays are freed as the walk
        goes (``minigrad.engine.graph.backward``) unless ``retain_graph=True``.
        """
        gradient = gradient.data if isinstance(gradient, Tensor) else gradient
        if gradient is not None and not backend.is_array(gradient):
            raise TypeError(f"gradient must be a Tensor or an array of shape {self.shape}, got "
                            f"{type(gradient).__name__}")
        retain_graph = validate.boolean("retain_graph", retain_graph)
        graph.backward(self, graph.seed(self, gradient), retain_graph=retain_graph)


def primitive(data, inputs, backward):
    """A new primitive's result: the Tensor holding ``data``, computed from ``inputs``.

    ``backward(g)`` maps the gradient of the result to the gradient of each input: a bare
    array when there is one input, a tuple otherwise (``None`` where an input needs none).
    The reverse walk undoes broadcasting, so a backward returns gradients of the result's
    shape where an input was broadcast. This is the one way to define a primitive:

    >>> def cube(x):
    ...     return primitive(x.data ** 3, (x,), lambda g: g * 3 * x.data ** 2)
    >>> x = Tensor([2.0], requires_grad=True)
    >>> cube(x).sum().backward()
    >>> x.grad
    array([12.])
    """
    if not isinstance(inputs, (tuple, list)) or not inputs or not all(
            isinstance(t, Tensor) for t in inputs):
        raise TypeError(f"inputs of a primitive must be a non-empty tuple of Tensors, got "
                        f"{inputs!r:.80}")
    if not callable(backward):
        raise TypeError(f"backward must be a function g -> input gradients, got "
                        f"{type(backward).__name__}")
    first = inputs[0]
    if not hasattr(data, "shape"):
        # NumPy object (Fraction) arrays give bare scalars for 0-d results.
        data = first.xp.asarray(data, dtype=first.dtype)
    out = Tensor.__new__(Tensor)
    out.data, out.xp, out.grad = data, first.xp, None
    out.requires_grad = graph.is_grad_enabled() and any(t.requires_grad for t in inputs)
    out._parents = tuple(inputs) if out.requires_grad else ()
    out._backward = backward if out.requires_grad else None
    if out.requires_grad:
        out._versions = tuple(t._version for t in inputs)
    return out


class Parameter(Tensor):
    """A leaf tensor that requires grad; ``Module`` registers these automatically.

    >>> w = Parameter([0.5, -1.0])
    >>> w.requires_grad, w.is_leaf, w.grad is None
    (True, True, True)
    """

    def __init__(self, data, *, dtype=None, xp=None, device=None):
        super().__init__(data, requires_grad=True, dtype=dtype, xp=xp, device=device)
        # Its own copy, as ``torch.tensor(data)`` makes: the optimizers update a parameter's
        # array in place, which must never write into an array the caller still holds.
        self.data = self.xp.asarray(self.data, copy=True)

    def __repr__(self):
        return f"Parameter({self.data!r})"


def _matmul(a, b):
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

    return primitive(x @ y, (a, b), backward)
