"""The accuracy figure of notebook 08 (minigrad.apps.plotting.claims): what it says and
contains, not its pixels."""

import matplotlib
import matplotlib.pyplot as plt
import pytest

from minigrad.apps.plotting import claims

matplotlib.use("Agg")


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def test_accuracy_figure_draws_full_and_accumulated_bars_in_percent():
    fig = claims.accuracy_figure({"no norm": (0.5, 0.5), "BatchNorm": (0.9, 0.8)}, title="acc")
    (ax,) = fig.axes
    assert ax.get_title() == "acc" and ax.get_ylabel() == "test accuracy (%)"
    heights = [p.get_height() for p in ax.patches]
    assert heights == pytest.approx([50.0, 90.0, 50.0, 80.0])  # full bars, then accumulated
    assert [t.get_text() for t in ax.get_xticklabels()] == ["no norm", "BatchNorm"]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["full batch", "accumulated"]
    assert max(heights) < ax.get_ylim()[1]
