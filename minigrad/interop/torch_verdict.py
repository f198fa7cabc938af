"""The full-batch reference of ``check_accumulation`` with its rounding bound, and the exact
comparison of the update a window made against it.

The reference is one ``loss_fn(model(x), y).backward()`` (scaled by the ``GradScaler`` if
given), then, with an optimizer, ``unscale_``, the clip to ``max_norm``, one step, the
scaler's ``update()`` and one ``scheduler.step()``. Hooks on its forward and backward collect
the bound (``minigrad.interop.torch_bound``), so the bound costs no extra pass.

The update is compared in two parts. What must be equal bit for bit: one ``step()``, taken
from the window's starting parameters and optimizer state, with the full batch's
hyperparameters (learning rates included), leaving what one ``step()`` of the gradient it saw
leaves (a replay of that step on a copy), and the scheduler's and the scaler's state after the
window. What may differ by rounding: that gradient, against the full batch's, entry by entry
within the bound.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from minigrad.interop.torch_bound import (
    UNIT_ROUNDOFF,
    BoundRecorder,
    bounds,
    clipped_bound,
    gamma,
    mse_factor,
    per_sample_sums,
)
from minigrad.interop.torch_runs import BATCHNORM, dense, replay, run, same

NORMS_FOR_KAPPA = (torch.nn.LayerNorm, torch.nn.GroupNorm, torch.nn.RMSNorm, *BATCHNORM)


@dataclass
class ParameterGap:
    """One parameter: the largest |g_acc - g_ref|, the largest bound entry, their worst
    ratio, and the 2-norms of the full-batch gradient and of the bound."""

    gap: float
    bound: float
    ratio: float
    grad_norm: float
    bound_norm: float


class Reference:
    """The full-batch step (``run`` calls it as a train_step); keeps its recorder."""

    def __init__(self, loss_fn, start, max_norm):
        self.loss_fn, self.max_norm = loss_fn, max_norm
        self.has = [o is not None for o in (start.optimizer, start.scheduler, start.scaler)]
        self.need_kappa = any(isinstance(m, NORMS_FOR_KAPPA) for m in start.model.modules())

    def _loss(self, model, x, y):
        try:
            out = model(x)
            loss = self.loss_fn(out, y)
        except Exception as error:
            raise ValueError(f"the full-batch reference loss_fn(model(x), y) raised "
                             f"{type(error).__name__}: {error}") from error
        tensors = [t for t in _tensors(out) if t.is_floating_point()]
        if not torch.is_tensor(loss) or loss.ndim != 0 or not tensors:
            raise ValueError(f"loss_fn(model(x), y) must be a scalar mean over items of a "
                             f"model output holding a floating tensor, got {loss!r}"[:300])
        first = max(tensors, key=lambda t: t.numel())  # the logits of a model's output
        self.kappa = mse_factor(self.loss_fn, first.detach(), y)
        self.classes = first.shape[-1] if first.ndim > 1 else 1
        self.loss = loss.detach()
        return out, loss

    def __call__(self, model, x, y, *objects):
        given = iter(objects)
        optimizer, scheduler, scaler = (next(given) if h else None for h in self.has)
        self.recorder = BoundRecorder(model, x.shape[0], self.need_kappa)
        try:
            out, loss = self._loss(model, x, y)
            self.scale = 1.0 if scaler is None else float(scaler.get_scale())
            (loss if scaler is None else scaler.scale(loss)).backward()
        finally:
            self.recorder.remove()
        self.names = {id(p): n for n, p in model.named_parameters()}
        self.raw = {n: dense(p.grad.detach()).double() / self.scale
                    for n, p in model.named_parameters() if p.grad is not None}
        if scaler is not None:
            scaler.unscale_(optimizer)
        if self.max_norm is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), self.max_norm)
        if optimizer is not None:
            (optimizer.step() if scaler is None else scaler.step(optimizer))
            if scaler is not None:
                scaler.update()
            if isinstance(scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau):
                scheduler.step(float(self.loss))  # the full batch's loss as its metric
            elif scheduler is not None:
                scheduler.step()


def _tensors(out):
    """The tensors of a model's output: a tensor, or those inside a tuple, list or dict (a
    ``ModelOutput``)."""
    if torch.is_tensor(out):
        return [out]
    values = out.values() if isinstance(out, dict) else out if isinstance(
        out, (list, tuple)) else []
    return [t for v in values for t in _tensors(v)]


def reference_bound(start, loss_fn, x, y, max_norm, seed, removals, n):
    """(the reference's ``Window``, name -> elementwise float64 bound)."""
    ref = Reference(loss_fn, start, max_norm)
    window = run(start, x, y, ref, seed, removals)
    rec, dtype = ref.recorder, next(start.model.parameters()).dtype
    u = UNIT_ROUNDOFF.get(dtype, 2.0**-24)
    sums = {ref.names[k]: s / ref.scale for k, s in rec.sums.items()}
    terms = {ref.names[k]: t for k, t in rec.terms.items()}
    s_norm = rec.s_norm() / ref.scale
    uncovered = {}
    for name, g in ref.raw.items():  # |g| <= S unless a use of the parameter was not hooked
        s = sums.get(name)
        if s is None or not bool((g.abs() <= s * (1 + 4 * gamma(terms[name] + 1, u))).all()):
            uncovered[name] = g
    if uncovered:
        found = {}

        def fallback(model, x, y, *objects):
            params = dict(model.named_parameters())
            found["sums"], found["s_norm"] = per_sample_sums(
                model, loss_fn, x, y, {name: params[name] for name in uncovered}, n)
        run(start, x, y, fallback, seed, removals)
        sums.update(found["sums"])
        terms.update({name: x.shape[0] for name in uncovered})
        s_norm += found["s_norm"]
    roundings = rec.roundings + 2 * ref.classes + 10
    kappa = ref.kappa * math.prod(rec.factors)
    bound = bounds({n: s for n, s in sums.items() if n in ref.raw}, terms, s_norm, roundings,
                   kappa, u)
    if max_norm is not None:
        bound = clipped_bound(bound, ref.raw, max_norm, u)
    return window, bound


def seen_gradient(window):
    """Name -> float64 gradient the step saw (a fused step's scaled gradient unscaled)."""
    scale = window.step_kwargs.get("grad_scale")
    scale = 1.0 if scale is None else float(scale)
    return {n: dense(g).double() / scale for n, g in window.grads.items()}


def gaps(acc, ref, bound):
    """Name -> ParameterGap of gradient ``acc`` against ``ref`` (name -> float64 tensors)."""
    out = {}
    for name, r in ref.items():
        g = acc.get(name, torch.zeros_like(r))
        diff, limit = (g - r).abs(), bound[name]
        ratio = torch.where(limit > 0, diff / limit.clamp_min(1e-300),
                            torch.where(diff > 0, math.inf, 0.0))
        ratio = torch.where(diff.isnan(), math.inf, ratio)
        out[name] = ParameterGap(float(diff.max()), float(limit.max()), float(ratio.max()),
                                 float(r.norm()), float(limit.norm()))
    return out


def within(parameter_gaps):
    return all(p.ratio <= 1 for p in parameter_gaps.values())


def _lrs(hyper):
    return [h.get("lr") for h in hyper]


def _scheduler_state(state):
    """A scheduler's state without ReduceLROnPlateau's ``best``: the metric the user passes
    (a loss summed over micro-batches) is the full batch's only up to rounding."""
    return None if state is None else {k: v for k, v in state.items() if k != "best"}


def _mode(acc, ref):
    changed = [n for n, t in acc.training.items() if ref.training.get(n, t) != t]
    if not changed:
        return []
    mode = "train" if acc.training[changed[0]] else "eval"
    names = ", ".join(n or "the model" for n in changed[:4]) + (" ..." if len(changed) > 4
                                                                else "")
    return [f"train_step ran {names} in {mode} mode, where the full batch runs them in the "
            f"mode they were given (model.{mode}() inside the window: dropout and BatchNorm "
            "differ)"]


def update_causes(start, acc, ref):
    """What the window did differently from the full batch, observed exactly: (causes that
    make the gradient comparison moot, causes beside it). The first list: no step, several
    steps, a change of the parameters, the optimizer's state or a module's mode before the
    step; the second: zero_grad or clipping inside the window, the hyperparameters, the
    scheduler, the scaler, the buffers, and the replay of the step."""
    if start.optimizer is None:
        moved = [n for n, p in start.model.named_parameters()
                 if not same(p.detach(), acc.params[n])]
        blocking = [f"train_step changed the parameters {', '.join(moved)} but no optimizer "
                    "was given: pass it as optimizer= so that the update is compared"] \
            if moved else []
        return blocking + _mode(acc, ref), _inside(acc, acc.clips_before) + _buffers(acc, ref)
    if acc.steps == 0:
        return ["optimizer.step() was never called in the window"], []
    if acc.steps > 1:
        return [f"optimizer.step() was called {acc.steps} times in one window, not once: "
                "the optimizer steps per micro-batch, and its count advances with each"], []
    blocking = _mode(acc, ref)
    if acc.moved:
        blocking.append(f"the parameters {', '.join(acc.moved)} changed inside the window "
                        "before optimizer.step(): weight decay (or another update) applied "
                        "per micro-batch")
    if acc.state_changed:
        blocking.append("the optimizer's state (its moments and step counts) was changed "
                        "inside the window before step(): cleared or reset mid-window")
    causes = _inside(acc, acc.clips_before)
    a_state, r_state = (_scheduler_state(w.scheduler_state) for w in (acc, ref))
    a, r = ((w or {}).get("last_epoch") for w in (a_state, r_state))
    count = f"the scheduler's count after the window is {a}, the full batch's {r}"
    lrs_differ = _lrs(acc.hyper) != _lrs(ref.hyper)
    if acc.scheduled_before or lrs_differ:
        causes.append(
            (f"scheduler.step() ran {acc.scheduled_before} time(s) before optimizer.step()"
             if acc.scheduled_before else "the learning rates at step() differ")
            + (f": the update used learning rates {_lrs(acc.hyper)}, the full batch "
               f"{_lrs(ref.hyper)}" if lrs_differ else ": the rate has not moved yet, but "
               "every later update uses a rate stepped ahead of its own")
            + (f"; {count}" if a != r else ""))
    for key in sorted({k for h in ref.hyper for k in h} - {"lr", "initial_lr"}):
        mine, theirs = [h.get(key) for h in acc.hyper], [h.get(key) for h in ref.hyper]
        if not same(mine, theirs):
            causes.append(f"the optimizer's {key} at step() was {mine}, the full batch's "
                          f"{theirs}")
    if not same(a_state, r_state) and not (acc.scheduled_before or lrs_differ):
        causes.append(f"{count}: it did not step once" if a is not None and r is not None
                      and a < r else f"{count}: it stepped per micro-batch" if a != r
                      else "the scheduler's state after the window differs from the full "
                      "batch's")
    elif same(a_state, r_state) and not same(acc.hyper_after, ref.hyper_after):
        causes.append(f"the optimizer's param_groups after the window differ from the full "
                      f"batch's: learning rates {_lrs(acc.hyper_after)} against "
                      f"{_lrs(ref.hyper_after)} (changed after the step)")
    if not same(acc.scaler_state, ref.scaler_state):
        a, r = acc.scaler_state, ref.scaler_state
        causes.append(f"the GradScaler after the window holds scale {a.get('scale')} and "
                      f"growth tracker {a.get('_growth_tracker')}, the full batch's "
                      f"{r.get('scale')} and {r.get('_growth_tracker')}: update() ran per "
                      "micro-batch, or not once")
    causes += _buffers(acc, ref)
    if acc.grads and not blocking and not causes:
        params, state = replay(start, acc)
        if not (same(params, acc.params) and same(state["state"],
                                                  acc.optimizer_state["state"])):
            causes.append("the update is not one optimizer.step() of the gradient it saw: "
                          "the parameters or the optimizer's state changed after the step")
    return blocking, causes


def _inside(acc, clips):
    causes = []
    if acc.zeroed_before:
        causes.append(f"zero_grad() cleared the gradients {acc.zeroed_before} time(s) inside "
                      "the window, before the step: only the micro-batches after the last "
                      "one count")
    if clips > 1:
        causes.append(f"the gradient was clipped {clips} times in the window: per micro-batch "
                      "(each partial sum clipped on its own), not once after the window")
    return causes


def _buffers(acc, ref):
    moved = [n for n, b in ref.buffers.items() if not same(acc.buffers.get(n), b)]
    return [f"the buffers {', '.join(moved[:4])}{' ...' if len(moved) > 4 else ''} after the "
            "window differ from the full batch's (BatchNorm's running statistics updated per "
            "micro-batch, or by an extra forward in train mode)"] if moved else []
