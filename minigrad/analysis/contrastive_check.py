"""``check`` for a loss with in-batch negatives (``minigrad check --loss contrastive``): is
the accumulated update the full-batch update?

A dual encoder (two towers ``nn.MLP(sizes, ...)``, seeds ``seed`` and ``seed + 1``) trains
for ``steps`` updates with a contrastive strategy (``minigrad.accumulate.contrastive``:
"naive", "gradcache" or "bank", a ``Bank(size=global_batch)``) on symmetric InfoNCE
(temperature 0.5). Each update draws ``global_batch`` pairs of ``pool`` (rows of shape
(2, sizes[0]), e.g. ``studies.data.paired_digits``) without replacement, from
``numpy.random.default_rng([seed, 1])``. Before each update, at the same parameters, the
strategy's gradient is compared with the full batch's and judged against
``contrastive.gradcache_bound``: equivalent when every entry is within its bound at every
update, and the comparison could have failed: a strategy that accumulates nothing (gradient
0, the idle run of ``minigrad.analysis.power``) would be |g_full| from the full batch, so
where |g_full| is within the bound at every update (``idle_ratio`` <= 1) there is no verdict
(``equivalent`` is ``None``, ``reasons`` say why). The result has the form of
``check.check``'s (``config``, ``sizes``, ``updates`` with the gradient gap per update,
``equivalent``, ``reasons``, ``notes``, ``verdict``).

Why not, in words, given when the gap exceeds the bound (``REASONS``):

* "naive" and "bank" with more than one micro-batch: each micro-batch's queries meet only
  their own micro-batch's passages;
* "bank" after its first update: the banks add stale representations of earlier updates.
"""

import copy
import warnings

import numpy as np

from minigrad import nn, optim
from minigrad.accumulate import Bank, accumulated_gradients, split_sizes, step
from minigrad.accumulate import strategy as strategies
from minigrad.analysis.bounds import bound_ratio, flat, unit_roundoff
from minigrad.analysis.contrastive_bound import gradcache_bound
from minigrad.analysis.power import IDLE, NO_VERDICT, could_fail
from minigrad.engine import validate
from minigrad.nn.mlp import ACTIVATIONS

NORMS = ("none", "group", "layer")
DTYPES = ("float64", "float32")
TEMPERATURE = 0.5
REASONS = {
    "negatives": "each micro-batch's queries meet only their own micro-batch's passages as "
                 "negatives (n_j - 1 instead of N - 1): another objective",
    "bank": "the memory banks add stale representations of earlier updates to every "
            "micro-batch's loss: another objective",
}
EQUIVALENT = "the accumulated update IS the full-batch update within the floating-point bound"
NOT_EQUIVALENT = "the accumulated update is NOT the full-batch update"


def configuration(pool, *, sizes=None, strategy="gradcache", activation="relu", norm="none",
                  dropout=0.0, optimizer="sgd", lr=0.01, weight_decay=0.0, clip=None,
                  global_batch=64, micro_batch=None, num_micro_batches=None, steps=20,
                  dtype="float64", seed=0):
    """The arguments checked, as the JSON-able ``config`` of the result. ``sizes`` defaults
    to [d, 16, 8] for pairs of width d; neither split given: micro-batches of
    ``ceil(global_batch / 3) + 1`` (an uneven split with a shorter last one)."""
    if pool.ndim != 3 or pool.shape[1] != 2:
        raise ValueError(f"pool must hold pairs, shape (N, 2, d), got {tuple(pool.shape)}")
    width = int(pool.shape[2])
    sizes = [width, 16, 8] if sizes is None else [
        validate.positive_int(f"sizes[{i}]", s) for i, s in enumerate(sizes)]
    if len(sizes) < 2 or sizes[0] != width:
        raise ValueError(f"sizes must list at least 2 widths, the first the pairs' width "
                         f"{width}, got {sizes}")
    n = validate.integer("global_batch", global_batch, low=2, high=pool.shape[0])
    if micro_batch is None and num_micro_batches is None:
        micro_batch = -(-n // 3) + 1
    if micro_batch is not None and num_micro_batches is not None:
        raise ValueError(f"give at most one of micro_batch and num_micro_batches, got "
                         f"micro_batch={micro_batch} and num_micro_batches={num_micro_batches}")
    config = {
        "sizes": sizes,
        "strategy": validate.choice("strategy", strategy, strategies.names("contrastive")),
        "activation": validate.choice("activation", activation, tuple(ACTIVATIONS)),
        "norm": validate.choice("norm", "none" if norm is None else norm, NORMS),
        "dropout": validate.probability("dropout", dropout),
        "optimizer": validate.choice("optimizer", optimizer, optim.OPTIMIZERS),
        "lr": validate.real("lr", lr),
        "weight_decay": validate.real("weight_decay", weight_decay),
        "clip": validate.optional(validate.real, "clip", clip, strict_low=True),
        "global_batch": n,
        "micro_batch": validate.optional(validate.integer, "micro_batch", micro_batch, low=1,
                                         high=n, noun=f"an integer in [1, global_batch={n}]"),
        "num_micro_batches": validate.optional(validate.integer, "num_micro_batches",
                                               num_micro_batches, low=1, high=n,
                                               noun=f"an integer in [1, global_batch={n}]"),
        "steps": validate.positive_int("steps", steps),
        "dtype": validate.choice("dtype", dtype, DTYPES),
        "seed": validate.integer("seed", seed, low=0),
        "loss": f"symmetric InfoNCE (temperature {TEMPERATURE:g})",
    }
    return config


def _factories(config):
    def tower(seed):
        return nn.MLP(config["sizes"], activation=config["activation"],
                      norm=None if config["norm"] == "none" else config["norm"],
                      dropout=config["dropout"], seed=seed, dtype=config["dtype"])

    model = nn.DualEncoder(tower(config["seed"]), tower(config["seed"] + 1))
    return model, optim.make(config["optimizer"], model.parameters(), config["lr"],
                             config["weight_decay"])


def check(pool, **options):
    """Is the accumulated update of ``strategy`` the full-batch update, update by update?
    See the module docstring; ``configuration`` checks ``options``."""
    config = configuration(pool, **options)
    split = split_sizes(config["global_batch"], config["micro_batch"],
                        config["num_micro_batches"])
    model, opt = _factories(config)
    loss = nn.InfoNCELoss(temperature=TEMPERATURE, symmetric=True)
    bank = Bank(size=config["global_batch"]) if config["strategy"] == "bank" else None
    rng, u = np.random.default_rng([config["seed"], 1]), unit_roundoff(config["dtype"])
    updates = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        for t in range(config["steps"]):
            rows = rng.choice(pool.shape[0], size=config["global_batch"], replace=False)
            x, y = np.asarray(pool[rows], dtype=config["dtype"]), np.arange(len(rows))
            probe = copy.deepcopy(bank) if bank is not None else config["strategy"]
            acc = accumulated_gradients(model, loss, x, y, sizes=split, strategy=probe,
                                        step_index=t)
            full = accumulated_gradients(model, loss, x, y, step_index=t)
            bound, _ = gradcache_bound(model, loss, x, y, step_index=t, u=u)
            updates.append(_row(t, acc, full, bound))
            step(model, loss, opt, x, y, sizes=split, max_grad_norm=config["clip"],
                 strategy=bank if bank is not None else config["strategy"])
    equivalent = all(r["ratio"] is not None and r["ratio"] <= 1 for r in updates)
    reasons = [] if equivalent else _reasons(config, split, updates)
    if equivalent and not could_fail(r["idle_ratio"] for r in updates):
        equivalent, reasons = None, _no_verdict(updates)
    label = NOT_EQUIVALENT if equivalent is False else NO_VERDICT
    verdict = EQUIVALENT if equivalent else f"{label}: {'; '.join(reasons)}"
    return {"config": config, "sizes": split, "updates": updates, "equivalent": equivalent,
            "reasons": reasons, "notes": [], "verdict": verdict}


def _row(t, acc, full, bound):
    error = np.abs(flat(acc.values()) - flat(full.values()))
    ratio = max(bound_ratio(np.abs(flat([acc[k]]) - flat([full[k]])), np.ravel(bound[k]))
                for k in full)
    idle = max(bound_ratio(np.abs(flat([full[k]])), np.ravel(bound[k])) for k in full)
    finite = [v if np.isfinite(v) else None for v in (float(np.max(error)),
                                                      max(float(np.max(b)) for b in
                                                          bound.values()), ratio, idle)]
    return {"step": t + 1, "max_abs": finite[0], "bound": finite[1], "ratio": finite[2],
            "idle_ratio": finite[3]}


def _reasons(config, split, updates):
    """The predicted causes, where the gap confirms them, else the gap itself."""
    out = []
    if config["strategy"] in ("naive", "bank") and len(split) > 1:
        out.append(REASONS["negatives"])
    if config["strategy"] == "bank" and len(updates) > 1:
        out.append(REASONS["bank"])
    if not out:
        bad = next(r for r in updates if r["ratio"] is None or r["ratio"] > 1)
        out.append(f"the gradient gap exceeds the floating-point bound at update {bad['step']} "
                   f"and none of the known causes applies here")
    return out


def _no_verdict(updates):
    """Why the comparison could not have failed: the full-batch gradient, measured."""
    idle = max(r["idle_ratio"] for r in updates)
    size = "exactly 0" if idle == 0 else (f"within the floating-point bound of 0 (|gradient| "
                                          f"/ bound at most {idle:.3g})")
    return [f"the full-batch gradient was {size} at every update: {IDLE} would pass too, and "
            f"so would a wrong strategy"]
