"""The figure of notebook 08 that is plumbing, not experiment: full-batch against accumulated
test accuracy per model. The verdicts themselves are computed by ``minigrad.analysis.claims``.
matplotlib is imported only when a figure is made.
"""

from __future__ import annotations

from collections.abc import Mapping

from minigrad.apps.plotting import axes, finish


def accuracy_figure(accuracies: Mapping[str, tuple[float, float]], *,
                    title: str = "Test accuracy: full batch vs accumulated"):
    """Grouped bars: per model (label -> (full-batch accuracy, accumulated accuracy)), in
    percent, each bar labelled with its value."""
    fig, (ax,) = axes(title, "model", "test accuracy (%)", width=7.0, height=4.2)
    names = list(accuracies)
    width = 0.38
    for offset, which, colour in ((-width / 2, 0, "tab:blue"), (width / 2, 1, "tab:orange")):
        values = [100 * accuracies[n][which] for n in names]
        bars = ax.bar([i + offset for i in range(len(names))], values, width, color=colour,
                      label=("full batch", "accumulated")[which])
        ax.bar_label(bars, fmt="%.1f", fontsize=9)
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels(names)
    ax.set_ylim(0, 119)  # room above the bars for the legend
    ax.legend(frameon=False, loc="upper left", ncol=2)
    return finish(fig, legend=False)
