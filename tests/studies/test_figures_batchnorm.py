"""The BatchNorm figures (minigrad.studies.batchnorm.figures): titles, labels, legends and line
data, not pixels; values of exactly 0 are left off the log axes and the legend says so."""

import matplotlib
import numpy as np
import pytest

matplotlib.use("Agg")

from minigrad.studies.batchnorm import figures as figures  # noqa: E402
from minigrad.studies.figures import pyplot  # noqa: E402


@pytest.fixture(autouse=True)
def _close():
    yield
    pyplot().close("all")


def _report(errors, cosines):
    return {m: {"all": {"rel_error": e, "cosine": c}} for m, e, c in
            zip([2, 4, 8], errors, cosines)}


def test_divergence_draws_cosine_and_error_with_the_limits():
    reports = {"BatchNorm": _report([3.0, 1.0, 0.0], [0.1, 0.5, 1.0]),
               "GroupNorm": _report([3e-16, 2e-16, 0.0], [1.0, 1.0, 1.0])}
    limits = {"BatchNorm": {"rel_error": 2e-8, "cosine": 1 - 1e-12},
              "GroupNorm": {"rel_error": 8e-9, "cosine": 1 - 1e-12}}
    fig = figures.divergence(reports, limits, global_batch=8)
    left, right = fig.axes
    assert fig._suptitle.get_text() == "Accumulated vs full-batch gradient, global batch 8"
    assert (left.get_title(), right.get_title()) == ("Gradient direction", "Gradient error")
    assert left.get_ylabel() == "cosine(g_m, g_full)"
    assert "log" in right.get_ylabel() and right.get_yscale() == "log"
    assert left.get_xlabel() == figures.MICRO
    bn, gn = left.lines
    assert bn.get_xdata().tolist() == [2, 4, 8] and bn.get_ydata().tolist() == [0.1, 0.5, 1.0]
    assert bn.get_label() == "BatchNorm" and gn.get_label() == "GroupNorm"
    assert bn.get_linestyle() != gn.get_linestyle()  # coinciding curves stay visible
    errors = right.lines[:2]
    assert errors[0].get_ydata().tolist() == [3.0, 1.0]  # the 0 at m = 8 is left out
    assert errors[0].get_label() == "BatchNorm (0 at m = 8: not drawn)"
    limit_lines = right.lines[2:]
    assert [line.get_ydata()[0] for line in limit_lines] == [2e-8, 8e-9]
    assert [line.get_label() for line in limit_lines] == ["BatchNorm: rounding limit",
                                                          "GroupNorm: rounding limit"]


def test_forward_gap_draws_mean_and_largest_per_layer():
    gaps = {m: {"1": {"mean_abs": v, "max_abs": 2 * v}, "4": {"mean_abs": v / 2,
                                                            "max_abs": v}}
            for m, v in ((2, 0.8), (4, 0.4), (8, 0.0))}
    fig = figures.forward_gap(gaps)
    (ax,) = fig.axes
    assert ax.get_title() == "Normalised values: micro-batch vs full batch"
    assert ax.get_yscale() == "log"
    labels = [line.get_label() for line in ax.lines]
    assert labels == ["BatchNorm layer '1': mean", "BatchNorm layer '1': largest",
                      "BatchNorm layer '4': mean", "BatchNorm layer '4': largest"]
    assert ax.lines[1].get_ydata().tolist() == [1.6, 0.8]
    assert ax.get_legend().get_title().get_text() == "exactly 0 at m = 8 (not drawn)"


def test_running_drift_draws_the_worst_layer_per_update():
    drift = {"1": {"running_mean": {"max_rel": [0.5, 0.25]}, "running_var": {"max_rel":
                                                                             [0.1, 0.0]}},
             "4": {"running_mean": {"max_rel": [0.75, 0.125]}, "running_var": {"max_rel":
                                                                               [0.2, 0.0]}}}
    fig = figures.running_drift({4: drift}, global_batch=16)
    mean, var = fig.axes
    assert (mean.get_title(), var.get_title()) == ("running_mean", "running_var")
    assert mean.lines[0].get_ydata().tolist() == [0.75, 0.25]
    assert var.lines[0].get_ydata().tolist() == [0.2]
    assert var.lines[0].get_label() == "m = 4 (0 at 1 updates: not drawn)"
    assert "16" in fig._suptitle.get_text()


def test_norm_panels_draw_one_panel_per_normalisation():
    panels = {"BatchNorm": {"full batch": [2.0, 1.0], "accumulated": [2.0, 1.5]},
              "GroupNorm": {"full batch": [2.0, 1.2], "accumulated": [2.0, 1.2]}}
    fig = figures.norm_panels(panels, suptitle="losses", ylabel="loss (nats)")
    assert [ax.get_title() for ax in fig.axes] == ["BatchNorm", "GroupNorm"]
    assert all(ax.get_ylabel() == "loss (nats)" for ax in fig.axes)
    assert fig.axes[0].lines[1].get_ydata().tolist() == [2.0, 1.5]
    assert fig._suptitle.get_text() == "losses"


def test_exact_cost_draws_memory_and_time_against_the_full_batch():
    fig = figures.exact_cost([4, 8], {"plain accumulation": [2048, 4096],
                                      "exact BatchNorm": [3072, 4096]},
                             {"plain accumulation": [0.01, 0.02],
                              "exact BatchNorm": [0.03, 0.04]},
                             full_peak=8192, full_seconds=0.005)
    mem, clock = fig.axes
    assert mem.get_ylabel() == "KiB" and clock.get_ylabel().startswith("ms")
    assert mem.lines[0].get_ydata().tolist() == [2.0, 4.0]
    assert np.allclose(clock.lines[1].get_ydata(), [30.0, 40.0])
    assert mem.lines[-1].get_ydata()[0] == 8.0 and mem.lines[-1].get_label() == "full batch"
    assert mem.lines[0].get_color() != mem.lines[1].get_color()
