"""Look at a recorded graph: the nodes below a Tensor, the operation that made each, its inputs.

A node is a Tensor (``minigrad.engine.graph``): ``_parents`` are its inputs, ``_backward``
is the closure its primitive returned beside the forward, and ``_op`` the name the primitive
gave it (``primitive(..., name="mul")``), which ``op_name`` reads. Leaves (inputs,
parameters, constants) have no backward and no name.

>>> from minigrad import Tensor
>>> a, b = Tensor([1.0, -2.0], requires_grad=True), Tensor([3.0, 4.0])
>>> [(n.index, n.op, n.name, n.parents) for n in nodes((a * b).relu(), {"a": a, "b": b})]
[(0, None, 'a', ()), (1, None, 'b', ()), (2, 'mul', None, (0, 1)), (3, 'relu', None, (2,))]

After ``backward()`` (without ``retain_graph=True``) the walk has freed every node: the root
is then a lone node whose op is ``"freed"``.
"""

from collections.abc import Mapping
from dataclasses import dataclass

from minigrad.engine import graph
from minigrad.engine.tensor import Tensor


@dataclass(frozen=True)
class Node:
    """One node of a graph, as ``nodes`` lists it.

    ``index`` is its position in the list; ``op`` the primitive that made it (``None`` for a
    leaf, ``"freed"`` once a backward has released it); ``name`` the name given in ``names``
    (or ``None``); ``parents`` the indices of its inputs, in the primitive's order.
    """

    index: int
    op: str | None
    name: str | None
    shape: tuple
    dtype: str
    requires_grad: bool
    parents: tuple

    @property
    def is_leaf(self):
        return self.op is None


def op_name(tensor):
    """The primitive that made ``tensor``: ``"mul"``, ``"relu"``, ``"matmul"``, ...; ``None``
    for a leaf, ``"freed"`` after a backward released it."""
    if not isinstance(tensor, Tensor):
        raise TypeError(f"tensor must be a minigrad Tensor, got {type(tensor).__name__}")
    if tensor._backward is None:
        return None
    if tensor._backward is graph._freed:
        return "freed"
    return tensor._op


def nodes(root, names=None):
    """Every node reachable from ``root`` through its inputs, inputs first (each node after
    all of its parents), ``root`` last; constants (inputs without ``requires_grad``) included.

    ``names`` maps a name to a Tensor (``{"a": a}``, ``dict(model.named_parameters())``);
    those Tensors get ``name`` in the result. An explicit stack, no recursion.
    """
    if not isinstance(root, Tensor):
        raise TypeError(f"root must be a minigrad Tensor, got {type(root).__name__}")
    label = _names(names)
    order, index = [], {}
    stack = [(root, False)]
    while stack:
        node, expanded = stack.pop()
        if expanded:
            index[id(node)] = len(order)
            order.append(node)
            continue
        if id(node) in index:
            continue
        stack.append((node, True))
        for parent in reversed(node._parents):  # the first input is listed first
            if id(parent) not in index:
                stack.append((parent, False))
    return [Node(i, op_name(t), label.get(id(t)), t.shape, str(t.dtype), t.requires_grad,
                 tuple(index[id(p)] for p in t._parents)) for i, t in enumerate(order)]


def _names(names):
    if names is None:
        return {}
    if not isinstance(names, Mapping):
        raise TypeError(f"names must map names to Tensors ({{'a': a}}), got "
                        f"{type(names).__name__}")
    for name, t in names.items():
        if not isinstance(name, str) or not isinstance(t, Tensor):
            raise TypeError(f"names must map str names to Tensors, got {name!r}: "
                            f"{type(t).__name__}")
    return {id(t): name for name, t in names.items()}


__all__ = ["Node", "nodes", "op_name"]
