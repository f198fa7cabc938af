"""Why accumulated training is not full-batch training, in words: the causes ``check`` names.

The set-up predicts these differences (``predicted_causes``), and they are given as reasons
when the measured gap exceeds the bound (``verdict``):

* "BatchNorm normalises each micro-batch with its own statistics": ``norm="batch"`` with
  ``strategy="micro"`` and more than one micro-batch;
* "the textbook rule divides uneven micro-batches by their count": ``normalize=
  "micro_batch_mean"`` with micro-batches of different sizes;
* "the textbook rule weighs micro-batches equally but they hold different numbers of kept
  targets": ``normalize="micro_batch_mean"`` with ignored targets spread unevenly;
* "the textbook rule weighs micro-batches equally but they hold different numbers of real
  tokens": the language model (``model="charlm"``) with ``normalize="micro_batch_mean"``,
  where sequences of different lengths put different numbers of tokens in the micro-batches
  (this replaces the two reasons above, which count samples and kept targets);
* "normalize='sum' scales the gradient by the number of items": ``"sum"`` with more than
  one item in an update.

A gap beyond the bound that none of them predicts is reported as such; where ReLU inputs
took opposite signs in the full-batch and the micro-batch forward passes (``relu_flips``,
the float32 caveat of ``minigrad.analysis.bounds``), that is named as the cause. A
predicted difference that the measurement did not show (the textbook rule with uneven
micro-batches that happened to hold equal numbers of kept targets) is said in ``notes``.
"""

import numpy as np

from minigrad import nn
from minigrad.engine import Tensor, backend, no_grad

IGNORE_INDEX = -100
REASONS = {
    "batchnorm": "BatchNorm normalises each micro-batch with its own statistics",
    "uneven": "the textbook rule divides uneven micro-batches by their count",
    "kept": "the textbook rule weighs micro-batches equally but they hold different numbers "
            "of kept targets",
    "tokens": "the textbook rule weighs micro-batches equally but they hold different numbers "
              "of real tokens (sequences of different lengths; padding is ignored)",
    "sum": "normalize='sum' scales the gradient by the number of items",
}
EQUIVALENT = "accumulated training IS full-batch training within the floating-point bound"
NOT_EQUIVALENT = "accumulated training is NOT full-batch training"


def relu_flips(model, x, sizes, step_index):
    """How many ReLU inputs are positive in one of the full-batch and the micro-batch
    forward passes of ``x`` and not in the other (same parameters, same dropout masks).

    ``None`` for a model with BatchNorm, whose micro-batch inputs differ by design.
    """
    if any(isinstance(layer, nn.BatchNorm1d) for layer in model):
        return None

    def signs(rows, start):
        h, seen = Tensor(rows), []
        with no_grad(), nn.dropout_keys.rows(step_index, rows, start):
            for layer in model:
                if isinstance(layer, nn.ReLU):
                    seen.append(backend.to_numpy(h.data) > 0)
                h = layer(h)
        return seen

    starts = np.cumsum([0, *sizes[:-1]])
    parts = [signs(x[s:s + n, ...], int(s)) for s, n in zip(starts, sizes)]
    return sum(int(np.sum(whole != np.concatenate(part)))
               for whole, *part in zip(signs(x, 0), *parts))


def predicted_causes(config, split, data, loss):
    """The keys of ``REASONS`` that the set-up predicts, and the items (kept targets, or
    samples times outputs) of each micro-batch at each update."""
    ends = np.cumsum(split)
    items = [[loss.num_items(y[e - s:e, ...]) for s, e in zip(split, ends)] for _, y in data]
    textbook = config["normalize"] == "micro_batch_mean"
    tokens = config["model"] == "charlm"
    ignored = any(bool(np.any(y == IGNORE_INDEX)) for _, y in data)
    unequal = any(len(set(row)) > 1 for row in items)
    predicted = {
        "batchnorm": config["norm"] == "batch" and config["strategy"] == "micro"
        and len(split) > 1,
        "uneven": textbook and not tokens and len(set(split)) > 1,
        "kept": textbook and not tokens and ignored and unequal,
        "tokens": textbook and tokens and unequal,
        "sum": config["normalize"] == "sum" and any(sum(row) > 1 for row in items),
    }
    return [key for key, holds in predicted.items() if holds], items


def verdict(config, predicted, items, updates, flips, diverged):
    """(equivalent, reasons, notes): the predicted causes where the gap confirms them, else
    what the measurement shows (a diverged run, a ReLU flip, or only the gap)."""
    within = [row["ratio"] is not None and row["ratio"] <= 1 for row in updates]
    first_bad = within.index(False) if False in within else len(updates)
    flipped = [(t + 1, n) for t, n in enumerate(flips[:first_bad + 1]) if n]
    if diverged is None and all(within):
        notes = [_not_shown(key, items) for key in predicted]
        notes += [f"{n} ReLU input(s) took opposite signs in the two forward passes of "
                  f"update {t}, but the gap stayed within the bound" for t, n in flipped]
        return True, [], notes
    reasons = [REASONS[key] for key in predicted]
    if diverged is not None:
        reasons.append(f"{diverged}, while the full-batch run stayed finite")
    if not reasons and flipped:
        reasons.append(_flip_reason(*flipped[0], config["dtype"]))
    if not reasons:
        ratio = updates[first_bad]["ratio"]
        reasons.append(f"the parameter gap exceeds the floating-point bound (gap / bound = "
                       f"{'inf' if ratio is None else f'{ratio:.3g}'} at update "
                       f"{first_bad + 1}), and none of the known causes applies here")
    return False, reasons, []


def _flip_reason(update, count, dtype):
    return (f"at update {update}, {count} ReLU input(s) within rounding of 0 took opposite "
            f"signs in the full-batch and the micro-batch forward passes ({dtype}): relu' is "
            f"0 on one side and 1 on the other, a change that no rounding bound covers; the "
            f"accumulation rule itself is right")


def _not_shown(key, items):
    """A predicted difference that the measured gap did not show, and why where known."""
    note = (f"the set-up predicts a difference ({REASONS[key]}), but the measured gap "
            f"stayed within the bound at every update")
    if key in ("uneven", "kept", "tokens") and all(len(set(row)) == 1 for row in items):
        note += (": the micro-batches always held equal numbers of items, so the textbook rule "
                 "was exact here")
    return note
