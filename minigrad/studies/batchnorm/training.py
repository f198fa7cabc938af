"""Normalisation layers trained full batch and accumulated side by side, judged by the bound.

* ``paired_training``: both runs from the same weights on the same global batches; after
  every update the largest parameter and running-statistics gaps and, for both runs, the
  loss and accuracy on held-out data in eval mode (BatchNorm: running statistics, so their
  drift shows too); the first updates are judged by the rounding bound of
  ``minigrad.analysis.trajectory.trajectory_bounds``.
* ``gradient_limits``: how far rounding alone can move a gradient (normwise relative
  error and cosine), the yardstick for the divergence of accumulated BatchNorm.
* ``ghost_batchnorm`` and ``ghost_control``: full-batch Ghost BatchNorm, the positive
  control that accumulated BatchNorm matches.

>>> import numpy as np
>>> from minigrad import nn, optim
>>> rng = np.random.default_rng(0)
>>> data = [(rng.normal(size=(8, 3)), rng.integers(0, 2, size=8)) for _ in range(2)]
>>> run = paired_training(lambda: nn.MLP([3, 4, 2], norm="layer"),
...                       lambda ps: optim.SGD(ps, lr=0.1), nn.CrossEntropyLoss(), data,
...                       [4, 4], data[0])
>>> run["within"], len(run["gap"]), run["predictions_equal"]
(True, 2, True)
"""

import numpy as np

from minigrad import nn
from minigrad.accumulate import accumulated_gradients, split_sizes, step
from minigrad.analysis.bounds import (
    U64,
    bound_ratio,
    condition_number,
    flat,
    gradient_bound,
    per_item_gradients,
)
from minigrad.analysis.metrics import eval_accuracy, vector_gap
from minigrad.analysis.trajectory import trajectory_bounds
from minigrad.engine import Tensor, backend, no_grad, validate


def ghost_batchnorm(model, size):
    """``model`` with every BatchNorm1d replaced by an ``nn.GhostBatchNorm1d`` normalising
    virtual batches of ``size`` samples; returns the model. ``size=None`` puts plain
    BatchNorm1d layers back. Each new layer has its old one's settings and mode, and the
    very same parameters and buffers.

    Full-batch training with Ghost BatchNorm of size m computes what accumulated training
    over micro-batches of m computes with plain BatchNorm: the positive control.
    """
    size = validate.optional(validate.positive_int, "size", size)
    if isinstance(model, nn.BatchNorm1d):
        return _ghost_layer(model, size)
    places = [(parent, name, child) for _, parent in model.named_modules()
              for name, child in parent.named_children() if isinstance(child, nn.BatchNorm1d)]
    if not places:
        raise ValueError(f"ghost_batchnorm needs a model with BatchNorm1d layers, got "
                         f"{type(model).__name__} without any")
    for parent, name, child in places:
        setattr(parent, name, _ghost_layer(child, size))
    return model


def _ghost_layer(layer, size):
    """A GhostBatchNorm1d of ``size`` (None: a BatchNorm1d) in ``layer``'s place: its
    settings, its mode, its parameters and buffers (the same objects)."""
    settings = dict(eps=layer.eps, momentum=layer.momentum, affine=layer.affine,
                    track_running_stats=layer.track_running_stats)
    new = nn.BatchNorm1d(layer.num_features, **settings) if size is None else \
        nn.GhostBatchNorm1d(layer.num_features, size, **settings)
    for name, value in [*layer.named_parameters(), *layer.named_buffers()]:
        setattr(new, name, value)
    return new.train(layer.training)


def _batch_norm_samples(model, n):
    """N for ``per_item_roundings`` when the model has BatchNorm in training mode, else 0."""
    return n if any(isinstance(m, nn.BatchNorm1d) and m.training
                    for _, m in model.named_modules()) else 0


def gradient_limits(make, loss_fn, x, y, *, per_sample=False):
    """How far two computations of the full-batch gradient of ``make()`` on ``(x, y)`` may
    drift apart by rounding alone, in float64, normwise: ``{"rel_error", "cosine"}``.
    ``make()`` builds an ``nn.MLP`` (the bound reads its ``sizes``).

    With the elementwise bound b of ``gradient_bound`` (kappa from ``condition_number``;
    BatchNorm's batch sums counted when it trains), |g_1 - g_2| <= |b| in 2-norm, so
    rel_error <= |b| / |g| (1 + (n + 4) u), the norms' own rounding over n entries; and
    1 - cos <= rel^2 / 2 from the bound's two sides plus the cosine's three dot products of
    n terms: cos >= 1 - 2 rel^2 - (2 n + 6) u. A split that computes the full-batch
    gradient stays within both; one beyond them computes something else.

    The bound needs each sample's gradient a_i. By default each is computed on the whole
    batch (N passes over N samples); ``per_sample=True`` computes it from the sample alone
    (N passes over 1), the same a_i up to rounding, which the first-order bound neglects. It
    needs a model whose samples do not interact: no BatchNorm in training mode and no
    dropout, whose masks are keyed by the sample's place in the batch.
    """
    model = make()
    coupled = [name for name, m in model.named_modules()
               if (isinstance(m, nn.BatchNorm1d) and m.training)
               or (isinstance(m, nn.Dropout) and m.p > 0)]
    if per_sample and coupled:
        raise ValueError(f"per_sample=True needs samples that do not interact, but layers "
                         f"{coupled} (BatchNorm in training mode or dropout) couple them or key "
                         f"them by their place; use per_sample=False")
    if per_sample:
        per_item = [{name: np.array(backend.to_numpy(g), dtype=np.float64) for name, g in
                     accumulated_gradients(model, loss_fn, x[i:i + 1, ...], y[i:i + 1, ...],
                                           normalize="sum").items()}
                    for i in range(x.shape[0])]
    else:
        per_item = per_item_gradients(model, loss_fn, x, y)
    bound = gradient_bound(per_item, loss_fn.num_items(y), model.sizes,
                           condition_number(make(), loss_fn, x, y),
                           _batch_norm_samples(model, x.shape[0]))
    full = flat(accumulated_gradients(make(), loss_fn, x, y).values())
    n, u = full.size, U64
    rel = float(np.linalg.norm(flat(bound.values())) / np.linalg.norm(full)) * (1 + (n + 4) * u)
    return {"rel_error": rel, "cosine": 1.0 - 2 * rel**2 - (2 * n + 6) * u}


def ghost_control(make, loss_fn, x, y, micro_batch_sizes):
    """Per micro-batch size m: accumulated plain BatchNorm against full-batch Ghost
    BatchNorm with virtual batches of m (``ghost_batchnorm``), gradient by gradient.

    Returns ``{m: {"ratio": max |g_acc - g_ghost| / bound over the entries, "max_abs": max
    |g_acc - g_ghost|, "rel_error_to_full": |g_acc - g| / |g| against plain full-batch
    BatchNorm}}``. The bound is ``gradient_bound`` for the ghost model, its BatchNorm sums
    over m samples; kappa is the largest ``condition_number`` of the plain model on one
    micro-batch, because each virtual batch divides by its own sigma.
    """
    full = flat(accumulated_gradients(make(), loss_fn, x, y).values())
    report = {}
    for m in micro_batch_sizes:
        sizes = split_sizes(x.shape[0], micro_batch_size=m)
        ghost = accumulated_gradients(ghost_batchnorm(make(), m), loss_fn, x, y)
        acc = accumulated_gradients(make(), loss_fn, x, y, sizes=sizes)
        starts = np.cumsum([0, *sizes[:-1]])
        kappa = max(condition_number(make(), loss_fn, x[s:s + n, ...], y[s:s + n, ...])
                    for s, n in zip(starts, sizes))
        model = ghost_batchnorm(make(), m)
        bound = gradient_bound(per_item_gradients(model, loss_fn, x, y),
                               loss_fn.num_items(y), model.sizes, kappa, m)
        error = {name: np.abs(flat([acc[name]]) - flat([ghost[name]])) for name in acc}
        report[m] = {"ratio": max(bound_ratio(error[k], np.ravel(bound[k])) for k in error),
                     "max_abs": max(float(np.max(e)) for e in error.values()),
                     "rel_error_to_full": vector_gap(flat(acc.values()), full)["rel_error"]}
    return report


def eval_loss(model, loss_fn, x, y):
    """``loss_fn(model(x), y)`` as a float, in eval mode and without a graph; the model is
    back in training mode afterwards."""
    model.eval()
    try:
        with no_grad():
            return float(loss_fn(model(Tensor(x)), y).item())
    finally:
        model.train()


def paired_training(make, make_optimizer, loss_fn, batches, sizes, held_out, *,
                    strategy="micro", bound_updates=None):
    """One update per ``(x, y)`` of ``batches``: full batch, and accumulated over
    micro-batches of ``sizes`` (``strategy="micro"`` or ``"exact_batchnorm"``), from the same
    ``make()`` and ``make_optimizer(params)``.

    Per update (lists): ``gap``, max |theta_acc - theta_full| over the parameters;
    ``running_gap``, the same over BatchNorm's running statistics (0.0 without any); and
    ``full`` and ``accumulated``, each ``{"train_loss": the step's mean loss, "loss" and
    "accuracy": on held_out = (x, y) in eval mode}``. ``predictions_equal``: both final
    models give every held-out sample the same class.

    The first ``bound_updates`` updates (default: all) are replayed by ``trajectory_bounds``
    (the same computations, so the same parameters) to judge the gap: ``bound`` (the bound's
    largest entry) and ``ratio`` (max gap / bound over the entries; <= 1 is within), one per
    replayed update; ``within`` is True when every ratio is <= 1. The replay costs N extra
    backward passes per update (the per-sample gradients of the bound), hence the option.
    """
    batches = list(batches)
    x_test, y_test = held_out
    split = dict(sizes=sizes, strategy=strategy)
    runs = {}
    for key, options in (("full", {}), ("accumulated", split)):
        model = make()
        runs[key] = (model, make_optimizer(model.parameters()), options)
    record = {"gap": [], "running_gap": [], "bound": [], "ratio": []}
    record.update({key: {"train_loss": [], "loss": [], "accuracy": []} for key in runs})
    for x, y in batches:
        for key, (model, optimizer, options) in runs.items():
            record[key]["train_loss"].append(step(model, loss_fn, optimizer, x, y, **options))
            record[key]["loss"].append(eval_loss(model, loss_fn, x_test, y_test))
            record[key]["accuracy"].append(eval_accuracy(model, x_test, y_test))
        full, acc = runs["full"][0], runs["accumulated"][0]
        record["gap"].append(_max_gap(acc.parameters(), full.parameters()))
        record["running_gap"].append(_max_gap(_running_stats(acc), _running_stats(full)))
    replay = batches if bound_updates is None else batches[:bound_updates]
    for full, acc, bound in trajectory_bounds(make, make_optimizer, loss_fn, replay, sizes,
                                              strategy=strategy):
        error = np.abs(flat(p.data for p in acc.parameters())
                       - flat(p.data for p in full.parameters()))
        record["bound"].append(float(np.max(bound)))
        record["ratio"].append(bound_ratio(error, bound))
    record["within"] = all(r <= 1.0 for r in record["ratio"])
    record["predictions_equal"] = bool(np.array_equal(
        *(_predictions(runs[key][0], x_test) for key in runs)))
    return record


def _running_stats(model):
    return [a for name, a in model.state_dict().items()
            if name.rsplit(".", 1)[-1] in ("running_mean", "running_var")]


def _max_gap(a, b):
    a, b = list(a), list(b)
    if not a:
        return 0.0
    return float(np.max(np.abs(flat(getattr(t, "data", t) for t in a)
                               - flat(getattr(t, "data", t) for t in b))))


def _predictions(model, x):
    model.eval()
    try:
        with no_grad():
            return np.argmax(backend.to_numpy(model(Tensor(x)).data), axis=1)
    finally:
        model.train()
