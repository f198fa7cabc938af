"""Does *your* PyTorch accumulation loop make the full-batch update? ``check_accumulation``.

It runs the user's ``train_step(model, x, y[, optimizer[, scheduler]][, scaler])`` (one
window: micro-batches, and with an optimizer the update) and a full-batch reference on deep
copies of the same state from the same torch seed, and answers in three values:

* ``True``: the gradient ``optimizer.step()`` saw is the full batch's within the derived
  rounding bound (``minigrad.interop.torch_bound``), the bound is *decisive*, and the update
  is the full batch's exactly: one step, from the window's starting parameters and optimizer
  state, with the full batch's hyperparameters, leaving the scheduler and the scaler where
  the full batch leaves them (``minigrad.interop.torch_verdict``);
* ``False``: something differs, each cause confirmed by a measurement or by a run without it
  (``minigrad.interop.torch_causes``);
* ``None``: no verdict, and why (a zero gradient, or a bound that is not decisive even on
  float64 copies).

**Decisive.** A wrong loop is caught for sure when its gradient differs from g by more than
the bound b in 2-norm (every entry within b implies |g_acc - g|_2 <= |b|_2). The smallest
mistake of the normaliser, counting one item too many or too few, moves g by |g|_2 / (n + 1)
(n the window's items). So ``True`` needs |b|_2 < |g|_2 / (n + 1): then a normaliser off by
one item, and any larger change, fails the check. Where that cannot hold, the check does not
say ``True``.

**Precision.** A float16 or bfloat16 model's bound is larger than its gradient, so the check
runs on float64 copies of the model, the optimizer state, the data and the step (the
report's ``dtype`` and ``verdict`` say so): it checks the loop's arithmetic, not the
rounding of low precision. A float32 model is checked in float32 where the bound can be
decisive (2 gamma_{N+1} < 1 / (n + 1) at least) and on float64 copies where it cannot, or
where a float32 gap has no confirmed cause. The user's model, optimizer, scheduler, scaler,
tensors and torch's random state (CPU and CUDA) are never changed.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field

try:
    import torch
except ImportError as error:  # pragma: no cover - exercised in a subprocess by the tests
    raise ImportError("minigrad.interop.torch needs PyTorch: install the extra "
                      "`pip install 'minigrad[torch]'` (or torch itself)") from error

# after the torch check, so that a missing torch gets the message above
from minigrad.interop.torch_arguments import validate  # noqa: E402
from minigrad.interop.torch_bound import UNIT_ROUNDOFF, count_items, gamma  # noqa: E402
from minigrad.interop.torch_causes import counterfactual, measured  # noqa: E402
from minigrad.interop.torch_runs import (  # noqa: E402
    Start,
    TrainStepError,
    calling_convention,
    check_signature,
    run,
)
from minigrad.interop.torch_verdict import (  # noqa: E402
    ParameterGap,
    gaps,
    reference_bound,
    seen_gradient,
    update_causes,
    within,
)

__all__ = ["ParameterGap", "TorchReport", "TrainStepError", "check_accumulation"]
LOW_PRECISION = (torch.float16, torch.bfloat16)


@dataclass
class TorchReport:
    """What ``check_accumulation`` found. ``equivalent``: True, False or None (no verdict);
    ``verdict``: the sentence to act on; ``parameters``: name -> ``ParameterGap`` (gap and
    bound, and the bound against the gradient's norm); ``causes``: why not, each confirmed;
    ``resolution``: |b|_2 / |g|_2, decisive below ``threshold`` = 1 / (n + 1); ``dtype``: the
    dtype the verdict was reached in."""

    equivalent: bool | None
    verdict: str
    parameters: dict[str, ParameterGap]
    causes: list[str] = field(default_factory=list)
    optimizer_steps: int | None = None
    items: int = 0
    resolution: float = math.nan
    threshold: float = math.nan
    dtype: str = ""

    def __str__(self):
        rows = ["| parameter | max gap | bound | gap / bound | ‖g‖ | ‖b‖ / ‖g‖ |",
                "|---|---|---|---|---|---|"]
        rows += [f"| {name} | {p.gap:.1e} | {p.bound:.1e} | {p.ratio:.2g} | "
                 f"{p.grad_norm:.2e} | {_ratio(p.bound_norm, p.grad_norm):.1e} |"
                 for name, p in self.parameters.items()]
        return "\n".join([f"verdict: {self.verdict}", *rows, *(f"- {c}" for c in self.causes)])


def _ratio(a, b):
    return a / b if b > 0 else (math.inf if a > 0 else math.nan)


@dataclass
class _Context:
    start: Start
    loss_fn: object
    x: torch.Tensor
    y: torch.Tensor
    train_step: object
    max_norm: float | None
    seed: int
    dtype: str = "torch.float64"
    bound: dict | None = None


def _guarded(train_step, convention, where):
    def call(*args):
        try:
            return train_step(*args)
        except Exception as error:
            raise TrainStepError(f"train_step raised {type(error).__name__}: {error} (called "
                                 f"as {convention} on {where})") from error
    return call


def _gradient_causes(ctx, acc, g_acc, g_ref, known):
    """Why the gradient differs: measured, else by runs without each suspect (with the
    mistakes already seen, ``known``, removed first); None where nothing explains it in a
    dtype other than float64."""
    if known:
        return counterfactual(ctx, acc, known)
    # a loop that clips may rescale by its clip: runs without clipping decide first
    cause = None if acc.clip_calls else measured(g_acc, g_ref, ctx.bound, ctx.start)
    causes = [cause] if cause else counterfactual(ctx, acc, ())
    if causes[0].startswith("unexplained") and acc.clip_calls:
        cause = measured(g_acc, g_ref, ctx.bound, ctx.start)
        causes = [cause] if cause else causes
    if causes[0].startswith("unexplained") and ctx.dtype != "torch.float64":
        return None
    return causes


def _judge(ctx, n, dtype_name):
    """One full check in the context's dtype: (TorchReport, whether float64 should decide)."""
    ctx.dtype = dtype_name
    ref, ctx.bound = reference_bound(ctx.start, ctx.loss_fn, ctx.x, ctx.y, ctx.max_norm,
                                     ctx.seed, (), n)
    acc = run(ctx.start, ctx.x, ctx.y, ctx.train_step, ctx.seed)
    g_ref, g_acc = seen_gradient(ref), seen_gradient(acc)
    parameters = gaps(g_acc, g_ref, ctx.bound)
    g_norm = math.sqrt(sum(p.grad_norm ** 2 for p in parameters.values()))
    b_norm = math.sqrt(sum(p.bound_norm ** 2 for p in parameters.values()))
    resolution, threshold = _ratio(b_norm, g_norm), 1 / (n + 1)

    def report(equivalent, verdict, causes=()):
        return TorchReport(equivalent, verdict, parameters, list(causes), acc.steps, n,
                           resolution, threshold, dtype_name)

    blocking, causes = update_causes(ctx.start, acc, ref)
    if blocking and blocking[0].startswith("train_step changed the parameters"):
        return report(None, "no verdict: " + blocking[0]), False
    if not blocking and not acc.grads and any(p.grad_norm > 0 for p in parameters.values()):
        blocking = ["train_step left no gradient: it never called backward (or set .grad to "
                    "None before the step)"]
    if not blocking and ctx.start.optimizer is not None and not acc.cleared:
        # .grad is left after the step: the next window must clear it before its backwards
        leftover = run(ctx.start, ctx.x, ctx.y, ctx.train_step, ctx.seed, grads=acc.grads)
        if not within(gaps(seen_gradient(leftover), g_acc, ctx.bound)):
            causes.append("the gradients are never zeroed: train_step clears .grad neither "
                          "before its backwards nor after the step, so the next window adds "
                          "this one's gradient (a loop that zeroes outside train_step: move "
                          "the zero_grad into it)")
    if not blocking and not within(parameters):
        known = tuple(r for r, hit in (("zeroing", acc.zeroed_before),
                                       ("clipping", max(acc.clips_before, acc.clip_calls) > 1))
                      if hit)
        found = _gradient_causes(ctx, acc, g_acc, g_ref, known)
        if found is None:  # unexplained in float32: float64 decides
            return report(False, "NOT equivalent: unexplained"), True
        causes = found + [c for c in causes if c not in found]
    causes = blocking + causes
    if causes:
        return report(False, "NOT equivalent: " + "; ".join(causes), causes), False
    if g_norm == 0:
        return report(None, "no verdict: the full-batch gradient is zero (a loss that is "
                      "identically zero, or no parameter it depends on), so no loop could "
                      "have failed"), False
    if not resolution < threshold:
        return report(None, f"no verdict: the rounding bound is {resolution:.1e} of the "
                      f"gradient's norm in {dtype_name}, not below one item's share 1/(n+1) "
                      f"= {threshold:.1e} (n = {n} items): a wrong normaliser could hide in "
                      "it"), dtype_name != "torch.float64"
    return report(True, f"equivalent: the update IS the full batch's (every gradient entry "
                  f"within its rounding bound, which is {resolution:.1e} of the gradient's "
                  f"norm, below one item's share {threshold:.1e}; one optimizer step with "
                  "the full batch's hyperparameters, scheduler and scaler)"), False


def check_accumulation(model, loss_fn, x, y, train_step, *, optimizer=None, scheduler=None,
                       scaler=None, max_norm=None, seed=0):
    """Is ``train_step``'s window the full-batch update? A ``TorchReport`` (module docstring).

    ``train_step(model, x, y)`` runs one window on the copy of ``model`` it is given and
    leaves the gradient in ``.grad``; with ``optimizer`` (``scheduler``, ``scaler``) it is
    called as ``train_step(model, x, y, optimizer[, scheduler][, scaler])`` with copies of
    them and makes the whole update, the next window's start included: ``.grad`` cleared
    before its backwards or after the step (a copy it is given starts with no gradient; one
    left after the step is tested against a second run that starts with it). The reference
    is ``loss_fn(model(x), y).backward()`` (the scaler's scaled loss), clipped to
    ``max_norm`` if given, one step, ``scaler.update()``, one ``scheduler.step()``
    (``ReduceLROnPlateau``: ``step(loss)`` with the full batch's loss). ``loss_fn`` is a
    mean over items (``reduction="mean"``); ``model(x)`` may return a tensor or a tuple or
    dict of them (its largest floating tensor is taken for the logits).

    >>> import torch
    >>> model = torch.nn.Linear(3, 1).double()
    >>> x, y = torch.randn(5, 3, dtype=torch.float64), torch.randn(5, 1, dtype=torch.float64)
    >>> def item_weighted(model, x, y):
    ...     for xj, yj in ((x[:2], y[:2]), (x[2:], y[2:])):
    ...         torch.nn.functional.mse_loss(model(xj), yj, reduction="sum").div(5).backward()
    >>> check_accumulation(model, torch.nn.MSELoss(), x, y, item_weighted).equivalent
    True
    """
    validate(model, loss_fn, x, y, train_step, optimizer, scheduler, scaler, max_norm, seed)
    user = Start(model, optimizer, scheduler, scaler)
    check_signature(train_step, user)
    n, convention = count_items(loss_fn, y), calling_convention(user)
    dtypes = {p.dtype for p in model.parameters() if p.requires_grad}
    u = max(UNIT_ROUNDOFF.get(d, 2.0**-24) for d in dtypes)
    native = (dtypes == {torch.float64}
              or (not dtypes & set(LOW_PRECISION) and 2 * gamma(x.shape[0] + 1, u) * (n + 1) < 1))
    report = None
    if native:
        ctx = _Context(user, loss_fn, x, y, _guarded(train_step, convention, "copies"),
                       max_norm, seed)
        report, again = _judge(ctx, n, str(sorted(dtypes, key=str)[0]))
        if not again:
            return report
    why = (f"the model is {'/'.join(sorted(str(d) for d in dtypes))}: its rounding cannot "
           "decide" if report is None else f"in {report.dtype} {report.verdict}")
    where = "float64 copies of the model, optimizer state, data and step"
    ctx = _Context(user.converted(torch.float64), _loss64(loss_fn), _to64(x), _to64(y),
                   _guarded(train_step, convention, where), max_norm, seed)
    try:
        report, _ = _judge(ctx, n, "torch.float64")
    except TrainStepError as error:
        if report is None:  # never run in its own dtype: an error there is the step's own
            ctx = _Context(user, loss_fn, x, y, _guarded(train_step, convention, "copies"),
                           max_norm, seed)
            report, _ = _judge(ctx, n, str(sorted(dtypes, key=str)[0]))
            if report.equivalent is False and not report.verdict.endswith("unexplained"):
                report.verdict += (f" (in {report.dtype}: train_step could not run on {where}"
                                   f": {error.__cause__!r})")
                return report
        return TorchReport(None, f"no verdict: {why}, and train_step could not run on {where}: "
                           f"{error.__cause__!r}", {}, [], None, n, math.nan, 1 / (n + 1),
                           "torch.float64")
    report.verdict += f" (checked on {where}: {why})"
    return report


def _to64(t):
    return t.detach().to(torch.float64) if t.is_floating_point() else t


def _loss64(loss_fn):
    if isinstance(loss_fn, torch.nn.Module):
        return copy.deepcopy(loss_fn).to(torch.float64)
    return loss_fn
