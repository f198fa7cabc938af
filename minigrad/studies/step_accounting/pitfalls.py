"""Step-accounting mistakes, made on purpose: what goes wrong when something that belongs to
the optimizer UPDATE is done once per MICRO-BATCH.

minigrad's own loops (``accumulate.step``, ``Accumulator``) do each of these once per
update, and refuse what they can (``Scheduler.step()`` twice without an update raises).
This module writes the accumulation loop out by hand, from the public API, so that one
mistake at a time can be switched on and measured against full-batch training. With k
micro-batches per update and u = 1, 2, ... counting updates:

================  =====================================================================
mistake           what the hand-written loop does
================  =====================================================================
``"none"``        nothing wrong: the same operations, in the same order, as
                  ``accumulate.step`` (so the same floats)
``"adam_count"``  Adam's step count advances per micro-batch: update u uses t = k u in
                  the bias corrections 1 - beta^t, where the moments saw u gradients
``"schedule"``    the learning-rate schedule advances per micro-batch: update u uses
                  schedule(k (u - 1)) instead of schedule(u - 1)
``"weight_decay"`` the decay is applied per micro-batch, k times per update: decoupled
                  (AdamW) theta <- (1 - lr wd) theta after every micro-batch (the last
                  one by the optimizer); coupled L2 (SGD, Adam) wd theta added to the
                  gradient once per micro-batch, so k wd theta in all
``"clipping"``    each micro-batch's own mean gradient is clipped to ``max_grad_norm``
                  and the clipped ones are averaged (weighted by their items), instead
                  of clipping the accumulated gradient once
``"zero_grad"``   the gradients are zeroed before every micro-batch, not after the
                  update: the update uses the last micro-batch's gradient alone (its sum
                  divided by the window's items, as ``loss / k`` does in PyTorch)
``"step_each"``   the optimizer steps after every micro-batch (on its own mean
                  gradient): k updates of a small batch, with the parameters changing
                  between the micro-batches of one window; no accumulation at all
================  =====================================================================

``compare`` trains full batch, the library's accumulation and each mistake from the same
start on the same batches, and judges every run's parameter gap against the rounding bound
of ``minigrad.analysis.trajectory`` (``trajectory_bounds``): the right run stays within it,
and a mistake that changes the training leaves it.
"""

import numpy as np

from minigrad import optim
from minigrad.accumulate import Accumulator, as_loss, micro_batches, step
from minigrad.accumulate.guard import as_batch, check_optimizer, check_scheduler
from minigrad.accumulate.split import check_sizes, positions
from minigrad.analysis.bounds import bound_ratio, flat
from minigrad.analysis.trajectory import trajectory_bounds
from minigrad.engine import validate

MISTAKES = ("none", "adam_count", "schedule", "weight_decay", "clipping", "zero_grad",
            "step_each")
"""The choices of ``mistake``: none, or one thing done per micro-batch that belongs to the
update (Adam's count, the schedule, weight decay, clipping), gradients zeroed inside the
window, or an optimizer step after every micro-batch."""
STEP_ACCOUNTING = ("adam_count", "schedule", "weight_decay", "clipping")
"""The four mistakes about counting: what must happen once per update, done per
micro-batch."""


def _check_mistake(mistake, optimizer, max_grad_norm, scheduler):
    """``mistake`` checked against what it needs to make a difference."""
    mistake = validate.choice("mistake", mistake, MISTAKES)
    if mistake == "adam_count" and not isinstance(optimizer, (optim.Adam, optim.AdamW)):
        raise ValueError(f"mistake='adam_count' needs optim.Adam or optim.AdamW (their "
                         f"bias corrections use the step count), got {type(optimizer).__name__}")
    if mistake == "schedule" and scheduler is None:
        raise ValueError("mistake='schedule' needs a scheduler (optim.Scheduler), got None")
    if mistake == "weight_decay" and optimizer.hyperparams["weight_decay"] == 0:
        raise ValueError("mistake='weight_decay' needs an optimizer with weight_decay > 0, "
                         "got weight_decay=0")
    if mistake == "clipping" and max_grad_norm is None:
        raise ValueError("mistake='clipping' needs max_grad_norm, got None")
    return mistake


def update(model, loss_fn, optimizer, x, y, sizes, *, mistake="none", max_grad_norm=None,
           scheduler=None):
    """ONE optimizer update from ``(x, y)`` over micro-batches of ``sizes``, written out as
    a loop, with at most one ``mistake`` (see the module docstring).

    Returns the window's mean loss per item (before the update, as ``accumulate.step``).
    Made for experiments: unlike ``accumulate.step`` it is not all-or-nothing (an error
    half-way leaves the update half-done), and every parameter must take part in the loss.

    >>> import numpy as np
    >>> from minigrad import nn
    >>> model = nn.MLP([2, 4, 1], seed=0)
    >>> opt = optim.Adam(model.parameters(), lr=0.1)
    >>> x, y = np.ones((6, 2)), np.zeros((6, 1))
    >>> _ = update(model, nn.MSELoss(), opt, x, y, [2, 2, 2], mistake="adam_count")
    >>> opt.step_count, opt.state[0].count  # one update, but t counted 3 micro-batches
    (1, 3)
    """
    x, y = as_batch(x, y)
    sizes = check_sizes(sizes, x.shape[0])
    loss = as_loss(loss_fn)
    if optimizer is None:
        raise TypeError("optimizer must be a minigrad optimizer (optim.SGD, ...), got None")
    params = model.parameters()
    check_optimizer(optimizer, params)
    check_scheduler(scheduler, optimizer)
    max_grad_norm = validate.optional(validate.real, "max_grad_norm", max_grad_norm,
                                      strict_low=True)
    mistake = _check_mistake(mistake, optimizer, max_grad_norm, scheduler)
    if mistake == "step_each":
        return _step_each(model, loss, optimizer, x, y, sizes, max_grad_norm, scheduler)
    k, items = len(sizes), loss.num_items(y)
    if items == 0:
        raise ValueError("the window holds no items (every target is ignore_index): its mean "
                         "gradient is 0 / 0")
    decay, decoupled = optimizer.hyperparams["weight_decay"], isinstance(optimizer, optim.AdamW)
    optimizer.zero_grad()  # stale gradients would join the first micro-batch
    total, loss_sum = None, 0.0
    for j, (start, xj, yj) in enumerate(micro_batches(x, y, sizes)):
        g, value = _micro_batch_sum(model, loss, optimizer, xj, yj, start)
        loss_sum += value
        if any(gi is None for gi in g):
            names = [n for (n, _), gi in zip(model.named_parameters(), g) if gi is None]
            raise ValueError(f"parameters {names} got no gradient: every parameter must take "
                             "part in the loss")
        if mistake == "clipping":
            items_j = loss.num_items(yj)
            mean = [gi / items_j for gi in g] if items_j else [gi * 0.0 for gi in g]
            clipped, _ = optim.clip_by_global_norm(mean, max_grad_norm)
            g = [ci * items_j for ci in clipped]  # back to a sum, weighted by its items
        if total is None or mistake == "zero_grad":
            total = g
        else:
            total = [t + gi for t, gi in zip(total, g)]
        if mistake == "weight_decay" and decoupled and j < k - 1:
            for p in params:  # the optimizer applies the k-th decay
                p.data = p.data * (1.0 - optimizer.lr * decay)
    grads = [t / items for t in total]
    if mistake == "weight_decay" and not decoupled:
        # the optimizer adds decay * theta once; the loop added it for the other k - 1
        grads = [gi + (k - 1) * decay * p.data for gi, p in zip(grads, params)]
    for p, gi in zip(params, grads):
        p.grad = gi
    if max_grad_norm is not None and mistake != "clipping":
        optim.clip_grad_norm_(params, max_grad_norm)
    if mistake == "adam_count":
        state = optimizer.state_dict()
        state["count"] = [c + k - 1 for c in state["count"]]  # step() adds the k-th
        optimizer.load_state_dict(state)
    optimizer.step()
    if scheduler is not None:
        if mistake == "schedule":
            scheduler.load_state_dict({"t": scheduler.t + k})  # k steps, one per micro-batch
        else:
            scheduler.step()
    optimizer.zero_grad()
    return loss_sum / items


def _step_each(model, loss, optimizer, x, y, sizes, max_grad_norm, scheduler):
    """k updates, one per micro-batch on its mean gradient (the ``"step_each"`` mistake);
    returns the window's mean loss per item, each micro-batch's loss taken before its step."""
    params, loss_sum = model.parameters(), 0.0
    for start, xj, yj in micro_batches(x, y, sizes):
        g, value = _micro_batch_sum(model, loss, optimizer, xj, yj, start)
        loss_sum += value
        items_j = loss.num_items(yj)
        if items_j == 0:
            continue  # every target ignored: no mean gradient, no step
        for p, gi in zip(params, g):
            p.grad = gi / items_j
        if max_grad_norm is not None:
            optim.clip_grad_norm_(params, max_grad_norm)
        optimizer.step()
        if scheduler is not None:
            scheduler.step()
        optimizer.zero_grad()
    return loss_sum / loss.num_items(y)


def _micro_batch_sum(model, loss, optimizer, xj, yj, start):
    """The gradient of micro-batch j's per-item loss SUM (a list, one array per parameter)
    and that sum; dropout is keyed by the update count and the global sample index."""
    acc = Accumulator(model, loss, None, normalize="sum", step_index=optimizer.step_count)
    value = acc.add(xj, yj, sample_index=positions(xj, start))
    grads = acc.gradients()
    acc.discard()
    return grads, value


def train(make_model, make_optimizer, loss_fn, batches, sizes=None, *, mistake=None,
          max_grad_norm=None, make_scheduler=None):
    """One update per ``(x, y)`` of ``batches`` from a fresh ``make_model()``.

    ``sizes=None``: full-batch training; ``mistake=None``: the library's ``accumulate.step``
    over micro-batches of ``sizes``; a name of ``MISTAKES``: the hand-written ``update``
    with that mistake. Returns ``{"params": [flat parameters after each update],
    "losses": [mean loss of each update], "model": the trained model}``.
    """
    model = make_model()
    optimizer = make_optimizer(model.parameters())
    scheduler = make_scheduler(optimizer) if make_scheduler is not None else None
    params, losses = [], []
    for x, y in batches:
        if mistake is None:
            split = {} if sizes is None else {"sizes": sizes}
            losses.append(step(model, loss_fn, optimizer, x, y, max_grad_norm=max_grad_norm,
                               scheduler=scheduler, **split))
        else:
            losses.append(update(model, loss_fn, optimizer, x, y, sizes or [x.shape[0]],
                                 mistake=mistake, max_grad_norm=max_grad_norm,
                                 scheduler=scheduler))
        params.append(flat(p.data for p in model.parameters()))
    return {"params": params, "losses": losses, "model": model}


def compare(make_model, make_optimizer, loss_fn, batches, sizes, *, mistakes=STEP_ACCOUNTING,
            max_grad_norm=None, make_scheduler=None):
    """Full batch, the library's accumulation over ``sizes`` and each of ``mistakes``, from
    the same start on the same batches, each judged against the rounding bound.

    Returns, per update (lists over updates):

    * ``"bound"``: the largest entry of the elementwise bound on |theta_acc - theta_full|
      (``trajectory_bounds``: what rounding alone can do to the right accumulation);
    * ``"gap"``: run -> max |theta_run - theta_full|; runs are ``"accumulated"`` and the
      mistakes;
    * ``"ratio"``: run -> max over entries of gap / bound (<= 1: within the bound);
    * ``"loss"``: run -> mean loss of the update, ``"full"`` included.
    """
    mistakes = [validate.choice("mistakes", m, MISTAKES) for m in mistakes]
    replay = trajectory_bounds(make_model, make_optimizer, loss_fn, batches, sizes,
                               max_grad_norm=max_grad_norm, make_scheduler=make_scheduler)
    full, right, limits = [], [], []
    for full_model, acc_model, limit in replay:
        full.append(flat(p.data for p in full_model.parameters()))
        right.append(flat(p.data for p in acc_model.parameters()))
        limits.append(limit)
    runs = {"accumulated": right}
    losses = {key: train(make_model, make_optimizer, loss_fn, batches, split,
                         max_grad_norm=max_grad_norm, make_scheduler=make_scheduler)["losses"]
              for key, split in (("full", None), ("accumulated", sizes))}
    for mistake in mistakes:
        run = train(make_model, make_optimizer, loss_fn, batches, sizes, mistake=mistake,
                    max_grad_norm=max_grad_norm, make_scheduler=make_scheduler)
        runs[mistake], losses[mistake] = run["params"], run["losses"]
    gaps = {key: [np.abs(a - b) for a, b in zip(states, full)] for key, states in runs.items()}
    return {"bound": [float(np.max(b)) for b in limits],
            "gap": {key: [float(np.max(g)) for g in gs] for key, gs in gaps.items()},
            "ratio": {key: [bound_ratio(g, b) for g, b in zip(gs, limits)]
                      for key, gs in gaps.items()},
            "loss": losses}


__all__ = ["MISTAKES", "STEP_ACCOUNTING", "compare", "train", "update"]
