"""One window of ``check_accumulation``, run on copies: the user's ``train_step`` or the
full-batch reference, with what ``optimizer.step()`` saw recorded and the state the window
left behind.

Every run starts from a deep copy of one ``Start`` (the user's model, optimizer, scheduler
and scaler, converted to the dtype the check works in), from ``torch.manual_seed(seed)``
inside ``torch.random.fork_rng``, so the caller's random state is never touched, and gets
``x`` and ``y`` as copies. A run may *remove* a suspected cause first (``REMOVALS``): dropout
layers switched off, BatchNorm on its running statistics, gradient clipping or
``zero_grad`` made a no-op.
"""

from __future__ import annotations

import copy
import inspect
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
from torch.nn.utils import clip_grad

REMOVALS = ("dropout", "batchnorm", "clipping", "zeroing")
DROPOUT = (torch.nn.modules.dropout._DropoutNd,)
BATCHNORM = (torch.nn.modules.batchnorm._BatchNorm,)


class TrainStepError(RuntimeError):
    """``train_step`` raised: the original error, with the call that raised it."""


@dataclass
class Start:
    """What every run copies: model, optimizer, scheduler, scaler (None where not given)."""

    model: torch.nn.Module
    optimizer: object = None
    scheduler: object = None
    scaler: object = None

    def objects(self):
        return [o for o in (self.optimizer, self.scheduler, self.scaler) if o is not None]

    def copy(self):
        model, optimizer, scheduler, scaler = copy.deepcopy(
            (self.model, self.optimizer, self.scheduler, self.scaler))
        if scheduler is not None:  # the copy lost the wrapper the scheduler puts on step()
            _wrap_step(optimizer)
        for p in model.parameters():
            p.grad = None
        return Start(model, optimizer, scheduler, scaler)

    def converted(self, dtype):
        """A copy whose model, optimizer state and scaler hold ``dtype`` (float64 copies)."""
        start = self.copy()
        start.model.to(dtype)  # keeps each Parameter object: the optimizer still holds them
        if start.optimizer is not None:
            for state in start.optimizer.state.values():
                for key, value in state.items():
                    if torch.is_tensor(value) and value.is_floating_point() and key != "step":
                        state[key] = value.to(dtype)
        return start


def _wrap_step(optimizer):
    def step(*args, **kwargs):
        optimizer._opt_called = True
        return type(optimizer).step(optimizer, *args, **kwargs)

    step._wrapped_by_lr_sched = True
    optimizer.step = step


def calling_convention(start):
    names = ["model", "x", "y"] + [n for n, o in (("optimizer", start.optimizer),
                                                   ("scheduler", start.scheduler),
                                                   ("scaler", start.scaler)) if o is not None]
    return f"train_step({', '.join(names)})"


def check_signature(train_step, start):
    """A TypeError naming the calling convention if ``train_step`` cannot take it."""
    try:
        signature = inspect.signature(train_step)
    except (TypeError, ValueError):  # a builtin without a signature: nothing to check
        return
    try:
        signature.bind(None, None, None, *start.objects())
    except TypeError:
        raise TypeError(
            f"train_step must accept the call {calling_convention(start)} (model, x, y, then "
            f"the optimizer, scheduler and scaler given to check_accumulation, in that "
            f"order), got a train_step with signature {signature}") from None


@dataclass
class Window:
    """What one run left: the gradient ``optimizer.step()`` saw (or ``.grad`` at the end,
    without an optimizer), what happened before that step, and everything the update could
    have changed."""

    grads: dict
    steps: int | None = None
    hyper: list | None = None          # param_groups at the first step, without "params"
    step_kwargs: dict = field(default_factory=dict)
    moved: list = field(default_factory=list)     # parameters changed before the step
    state_changed: bool = False                   # optimizer state changed before the step
    training: dict = field(default_factory=dict)  # module -> training flag at the step
    clips_before: int = 0                         # clips before the step
    zeroed_before: int = 0                        # zero_grad calls that cleared a gradient
    scheduled_before: int = 0                     # scheduler.step() calls before the step
    params: dict = field(default_factory=dict)    # name -> parameter after the window
    buffers: dict = field(default_factory=dict)   # name -> buffer after the window
    hyper_after: list | None = None
    cleared: bool = True                          # every .grad None or 0 after the window
    optimizer_state: dict | None = None
    scheduler_state: dict | None = None
    scaler_state: dict | None = None
    clip_calls: int = 0


def hyperparameters(optimizer):
    return [{k: v for k, v in g.items() if k != "params"} for g in optimizer.param_groups]


def same(a, b):
    """Exact equality of states: tensors bit for bit (NaN equal to NaN), containers by item."""
    if torch.is_tensor(a) or torch.is_tensor(b):
        return (torch.is_tensor(a) and torch.is_tensor(b) and a.shape == b.shape
                and a.dtype == b.dtype and bool(torch.equal(a, b) or (
                    a.is_floating_point() and torch.equal(a.isnan(), b.isnan())
                    and torch.equal(a.nan_to_num(), b.nan_to_num()))))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same(p, q) for p, q in zip(a, b))
    return a == b or (a != a and b != b)


def _state(obj):
    return None if obj is None else copy.deepcopy(obj.state_dict())


@contextmanager
def _patched(owner, name, replacement):
    original = getattr(owner, name, None)
    if original is None:  # an older torch without this function: nothing to observe
        yield
        return
    setattr(owner, name, replacement(original))
    try:
        yield
    finally:
        setattr(owner, name, original)


@contextmanager
def _observed(removals, counts):
    """Count the gradient clips (``clip_grad_norm_``, ``clip_grads_with_norm_``,
    ``clip_grad_value_``) and the ``zero_grad`` calls that clear a gradient; with
    "clipping" or "zeroing" in ``removals``, make them no-ops."""
    def counting(key, remove):
        def wrap(original):
            def call(*args, **kwargs):
                counts[key] = counts.get(key, 0) + 1
                if not remove:
                    return original(*args, **kwargs)
            return call
        return wrap

    def zeroing(original):
        def call(self, *args, **kwargs):
            params = self.parameters() if isinstance(self, torch.nn.Module) else (
                p for g in self.param_groups for p in g["params"])
            if any(p.grad is not None and bool(dense(p.grad).any()) for p in params):
                counts["zero"] = counts.get("zero", 0) + 1
                if "zeroing" in removals:
                    return None
            return original(self, *args, **kwargs)
        return call

    clip = counting("clip", "clipping" in removals)
    with _patched(clip_grad, "_clip_grads_with_norm_", clip), \
            _patched(torch.nn.utils, "clip_grads_with_norm_", clip), \
            _patched(clip_grad, "clip_grad_value_", clip), \
            _patched(torch.nn.utils, "clip_grad_value_", clip), \
            _patched(torch.optim.Optimizer, "zero_grad", zeroing), \
            _patched(torch.nn.Module, "zero_grad", zeroing):
        yield


def dense(g):
    return g.to_dense() if g.is_sparse else g


def run(start, x, y, step, seed, removals=(), grads=None):
    """Run ``step(model, x, y, *objects)`` on a copy of ``start``; a ``Window``. ``grads``
    (name -> tensor): gradients left in ``.grad`` before the window, as a previous window that
    was never zeroed would leave them."""
    s = start.copy()
    for module in s.model.modules():
        if ("dropout" in removals and isinstance(module, DROPOUT)) or (
                "batchnorm" in removals and isinstance(module, BATCHNORM)):
            module.eval()
    names = {id(p): name for name, p in s.model.named_parameters()}
    for name, p in s.model.named_parameters():
        if grads is not None and name in grads:
            p.grad = grads[name].clone()
    first = {name: p.detach().clone() for name, p in s.model.named_parameters()}
    state0 = None if s.optimizer is None else _state(s.optimizer)
    window, counts = Window({}), {}
    if s.optimizer is not None:
        window.steps = 0

        def record(opt, args, kwargs):
            window.steps += 1
            if window.steps > 1:
                return
            window.grads = {names[id(p)]: p.grad.detach().clone() for g in opt.param_groups
                            for p in g["params"] if p.grad is not None}
            window.hyper = hyperparameters(opt)
            window.step_kwargs = {k: v.detach().clone() if torch.is_tensor(v) else v
                                  for k, v in kwargs.items()}
            window.moved = [n for n, p in s.model.named_parameters()
                            if not same(p.detach(), first[n])]
            window.state_changed = not same(opt.state_dict()["state"], state0["state"])
            window.training = {n: m.training for n, m in s.model.named_modules()}
            window.clips_before = counts.get("clip", 0)
            window.zeroed_before = counts.get("zero", 0)
            window.scheduled_before = counts.get("schedule", 0)
        s.optimizer.register_step_pre_hook(record)
    if s.scheduler is not None:
        scheduler_step = s.scheduler.step

        def counted_step(*args, **kwargs):
            counts["schedule"] = counts.get("schedule", 0) + 1
            return scheduler_step(*args, **kwargs)
        s.scheduler.step = counted_step
    devices = sorted({t.device.index or 0 for t in (x, *s.model.parameters())
                      if t.device.type == "cuda"})
    with torch.random.fork_rng(devices=devices), _observed(removals, counts):
        torch.manual_seed(seed)
        step(s.model, x.detach().clone(), y.detach().clone(), *s.objects())
    if s.optimizer is None:
        window.grads = {n: p.grad.detach().clone() for n, p in s.model.named_parameters()
                        if p.grad is not None}
        window.training = {n: m.training for n, m in s.model.named_modules()}
        window.clips_before, window.zeroed_before = counts.get("clip", 0), counts.get("zero", 0)
    window.params = {n: p.detach().clone() for n, p in s.model.named_parameters()}
    window.buffers = {n: b.detach().clone() for n, b in s.model.named_buffers()}
    window.cleared = all(p.grad is None or not bool(dense(p.grad).any())
                         for p in s.model.parameters())
    window.optimizer_state = _state(s.optimizer)
    window.hyper_after = None if s.optimizer is None else hyperparameters(s.optimizer)
    if s.scheduler is not None:
        del s.scheduler.step  # the instance attribute: state_dict must not hold it
    window.scheduler_state, window.scaler_state = _state(s.scheduler), _state(s.scaler)
    window.clip_calls = counts.get("clip", 0)
    return window


def replay(start, window):
    """The window's starting parameters and optimizer state, stepped once by the optimizer
    with the gradient, hyperparameters and arguments ``window`` recorded: (parameters,
    optimizer state), to be equal bit for bit to what the window left."""
    s = start.copy()
    for p in s.model.parameters():
        p.grad = None
    params = dict(s.model.named_parameters())
    for name, g in window.grads.items():
        params[name].grad = g.clone()
    for group, hyper in zip(s.optimizer.param_groups, window.hyper):
        group.update(hyper)
    type(s.optimizer).step(s.optimizer, **window.step_kwargs)
    return ({n: p.detach().clone() for n, p in s.model.named_parameters()},
            _state(s.optimizer))
