"""The reverse walk over the graph of Tensors, and the one place broadcasting is undone.

A node is a Tensor: ``_parents`` (its inputs), ``_backward`` (``g`` -> one gradient per
input, written beside each primitive's forward in ``minigrad.engine.primitives``) and ``_op``
(the primitive's name, for messages); a leaf has no ``_backward``. A one-input backward
returns a bare gradient, wrapped here once. Nothing here depends on what the primitives are.
"""

from contextlib import ContextDecorator

from minigrad.engine import backend, interrupts

_grad_enabled = True


class no_grad(ContextDecorator):  # lower case, as torch's: it is used like a function
    """Inside this block no graph is recorded: results have ``requires_grad=False``.

    >>> from minigrad import Tensor
    >>> with no_grad():
    ...     y = Tensor([1.0], requires_grad=True) * 2
    >>> y.requires_grad
    False

    A class, not a generator: once ``__enter__`` has cleared the flag the ``with`` statement
    is sure to call ``__exit__``, so Ctrl-C at any point leaves the flag as it was. One object
    may be entered again inside itself (as a decorator of a recursive function is).
    """

    def __init__(self):
        self._previous = []  # the flag before each entry still open, innermost last

    def __enter__(self):
        global _grad_enabled
        # One statement, the flag last: no interrupt falls between saving and clearing it.
        self._previous, _grad_enabled = [*self._previous, _grad_enabled], False

    def __exit__(self, *exc_info):
        global _grad_enabled
        _grad_enabled = self._previous.pop()


def is_grad_enabled():
    """Whether operations record the graph now: False inside ``no_grad()``.

    >>> with no_grad():
    ...     is_grad_enabled()
    False
    """
    return _grad_enabled


def set_grad_enabled(mode):
    """Turn graph recording on or off, as ``torch.set_grad_enabled`` called as a function;
    the all-or-nothing guards use it to put the flag back after an interrupt."""
    global _grad_enabled
    _grad_enabled = bool(mode)


def seed(root, gradient=None):
    """The gradient that starts the walk: ones for a one-element root, else ``gradient``
    checked against the root's namespace and shape."""
    if not root.requires_grad:
        raise RuntimeError("backward() on a tensor that does not require grad "
                           "(no input had requires_grad=True, or it was made under no_grad)")
    if gradient is None:
        if root.size != 1:
            raise RuntimeError(f"backward() on a non-scalar tensor of shape {root.shape} "
                               "needs a seed: pass gradient= with that shape")
        return backend.ones_like(root.xp, root.data)
    try:
        backend.get_namespace(root.data, gradient)
    except TypeError as err:
        raise TypeError(f"gradient must be an array of the output's namespace: {err}") from None
    if not backend.is_numeric(root.xp, gradient) or backend.is_exact(gradient) != \
            backend.is_exact(root.data):
        raise TypeError(f"gradient must hold numbers like the output ({root.dtype}), got "
                        f"dtype {gradient.dtype}")
    if tuple(gradient.shape) != root.shape:
        raise ValueError(f"gradient has shape {tuple(gradient.shape)}, "
                         f"expected the output's shape {root.shape}")
    return gradient


def backward(root, gradient, retain_graph=False):
    """Add d(root)/d(leaf) . gradient into ``.grad`` of every leaf below ``root``.

    Each node's gradient is complete before it is passed on (reverse topological order).
    ``.grad`` is written only once every new gradient (``grad + g``) is computed, all in one
    region that holds Ctrl-C back (``interrupts.deferred``): an error or a Ctrl-C leaves
    every ``.grad`` as it was or every one added to, never some of them. Gradients are
    added out of place, never into an existing array.

    Memory: a node's ``backward`` closure holds the arrays its rule needs (the inputs of a
    product, the output of an exp, ...). Unless ``retain_graph``, each node is cut loose as
    soon as its backward has run (its closure and its links to its inputs are dropped, as
    PyTorch frees saved tensors), so the activations of the forward pass are freed during
    the walk, from the loss back to the inputs, and the peak is not "all activations plus
    all gradients". A second backward through a freed node raises ``RuntimeError``.
    """
    leaves = _walk(topological_order(root), gradient, retain_graph, cast=True)
    # Every sum first (each leaf is reached once), each replacing its addend in the list:
    # the peak memory is that of adding leaf by leaf. Then only the writes, uninterrupted.
    for i, (leaf, g) in enumerate(leaves):
        if leaf.grad is not None:
            leaves[i] = (leaf, leaf.grad + g)
    with interrupts.deferred():
        for leaf, g in leaves:
            leaf.grad = g


def gradients(root, gradient, inputs, *, cast=True):
    """d(root)/d(input) . gradient for each of ``inputs`` (``None`` where none reaches it),
    as ``torch.autograd.grad``: no ``.grad`` is written, and the graph is freed as
    ``backward`` frees it. ``inputs`` are leaves (Parameters, detached copies); the walk
    is the one ``backward`` does, so each gradient has the same bits as the ``.grad`` that
    ``backward`` would add. ``RuntimeError``, before anything is walked, if the graph
    reaches a leaf that requires grad and is not among ``inputs``: its gradient would be
    lost (``nn.Recompute`` relies on this to refuse a block that uses an outside tensor).

    ``root`` may also be given as its ``topological_order(root)``, which the walk empties:
    a caller that keeps no other reference to the root then frees its array during the
    walk, as ``backward`` frees every other node's (``nn.Recompute`` does so).
    ``cast=False`` gives each gradient in the dtype it reached the input with, not cast to
    the input's own: the gradients a walk within a larger walk passes on (``nn.Recompute``;
    the outer walk casts at its leaves).
    """
    if any(t._backward is not None for t in inputs):
        raise ValueError("gradients() takes leaves as inputs (Parameters, tensors made with "
                         "requires_grad=True or detached); got a tensor computed from others")
    order = root if isinstance(root, list) else topological_order(root)
    if not order:
        return [None] * len(inputs)
    wanted = {id(t) for t in inputs}
    stray = [node for node in order if node._backward is None and id(node) not in wanted]
    if stray:
        raise RuntimeError(f"the graph reaches {len(stray)} tensor(s) that require grad but "
                           f"are not among the inputs, e.g. one of shape {stray[0].shape}; "
                           "pass every such tensor as an input")
    del stray
    found = {id(leaf): g for leaf, g in _walk(order, gradient, False, cast)}
    return [found.get(id(t)) for t in inputs]


def _walk(order, gradient, retain_graph, cast):
    """The reverse walk over ``order`` (``topological_order(root)``, the root last), seeded
    with ``gradient`` at the root: ``[(leaf, gradient)]`` in the order the leaves are
    reached (``cast``: in the leaf's dtype), nothing written. ``order`` is emptied as the
    walk goes."""
    root = order[-1]
    xp = root.xp
    grads = {id(root): gradient}
    del root
    leaves = []
    while order:
        node = order.pop()  # popping drops the walk's own reference to the node
        g = grads.pop(id(node), None)
        if g is None:
            continue
        rule = node._backward
        if rule is None:
            if cast and g.dtype != node.data.dtype:
                g = xp.astype(g, node.data.dtype)
            leaves.append((node, g))
            continue
        if node._versions and any(t._version != v for t, v in zip(node._parents,
                                                                  node._versions)):
            _stale(node)
        grads_in = rule(g)
        parents = node._parents
        if not retain_graph:
            node._backward, node._parents = _freed, ()
        if len(parents) == 1:
            grads_in = (grads_in,)  # a one-input backward returns a bare gradient
        for parent, pg in zip(parents, grads_in):
            if pg is None or not parent.requires_grad:
                continue
            if not hasattr(pg, "shape"):  # a bare Fraction from a 0-d object array
                pg = xp.asarray(pg, dtype=parent.dtype)
            if pg.shape != parent.data.shape:
                pg = unbroadcast(xp, pg, parent.shape)
            key = id(parent)
            grads[key] = pg if key not in grads else grads[key] + pg
        del node, g, grads_in, parents, rule
    return leaves


def _stale(node):
    """``RuntimeError``: an input of ``node`` was written in place after ``node`` was computed
    (an optimizer's step between the forward and the backward pass), so its backward would
    use the new values; PyTorch refuses this too ("modified by an inplace operation")."""
    changed = next(t for t, v in zip(node._parents, node._versions) if t._version != v)
    raise RuntimeError(f"a tensor of shape {changed.shape}, an input of this graph's "
                       f"{node._op!r} node, was updated in place after the forward pass (an "
                       f"optimizer step between forward and backward): its gradient would use "
                       f"the new values. Run the forward pass again after the step; nothing "
                       f"was written to .grad")


def _freed(g):
    raise RuntimeError("backward through a part of the graph that a previous backward() "
                       "already freed; call backward(retain_graph=True) the first time to "
                       "walk it twice")


def unbroadcast(xp, g, shape):
    """Sum ``g`` over the axes that broadcasting added or stretched, back to ``shape``."""
    if tuple(g.shape) == tuple(shape):
        return g
    extra = g.ndim - len(shape)
    if extra > 0:
        g = xp.sum(g, axis=tuple(range(extra)))
    stretched = tuple(i for i, n in enumerate(shape) if n == 1 and g.shape[i] != 1)
    if stretched:
        g = xp.sum(g, axis=stretched, keepdims=True)
    return g


def kept_shape(shape, axis):
    """The shape of a sum over ``axis`` with ``keepdims=True``."""
    if axis is None:
        return (1,) * len(shape)
    axes = {a % len(shape) for a in ((axis,) if isinstance(axis, int) else axis)}
    return tuple(1 if i in axes else n for i, n in enumerate(shape))


def reduced_count(shape, axis):
    """How many elements a sum over ``axis`` adds into each result (a mean divides by it)."""
    count = 1
    for full, kept in zip(shape, kept_shape(shape, axis)):
        count *= full // kept if kept else 1
    return count


def topological_order(root):
    """Nodes reachable from ``root`` (through inputs that require grad), inputs first.

    An explicit stack, not recursion, so a 10,000-op chain is fine.
    """
    order, seen = [], {id(root)}
    # Depth first, a node's last input first: a node goes to ``order`` once all its inputs
    # are there. (The input order fixes the order in which a shared node's gradients are
    # added, so it is kept as it always was: results stay the same to the last bit.)
    stack = [(root, reversed(root._parents))]
    while stack:
        node, parents = stack[-1]
        for parent in parents:
            if parent.requires_grad and id(parent) not in seen:
                seen.add(id(parent))
                stack.append((parent, reversed(parent._parents)))
                break
        else:
            stack.pop()
            order.append(node)
    return order
