"""Recomputation (activation checkpointing): drop a block's saved arrays, redo its forward
in the backward.

``Recompute(module)`` runs ``module``'s forward without recording its graph, so none of
the arrays the block's primitives would save (its activations) stays alive; its one node
keeps the block's inputs and parameters. When the backward reaches that node, the forward
runs again, now recording, and the engine's walk goes back through it: a walk inside the
walk, the design of PyTorch's reentrant ``torch.utils.checkpoint.checkpoint(...,
use_reentrant=True)`` (``CheckpointFunction``), with three differences that make the
recomputed forward the SAME computation as the first:

* **the state it reads is put back**: every module's training flag, each ``Dropout``'s
  call count, the dropout keys (``dropout_keys``) and the buffers are those of the first
  forward while the block is recomputed. minigrad's dropout masks are keyed by (seed,
  step, sample index), not drawn from a generator whose state moved on, so the masks are
  the first forward's by construction, inside accumulation windows or not;
* **running statistics move once**: the buffers (BatchNorm's running mean and variance,
  and its batch count) are put back to what they were before the recomputation when it
  ends. PyTorch updates them a second time during the recomputation (its checkpoint
  re-runs ``BatchNorm``'s forward in training mode); minigrad chooses the statistics of
  training without recomputation, so that recomputing changes nothing but memory and time;
* **gradients come out of the same operations in the same order**: the recomputed block
  is walked by the engine's own walk (``minigrad.engine.graph.gradients``), so every
  parameter's gradient has the bits it has without recomputation (for a parameter used
  inside one block only; one also used outside it gets its two parts added in another
  order).

A block whose forward reads state that these do not cover (a random generator of its own,
say) gets a different forward the second time, and so a wrong gradient with no error, as
in any framework; ``Recompute(module, check=True)`` compares the recomputed output with
the first, bit for bit, and raises. The block's tensors must come in as its arguments or
be its parameters: a tensor that requires grad and reaches the block another way raises
``RuntimeError`` at the backward instead of losing its gradient.

>>> import numpy as np
>>> from minigrad import Tensor, nn
>>> block = nn.Recompute(nn.Sequential(nn.Linear(3, 4), nn.ReLU()))
>>> [name for name, _ in block.named_parameters()]  # the wrapped module's names
['0.weight', '0.bias']
>>> block(Tensor(np.ones((2, 3)))).sum().backward()
>>> block.module[0].weight.grad.shape
(4, 3)
"""

from minigrad.engine import backend, graph, interrupts, validate
from minigrad.engine.tensor import Tensor, primitive
from minigrad.nn import dropout
from minigrad.nn.module import Module


class Recompute(Module):
    """``module``, with its forward recomputed in the backward instead of its activations
    kept (see this module's text). Parameters and buffers keep ``module``'s names and order;
    the wrapped module is ``.module``. ``check=True``: the backward raises ``RuntimeError``
    if the recomputed output differs from the first forward's in any bit."""

    def __init__(self, module, *, check=False):
        super().__init__()
        if not isinstance(module, Module):
            raise TypeError(f"Recompute wraps an nn.Module, got {type(module).__name__}")
        # Registered under the empty name: names pass through (see Module.named_modules).
        self._modules[""] = module
        self.check = validate.boolean("check", check)

    @property
    def module(self):
        return self._modules[""]

    def forward(self, *args, **kwargs):
        return recompute(self.module, *args, check=self.check, **kwargs)

    def __getattr__(self, name):
        try:
            return super().__getattr__(name)
        except AttributeError:
            inner = self.__dict__.get("_modules", {}).get("")
            if inner is None:
                raise
            return getattr(inner, name)

    def __repr__(self):
        head = "Recompute(check=True,\n  " if self.check else "Recompute(\n  "
        return head + repr(self.module).replace("\n", "\n  ") + "\n)"


def recompute(module, *args, check=False, **kwargs):
    """``module(*args, **kwargs)`` as one node whose backward recomputes it (``Recompute``).

    Where nothing records a graph (``no_grad``, or no argument nor parameter requires
    grad), this is the plain call. The output must be one Tensor.
    """
    params = [p for p in module.parameters() if p.requires_grad]
    inputs = [a for a in args if isinstance(a, Tensor) and a.requires_grad]
    for key, value in kwargs.items():
        if isinstance(value, Tensor) and value.requires_grad and graph.is_grad_enabled():
            raise TypeError(f"Recompute passes tensors that require grad positionally only; "
                            f"keyword argument {key!r} is one: pass it as a positional "
                            "argument so that its gradient is kept")
    if not graph.is_grad_enabled() or not (inputs or params):
        return module(*args, **kwargs)
    first = _State(module)
    with graph.no_grad():
        out = module(*args, **kwargs)
    if not isinstance(out, Tensor):
        raise TypeError(f"Recompute needs a module that returns one Tensor; "
                        f"{type(module).__name__} returned {type(out).__name__}")
    data, shape, dtype = out.data, out.shape, out.dtype
    expected = data if check else None  # the first output, kept for the bitwise check only

    def backward(g):
        copies = [Tensor(a.data, requires_grad=a.requires_grad) if isinstance(a, Tensor)
                  else a for a in args]
        now = _State(module)
        # Ctrl-C is held from before the first write of the first forward's state to after
        # the last write putting back today's: a ``finally`` alone is no guard, as a Ctrl-C
        # can land in it before it has put anything back. The wait is one block's forward.
        with interrupts.deferred():
            try:
                first.restore()
                graph.set_grad_enabled(True)
                again = module(*copies, **kwargs)
            finally:
                now.restore()
        _check_same(module, again, shape, dtype, expected)
        wrt = [c for c in copies if isinstance(c, Tensor) and c.requires_grad] + params
        if not again.requires_grad:  # a constant output: nothing flows back through it
            return (None,) * len(wrt) if len(wrt) > 1 else None
        # Handed over as its order, with no other reference kept: the walk frees the
        # recomputed output as soon as its node is done, like every other activation.
        order = graph.topological_order(again)
        del again, copies
        grads = graph.gradients(order, g, wrt, cast=False)  # the outer walk casts at leaves
        return grads[0] if len(grads) == 1 else tuple(grads)

    return primitive(data, (*inputs, *params), backward, name="recompute")


def _check_same(module, again, shape, dtype, expected):
    """The recomputed output against the first: the same shape and dtype always, the same
    bits when ``expected`` (the first output, kept under ``check=True``) is given."""
    name = type(module).__name__
    if not isinstance(again, Tensor) or again.shape != shape or again.dtype != dtype:
        raise RuntimeError(f"Recompute: the recomputed forward of {name} returned "
                           f"{getattr(again, 'shape', type(again).__name__)} where the first "
                           f"returned shape {shape} ({dtype})")
    if expected is not None and not _same(again.xp, again.data, expected):
        raise RuntimeError(f"Recompute(check=True): the recomputed forward of {name} differs "
                           "from the first; it reads state that recomputation does not put "
                           "back (a random generator of its own?), so its gradient would be "
                           "wrong")


def _same(xp, a, b):
    """Every element equal, NaN where the other has NaN too."""
    same = a == b
    if backend.is_floating(xp, a):
        same = same | (xp.isnan(a) & xp.isnan(b))
    return bool(xp.all(same))


def _copy(value):
    """An array's copy (in its namespace); anything else as it is."""
    if backend.is_array(value):
        return backend.get_namespace(value).asarray(value, copy=True)
    return value


class _State:
    """What a forward reads besides its arguments and parameters: every module's training
    flag and buffers, each Dropout's call count, the dropout keys and the grad mode."""

    def __init__(self, module):
        # Copies of the buffers: a layer may update one in place (x *= 0.9), not only replace
        # it as BatchNorm does. They are small (statistics), so copying is cheap.
        self.modules = [(m, m.training, {k: _copy(v) for k, v in m._buffers.items()},
                         getattr(m, "calls", None) if isinstance(m, dropout.Dropout) else None)
                        for _, m in module.named_modules()]
        self.keys = dropout.current_keys()
        self.grad_enabled = graph.is_grad_enabled()

    def restore(self):
        # The process-global flags first: an error inside this call then leaves at most a
        # module's state half put back, which the accumulation guard restores as a whole.
        # (``recompute`` holds Ctrl-C back around it.)
        dropout.set_keys(self.keys)
        graph.set_grad_enabled(self.grad_enabled)
        for m, training, buffers, calls in self.modules:
            object.__setattr__(m, "training", training)
            m._buffers.update({k: _copy(v) for k, v in buffers.items()})  # kept unwritten
            if calls is not None:
                m.calls = calls
