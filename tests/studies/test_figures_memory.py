"""The memory and time figures (minigrad.studies.memory.figures): bars, lines, labels and
legends, not pixels."""

import matplotlib
import numpy as np
import pytest

matplotlib.use("Agg")

from minigrad.studies.figures import pyplot  # noqa: E402
from minigrad.studies.memory import figures as figures  # noqa: E402

MIB = 2**20


@pytest.fixture(autouse=True)
def _close():
    yield
    pyplot().close("all")


def _report(activations, theory):
    return {"peak": (4 + activations) * MIB, "parameters": MIB, "gradients": MIB,
            "optimizer_state": 2 * MIB, "activations": activations * MIB, "theory": theory}


def test_breakdown_stacks_the_four_parts_and_marks_the_theory():
    reports = {16: _report(1, 4.5 * MIB), 32: _report(3, None)}
    fig = figures.breakdown(reports, global_batch=32)
    (ax,) = fig.axes
    assert ax.get_title() == "Peak extra memory of one update (global batch 32)"
    assert ax.get_ylabel() == "peak extra memory (MiB)"
    assert [t.get_text() for t in ax.get_xticklabels()] == ["16", "32"]
    bars = ax.patches
    assert len(bars) == 8  # four parts x two sizes
    # the activations sit on top of parameters + gradients + optimizer state (4 MiB)
    assert [b.get_y() for b in bars[6:]] == [4.0, 4.0]
    assert [b.get_height() for b in bars[6:]] == [1.0, 3.0]
    (theory,) = ax.lines
    assert theory.get_ydata().tolist() == [4.5] and theory.get_xdata().tolist() == [0]
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "activations and temporaries" in legend and "theory (theoretical_peak)" in legend


def test_gradients_vs_batch_draws_peak_held_and_nbytes():
    results = {b: {"peak": b * MIB, "held": MIB + 1024, "gradients": MIB} for b in (1, 4, 16)}
    fig = figures.gradients_vs_batch(results)
    (ax,) = fig.axes
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    peak, held, nbytes = ax.lines
    assert peak.get_ydata().tolist() == [1.0, 4.0, 16.0]
    assert np.allclose(held.get_ydata(), 1 + 1024 / MIB)
    assert nbytes.get_label() == "sum of p.grad.nbytes"


def test_time_per_update_in_ms_with_the_machine():
    fig = figures.time_per_update({1: 0.02, 2: 0.021, 4: 0.03}, machine="a test machine")
    (ax,) = fig.axes
    assert "a test machine" in ax.get_title()
    assert ax.get_ylabel() == "ms per update"
    assert np.allclose(ax.lines[0].get_ydata(), [20.0, 21.0, 30.0])
    assert ax.lines[1].get_ydata()[0] == pytest.approx(20.0)


def test_plan_marks_the_budget_and_the_choice():
    choice = {"micro_batch_size": 24, "num_micro_batches": 3, "measured_peak": 3 * MIB,
              "budget": 4 * MIB, "a": MIB, "b": MIB / 12}
    fig = figures.plan({8: 2 * MIB, 24: 3 * MIB, 64: 7 * MIB}, choice)
    (ax,) = fig.axes
    measured, line, budget, chosen = ax.lines
    assert measured.get_ydata().tolist() == [2.0, 3.0, 7.0]
    assert line.get_ydata()[0] == pytest.approx(1 + 8 / 12)
    assert budget.get_ydata()[0] == 4.0 and budget.get_label() == "budget"
    assert chosen.get_ydata().tolist() == [3.0]
    assert chosen.get_label() == "chosen: m = 24 (3 micro-batches)"
