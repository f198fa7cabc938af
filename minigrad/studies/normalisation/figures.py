"""Loss-normalisation figures: the gradient error of each accumulation rule against the
split, and the peak memory of adding losses against accumulating gradients.

``rule_errors`` draws, for one family of splits, the relative error of each rule's
accumulated gradient against the full-batch gradient (log axis) beside the rounding bound
the item-weighted rule must stay under. ``peak_memory`` draws measured peaks in MiB against
the number of micro-batches.

>>> fig = rule_errors([1, 3, 7], {"item-weighted": [1e-16, 2e-16, 1e-16],
...                               "textbook": [1e-16, 0.4, 1.2]}, [4e-12, 4e-12, 4e-12],
...                   title="uneven micro-batches", xlabel="larger / smaller micro-batch")
>>> [line.get_label() for line in fig.axes[0].lines]
['item-weighted', 'textbook', 'rounding bound']
"""

from __future__ import annotations

import numpy as np

from minigrad.studies.figures import axes, finish, panel, series

MARKERS = ["o", "s", "^", "D", "v", "P"]
COLOURS = ["tab:blue", "tab:red", "tab:green", "tab:purple", "tab:orange", "tab:brown"]
ERROR_LABEL = "max |g_acc − g_full| / max |g_full| (log)"
"""The error axis' label: the normwise relative gradient error."""
MIB = 2**20


def rule_errors(x, errors, bound, *, title, xlabel, ylabel=ERROR_LABEL, ax=None,
                xscale="linear", bound_label="rounding bound"):
    """Relative gradient error of each rule against ``x`` (log axis), and the bound.

    ``errors``: rule label -> one relative error per x; ``bound``: the relative rounding
    bound per x (dashed black). An error of exactly 0 has no place on a log axis: it is
    left out and counted in the legend. Draws into ``ax`` when given, else makes a figure.
    Returns the figure.
    """
    x, errors = series(x, errors, "errors", most=len(MARKERS))
    bound = series(x, {bound_label: bound}, "bound", most=len(MARKERS))[1][str(bound_label)]
    if np.any(bound <= 0):
        raise ValueError(f"bound must be > 0 everywhere (a log axis), got {bound.tolist()}")
    fig, ax = panel(ax, title, xlabel, ylabel, width=6.2, height=4.2)
    for i, (label, v) in enumerate(errors.items()):
        keep = v > 0
        zeros = int(np.sum(~keep))
        if zeros:
            label = f"{label} (exactly 0 at {zeros} of {v.size}: not drawn)"
        # later series hollow: where two rules agree, both markers stay visible
        ax.plot(x[keep], v[keep], marker=MARKERS[i], color=COLOURS[i], linewidth=1.4,
                markersize=7 + 2 * i, markerfacecolor=COLOURS[i] if i == 0 else "none",
                label=label)
    ax.plot(x, bound, "--", color="black", linewidth=1.0, label=bound_label)
    ax.set_yscale("log")
    ax.set_xscale(xscale)
    ax.legend(frameon=False)
    return finish(fig, legend=False)


def peak_memory(counts, peaks, *, title, reference=None,
                xlabel="micro-batches per update N (fixed micro-batch size)",
                ylabel="peak memory of one update (MiB)"):
    """Measured peaks (label -> bytes, one per count) in MiB against the number of
    micro-batches. ``reference`` = (label, bytes per count) adds a dotted line, e.g. the
    memory of N micro-batch graphs. Returns the figure."""
    counts, peaks = series(counts, peaks, "peaks", most=len(MARKERS))
    if reference is not None:
        ref_label, ref_values = reference
        ref = series(counts, {ref_label: ref_values}, "reference",
                     most=len(MARKERS))[1][str(ref_label)]
    fig, (ax,) = axes(title, xlabel, ylabel, width=6.4, height=4.2)
    for i, (label, v) in enumerate(peaks.items()):
        ax.plot(counts, v / MIB, marker=MARKERS[i], color=COLOURS[i], linewidth=1.6,
                label=label)
    if reference is not None:
        ax.plot(counts, ref / MIB, ":", color="grey", linewidth=1.4,
                label=str(ref_label))
    ax.set_xticks(counts)
    ax.set_ylim(bottom=0)
    return finish(fig)


__all__ = ["ERROR_LABEL", "peak_memory", "rule_errors"]
