"""A figure as data (minigrad.studies.interactive): the numbers the site draws again
are the figure's own, bit for bit, with its labels, scales and ticks."""

import json

import matplotlib
import numpy as np
import pytest

matplotlib.use("Agg")

from minigrad.studies import interactive
from minigrad.studies.figures import axes, finish, publish, pyplot  # noqa: E402
from minigrad.studies.interactive import figure_data  # noqa: E402


@pytest.fixture(autouse=True)
def _close():
    yield
    pyplot().close("all")


def test_lines_carry_the_figures_numbers_exactly():
    rng = np.random.default_rng(0)
    x, y = np.arange(1, 51), rng.lognormal(size=50)  # 17 significant digits each
    fig, (ax,) = axes("gap per update", "update", "gap (log)")
    ax.plot(x, y, "--s", color="tab:red", markerfacecolor="none", label="largest gap")
    ax.plot(x, 2 * y, ":", color="black")  # no label: in no legend
    data = json.loads(json.dumps(figure_data(fig, "gap"), allow_nan=False))
    first, second = data["panels"][0]["series"]
    assert first == {"kind": "line", "label": "largest gap", "x": x.tolist(), "y": y.tolist(),
                     "colour": "#d62728", "dash": "dash", "marker": "square-open"}
    assert second["label"] is None and second["y"] == (2 * y).tolist()
    assert (second["dash"], second["marker"], second["colour"]) == ("dot", None, "#000000")


def test_scales_labels_titles_and_set_ticks_are_carried():
    fig, panels = axes(["left", "right"], "micro-batch size m", ["cosine", "error (log)"],
                       suptitle="Two panels")
    panels[0].plot([2, 4, 8], [0.5, 0.9, 1.0])
    panels[1].plot([2, 4, 8], [1e-3, 1e-9, 0.0], label="error, $3\\times 10^{7}$ x\nbelow")
    panels[1].set_xscale("log", base=2)
    panels[1].set_yscale("log")
    panels[1].set_xticks([2, 4, 8], ["2", "4", "8"])
    data = figure_data(finish(fig), "two")
    assert (data["title"], data["rows"], data["columns"]) == ("Two panels", 1, 2)
    left, right = data["panels"]
    assert (left["row"], left["column"], right["column"]) == (0, 0, 1)
    assert left["x"] == {"label": "micro-batch size m", "scale": "linear", "ticks": None}
    assert right["title"] == "right" and right["y"]["label"] == "error (log)"
    assert (right["x"]["scale"], right["y"]["scale"]) == ("log", "log")
    assert right["x"]["ticks"] == {"values": [2.0, 4.0, 8.0], "labels": ["2", "4", "8"]}
    # mathtext and line breaks in Plotly's HTML subset
    assert right["series"][0]["label"] == "error, 3×10<sup>7</sup> x<br>below"


def test_gaps_horizontal_lines_and_stacked_bars():
    fig, (ax,) = axes("memory", "m", "MiB")
    ax.bar([0, 1], [1.0, 2.0], width=0.5, color="tab:blue", label="parameters")
    ax.bar([0, 1], [0.25, 0.5], bottom=[1.0, 2.0], width=0.5, label="activations")
    ax.plot([0, 1], [np.nan, 3.0], label="theory")
    ax.axhline(2.75, color="tab:red", label="budget")
    series = figure_data(fig, "memory")["panels"][0]["series"]
    assert [s["kind"] for s in series] == ["bar", "bar", "line", "line"]
    assert series[0] == {"kind": "bar", "label": "parameters", "x": [0.0, 1.0],
                         "y": [1.0, 2.0], "base": [0.0, 0.0], "width": [0.5, 0.5],
                         "colour": "#1f77b4"}
    assert series[1]["base"] == [1.0, 2.0] and series[1]["y"] == [0.25, 0.5]
    assert series[2]["y"] == [None, 3.0]  # NaN: a gap, and valid JSON
    assert series[3]["y"] == [2.75, 2.75] and series[3]["x"] == list(ax.get_xlim())


def test_a_figure_with_nothing_to_publish_is_refused():
    plt = pyplot()
    with pytest.raises(ValueError, match="has no line or bar to publish"):
        figure_data(plt.figure(), "empty")
    fig, _ = axes("nothing drawn", "x", "y")
    with pytest.raises(ValueError, match="has no line or bar to publish"):
        figure_data(fig, "empty")


def test_what_cannot_be_drawn_again_is_refused():
    fig, (ax,) = axes("t", "x", "y")
    ax.plot([1, 2], [3, 4])
    with pytest.raises(ValueError, match="lowercase words joined by '-'"):
        figure_data(fig, "Loss Curves")
    ax.twinx().plot([1, 2], [5, 6])
    with pytest.raises(ValueError, match="share grid cell"):
        figure_data(fig, "twin")
    fig, (ax,) = axes("t", "x", "y")
    ax.scatter([1, 2], [3, 4])
    with pytest.raises(ValueError, match="PathCollection"):
        figure_data(fig, "scatter")


def test_publish_displays_the_data_with_a_text_fallback(monkeypatch):
    shown = []
    monkeypatch.setattr("IPython.display.display",
                        lambda data, raw: shown.append((data, raw)))
    fig, (ax,) = axes("t", "x", "y")
    ax.plot([1, 2], [3, 4], label="a")
    assert publish(fig, "small") is None  # nothing echoed after a cell
    ((data, raw),) = shown
    assert raw is True and set(data) == {interactive.MIME, "text/plain"}
    assert data[interactive.MIME] == figure_data(fig, "small")
    assert data["text/plain"] == interactive.NOTE
