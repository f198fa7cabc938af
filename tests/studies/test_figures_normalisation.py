"""The loss-normalisation figures (minigrad.studies.normalisation.figures): titles, labels,
legends and line data, not pixels."""

import matplotlib
import numpy as np
import pytest

matplotlib.use("Agg")

from minigrad.studies.figures import pyplot  # noqa: E402
from minigrad.studies.normalisation.figures import (  # noqa: E402
    ERROR_LABEL,
    MIB,
    peak_memory,
    rule_errors,
)


@pytest.fixture(autouse=True)
def _close():
    yield
    pyplot().close("all")


def test_rule_errors_draw_each_rule_and_the_bound_on_a_log_axis():
    x = [1, 3, 7, 15]
    errors = {"item-weighted": [1e-16, 2e-16, 1e-16, 3e-16], "textbook": [0.0, 0.4, 1.2, 1.9]}
    fig = rule_errors(x, errors, [4e-12] * 4, title="uneven", xlabel="ratio", xscale="log")
    (ax,) = fig.axes
    assert ax.get_title() == "uneven" and ax.get_xlabel() == "ratio"
    assert ax.get_ylabel() == ERROR_LABEL
    assert ax.get_yscale() == "log" and ax.get_xscale() == "log"
    items, textbook, bound = ax.lines
    assert items.get_label() == "item-weighted"
    assert items.get_ydata().tolist() == errors["item-weighted"]
    # a zero error has no place on a log axis: left out, counted in the legend
    assert textbook.get_xdata().tolist() == [3, 7, 15]
    assert textbook.get_label() == "textbook (exactly 0 at 1 of 4: not drawn)"
    assert bound.get_label() == "rounding bound" and bound.get_linestyle() == "--"
    assert bound.get_ydata().tolist() == [4e-12] * 4
    assert len(ax.get_legend().get_texts()) == 3


def test_rule_errors_draw_into_a_given_panel():
    fig, (left, right) = pyplot().subplots(1, 2)
    out = rule_errors([0.0, 0.5], {"a": [1e-16, 0.3]}, [1e-12, 1e-12], title="ignored",
                      xlabel="fraction ignored", ax=left, bound_label="bound of a")
    assert out is fig and left.get_title() == "ignored" and not right.lines
    assert left.lines[-1].get_label() == "bound of a"


@pytest.mark.parametrize("x, errors, bound, match", [
    ([], {"a": []}, [], "x must be a non-empty"),
    ([1, 2], {"a": [1e-16]}, [1.0, 1.0], r"errors\['a'\] must hold 2"),
    ([1, 2], {"a": [1e-16, -1.0]}, [1.0, 1.0], ">= 0"),
    ([1, 2], {"a": [1e-16, 1e-16]}, [1.0, 0.0], "bound must be > 0"),
])
def test_rule_errors_refuse_bad_values(x, errors, bound, match):
    with pytest.raises(ValueError, match=match):
        rule_errors(x, errors, bound, title="t", xlabel="x")


def test_peak_memory_plots_mebibytes_against_the_count():
    counts = [1, 2, 4]
    peaks = {"add losses": [1 * MIB, 2 * MIB, 4 * MIB], "accumulate": [MIB, MIB, MIB]}
    fig = peak_memory(counts, peaks, title="graphs alive",
                      reference=("N graphs", np.array([0.5, 1.0, 2.0]) * MIB))
    (ax,) = fig.axes
    assert ax.get_title() == "graphs alive" and "MiB" in ax.get_ylabel()
    assert "micro-batches" in ax.get_xlabel()
    lines = {line.get_label(): line for line in ax.lines}
    assert lines["add losses"].get_ydata().tolist() == [1.0, 2.0, 4.0]
    assert lines["accumulate"].get_xdata().tolist() == counts
    assert lines["N graphs"].get_ydata().tolist() == [0.5, 1.0, 2.0]
    assert ax.get_ylim()[0] == 0
    assert {t.get_text() for t in ax.get_legend().get_texts()} == set(lines)
