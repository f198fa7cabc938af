"""Memory and time figures: where the peak of an update goes, what the gradients hold, what
an update costs in time, and the planner's choice for a memory budget.

* ``breakdown``: stacked bars of the measured peak, split as
  ``minigrad.analysis.memory.update_memory`` splits it, with the derived theory beside them;
* ``gradients_vs_batch``: the peak of one forward and backward pass and what stays after it
  (the gradients) against the batch size;
* ``time_per_update``: measured time of one update against the number of micro-batches;
* ``plan``: measured peaks against the micro-batch size, the budget, the planner's line and
  its choice.

>>> fig = time_per_update({1: 0.020, 4: 0.024}, machine="test machine")
>>> fig.axes[0].get_xlabel()
'micro-batches per update k (log scale)'
"""

from __future__ import annotations

import numpy as np

from minigrad.studies.figures import axes, finish

MIB = 2**20
PARTS = [("parameters", "parameters", "tab:blue"),
         ("gradients", "gradients", "tab:orange"),
         ("optimizer_state", "optimizer state", "tab:green"),
         ("activations", "activations and temporaries", "tab:red")]


def breakdown(reports, *, global_batch):
    """Stacked bars, one per micro-batch size m (``reports``: m -> ``update_memory``
    result), in MiB; a black marker shows ``theory`` where the report has one."""
    fig, (ax,) = axes(f"Peak extra memory of one update (global batch {global_batch})",
                      "micro-batch size m (samples)", "peak extra memory (MiB)", width=8.0,
                      height=4.6)
    sizes = list(reports)
    where = np.arange(len(sizes))
    bottom = np.zeros(len(sizes))
    for key, label, colour in PARTS:
        values = np.array([reports[m][key] for m in sizes], dtype=float) / MIB
        ax.bar(where, values, bottom=bottom, color=colour, label=label, width=0.7)
        bottom += values
    theory = [(i, reports[m]["theory"]) for i, m in enumerate(sizes)
              if reports[m]["theory"] is not None]
    if theory:
        ax.plot([i for i, _ in theory], [t / MIB for _, t in theory], "k_", markersize=28,
                markeredgewidth=2.5, linestyle="none", label="theory (theoretical_peak)")
    ax.set_xticks(where)
    ax.set_xticklabels([str(m) for m in sizes])
    ax.legend(frameon=False, loc="upper left")
    return finish(fig, legend=False)


def gradients_vs_batch(results):
    """``results``: batch size B -> ``costs.gradient_memory`` result. The peak of one
    forward and backward pass, and the memory still held after it, in MiB (log-log)."""
    fig, (ax,) = axes("What one backward pass needs, and what it leaves",
                      "batch size B (samples, log scale)", "MiB (log scale)", width=7.0,
                      height=4.4)
    sizes = list(results)
    series = [("peak", "peak while it runs (activations grow with B)", "tab:red", "-o"),
              ("held", "held after it: the gradients", "tab:orange", "-s"),
              ("gradients", "sum of p.grad.nbytes", "black", ":")]
    for key, label, colour, style in series:
        ax.plot(sizes, [results[b][key] / MIB for b in sizes], style, color=colour,
                label=label, markerfacecolor="none")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(sizes)
    ax.set_xticklabels([str(b) for b in sizes])
    return finish(fig)


def time_per_update(seconds, *, machine):
    """``seconds``: number of micro-batches k -> seconds per update; ``machine`` (a line,
    e.g. ``costs.machine()``) goes under the title."""
    counts = list(seconds)
    fig, (ax,) = axes(f"Time per update, same global batch\n{machine}",
                      "micro-batches per update k (log scale)", "ms per update", width=7.0,
                      height=4.4)
    ax.plot(counts, [seconds[k] * 1e3 for k in counts], "-o", color="tab:blue",
            label="measured (least of several rounds)")
    ax.axhline(seconds[counts[0]] * 1e3, color="black", linestyle="--",
               label=f"k = {counts[0]}")
    ax.set_xscale("log", base=2)
    ax.set_xticks(counts)
    ax.set_xticklabels([str(k) for k in counts])
    ax.set_ylim(bottom=0)
    ax.title.set_fontsize(11)
    return finish(fig)


def plan(peaks, choice):
    """``peaks``: micro-batch size m -> measured peak bytes; ``choice``: the result of
    ``minigrad.analysis.planner.plan`` (budget, line a + b m, chosen size and its peak)."""
    fig, (ax,) = axes("Adaptive accumulation: the largest micro-batch that fits",
                      "micro-batch size m (samples)", "peak extra memory (MiB)", width=7.5,
                      height=4.6)
    sizes = sorted(peaks)
    ax.plot(sizes, [peaks[m] / MIB for m in sizes], "-o", color="tab:blue", markersize=4,
            label="measured peak")
    grid = np.linspace(sizes[0], sizes[-1], 200)
    ax.plot(grid, (choice["a"] + choice["b"] * grid) / MIB, ":", color="tab:gray",
            label="planner's line a + b m (from two probes)")
    ax.axhline(choice["budget"] / MIB, color="tab:red", linestyle="--", label="budget")
    ax.plot([choice["micro_batch_size"]], [choice["measured_peak"] / MIB], "*",
            color="tab:red", markersize=16,
            label=f"chosen: m = {choice['micro_batch_size']} "
                  f"({choice['num_micro_batches']} micro-batches)")
    ax.set_ylim(bottom=0)
    return finish(fig)


__all__ = ["breakdown", "gradients_vs_batch", "plan", "time_per_update"]
