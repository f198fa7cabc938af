"""Token-level training under accumulation (notebook 13): ``nn.CharMLP`` on the names, full
batch and accumulated under each rule from the same start, with each rule's parameter gap to
the full-batch run of its own objective and the trajectory bound on that gap, update by
update (``side_by_side``); the gradient error of each rule against the spread of the
micro-batches' token counts (``spread_errors``); and padding against packing
(``layout_gaps``).

The rules (``RULES``): the item-weighted rule divides the window's summed token losses once by
its real tokens; the textbook rule divides each micro-batch's token mean by the number of
micro-batches; per-sequence averaging (``text.SequenceMeanLoss``) is another objective, each
name's token mean averaged over the names, divided once by the window's names.
"""

import numpy as np

from minigrad import nn
from minigrad.accumulate import accumulated_gradients, split_sizes, step
from minigrad.analysis.bounds import bound_ratio, flat
from minigrad.analysis.trajectory import TrajectoryReplay
from minigrad.studies import text
from minigrad.studies.tokens.bound import gradient_bound

LOSSES = {"token mean": nn.CrossEntropyLoss(ignore_index=text.IGNORE_INDEX),
          "sequence mean": text.SequenceMeanLoss()}
"""Objective -> its loss: the mean over the window's tokens, or over its names of each
name's token mean."""
RULES = {"item-weighted": ("token mean", "items"),
         "textbook": ("token mean", "micro_batch_mean"),
         "per-sequence": ("sequence mean", "items")}
"""Rule -> (its objective, the ``normalize`` of ``accumulate.step``)."""
FULL = {"token mean": "full batch", "sequence mean": "full batch, per sequence"}
"""Objective -> the name of its full-batch run in ``side_by_side``."""


def targets(windows, objective):
    """The targets of ``windows`` for ``objective``: next-token ids, or with the sequence
    index beside them (``Windows.sequence_targets``)."""
    return windows.y if objective == "token mean" else windows.sequence_targets()


def token_counts(windows, sizes):
    """The real tokens of each micro-batch when ``windows``' rows are split into ``sizes``."""
    edges = np.cumsum([0, *sizes])
    return [int(np.sum(windows.y[a:b] != text.IGNORE_INDEX)) for a, b in zip(edges, edges[1:])]


def _replay(model, optimizer, loss, splits):
    """``TrajectoryReplay`` of ``nn.CharMLP`` with the token gradient bound
    (``bound.gradient_bound``, for windows split into ``splits`` micro-batches) in place of
    the per-sample one, which would take one backward pass per token."""
    return TrajectoryReplay(model, optimizer, loss,
                            rounding=lambda m, x, y, t: gradient_bound(m, loss, x, y, splits))


def side_by_side(make, make_optimizer, batches, sizes):
    """Both objectives trained full batch, and every rule of ``RULES`` accumulated over
    micro-batches of ``sizes`` rows, all from the same start (``make()``), one update per
    ``text.Windows`` of ``batches``.

    Returns a dict: ``"loss"``, run -> the loss ``step`` returned per update (each run's own
    objective); ``"theta"``, run -> (updates, P) its flat parameters after each update;
    ``"gap"`` and ``"bound"``, rule -> (updates, P) |theta_rule - theta_ref| and its
    trajectory bound, ref the full-batch run of the rule's objective (``FULL``);
    ``"tokens"``, the token counts of each update's micro-batches.
    """
    runs = [*FULL.values(), *RULES]
    models = {name: make() for name in runs}
    opts = {name: make_optimizer(model.parameters()) for name, model in models.items()}
    replays = {rule: _replay(models[FULL[objective]], opts[FULL[objective]],
                             LOSSES[objective], len(sizes))
               for rule, (objective, _) in RULES.items()}
    out = {"loss": {name: [] for name in runs}, "theta": {name: [] for name in runs},
           "gap": {rule: [] for rule in RULES}, "bound": {rule: [] for rule in RULES},
           "tokens": []}
    for windows in batches:
        out["tokens"].append(token_counts(windows, sizes))
        for rule, (objective, _) in RULES.items():
            replays[rule].measure(models[rule], windows.x, targets(windows, objective))
        for objective, name in FULL.items():
            out["loss"][name].append(step(models[name], LOSSES[objective], opts[name],
                                          windows.x, targets(windows, objective)))
        for rule, (objective, normalize) in RULES.items():
            out["loss"][rule].append(step(models[rule], LOSSES[objective], opts[rule],
                                          windows.x, targets(windows, objective), sizes=sizes,
                                          normalize=normalize))
        for name, model in models.items():
            out["theta"][name].append(flat(p.data for p in model.parameters()))
        for rule, replay in replays.items():
            seen = replay.observe(out["theta"][rule][-1])
            out["gap"][rule].append(seen.gap)
            out["bound"][rule].append(seen.bound)
    for part in ("theta", "gap", "bound"):
        out[part] = {name: np.array(rows) for name, rows in out[part].items()}
    return out


def relative_errors(make, windows, sizes, rules=("item-weighted", "textbook")):
    """For one split of ``windows``' rows into ``sizes``: rule -> max|g_rule - g_full| /
    max|g_full| against the full-batch gradient of the rule's own objective, and rule -> the
    most rounding alone may give there (max of the bound / max|g_full|)."""
    errors, limits = {}, {}
    for rule in rules:
        objective, normalize = RULES[rule]
        loss, y = LOSSES[objective], targets(windows, objective)
        full = flat(accumulated_gradients(make(), loss, windows.x, y).values())
        acc = flat(accumulated_gradients(make(), loss, windows.x, y, sizes=sizes,
                                         normalize=normalize).values())
        bound = flat(gradient_bound(make(), loss, windows.x, y, len(sizes)).values())
        scale = float(np.max(np.abs(full)))
        errors[rule] = float(np.max(np.abs(acc - full))) / scale
        limits[rule] = float(np.max(bound)) / scale
    return errors, limits


def matched_halves(words, count):
    """2 x ``count`` indices of ``words``: ``count`` of them, then for each, in the same
    order, another word of the same length; so the two halves hold the same tokens."""
    first, second, free = [], [], list(range(len(words)))
    while free and len(first) < count:
        i = free.pop(0)
        partner = next((j for j in free if len(words[j]) == len(words[i])), None)
        if partner is not None:
            free.remove(partner)
            first.append(i)
            second.append(partner)
    if len(first) < count:
        raise ValueError(f"words holds {len(first)} pairs of names of equal length, not "
                         f"{count}")
    return first + second


def spread_errors(make, words, vocab, context, count, shifts):
    """The textbook rule against the spread of token counts: two micro-batches of ``count``
    names of matching lengths (``matched_halves``: equal token counts), then ``s`` names of
    the first moved to the second, for each s of ``shifts``. Returns ``{"spread": max - min
    tokens, "errors": rule -> relative error, "limits": rule -> rounding's most}``, one
    entry per shift."""
    chosen = matched_halves(words, count)
    windows = text.padded_windows([words[i] for i in chosen], vocab, context)
    out = {"spread": [], "errors": {}, "limits": {}}
    for s in shifts:
        sizes = [count - s, count + s]
        tokens = token_counts(windows, sizes)
        errors, limits = relative_errors(make, windows, sizes)
        out["spread"].append(max(tokens) - min(tokens))
        for rule in errors:
            out["errors"].setdefault(rule, []).append(errors[rule])
            out["limits"].setdefault(rule, []).append(limits[rule])
    return out


def layout_gaps(make, words, vocab, context, row_length, micro_batch_size):
    """The same names padded, packed with the context reset at each boundary and packed
    without: for each layout its rows, positions and real tokens, and its item-weighted
    accumulated gradient over micro-batches of ``micro_batch_size`` rows against the padded
    layout's full-batch gradient, as max gap / bound (<= 1: the same gradient up to
    rounding)."""
    padded = text.padded_windows(words, vocab, context)
    loss = LOSSES["token mean"]
    full = accumulated_gradients(make(), loss, padded.x, padded.y)
    layouts = {"padded": padded,
               "packed, context reset": text.packed_windows(words, vocab, context, row_length),
               "packed, no reset": text.packed_windows(words, vocab, context, row_length,
                                                       reset=False)}
    out = {}
    for label, windows in layouts.items():
        sizes = split_sizes(windows.x.shape[0], micro_batch_size=micro_batch_size)
        g = accumulated_gradients(make(), loss, windows.x, windows.y, sizes=sizes)
        terms = max(padded.x.size, windows.x.size) + len(sizes)
        bound = gradient_bound(make(), loss, padded.x, padded.y, len(sizes), terms=terms)
        out[label] = {"windows": windows, "rows": windows.x.shape[0],
                      "positions": int(windows.y.size), "tokens": windows.num_tokens,
                      "ratio": max(bound_ratio(np.abs(g[name] - full[name]), bound[name])
                                   for name in bound)}
    return out


__all__ = ["FULL", "LOSSES", "RULES", "layout_gaps", "matched_halves",
           "relative_errors", "side_by_side", "spread_errors", "targets", "token_counts"]
