"""Does *your* PyTorch accumulation loop give the full-batch gradient? ``check_accumulation``.

It runs the user's ``train_step(model, x, y)`` (a micro-batch loop that leaves the window's
gradient in ``.grad``) and a full-batch reference, ``loss_fn(model(x), y).backward()`` with
``loss_fn`` a mean over items, from deep copies of the same state and the same torch seed,
and compares them parameter by parameter against the derived rounding bound of
``minigrad.interop.torch_bound``. It runs the step twice: a gap between those two runs is
randomness. The user's model, optimizer, scheduler and torch's RNG state are never changed.
"""

from __future__ import annotations

import copy
import math
import numbers
from dataclasses import dataclass, field

try:
    import torch
except ImportError as error:  # pragma: no cover - exercised in a subprocess by the tests
    raise ImportError("minigrad.interop.torch needs PyTorch: install the extra "
                      "`pip install 'minigrad[torch]'` (or torch itself)") from error

# after the torch check, so that a missing torch gets the message above
from minigrad.interop.torch_bound import clipped_bound, gradient_bound  # noqa: E402

__all__ = ["ParameterGap", "TorchReport", "check_accumulation", "gradient_bound"]


@dataclass
class ParameterGap:
    """One parameter: the largest |g_acc - g_ref|, the bound there, and their worst ratio."""

    gap: float
    bound: float
    ratio: float


@dataclass
class TorchReport:
    """What ``check_accumulation`` found: ``equivalent`` is True when every gap is within its
    bound (and, with an optimizer, it stepped once with the reference's learning rates)."""

    parameters: dict[str, ParameterGap]
    equivalent: bool
    causes: list[str] = field(default_factory=list)
    optimizer_steps: int | None = None

    def __str__(self):
        rows = ["| parameter | max gap | bound | gap / bound |", "|---|---|---|---|"]
        rows += [f"| {name} | {p.gap:.1e} | {p.bound:.1e} | {p.ratio:.2g} |"
                 for name, p in self.parameters.items()]
        verdict = "equivalent" if self.equivalent else "NOT equivalent"
        return "\n".join([f"verdict: {verdict}", *rows, *(f"- {c}" for c in self.causes)])


def _require(name, value, ok, allowed):
    if not ok:
        raise TypeError(f"{name} must be {allowed}, got {value!r}"[:300])


def _validate(model, loss_fn, x, y, train_step, optimizer, scheduler, max_norm, seed):
    _require("model", model, isinstance(model, torch.nn.Module), "a torch.nn.Module")
    _require("loss_fn", loss_fn, callable(loss_fn), "a callable loss_fn(output, y), a mean")
    _require("train_step", train_step, callable(train_step),
             "a callable train_step(model, x, y[, optimizer[, scheduler]])")
    for name, value in (("x", x), ("y", y)):
        _require(name, value, isinstance(value, torch.Tensor), "a torch.Tensor")
    if x.ndim == 0 or x.shape[0] < 1 or y.ndim == 0 or y.shape[0] != x.shape[0]:
        raise ValueError(f"x and y must hold the same number (>= 1) of samples along dim 0, "
                         f"got x of shape {tuple(x.shape)} and y of shape {tuple(y.shape)}")
    _require("optimizer", optimizer, optimizer is None
             or isinstance(optimizer, torch.optim.Optimizer), "None or a torch.optim.Optimizer")
    if optimizer is not None:
        mine = {id(p) for p in model.parameters()}
        theirs = [p for g in optimizer.param_groups for p in g["params"]]
        if any(id(p) not in mine for p in theirs):
            raise ValueError("optimizer must update parameters of model, got an optimizer "
                             "holding parameters that model does not have")
    _require("scheduler", scheduler, scheduler is None or (
        optimizer is not None and getattr(scheduler, "optimizer", None) is optimizer),
        "None, or an LR scheduler of the given optimizer")
    if max_norm is not None and not (isinstance(max_norm, numbers.Real) and max_norm > 0):
        raise ValueError(f"max_norm must be None or a positive number, got {max_norm!r}")
    _require("seed", seed, isinstance(seed, int) and not isinstance(seed, bool), "an int")


def _copies(model, optimizer, scheduler):
    """Deep copies that share nothing with the user's objects. An optimizer's copy loses the
    wrapper its scheduler puts on ``step`` (``Optimizer.__getstate__`` keeps only its state),
    so the copy gets one, or every ``scheduler.step()`` would warn."""
    model, optimizer, scheduler = copy.deepcopy((model, optimizer, scheduler))
    if scheduler is not None:
        opt = optimizer

        def step(*args, **kwargs):
            opt._opt_called = True
            return type(opt).step(opt, *args, **kwargs)

        step._wrapped_by_lr_sched = True
        opt.step = step
    for p in model.parameters():
        p.grad = None
    return model, optimizer, scheduler


def _run(model, x, y, train_step, optimizer, scheduler, seed):
    """Gradients (name -> float64) the window produced, its steps and learning rates."""
    model, optimizer, scheduler = _copies(model, optimizer, scheduler)
    names = {id(p): name for name, p in model.named_parameters()}
    seen = []
    if optimizer is not None:
        def record(opt, args, kwargs):
            seen.append(({names[id(p)]: p.grad.double().clone() for g in opt.param_groups
                          for p in g["params"] if p.grad is not None},
                         [g["lr"] for g in opt.param_groups]))
        optimizer.register_step_pre_hook(record)
    torch.manual_seed(seed)
    args = [a for a in (optimizer, scheduler) if a is not None]
    train_step(model, x, y, *args)
    if optimizer is None:
        grads = {name: (torch.zeros_like(p) if p.grad is None else p.grad).double()
                 for name, p in model.named_parameters() if p.requires_grad}
        return grads, None, None
    grads, lrs = seen[0] if seen else ({}, None)
    return grads, len(seen), lrs


def _reference(model, loss_fn, x, y, optimizer, scheduler, max_norm, seed):
    def full_batch(model, x, y, *args):
        loss_fn(model(x), y).backward()
        if max_norm is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        if args:
            args[0].step()
    return _run(model, x, y, full_batch, optimizer, scheduler, seed)


def check_accumulation(model, loss_fn, x, y, train_step, *, optimizer=None, scheduler=None,
                       max_norm=None, seed=0):
    """Compare ``train_step``'s gradient with the full-batch one; a ``TorchReport``.

    ``train_step(model, x, y)`` runs one window on the copy of ``model`` it is given and
    leaves the gradient in ``.grad``. With ``optimizer`` (and ``scheduler``) it is called as
    ``train_step(model, x, y, optimizer[, scheduler])`` with copies of them, and the gradient
    compared is the one ``optimizer.step()`` saw. The reference is
    ``loss_fn(model(x), y).backward()``, clipped to ``max_norm`` if given, then one
    ``optimizer.step()``. Both start from ``torch.manual_seed(seed)``.

    >>> import torch
    >>> model = torch.nn.Linear(3, 1).double()
    >>> x, y = torch.randn(5, 3, dtype=torch.float64), torch.randn(5, 1, dtype=torch.float64)
    >>> def item_weighted(model, x, y):
    ...     for xj, yj in ((x[:2], y[:2]), (x[2:], y[2:])):
    ...         torch.nn.functional.mse_loss(model(xj), yj, reduction="sum").div(5).backward()
    >>> check_accumulation(model, torch.nn.MSELoss(), x, y, item_weighted).equivalent
    True
    """
    _validate(model, loss_fn, x, y, train_step, optimizer, scheduler, max_norm, seed)
    state = torch.get_rng_state()
    try:
        bound = gradient_bound(model, loss_fn, x, y, seed)
        if max_norm is not None:
            raw = _reference(model, loss_fn, x, y, None, None, None, seed)[0]
            dtype = next(model.parameters()).dtype
            bound = clipped_bound(bound, raw, max_norm, dtype)
        ref, _, ref_lrs = _reference(model, loss_fn, x, y, optimizer, scheduler, max_norm, seed)
        runs = [_run(model, x, y, train_step, optimizer, scheduler, seed) for _ in range(2)]
    finally:
        torch.set_rng_state(state)
    (acc, steps, lrs), (again, _, _) = runs
    return _report(model, ref, acc, again, bound, steps, lrs, ref_lrs)


def _gaps(a, b, bound):
    out = {}
    for name, r in b.items():
        g = a.get(name, torch.zeros_like(r))
        diff, limit = (g - r).abs(), bound[name]
        ratio = torch.where(limit > 0, diff / limit.clamp_min(1e-300),
                            torch.where(diff > 0, math.inf, 0.0))
        out[name] = ParameterGap(float(diff.max()), float(limit.max()), float(ratio.max()))
    return out


def _report(model, ref, acc, again, bound, steps, lrs, ref_lrs):
    gaps = _gaps(acc, ref, bound)
    ok = all(p.ratio <= 1 for p in gaps.values())
    causes = []
    coupled = [name for name, m in model.named_modules()
               if isinstance(m, torch.nn.modules.batchnorm._BatchNorm) and m.training]
    if coupled:
        causes.append(f"batch-coupled modules in training mode: {', '.join(coupled)} "
                      "(statistics per micro-batch; use GroupNorm/LayerNorm or eval mode)")
    if any(p.ratio > 1 for p in _gaps(again, acc, bound).values()):
        causes.append("two runs of train_step from the same state and seed differ: "
                      "randomness not reset identically (dropout with fresh random numbers)")
    if steps is not None and steps != 1:
        ok = False
        causes.append(f"optimizer.step() was called {steps} times in one window, not once")
    if lrs is not None and lrs != ref_lrs:
        ok = False
        causes.append(f"the update used learning rates {lrs}, the full batch {ref_lrs}: "
                      "a scheduler stepped per micro-batch")
    if not ok and not causes:
        causes.append(_rescaling(acc, ref, bound))
    return TorchReport(gaps, ok, causes, steps)


def _rescaling(acc, ref, bound):
    """The cause of a gap that is not randomness, coupling or step accounting."""
    names = list(ref)
    a = torch.cat([acc.get(n, torch.zeros_like(ref[n])).flatten() for n in names])
    r = torch.cat([ref[n].flatten() for n in names])
    b = torch.cat([bound[n].flatten() for n in names])
    c = float(a @ r / (r @ r)) if float(r @ r) > 0 else math.nan
    if math.isfinite(c) and bool(((a - c * r).abs() <= max(1.0, abs(c)) * b).all()):
        return (f"the gradient is {c:.6g} x the full-batch one: a rescaling, a normalisation "
                "(divided by the wrong count, twice, or not at all) or a clip of a scaled "
                "gradient")
    return ("the items are weighted differently from the full batch's mean: the textbook "
            "loop on an uneven split or with ignored targets, or gradients zeroed or clipped "
            "inside the window")
