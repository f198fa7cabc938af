"""Why a window's gradient is not the full batch's: each cause confirmed by a measurement
that explains the whole gap, or by a run that removes it.

Measured on the gap itself (no run):

* a rescaling: g_acc = c g_ref within the bound (normalised by the wrong count);
* added decay: g_acc = g_ref + c theta within the bound (weight decay per micro-batch).

Counterfactual: the reference and ``train_step`` run again, both with one suspect removed
(``minigrad.interop.torch_runs.REMOVALS``); the suspect is a cause when the gap then falls
within the bound of that reference. Dropout layers off (randomness), BatchNorm on running
statistics (coupling, the layers named), gradient clipping a no-op, ``zero_grad`` a no-op;
then, if no single removal explains the gap, all of them at once; then, with all of them,
a batch of identical items: a loop that weighs items differently but gives them the right
total weight (the textbook loop on uneven micro-batches, a count per rank) is the full batch
there. A gap none of these explains is reported as such.
"""

from __future__ import annotations

import torch

from minigrad.interop.torch_bound import count_items
from minigrad.interop.torch_runs import BATCHNORM, DROPOUT, run
from minigrad.interop.torch_verdict import gaps, reference_bound, seen_gradient, within


def _flat(grads, names, like):
    return torch.cat([grads.get(n, torch.zeros_like(like[n])).flatten() for n in names])


def _explained_by(a, r, bound):
    """True where |a - r| <= b for every entry (flat float64 tensors)."""
    return bool(((a - r).abs() <= bound).all())


def measured(acc, ref, bound, start):
    """A cause that the gap alone shows (rescaling, added decay), else None."""
    names = list(ref)
    a, r, b = _flat(acc, names, ref), _flat(ref, names, ref), _flat(bound, names, ref)
    rr = float(r @ r)
    if rr > 0:
        c = float(a @ r) / rr
        if abs(c - 1) > 0 and _explained_by(a, c * r, b * max(1.0, abs(c))):
            return (f"the gradient is {c:.6g} x the full-batch one: a normalisation by the "
                    "wrong count (undivided, divided twice, or by another window's items) "
                    "or a rescaled loss")
    params = dict(start.model.named_parameters())
    theta = torch.cat([params[n].detach().double().flatten() for n in names])
    tt = float(theta @ theta)
    if tt > 0:
        c = float((a - r) @ theta) / tt
        if c != 0 and _explained_by(a, r + c * theta, b):
            return (f"the gradient is the full batch's plus {c:.3g} x the parameters: weight "
                    "decay added to the gradient inside the window (once per micro-batch, or "
                    "by hand as well as by the optimizer)")
    return None


def _suspects(start, acc, max_norm):
    model = start.model
    dropout = [f"{n} ({type(m).__name__})" for n, m in model.named_modules()
               if isinstance(m, DROPOUT) and m.training]
    coupled = [f"{n} ({type(m).__name__})" for n, m in model.named_modules()
               if isinstance(m, BATCHNORM) and m.training]
    suspects = []
    if dropout:
        suspects.append(("dropout", "the randomness differs between the split and the full "
                         f"batch (e.g. CUDA dropout, or dropout re-seeded per call): with the "
                         f"dropout layers {', '.join(dropout)} off the loop IS the full batch, "
                         "so its update is the same in distribution only"))
    if coupled:
        suspects.append(("batchnorm", f"batch-coupled modules: {', '.join(coupled)} normalise "
                         "each micro-batch with its own statistics (the gap goes with them on "
                         "running statistics): use GroupNorm or LayerNorm, eval mode, or an "
                         "exact two-pass BatchNorm"))
    if acc.clip_calls or max_norm is not None:
        given = "" if max_norm is not None else " (and check_accumulation got no max_norm)"
        suspects.append(("clipping", "gradient clipping: the gap goes with clipping off, so "
                         "the loop clips something other than the window's accumulated, "
                         f"unscaled gradient at max_norm{given}: each micro-batch, a scaled "
                         "gradient, or another threshold"))
    suspects.append(("zeroing", "gradients zeroed inside the window (zero_grad per "
                     "micro-batch): the gap goes with zero_grad made a no-op"))
    return suspects


def _identical(loss_fn, x, y):
    """Every row a copy of the first row that holds an item."""
    i = next(i for i in range(y.shape[0]) if count_items(loss_fn, y[i:i + 1]) > 0)
    return (x[i:i + 1].expand_as(x).clone(), y[i:i + 1].expand_as(y).clone())


def counterfactual(ctx, acc, known=()):
    """Causes of a gradient gap, each confirmed by a run without it (a list of sentences).
    ``known``: removals of mistakes already observed (zero_grad or clipping inside the
    window), applied to every run; an empty list when they explain the whole gap."""
    start, loss_fn, x, y = ctx.start, ctx.loss_fn, ctx.x, ctx.y
    masked = []  # a measured cause that a removal uncovered (a clip hides a decay's form)

    def explains(removals, data=(x, y)):
        removals = tuple(dict.fromkeys(known + tuple(removals)))
        xs, ys = data
        ref, bound = reference_bound(start, loss_fn, xs, ys, ctx.max_norm, ctx.seed,
                                     removals, count_items(loss_fn, ys))
        mine = run(start, xs, ys, ctx.train_step, ctx.seed, removals)
        g_mine, g_ref = seen_gradient(mine), seen_gradient(ref)
        if within(gaps(g_mine, g_ref, bound)):
            return True
        if (cause := measured(g_mine, g_ref, bound, start)):
            masked.append(cause)
        return False

    if known and explains(()):
        return []
    if masked:
        return masked[:1]
    suspects = [(r, text) for r, text in _suspects(start, acc, ctx.max_norm) if r not in known]
    confirmed = [text for removal, text in suspects if explains((removal,))]
    if confirmed:
        return confirmed
    if masked:
        return masked[:1]
    again = run(start, x, y, ctx.train_step, ctx.seed, known)
    mine = run(start, x, y, ctx.train_step, ctx.seed, known) if known else acc
    if not within(gaps(seen_gradient(again), seen_gradient(mine), ctx.bound)):
        return ["train_step is not deterministic: two runs from the same state and seed "
                "differ (fresh random numbers: a re-seed, functional dropout or shuffling "
                "with its own generator)"]
    everything = tuple(removal for removal, _ in suspects)
    if len(suspects) > 1 and explains(everything):
        needed = [text for removal, text in suspects
                  if not explains(tuple(r for r in everything if r != removal))]
        return [f"together, none alone: {text}" for text in needed or
                [text for _, text in suspects]]
    if explains(everything, _identical(loss_fn, x, y)):
        return ["the items are weighted differently from the full batch's mean, with the "
                "right total weight (on a batch of identical items the gap goes): the "
                "textbook loop (each micro-batch's mean divided by their number) on "
                "micro-batches or ranks holding different numbers of items, a count per "
                "micro-batch or per rank, or micro-batches of x matched with the wrong "
                "targets"]
    return ["unexplained: the gradient differs from the full batch's beyond the bound and "
            "no removal (dropout, BatchNorm, clipping, zero_grad) nor a batch of identical "
            "items makes it agree"]
