"""The figure of notebook 08 that is plumbing, not experiment: full-batch against accumulated
test accuracy per model. The verdicts themselves are computed by ``verdicts``. matplotlib is
imported only when a figure is made.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from minigrad.studies.figures import finish, panel


def accuracy_figure(accuracies: Mapping[str, tuple], *,
                    title: str = "Test accuracy: full batch vs accumulated", ax=None):
    """Grouped bars: per model (label -> (full-batch accuracy, accumulated accuracy)), in
    percent. Each accuracy is one number or one per seed: the bar is their mean, labelled
    with its value, and each seed's value is a dot on it. Drawn on ``ax`` when given (a
    panel of a larger figure), else on a new figure."""
    fig, ax = panel(ax, title, "model", "test accuracy (%)", width=7.0, height=4.2)
    names = list(accuracies)
    width = 0.38
    for offset, which, colour in ((-width / 2, 0, "tab:blue"), (width / 2, 1, "tab:orange")):
        seeds = [100 * np.atleast_1d(np.asarray(accuracies[n][which], dtype=np.float64))
                 for n in names]
        ax.bar([i + offset for i in range(len(names))], [s.mean() for s in seeds], width,
               color=colour, label=("full batch", "accumulated")[which])
        for i, s in enumerate(seeds):  # the mean's value above the highest seed
            ax.text(i + offset, s.max() + 1.5, f"{s.mean():.1f}", ha="center", va="bottom",
                    fontsize=9)
            if len(s) > 1:
                ax.plot([i + offset] * len(s), s, "o", color="0.15", markersize=3.5)
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels(names)
    ax.set_ylim(0, 119)  # room above the bars for the legend
    ax.legend(frameon=False, loc="upper left", ncol=2)
    return finish(fig, legend=False)
