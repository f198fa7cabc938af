"""Plotting helpers for the notebooks and the site: each figure readable without its code.

Every figure a reader sees has a title, labelled axes with units and a legend; these helpers
keep that boilerplate out of the notebooks. matplotlib is imported only when a figure is made,
so ``import minigrad`` never needs it. Each chapter's ``figures`` module builds its notebook's
figures on :func:`axes` (or :func:`panel`) and :func:`finish`.

The two figures of training that every chapter draws live here: ``loss_curves`` draws several runs
on one axis; runs that are the same training lie on top of each other, so every curve after the
first is dashed and carries hollow markers at staggered updates, and a reader sees both.
``gap_vs_bound`` draws, per update, the largest parameter gap and the largest entry of its bound on
a log axis, and (given the ratios) the largest gap / bound per update against the line 1 it must
stay under.

>>> fig = loss_curves({"B=8, N=1": [2.3, 1.9, 1.6], "B=2, N=4": [2.3, 1.9, 1.6]},
...                   title="same global batch")
>>> [line.get_label() for line in fig.axes[0].lines]
['B=8, N=1', 'B=2, N=4']
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

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


def series(x, values, name, *, most):
    """``x`` and ``values`` (label -> one number >= 0 per x, at most ``most`` labels) checked,
    as float64 NumPy arrays: ``(x, {label: values})``."""
    x = np.asarray(x, dtype=np.float64)
    if x.ndim != 1 or x.size == 0 or not np.all(np.isfinite(x)):
        raise ValueError(f"x must be a non-empty 1-d sequence of finite numbers, got shape "
                         f"{x.shape}")
    checked = {}
    for label, v in labelled(values, name, most=most, each="one value per x", noun="series"):
        if v.shape != x.shape or np.any(v < 0) or not np.all(np.isfinite(v)):
            raise ValueError(f"{name}[{label!r}] must hold {x.size} finite numbers >= 0, one "
                             f"per x, got {v.tolist()}")
        checked[str(label)] = v
    return x, checked


def _per_panel(label, n, name):
    if isinstance(label, str):
        return [label] * n
    labels = list(label)
    if len(labels) != n or not all(isinstance(x, str) for x in labels):
        raise ValueError(f"{name} must be one string or a list of {n} (one per panel), "
                         f"got {label!r}")
    return labels


# ----- training figures: runs that should coincide, and a gap beside its bound -----------
# (line style, marker) of the 1st, 2nd, ... curve: solid, then dashed/dotted with markers.
STYLES = [("-", None), ("--", "o"), (":", "s"), ("-.", "^"), ((0, (5, 2, 1, 2)), "D"),
          ((0, (1, 3)), "v")]
COLOURS = ["tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown"]
"""The colour of the 1st, 2nd, ... curve of a figure."""
LOSS_LABEL = "training loss (mean cross-entropy per sample)"
"""The loss axis' label of ``loss_curves``."""


def _curves(curves, name):
    """``curves`` (label -> per-update values) checked: a non-empty mapping of 1-d,
    non-empty sequences of finite numbers, at most ``len(STYLES)`` of them."""
    checked = {}
    for label, values in labelled(curves, name, most=len(STYLES), each="per-update values",
                                  noun="curves"):
        if values.ndim != 1 or values.size == 0 or not np.all(np.isfinite(values)):
            raise ValueError(f"{name}[{label!r}] must be a non-empty 1-d sequence of finite "
                             f"numbers (one per update), got shape {values.shape}")
        checked[str(label)] = values
    return checked


def loss_curves(curves, *, title, ylabel=LOSS_LABEL, xlabel="update (optimizer step)",
                ax=None, markers=12):
    """Draw ``curves`` (label -> loss per update; update 1, 2, ...) on one axis.

    The first curve is a solid line; each later one is dashed or dotted with about
    ``markers`` hollow markers, staggered between curves, so identical curves stay visible.
    Draws into ``ax`` when given (a panel of a larger figure), else makes a figure.
    Returns the figure.
    """
    curves = _curves(curves, "curves")
    fig, ax = panel(ax, title, xlabel, ylabel, width=7.0, height=4.2)
    for i, (label, values) in enumerate(curves.items()):
        style, marker = STYLES[i]
        every = max(1, len(values) // max(1, markers))
        ax.plot(np.arange(1, len(values) + 1), values, linestyle=style, marker=marker,
                markevery=(i * every // len(curves), every), markerfacecolor="none",
                color=COLOURS[i], linewidth=1.6 if i == 0 else 1.3, label=label)
    ax.legend(frameon=False)
    return finish(fig, legend=False)


def gap_vs_bound(gaps, bounds, *, ratios=None, title="Accumulated vs full-batch training",
                 xlabel="update (optimizer step)"):
    """The parameter gap per update against its rounding bound, on log axes.

    ``gaps``: label -> per update, the largest |theta_acc - theta_full| over every parameter;
    ``bounds``: the same labels -> per update, the largest entry of the elementwise bound.
    Both are drawn in the label's colour, the gap solid with markers, the bound dashed.
    A gap of exactly 0 has no place on a log axis: those updates are left out and counted
    in the legend. ``ratios`` (optional, the same labels -> per update, the largest
    gap / bound over the entries) adds a second panel with the line 1 that the ratio must
    stay under. Returns the figure.
    """
    gaps, bounds = _curves(gaps, "gaps"), _curves(bounds, "bounds")
    if gaps.keys() != bounds.keys():
        raise ValueError(f"gaps and bounds must have the same labels, got {list(gaps)} and "
                         f"{list(bounds)}")
    titles = ["Largest parameter gap and its bound"]
    ylabels = ["max |θ_acc − θ_full| (log)"]
    if ratios is not None:
        ratios = _curves(ratios, "ratios")
        if ratios.keys() != gaps.keys():
            raise ValueError(f"ratios must have the labels of gaps, {list(gaps)}, got "
                             f"{list(ratios)}")
        titles.append("Gap / bound (<= 1 means within the bound)")
        ylabels.append("max of gap / bound over entries (log)")
    fig, panels = axes(titles, xlabel, ylabels, suptitle=title, width=6.2, height=4.8)
    for i, label in enumerate(gaps):
        colour = COLOURS[i % len(COLOURS)]
        _positive(panels[0], gaps[label], f"{label}: gap", colour, "-", "o")
        panels[0].plot(np.arange(1, len(bounds[label]) + 1), bounds[label], "--",
                       color=colour, linewidth=1.2, label=f"{label}: rounding bound")
        if ratios is not None:
            _positive(panels[1], ratios[label], label, colour, "-", "o")
    for ax in panels:
        ax.set_yscale("log")
    if ratios is not None:
        panels[1].axhline(1.0, color="black", linewidth=1.0, label="bound (ratio 1)")
    for ax in panels:  # below each panel: the curves span the whole height of a log axis
        ax.legend(frameon=False, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2,
                  fontsize=9)
    return finish(fig, legend=False)


def _positive(ax, values, label, colour, style, marker):
    """Plot the positive values (a log axis has no 0); the legend counts the zeros left out."""
    steps = np.arange(1, len(values) + 1)
    keep = values > 0
    zeros = int(np.sum(~keep))
    if zeros:
        label = f"{label} (exactly 0 at {zeros} of {len(values)} updates: not drawn)"
    every = max(1, len(values) // 12)
    ax.plot(steps[keep], values[keep], linestyle=style, marker=marker, markevery=every,
            markersize=4, color=colour, linewidth=1.2, label=label)


from minigrad.studies.interactive import publish  # noqa: E402  (it needs none of the above)

__all__ = ["COLOURS", "LOSS_LABEL", "STYLE", "axes", "finish", "gap_vs_bound", "labelled",
           "loss_curves", "panel", "publish", "pyplot", "series"]
