"""Tensor: an array plus the reverse-mode graph that produced it; ``primitive``, the one
way a graph node is made; ``lift``, a value as a Tensor to combine with another.

Each primitive computes its forward value and, right beside it, a ``backward(g)`` that
maps the gradient ``g`` of the output to one gradient per input (``None`` where an input
needs none). The primitives live in ``minigrad.engine.primitives``, one module per family,
and are Tensor's operators (``x * y`` is ``primitives.arithmetic.mul(x, y)``). The reverse
walk itself is in ``minigrad.engine.graph``, and so is the ONE place where broadcasting is
undone; no primitive sums over broadcast axes itself.

>>> x = Tensor([1.0, 2.0, 3.0], requires_grad=True)
>>> (x * x).sum().backward()
>>> x.grad
array([2., 4., 6.])
"""

import operator
from functools import partialmethod

from minigrad.engine import backend, graph, shapes, validate
from minigrad.engine.graph import is_grad_enabled, no_grad

__all__ = ["Parameter", "Tensor", "is_grad_enabled", "lift", "no_grad", "primitive"]


class Tensor:
    """An array of any array-API namespace, with ``.grad`` and a node in the graph.

    Its operators and methods that record a node are the primitives of
    ``minigrad.engine.primitives`` (``+ * / ** -x @``, ``exp``, ``log``, ``sqrt``, ``tanh``,
    ``relu``, ``sum``, ``reshape``, ``transpose``), attached there by name; the rest
    (``-``, ``mean``, ``.T``, the reflected operators) are composed of them here.

    >>> x = Tensor([1.0, 2.0, 3.0], requires_grad=True)
    >>> y = (x * x).sum()  # y = sum x_i^2, so dy/dx = 2x
    >>> y.backward()
    >>> y.item(), x.grad.tolist()
    (14.0, [2.0, 4.0, 6.0])
    """

    _version = 0  # bumped when an optimizer writes the array in place (see graph._walk)
    _versions = ()  # a node's: its inputs' versions when it was computed
    _op = None  # a node's: the name its primitive gave it ("mul", "relu", ...)

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

    # ----- composed of primitives (the primitives themselves: minigrad.engine.primitives) --
    def __sub__(self, other):
        return self + (-lift(other, like=self))  # negation is exact: the same bits as x - y

    def __radd__(self, other):
        return lift(other, like=self) + self

    def __rsub__(self, other):
        return lift(other, like=self) - self

    def __rmul__(self, other):
        return lift(other, like=self) * self

    def __rtruediv__(self, other):
        return lift(other, like=self) / self

    def __rmatmul__(self, other):
        return lift(other, like=self) @ self

    def mean(self, axis=None, keepdims=False):
        axis = shapes.reduced_axes(axis, self.ndim, "mean")
        count = graph.reduced_count(self.shape, axis)
        return self.sum(axis=axis, keepdims=keepdims) / count

    # ----- comparisons (no gradient) -------------------------------------------------------
    def _compare(self, other, op):
        return Tensor(shapes.broadcasting(op, self.data, lift(other, like=self).data, op.__name__))

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


def lift(value, *, like):
    """``value`` as a Tensor of ``like``'s namespace and device, to be combined with ``like``
    (as ``like * value`` does with it). A Tensor is returned as it is; Python numbers and
    lists take ``like``'s dtype when it is floating (no float32 -> float64 promotion); next
    to an integer tensor they keep their own kind, so ``int_tensor * 0.5`` is floating. A
    Tensor or array of another namespace raises ``TypeError`` naming both.

    >>> x = Tensor([1.0, 2.0], dtype="float32")
    >>> lift(3, like=x)
    Tensor(array(3., dtype=float32))
    """
    if not isinstance(like, Tensor):
        raise TypeError(f"like must be a minigrad Tensor, got {type(like).__name__}")
    if not isinstance(value, Tensor):
        keep = backend.is_differentiable(like.xp, like.data)
        try:
            if isinstance(value, (int, float)) or not backend.is_array(value):
                value = backend.as_array(value, xp=like.xp, device=like.device,
                                         dtype=like.dtype if keep else None)
        except TypeError as err:
            raise TypeError(f"cannot combine a Tensor with {type(value).__name__}: "
                            f"{err}") from None
        value = Tensor(value)
    if value.xp is not like.xp:
        backend.get_namespace(like.data, value.data)  # raises TypeError naming both
    return value


def primitive(data, inputs, backward, *, name):
    """A new primitive's result: the Tensor holding ``data``, computed from ``inputs`` by the
    operation ``name`` (what a drawn graph and ``introspect`` show: ``"mul"``, ``"relu"``).

    ``backward(g)`` maps the gradient of the result to the gradient of each input: a bare
    array when there is one input, a tuple otherwise (``None`` where an input needs none).
    The reverse walk undoes broadcasting, so a backward returns gradients of the result's
    shape where an input was broadcast. This is the one way to define a primitive; every
    primitive says what it is, so ``name`` has no default:

    >>> def cube(x):
    ...     return primitive(x.data ** 3, (x,), lambda g: g * 3 * x.data ** 2, name="cube")
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
    if not isinstance(name, str) or not name:
        raise TypeError(f"name of a primitive must be a non-empty str, the operation a graph "
                        f"shows (e.g. name='cube'), got {type(name).__name__} {name!r}")
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
        out._op = name
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
