"""Plotting helpers for the notebooks and the site: each figure readable without its code.

Every figure a reader sees has a title, labelled axes with units and a legend; these helpers
keep that boilerplate out of the notebooks. matplotlib is imported only when a figure is made,
so ``import minigrad`` never needs it. The topic modules beside this one build the figures of
one notebook each on :func:`axes` (or :func:`panel`) and :func:`finish`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from minigrad.engine import validate

STYLE = {
    "figure.dpi": 110,
    "savefig.dpi": 110,
    "font.size": 11,
    "axes.titlesize": 12,
    "axes.labelsize": 11,
    "legend.fontsize": 10,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "axes.spines.top": False,
    "axes.spines.right": False,
}
"""matplotlib settings of every figure: large enough to read on the site and in a notebook at
100% zoom, a light grid, no top and right spines."""


def pyplot():
    """matplotlib's pyplot with minigrad's style applied (imported on first use)."""
    import matplotlib.pyplot as plt

    plt.rcParams.update(STYLE)
    return plt


def axes(titles: str | Sequence[str], xlabel: str | Sequence[str], ylabel: str | Sequence[str],
         *, suptitle: str | None = None, width: float = 5.2, height: float = 3.6):
    """A row of labelled axes: ``fig, [ax, ...] = axes(["a", "b"], "x (unit)", "y (unit)")``.

    ``titles`` gives one panel per title; ``xlabel`` and ``ylabel`` are one label for every
    panel or one per panel. Returns the figure and the list of axes (a list even for one).
    """
    titles = [titles] if isinstance(titles, str) else list(titles)
    n = validate.positive_int("the number of titles", len(titles))
    xlabels = _per_panel(xlabel, n, "xlabel")
    ylabels = _per_panel(ylabel, n, "ylabel")
    plt = pyplot()
    fig, grid = plt.subplots(1, n, figsize=(width * n, height), squeeze=False)
    panels = list(grid[0])
    for ax, title, xl, yl in zip(panels, titles, xlabels, ylabels):
        ax.set_title(title)
        ax.set_xlabel(xl)
        ax.set_ylabel(yl)
    if suptitle is not None:
        fig.suptitle(suptitle, fontsize=13)
    return fig, panels


def panel(ax, title: str, xlabel: str, ylabel: str, *, width: float, height: float):
    """``(fig, ax)`` for a one-axis figure function: ``ax`` itself (a panel of a larger
    figure) given ``title`` and the axis labels, or, when ``ax`` is None, the one axis of a
    new ``width`` x ``height`` inch figure made by :func:`axes`."""
    if ax is None:
        fig, (ax,) = axes(title, xlabel, ylabel, width=width, height=height)
        return fig, ax
    ax.set(title=title, xlabel=xlabel, ylabel=ylabel)
    return ax.figure, ax


def finish(fig, *, legend: bool = True):
    """Legends on every panel that has labelled artists, a tight layout; returns ``fig``."""
    if legend:
        for ax in fig.axes:
            handles, labels = ax.get_legend_handles_labels()
            if labels:
                ax.legend(frameon=False)
    fig.tight_layout()
    return fig


def labelled(values, name, *, most, each, noun):
    """``values`` (label -> numbers) checked as a non-empty mapping of at most ``most``
    entries (more do not stay readable on one axis); returns ``(label, float64 NumPy
    array)`` pairs. ``each`` says what a label maps to and ``noun`` what the entries are,
    for messages. The shape of each array is the caller's to check."""
    import numpy as np

    if not isinstance(values, Mapping) or not values:
        raise TypeError(f"{name} must be a non-empty dict of label -> {each}, got "
                        f"{type(values).__name__}")
    if len(values) > most:
        raise ValueError(f"{name} holds {len(values)} {noun}; at most {most} stay readable "
                         "on one axis")
    return [(label, np.asarray(v, dtype=np.float64)) for label, v in values.items()]


def _per_panel(label, n, name):
    if isinstance(label, str):
        return [label] * n
    labels = list(label)
    if len(labels) != n or not all(isinstance(x, str) for x in labels):
        raise ValueError(f"{name} must be one string or a list of {n} (one per panel), "
                         f"got {label!r}")
    return labels


from minigrad.apps.plotting.interactive import publish  # noqa: E402  (it needs none of the above)

__all__ = ["STYLE", "axes", "finish", "labelled", "panel", "publish", "pyplot"]
