"""The checks and the snapshot that make every accumulation call all-or-nothing.

``as_batch``, ``as_loss`` and the ``check_*`` functions judge the arguments before anything
runs; ``TrainingState`` holds references to everything a call may change, so that any
failure, ``KeyboardInterrupt`` included, puts all of it back.
"""

import math
from dataclasses import dataclass
from fractions import Fraction

from minigrad import nn
from minigrad.engine import Tensor, backend, graph
from minigrad.nn import dropout
from minigrad.nn import functional as F


@dataclass(frozen=True)
class TrainingState:
    """References to everything an accumulator call may change, to put back on failure.

    Until an update commits, ``.grad``, parameters and buffers are replaced by new arrays,
    never written into, so holding the old references is a snapshot; the commit writes
    parameters and optimizer state in place and is final (``restore`` after it does
    nothing). The optimizer's and scheduler's attributes are copied one level deep.
    The two process-global flags, grad mode and the dropout keys, are kept too: an interrupt
    that lands as a ``with`` block ends (before its ``__exit__`` runs) leaves them set.
    """

    data: list
    grads: list
    buffers: dict
    window: object
    skipped_updates: int
    optimizer: dict | None
    scheduler: dict | None
    flags: tuple
    commits: int

    @classmethod
    def of(cls, acc):
        return cls([p.data for p in acc.params], [p.grad for p in acc.params],
                   dict(acc.model.named_buffers()), acc.window, acc.skipped_updates,
                   attributes(acc.optimizer), attributes(acc.scheduler),
                   (graph.is_grad_enabled(), dropout.current_keys()), acc.commits)

    def restore(self, acc):
        """Put everything back, unless an update was committed since (it wrote in place and
        is final: an interrupt held during its commit arrives after it, in the state after)."""
        if acc.commits != self.commits:
            return
        graph.set_grad_enabled(self.flags[0])
        dropout.set_keys(self.flags[1])
        for p, data, grad in zip(acc.params, self.data, self.grads):
            p.data, p.grad = data, grad
        acc.model.set_buffers(self.buffers)
        acc.window, acc.skipped_updates = self.window, self.skipped_updates
        restore_attributes(acc.optimizer, self.optimizer)
        restore_attributes(acc.scheduler, self.scheduler)


def attributes(obj):
    """A copy of ``obj``'s attributes, one level deep (lists are copied), or None."""
    if obj is None:
        return None
    return {k: list(v) if isinstance(v, list) else v for k, v in vars(obj).items()}


def restore_attributes(obj, saved):
    """Put back what ``attributes(obj)`` returned."""
    if obj is not None:
        vars(obj).update({k: list(v) if isinstance(v, list) else v for k, v in saved.items()})


def nonfinite(loss_sum):
    """Why a window that ``decide`` found not finite is refused."""
    if not finite_number(loss_sum):
        return f"a micro-batch's loss is not finite (the window's loss sum is {loss_sum})"
    return "the accumulated gradient is not finite"


def finite_number(value):
    """Whether a Python number is finite (exact Fractions always are)."""
    return isinstance(value, Fraction) or math.isfinite(value)


def as_batch(x, y):
    """``(x, y)`` as arrays of one namespace with the same number of samples.

    Tensors are unwrapped (their ``.data``); anything else that is not an array is refused.
    """
    arrays = []
    for name, a in (("x", x), ("y", y)):
        a = a.data if isinstance(a, Tensor) else a
        if not backend.is_array(a):
            raise TypeError(f"{name} must be an array (NumPy, CuPy, ...) or a Tensor, "
                            f"got {type(a).__name__}")
        if a.ndim == 0:
            raise ValueError(f"{name} must have a sample axis, got a 0-d array")
        arrays.append(a)
    x, y = arrays
    backend.get_namespace(x, y)
    if x.shape[0] != y.shape[0]:
        raise ValueError(f"x has {x.shape[0]} samples but y has {y.shape[0]}")
    if x.shape[0] == 0:
        raise ValueError("the batch is empty: x has 0 samples")
    return x, y


def as_loss(loss_fn):
    """A loss object with ``(input, target, reduction=...)`` and ``num_items(target)``."""
    if isinstance(loss_fn, type):
        raise TypeError(f"loss_fn must be a loss object, got the class {loss_fn.__name__}; "
                        f"pass an instance, e.g. {loss_fn.__name__}()")
    if hasattr(loss_fn, "num_items"):
        return loss_fn
    if loss_fn is F.cross_entropy:
        return nn.CrossEntropyLoss()
    if loss_fn is F.mse_loss:
        return nn.MSELoss()
    raise TypeError("loss_fn must be functional.cross_entropy, functional.mse_loss or a loss "
                    "with num_items(target), such as nn.CrossEntropyLoss(ignore_index=...)")


def check_optimizer(optimizer, params):
    """The optimizer (None allowed: gradients only) holds parameters of the model."""
    if optimizer is None:
        return
    if not hasattr(optimizer, "params") or not hasattr(optimizer, "step"):
        raise TypeError(f"optimizer must be a minigrad optimizer (optim.SGD, ...), "
                        f"got {type(optimizer).__name__}")
    own = {id(p) for p in params}
    for i, p in enumerate(optimizer.params):
        if id(p) not in own:
            raise ValueError(f"optimizer.params[{i}] is not a parameter of the model (was the "
                             "model rebuilt after the optimizer was made?); build the "
                             "optimizer from model.parameters()")


def check_scheduler(scheduler, optimizer):
    """``scheduler`` (or None) must be an ``optim.Scheduler`` of ``optimizer``."""
    if scheduler is None:
        return
    if not hasattr(scheduler, "next_lr"):
        raise TypeError(f"scheduler must be an optim.Scheduler, got {type(scheduler).__name__}")
    if scheduler.optimizer is not optimizer:
        raise ValueError("scheduler drives another optimizer than the one given; build it "
                         "with Scheduler(optimizer, schedule)")

