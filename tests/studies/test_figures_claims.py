"""The accuracy figure of notebook 08 (minigrad.studies.claims.figures): what it says and
contains, not its pixels."""

import matplotlib
import matplotlib.pyplot as plt
import pytest

from minigrad.studies.claims import figures as claims

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
    assert [t.get_text() for t in ax.texts] == ["50.0", "90.0", "50.0", "80.0"]


def test_accuracy_figure_shows_the_mean_of_the_seeds_and_each_seed_on_a_given_panel():
    fig, (ax, other) = plt.subplots(1, 2)
    returned = claims.accuracy_figure({"GroupNorm": ([0.5, 0.7, 0.9], [0.5, 0.6, 0.7])},
                                      title="after 30", ax=ax)
    assert returned is fig and ax.get_title() == "after 30" and not other.patches
    assert [p.get_height() for p in ax.patches] == pytest.approx([70.0, 60.0])
    dots = sorted(y for line in ax.lines for y in line.get_ydata())
    assert dots == pytest.approx([50.0, 50.0, 60.0, 70.0, 70.0, 90.0])
