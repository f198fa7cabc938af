"""``check``: is a set-up accumulation-safe? (``minigrad check`` on the command line.)

It trains one model twice from the same start on the same seeded data, for ``steps`` updates:
full batch, and accumulated (``minigrad.accumulate.step`` over micro-batches of
``micro_batch`` samples, or ``num_micro_batches`` near-equal parts). After every update it
measures the parameter gap and judges it against the floating-point bound derived in
``minigrad.analysis.trajectory``: equivalent when, at every update, every entry of the gap is
within its bound, and the comparison could have failed ("No verdict" below). Each update
draws x ~ N(0, 1) (``global_batch`` rows) and targets from ``numpy.random.default_rng([seed,
1])``: classes uniform, with ``round(ignore_fraction * global_batch)`` of them (at most all
but one) set to ``ignore_index`` -100, for cross-entropy; N(0, 1) for MSE. The model is
``nn.MLP(sizes, ..., seed=seed)``. With ``model="charlm"`` it is the character-level
language model ``nn.CharMLP`` on seeded token sequences of different lengths, whose
micro-batches hold different numbers of real tokens (``minigrad.analysis.charlm``: its
options ``vocab_size``, ``context``, ``embedding_dim``, ``hidden``, ``max_length``, its
data, and the MLP's options it refuses); global_batch, micro_batch and num_micro_batches
then count sequences.

Why not. Where the gap exceeds the bound the result names the cause: the differences the
set-up predicts (BatchNorm with micro-batches, the textbook rule on uneven splits or unevenly
kept targets, ``normalize='sum'``), else a ReLU input that flipped sign, else the gap alone
(``minigrad.analysis.causes``; for the language model, the textbook rule on micro-batches
of different numbers of real tokens).

No verdict. A third run from the same start, the idle run of ``minigrad.analysis.power``,
gives the optimizer a gradient of 0 at every update. Where the gap is within the bound at
every update and so is the idle run's gap to the full-batch run, no wrong rule could have
been told from the right one: ``equivalent`` is ``None`` and ``reasons`` say why, the cause
first where the set-up names one ("cross-entropy over one output class is identically 0",
"lr is 0"), then what the runs did ("the full-batch run never moved the parameters", or
moved exactly as the idle run, or within the bound of it). A gap beyond the bound is NOT
equivalent whatever the idle run does.

The result is JSON-able (numbers that are not finite are ``null``)::

    {"config":  {"model": "mlp" | "charlm",
                 "sizes": [int, ...] | null,  # null for charlm, whose options are these:
                 "vocab_size": int | null, "context": int | null,   # null for mlp
                 "embedding_dim": int | null, "hidden": int | null, "max_length": int | null,
                 "activation": str, "norm": str, "dropout": float,
                 "loss": str, "ignore_fraction": float, "optimizer": str, "lr": float,
                 "weight_decay": float, "clip": float | null, "global_batch": int,
                 "micro_batch": int | null, "num_micro_batches": int | null,
                 "normalize": str, "strategy": str, "steps": int, "dtype": str,
                 "seed": int},
     "sizes":   [int, ...],         # the micro-batch sizes of every update (samples, or
                                    # sequences for charlm)
     "updates": [{"step": int,      # updates done so far: 1, 2, ..., steps
                  "max_abs": float, # max |theta_acc - theta_full| over every entry
                  "max_rel": float, # worst over the parameters of max_abs / max |theta_full|
                  "max_ulp": float, # the same gap in units in the last place of the dtype
                  "bound": float,   # the largest entry of the elementwise bound
                  "ratio": float,   # max of gap / bound over the entries: <= 1 is within
                  "idle_ratio": float},  # the same for the idle run against the full batch
                 ...],
     "equivalent": bool | null,     # true: ratio <= 1 at every update, both runs finite, and
                                    # idle_ratio > 1 at some update; false: ratio > 1 at some
                                    # update (or a run diverged); null: no verdict
     "reasons": [str, ...],         # why not, or why no verdict (empty when equivalent)
     "notes":   [str, ...],         # predicted differences the measurement did not show
     "verdict": "accumulated training IS full-batch training within the floating-point bound"
                | "accumulated training is NOT full-batch training: <reasons>"
                | "no verdict (the comparison could not have failed): <reasons>"}
"""

import warnings

import numpy as np

from minigrad.accumulate import split_sizes
from minigrad.analysis import charlm
from minigrad.analysis.bounds import bound_ratio, flat, unit_roundoff
from minigrad.analysis.causes import (
    EQUIVALENT,
    NOT_EQUIVALENT,
    predicted_causes,
    relu_flips,
    verdict,
)
from minigrad.analysis.check_setup import (
    batches,
    configuration,
    factories,
)
from minigrad.analysis.equivalence import compare_named
from minigrad.analysis.power import NO_VERDICT, could_fail, idle_step, no_verdict
from minigrad.analysis.trajectory import Diverged, trajectory_bounds


def _finite(value):
    value = float(value)
    return value if np.isfinite(value) else None


def _flat_parameters(model):
    return flat(p.data for p in model.parameters())


def _measure(t, full, acc, idle, bound):
    """One row of ``updates``: the gap after update t + 1, its bound, and the idle run's."""
    theta_full = {name: p.data for name, p in full.named_parameters()}
    theta_acc = {name: p.data for name, p in acc.named_parameters()}
    gap = compare_named(theta_acc, theta_full)["all"]
    reference = flat(theta_full.values())
    error = np.abs(flat(theta_acc.values()) - reference)
    idle_gap = np.abs(_flat_parameters(idle) - reference)
    return {"step": t + 1, "max_abs": _finite(gap["max_abs"]), "max_rel": _finite(gap["max_rel"]),
            "max_ulp": _finite(gap["max_ulp"]), "bound": _finite(np.max(bound)),
            "ratio": _finite(bound_ratio(error, bound)),
            "idle_ratio": _finite(bound_ratio(idle_gap, bound))}


def check(sizes=None, *, model="mlp", vocab_size=None, context=None, embedding_dim=None,
          hidden=None, max_length=None, activation=None, norm="none", dropout=0.0,
          loss="cross-entropy", ignore_fraction=0.0, optimizer="sgd", lr=0.01, weight_decay=0.0,
          clip=None, global_batch=64, micro_batch=None, num_micro_batches=None,
          normalize="items", strategy="micro", steps=20, dtype="float64", seed=0):
    """Is accumulated training full-batch training for this set-up? The module docstring
    describes the data, the verdict and the result; ``configuration`` checks the arguments.

    Raises ``Diverged`` when the full-batch run's loss or gradient stops being finite:
    then there is nothing to compare with.

    >>> result = check([3, 4, 2], global_batch=6, micro_batch=4, steps=2)
    >>> result["sizes"], result["equivalent"]
    ([4, 2], True)
    >>> check(model="charlm", global_batch=4, micro_batch=2, steps=2)["equivalent"]
    True
    """
    config = configuration(
        sizes, model=model, vocab_size=vocab_size, context=context, embedding_dim=embedding_dim,
        hidden=hidden, max_length=max_length, activation=activation, norm=norm, dropout=dropout,
        loss=loss, ignore_fraction=ignore_fraction, optimizer=optimizer, lr=lr,
        weight_decay=weight_decay, clip=clip, global_batch=global_batch,
        micro_batch=micro_batch, num_micro_batches=num_micro_batches, normalize=normalize,
        strategy=strategy, steps=steps, dtype=dtype, seed=seed)
    samples = split_sizes(config["global_batch"], config["micro_batch"],
                          config["num_micro_batches"])
    # the rows of each micro-batch: a sample is one row, a sequence its positions
    rows = charlm.positions(config) if config["model"] == "charlm" else 1
    split = [n * rows for n in samples]
    data = batches(config)
    make, make_optimizer, loss_fn = factories(config)
    updates, flips, diverged = [], [], None
    idle = make()  # the idle run (minigrad.analysis.power): every gradient 0
    idle_optimizer, start = make_optimizer(idle.parameters()), _flat_parameters(idle)
    still = True  # the full-batch run has not moved from the start
    if config["activation"] == "relu":
        flips.append(relu_flips(make(), data[0][0], split, 0))
    replay = trajectory_bounds(make, make_optimizer, loss_fn, data, split,
                               max_grad_norm=config["clip"], normalize=config["normalize"],
                               strategy=config["strategy"], u=unit_roundoff(config["dtype"]))
    # A diverging run is reported once, as a reason or as Diverged, not as NumPy's warnings.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        try:
            for t, (full, acc, bound) in enumerate(replay):
                idle_step(idle_optimizer)
                updates.append(_measure(t, full, acc, idle, bound))
                still = still and np.array_equal(_flat_parameters(full), start)
                if flips and t + 1 < len(data):  # acc is where the next update starts
                    flips.append(relu_flips(acc, data[t + 1][0], split, t + 1))
        except Diverged as err:
            if err.run != "accumulated":
                raise
            diverged = err
    predicted, items = predicted_causes(config, split, data, loss_fn)
    equivalent, reasons, notes = verdict(config, predicted, items, updates, flips, diverged)
    if equivalent and not could_fail(row["idle_ratio"] for row in updates):
        equivalent, reasons = None, no_verdict(config, updates, still)
    label = NOT_EQUIVALENT if equivalent is False else NO_VERDICT
    sentence = EQUIVALENT if equivalent else f"{label}: {'; '.join(reasons)}"
    return {"config": config, "sizes": samples, "updates": updates, "equivalent": equivalent,
            "reasons": reasons, "notes": notes, "verdict": sentence}
