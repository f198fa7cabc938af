"""BatchNorm figures: how far accumulated BatchNorm is from full-batch BatchNorm, beside
GroupNorm and LayerNorm, and what the exact mode costs.

* ``divergence``: gradient cosine and relative error against the micro-batch size, with
  the rounding limits that an equivalent computation stays within;
* ``forward_gap``: how far each micro-batch's normalised values are from the full batch's;
* ``running_drift``: the running statistics' gap, update by update;
* ``norm_panels``: a loss per update, one panel per normalisation;
* ``exact_cost``: peak memory and time per update of full batch, plain accumulation and the
  exact mode against the micro-batch size.

Values that are exactly 0 (one micro-batch is the full batch) have no place on a log axis:
they are left out and the legend says so.

>>> fig = forward_gap({2: {"1": {"mean_abs": 0.7, "max_abs": 1.9}},
...                    8: {"1": {"mean_abs": 0.3, "max_abs": 1.1}}})
>>> fig.axes[0].get_title()
'Normalised values: micro-batch vs full batch'
"""

from __future__ import annotations

import numpy as np

from minigrad.studies.figures import axes, finish, pyplot

COLOURS = {"BatchNorm": "tab:red", "GroupNorm": "tab:green", "LayerNorm": "tab:blue",
           "exact BatchNorm": "tab:purple", "Ghost BatchNorm": "tab:orange",
           "plain accumulation": "tab:red"}
PALETTE = ["tab:red", "tab:orange", "tab:brown", "tab:purple", "tab:blue", "tab:green"]
MICRO = "micro-batch size m (samples, log scale)"
# (line style, marker, hollow) of the 1st, 2nd, ... series: curves that coincide stay visible
STYLES = [("-", "o", False), ("--", "s", True), (":", "^", True), ("-.", "D", True)]


def _colour(label, i):
    return COLOURS.get(label, PALETTE[i % len(PALETTE)])


def _positive(ax, xs, ys, **style):
    """Plot the positive points (a log axis has no 0); returns how many were left out."""
    xs, ys = np.asarray(xs, dtype=float), np.asarray(ys, dtype=float)
    keep = ys > 0
    ax.plot(xs[keep], ys[keep], **style)
    return int(np.sum(~keep))


def _log2_ticks(ax, sizes):
    ax.set_xscale("log", base=2)
    ax.set_xticks(list(sizes))
    ax.set_xticklabels([str(m) for m in sizes])


def divergence(reports, limits, *, global_batch):
    """Two panels against the micro-batch size m: the cosine of the accumulated and the
    full-batch gradient, and their relative error |g_m - g| / |g| (log).

    ``reports``: label -> ``minigrad.studies.batchnorm.divergence.gradient_divergence`` result;
    ``limits``: label -> ``norm_training.gradient_limits`` result, drawn as a dashed line
    of the label's colour: rounding alone stays above it (cosine) or below it (error).
    """
    titles = ["Gradient direction", "Gradient error"]
    ylabels = ["cosine(g_m, g_full)", "|g_m − g_full| / |g_full| (log)"]
    fig, (left, right) = axes(titles, MICRO, ylabels, width=6.0, height=4.4,
                              suptitle=f"Accumulated vs full-batch gradient, global batch "
                                       f"{global_batch}")
    sizes = sorted({m for report in reports.values() for m in report})
    for i, (label, report) in enumerate(reports.items()):
        line, marker, hollow = STYLES[i % len(STYLES)]
        style = dict(color=_colour(label, i), linestyle=line, marker=marker,
                     markerfacecolor="none" if hollow else None, markersize=6 + 2 * i)
        ms = sorted(report)
        left.plot(ms, [report[m]["all"]["cosine"] for m in ms], label=label, **style)
        errors = [report[m]["all"]["rel_error"] for m in ms]
        zeros = [m for m, e in zip(ms, errors) if e == 0]
        note = f" (0 at m = {', '.join(map(str, zeros))}: not drawn)" if zeros else ""
        _positive(right, ms, errors, label=label + note, **style)
    for i, (label, limit) in enumerate(limits.items()):
        colour = _colour(label, i)
        right.axhline(limit["rel_error"], color=colour, linestyle=(0, (6, 3)), linewidth=1.0,
                      label=f"{label}: rounding limit")
    right.set_yscale("log")
    for ax in (left, right):
        _log2_ticks(ax, sizes)
    left.set_ylim(-0.05, 1.05)
    left.legend(frameon=False, loc="lower right")
    right.legend(frameon=False, fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.2),
                 ncol=2)
    return finish(fig, legend=False)


def forward_gap(gaps):
    """Mean and largest |x_hat_m - x_hat| of every BatchNorm layer against m (log-log).

    ``gaps``: ``minigrad.studies.batchnorm.divergence.forward_gap`` result, m -> layer -> stats.
    """
    fig, (ax,) = axes("Normalised values: micro-batch vs full batch", MICRO,
                      "|x̂_m − x̂_full| (log)", width=7.0, height=4.4)
    sizes = sorted(gaps)
    layers = list(next(iter(gaps.values())))
    zeros = set()
    for i, layer in enumerate(layers):
        colour = PALETTE[i % len(PALETTE)]
        for stat, line, marker, word in (("mean_abs", "-", "o", "mean"),
                                         ("max_abs", "--", "s", "largest")):
            values = [gaps[m][layer][stat] for m in sizes]
            zeros.update(m for m, v in zip(sizes, values) if v == 0)
            _positive(ax, sizes, values, linestyle=line, marker=marker, color=colour,
                      markerfacecolor="none" if stat == "max_abs" else colour,
                      label=f"BatchNorm layer '{layer}': {word}")
    ax.set_yscale("log")
    _log2_ticks(ax, sizes)
    note = (f"exactly 0 at m = {', '.join(map(str, sorted(zeros)))} (not drawn)"
            if zeros else None)
    ax.legend(frameon=False, title=note, title_fontsize=9, fontsize=9, ncol=2,
              loc="upper center", bbox_to_anchor=(0.5, -0.18))
    return finish(fig, legend=False)


def running_drift(drifts, *, global_batch):
    """The running statistics of accumulated BatchNorm against full batch's, per update.

    ``drifts``: m -> ``divergence.running_stat_drift``'s result; each line is the largest relative
    gap over the BatchNorm layers (log).
    """
    titles = ["running_mean", "running_var"]
    fig, panels = axes(titles, "update (optimizer step)",
                       "largest relative gap to full batch (log)", width=6.0, height=4.2,
                       suptitle=f"Running statistics: micro-batches of m vs the batch of "
                                f"{global_batch}")
    for ax, stat in zip(panels, titles):
        for i, (m, drift) in enumerate(drifts.items()):
            per_layer = np.array([layer[stat]["max_rel"] for layer in drift.values()])
            worst = per_layer.max(axis=0)
            zeros = _positive(ax, np.arange(1, worst.size + 1), worst, marker="o",
                              markersize=3, color=PALETTE[i % len(PALETTE)],
                              label=f"m = {m}")
            if zeros:
                ax.lines[-1].set_label(f"m = {m} (0 at {zeros} updates: not drawn)")
        ax.set_yscale("log")
    return finish(fig)


def norm_panels(panels, *, suptitle, ylabel):
    """One panel per title of ``panels`` (title -> label -> value per update), drawn with
    ``training.loss_curves`` so that curves on top of each other stay visible."""
    from minigrad.studies.figures import loss_curves

    plt = pyplot()
    fig, grid = plt.subplots(1, len(panels), figsize=(5.2 * len(panels), 4.2), squeeze=False)
    for ax, (title, curves) in zip(grid[0], panels.items()):
        loss_curves(curves, title=title, ax=ax, ylabel=ylabel)
    fig.suptitle(suptitle, fontsize=13)
    return finish(fig, legend=False)


def exact_cost(micro_batch_sizes, peaks, seconds, *, full_peak, full_seconds):
    """Peak memory (KiB) and time per update (ms) against m, per way of training.

    ``peaks`` and ``seconds``: label -> one value per micro-batch size; the full batch's
    ``full_peak`` and ``full_seconds`` are one line across each panel.
    """
    titles = ["Peak extra memory of one update", "Time per update"]
    fig, (mem, clock) = axes(titles, MICRO, ["KiB", "ms (least of several rounds)"],
                             width=6.0, height=4.2)
    sizes = list(micro_batch_sizes)
    for i, label in enumerate(peaks):
        colour = _colour(label, i)
        mem.plot(sizes, np.asarray(peaks[label]) / 2**10, "-o", color=colour, label=label)
        clock.plot(sizes, np.asarray(seconds[label]) * 1e3, "-o", color=colour, label=label)
    mem.axhline(full_peak / 2**10, color="black", linestyle="--", label="full batch")
    clock.axhline(full_seconds * 1e3, color="black", linestyle="--", label="full batch")
    for ax in (mem, clock):
        _log2_ticks(ax, sizes)
        ax.set_ylim(bottom=0)
    return finish(fig)


__all__ = ["divergence", "exact_cost", "forward_gap", "norm_panels", "running_drift"]
