"""The figures of notebook 05 (minigrad.studies.step_accounting.figures): what they contain (titles,
axis labels and scales, the plotted data, the legend), not their pixels."""

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import pytest

from minigrad.studies.step_accounting import figures as plots

matplotlib.use("Agg")


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def legend_texts(ax):
    return [t.get_text() for t in ax.get_legend().get_texts()]


def test_gap_figure_draws_each_run_and_the_bound_on_a_log_axis_with_zeros_at_the_floor():
    result = {"gap": {"accumulated": [0.0, 1e-16, 2e-16], "adam_count": [1e-3, 1e-2, 2e-2]},
              "bound": [1e-8, 2e-8, 3e-8]}
    fig = plots.gap_figure({"SGD": result, "Adam": result}, labels={"accumulated": "right"},
                           suptitle="gaps")
    assert fig._suptitle.get_text() == "gaps"
    assert [ax.get_title() for ax in fig.axes] == ["SGD", "Adam"]
    for ax in fig.axes:
        assert ax.get_yscale() == "log"
        assert ax.get_xlabel() == "update" and "theta_full" in ax.get_ylabel()
        lines = {line.get_label(): line for line in ax.get_lines()}
        assert list(lines) == ["right", "adam_count", "rounding bound (largest entry)"]
        assert list(lines["right"].get_xdata()) == [1, 2, 3]
        assert list(lines["right"].get_ydata()) == [plots.FLOOR, 1e-16, 2e-16]  # 0 -> floor
        assert list(lines["adam_count"].get_ydata()) == [1e-3, 1e-2, 2e-2]
        assert list(lines["rounding bound (largest entry)"].get_ydata()) == [1e-8, 2e-8, 3e-8]
        assert lines["rounding bound (largest entry)"].get_linestyle() == "--"
        # the reference is drawn on top of the runs that coincide with it
        assert lines["right"].get_zorder() > lines["adam_count"].get_zorder()
        assert legend_texts(ax) == list(lines)


def test_norm_figure_is_log_log_with_integer_ticks_at_the_counts():
    counts = [1, 2, 4, 8]
    fig = plots.norm_figure(counts, {"summed": [1, 2, 4, 8], "averaged": [1, 0.5, 0.4, 0.4]},
                            styles={"summed": "o-"}, title="t", xlabel="N (log)",
                            ylabel="norm (log)")
    (ax,) = fig.axes
    assert (ax.get_title(), ax.get_xlabel(), ax.get_ylabel()) == ("t", "N (log)", "norm (log)")
    assert ax.get_xscale() == ax.get_yscale() == "log"
    assert list(ax.get_xticks()) == counts
    assert [t.get_text() for t in ax.get_xticklabels()] == ["1", "2", "4", "8"]
    summed, averaged = ax.get_lines()
    assert summed.get_label() == "summed" and list(summed.get_ydata()) == [1, 2, 4, 8]
    assert summed.get_marker() == "o"
    assert list(averaged.get_ydata()) == [1, 0.5, 0.4, 0.4]
    assert legend_texts(ax) == ["summed", "averaged"]


def test_noise_figure_shows_prediction_measurement_and_both_scales():
    sizes = [1, 4, 16]
    fig = plots.noise_figure(sizes, [2.0, 1.0, 0.5], [2.1, 0.9, 0.5], 0.25, population=64)
    (ax,) = fig.axes
    assert ax.get_xscale() == ax.get_yscale() == "log"
    assert "batch size" in ax.get_xlabel() and "gradient norm" in ax.get_ylabel()
    predicted, measured, signal, summed = ax.get_lines()
    assert list(predicted.get_ydata()) == [2.0, 1.0, 0.5]
    assert "n = 64" in predicted.get_label()
    assert list(measured.get_ydata()) == [2.1, 0.9, 0.5] and measured.get_linestyle() == "None"
    assert np.all(np.asarray(signal.get_ydata()) == 0.25)  # the same for every B
    assert list(summed.get_ydata()) == [0.25, 1.0, 4.0]  # B times: a sum loss
    assert len(legend_texts(ax)) == 4
