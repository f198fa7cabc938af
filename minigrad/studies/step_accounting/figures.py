"""Figures of notebook 05 (optimizers and step accounting): the parameter gap to full-batch
training per update beside its rounding bound, the size of one update against the number
of micro-batches, and the gradient's noise against the batch size.

Every function returns the figure (matplotlib is imported only when one is made).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from minigrad.studies.figures import axes, finish

# A gap of exactly 0 is drawn here: a log axis has no 0.
FLOOR = 1e-18
"""Where a gap of exactly 0 is drawn on the log axis."""


def _legend_below(ax, columns=2):
    """The legend under the panel, so that no curve hides behind it."""
    ax.legend(frameon=False, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=columns)


def _integer_ticks(ax, values):
    """Ticks of a log axis at ``values``, labelled as plain integers (8, not 2^3)."""
    ax.set_xticks(list(values))
    ax.set_xticklabels([str(v) for v in values])
    ax.minorticks_off()


def gap_figure(results: Mapping[str, Mapping], *, labels: Mapping[str, str] | None = None,
               suptitle: str | None = None, floor: float = FLOOR):
    """One panel per title of ``results``: per update, each run's largest parameter gap to
    the full-batch run (log axis) and the largest entry of the rounding bound (dashed).

    Each value of ``results`` has the shape of ``pitfalls.compare``'s
    result: ``{"gap": {run: [gap per update]}, "bound": [bound per update]}``. ``labels``
    names the runs in the legend (default: their keys). Gaps of 0 are drawn at ``floor``.
    """
    from matplotlib.ticker import MaxNLocator

    labels = dict(labels or {})
    width = {1: 8.0, 2: 6.0}.get(len(results), 4.8)
    fig, panels = axes(list(results), "update", "max |theta - theta_full| (log)",
                       suptitle=suptitle, width=width, height=4.6)
    for ax, result in zip(panels, results.values()):
        updates = range(1, len(result["bound"]) + 1)
        runs = list(result["gap"].items())
        for i, (run, gaps) in enumerate(runs):
            # the first run on top: where runs coincide, the reference stays visible
            ax.plot(updates, [max(g, floor) for g in gaps], marker=".", markersize=4,
                    zorder=2 + len(runs) - i, label=labels.get(run, run))
        ax.plot(updates, result["bound"], "k--", linewidth=1.2,
                label="rounding bound (largest entry)")
        ax.set_yscale("log")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        _legend_below(ax, columns=2 if len(results) < 3 else 1)
    return finish(fig, legend=False)


def norm_figure(counts: Sequence[int], norms: Mapping[str, Sequence[float]], *, title: str,
                xlabel: str, ylabel: str, styles: Mapping[str, str] | None = None):
    """Log-log lines of ``norms`` (label -> one value per count) against ``counts``;
    ``styles`` gives a matplotlib format string per label (e.g. ``"o-"``)."""
    styles = dict(styles or {})
    fig, (ax,) = axes(title, xlabel, ylabel, width=7.6, height=5.0)
    for label, values in norms.items():
        ax.plot(counts, values, styles.get(label, "o-"), label=label)
    ax.set_xscale("log")
    ax.set_yscale("log")
    _integer_ticks(ax, counts)
    _legend_below(ax)
    return finish(fig, legend=False)


def noise_figure(batch_sizes: Sequence[int], predicted: Sequence[float],
                 measured: Sequence[float], signal: float, *, population: int,
                 title: str = "Mean-loss gradient: same scale, less noise"):
    """The RMS deviation of a batch's mean-loss gradient from the population's, predicted
    (line) and measured (dots), against the batch size; the norm of the expected gradient,
    the same for every batch size (horizontal); the expected gradient of a SUM loss,
    ``B * signal``, which grows with B (dotted)."""
    fig, (ax,) = axes(title, "batch size B (samples, log)", "gradient norm (log)",
                      width=7.6, height=5.2)
    ax.plot(batch_sizes, predicted, "-", color="tab:blue",
            label=rf"noise, predicted: $\sigma\sqrt{{(n - B) / (B (n - 1))}}$, n = {population}")
    ax.plot(batch_sizes, measured, "o", color="tab:blue", label="noise, measured (RMS)")
    ax.axhline(signal, color="tab:green", label="|expected gradient|, mean loss")
    ax.plot(batch_sizes, [b * signal for b in batch_sizes], ":", color="tab:red",
            label="|expected gradient|, sum loss (B times)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    _integer_ticks(ax, batch_sizes)
    _legend_below(ax, columns=1)
    return finish(fig, legend=False)


__all__ = ["FLOOR", "gap_figure", "noise_figure", "norm_figure"]
