"""A notebook's figure, also as data: the site draws it again, zoomable and hoverable.

``publish(fig, "name")`` (call it before ``plt.show()``) emits one display output under
:data:`MIME`: for each panel its title, axis labels, scales and explicit ticks, and for each
line, bar and horizontal or vertical line its label, colour, style and numbers, exactly as the
figure holds them. In Jupyter and in the notebook file the PNG stays the figure (the output
shows one line of text); the site (``docs_hooks/notebooks.py``) turns the output into a
Plotly figure drawn by ``docs/javascripts/figures.js``, with the PNG behind a toggle.

>>> from minigrad.studies.figures import axes
>>> fig, (ax,) = axes("loss", "update", "loss")
>>> _ = ax.plot([1, 2], [0.5, 0.25], label="SGD")
>>> figure_data(fig, "loss")["panels"][0]["series"][0]["y"]
[0.5, 0.25]
"""

from __future__ import annotations

import math
import re

MIME = "application/vnd.minigrad.figure+json"
"""The display output's type: the figure as data, which the site draws again."""
NOTE = "[An interactive version of this figure, zoomable with exact values, is on the site.]"
"""What a reader of the notebook sees beside the figure."""
NAME = re.compile(r"[a-z0-9]+(-[a-z0-9]+)*")
DASHES = {"-": "solid", "--": "dash", ":": "dot", "-.": "dashdot"}
SYMBOLS = {"o": "circle", ".": "circle", "s": "square", "^": "triangle-up",
           "v": "triangle-down", "*": "star", "D": "diamond", "d": "diamond", "x": "x",
           "+": "cross", "_": "line-ew", "|": "line-ns"}
# mathtext -> the HTML subset Plotly draws in its strings
MATH = [(re.compile(r"\\mathdefault\{([^{}]*)\}"), r"\1"), (re.compile(r"\\times\s*"), "×"),
        (re.compile(r"\\sqrt"), "√"), (re.compile(r"\^\{([^{}]*)\}"), r"<sup>\1</sup>"),
        (re.compile(r"_\{([^{}]*)\}"), r"<sub>\1</sub>"), (re.compile(r"\\([A-Za-z]+)"), r"\1")]


def publish(fig, name: str) -> None:
    """Display ``figure_data(fig, name)`` under :data:`MIME`, with :data:`NOTE` as its text;
    call it after drawing, before ``plt.show()`` (the site pairs it with the next PNG)."""
    from IPython.display import display

    display({MIME: figure_data(fig, name), "text/plain": NOTE}, raw=True)


def figure_data(fig, name: str) -> dict:
    """The numbers and words of ``fig``, a matplotlib Figure of lines and bars, as JSON-ready
    data: ``{"name", "title", "rows", "columns", "panels": [...]}``. NaN becomes None (a gap).

    Raises ValueError for a name that is not lowercase words joined by ``-``, for a panel
    that shares its grid cell (a twin axis), for a filled area or scatter (not drawn
    again), and for a figure with no line or bar to publish."""
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise ValueError(f"name must be lowercase words joined by '-' (an id on the page), "
                         f"got {name!r}")
    panels, cells = [], set()
    rows = columns = 1
    for ax in fig.axes:
        spec = ax.get_subplotspec()
        if spec is None:
            raise ValueError(f"figure '{name}': an axis outside the subplot grid cannot be "
                             "drawn again")
        rows, columns = spec.get_gridspec().get_geometry()
        cell = (spec.rowspan.start, spec.colspan.start)
        if cell in cells:
            raise ValueError(f"figure '{name}': two axes share grid cell {cell} (a twin "
                             "axis?); publish draws one panel per cell")
        cells.add(cell)
        if ax.collections:
            kinds = sorted({type(c).__name__ for c in ax.collections})
            raise ValueError(f"figure '{name}': panel '{ax.get_title()}' has {kinds}; "
                             "publish draws lines, bars and horizontal or vertical lines")
        series = [*_bars(ax), *(_line(ax, line) for line in ax.get_lines())]
        panels.append({"row": cell[0], "column": cell[1], "title": _text(ax.get_title()),
                       "x": _axis(ax.xaxis, ax.get_xlabel(), ax.get_xscale()),
                       "y": _axis(ax.yaxis, ax.get_ylabel(), ax.get_yscale()),
                       "series": series})
    if not any(panel["series"] for panel in panels):
        raise ValueError(f"figure '{name}' has no line or bar to publish (draw on it first)")
    return {"name": name, "title": _text(fig.get_suptitle()), "rows": rows,
            "columns": columns, "panels": panels}


def _numbers(values) -> list:
    return [None if math.isnan(v) else v for v in map(float, values)]


def _colour(colour) -> str:
    from matplotlib.colors import to_hex

    return to_hex(colour)


def _label(artist) -> str | None:
    label = artist.get_label()
    return None if not label or label.startswith("_") else _text(label)


def _line(ax, line) -> dict:
    """A Line2D in data coordinates, or from ``axhline``/``axvline`` (its x or y in axes
    coordinates: it spans the panel's limits)."""
    x, y = _numbers(line.get_xdata()), _numbers(line.get_ydata())
    transform = line.get_transform()
    if transform == ax.get_yaxis_transform():  # axhline: y in data, x across the panel
        x = [float(v) for v in ax.get_xlim()]
    elif transform == ax.get_xaxis_transform():  # axvline
        y = [float(v) for v in ax.get_ylim()]
    elif transform != ax.transData:
        raise ValueError(f"panel '{ax.get_title()}': line {line.get_label()!r} is not in data "
                         "coordinates")
    marker = line.get_marker()
    symbol = SYMBOLS.get(marker) if line.get_markevery() is None else None
    if symbol is not None and str(line.get_markerfacecolor()) == "none":
        symbol += "-open"
    return {"kind": "line", "label": _label(line), "x": x, "y": y,
            "colour": _colour(line.get_color()),
            "dash": DASHES.get(line.get_linestyle()) if line.get_linestyle() != "None"
            else None,
            "marker": symbol}


def _bars(ax) -> list:
    from matplotlib.container import BarContainer

    bars = []
    for container in ax.containers:
        if not isinstance(container, BarContainer):
            continue
        patches = container.patches
        bars.append({"kind": "bar", "label": _label(container),
                     "x": [p.get_x() + p.get_width() / 2 for p in patches],
                     "y": [p.get_height() for p in patches],
                     "base": [p.get_y() for p in patches],
                     "width": [p.get_width() for p in patches],
                     "colour": _colour(patches[0].get_facecolor()) if patches else None})
    return bars


def _axis(axis, label: str, scale: str) -> dict:
    """Label, ``"linear"`` or ``"log"``, and the ticks where the figure set them."""
    from matplotlib.ticker import FixedLocator

    if scale not in ("linear", "log"):
        raise ValueError(f"axis '{label}': scale {scale!r}; publish carries linear and log")
    data = {"label": _text(label), "scale": scale, "ticks": None}
    locator = axis.get_major_locator()
    if isinstance(locator, FixedLocator):
        values = [float(v) for v in locator.tick_values(None, None)]
        labels = axis.get_major_formatter().format_ticks(values)
        data["ticks"] = {"values": values, "labels": [_text(t) for t in labels]}
    return data


def _text(text: str) -> str:
    """matplotlib's text in Plotly's HTML subset: escaped, line breaks, simple mathtext."""
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    parts = text.split("$")
    for i in range(1, len(parts), 2):  # the parts between $ signs
        for pattern, replacement in MATH:
            parts[i] = pattern.sub(replacement, parts[i])
    return "".join(parts).replace("\n", "<br>")


__all__ = ["MIME", "NOTE", "figure_data", "publish"]
