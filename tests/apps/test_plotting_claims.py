"""The verdicts, the verdict table and the figures of notebook 08
(minigrad.apps.plotting.claims): what they say and contain, not their pixels."""

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import pytest

from minigrad.apps.plotting import claims

matplotlib.use("Agg")


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


@pytest.mark.parametrize("holds, breaks, expected", [
    (True, False, "holds"),
    (True, True, "holds only if"),
    (False, False, "does not hold"),
    (False, True, "does not hold"),
    (np.float64(2.0) > 1.0, np.bool_(False), "holds"),  # comparisons of NumPy values
])
def test_the_verdict_follows_from_the_two_measured_facts(holds, breaks, expected):
    assert claims.verdict(holds, breaks) == expected


@pytest.mark.parametrize("holds, breaks", [(1, False), (True, [True]), ("yes", False)])
def test_the_verdict_refuses_what_is_not_a_bool(holds, breaks):
    with pytest.raises(TypeError, match="must be a bool"):
        claims.verdict(holds, breaks)


def test_the_verdict_table_is_markdown_with_one_row_per_claim():
    rows = [{"article": "A", "claim": "x | y", "measured": "1.0", "verdict": "holds"},
            {"article": "B", "claim": "c", "measured": "2\n3", "verdict": "holds only if",
             "condition": "no BatchNorm"},
            {"article": "C", "claim": "d", "measured": "4", "verdict": "does not hold"}]
    lines = claims.verdict_table(rows).splitlines()
    assert lines[0] == "| # | article | claim (paraphrased) | what we measured | verdict |"
    assert lines[1] == "|---|---|---|---|---|"
    assert lines[2] == "| 1 | A | x \\| y | 1.0 | **holds** |"  # a pipe stays in its cell
    assert lines[3] == "| 2 | B | c | 2 3 | **holds only if** no BatchNorm |"
    assert lines[4] == "| 3 | C | d | 4 | **does not hold** |"
    assert len(lines) == 5


@pytest.mark.parametrize("row, message", [
    ({"article": "A", "claim": "c", "measured": "m"}, "lacks \\['verdict'\\]"),
    ({"article": "A", "claim": "c", "measured": "m", "verdict": "true"}, "must be one of"),
    ({"article": "A", "claim": "c", "measured": "m", "verdict": "holds only if"},
     "needs a condition"),
])
def test_the_verdict_table_refuses_incomplete_rows(row, message):
    with pytest.raises(ValueError, match=message):
        claims.verdict_table([row])


def test_check_panel_takes_the_gap_and_bound_of_every_update():
    result = {"updates": [{"max_abs": 1e-16, "bound": 1e-12}, {"max_abs": 2e-16, "bound": 3e-12}]}
    assert claims.check_panel(result, "acc") == {"gap": {"acc": [1e-16, 2e-16]},
                                                 "bound": [1e-12, 3e-12]}


def test_accuracy_figure_draws_full_and_accumulated_bars_in_percent():
    fig = claims.accuracy_figure({"no norm": (0.5, 0.5), "BatchNorm": (0.9, 0.8)}, title="acc")
    (ax,) = fig.axes
    assert ax.get_title() == "acc" and ax.get_ylabel() == "test accuracy (%)"
    heights = [p.get_height() for p in ax.patches]
    assert heights == pytest.approx([50.0, 90.0, 50.0, 80.0])  # full bars, then accumulated
    assert [t.get_text() for t in ax.get_xticklabels()] == ["no norm", "BatchNorm"]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["full batch", "accumulated"]
    assert max(heights) < ax.get_ylim()[1]


def test_direction_figure_has_the_cosine_boxes_and_the_loss_curves():
    fig = claims.direction_figure({"window": [0.7, 0.8], "micro": [0.4, 0.5, 0.6]},
                                  [0, 64, 128], {"acc": [2.3, 2.0, 1.8], "each": [2.3, 1.5, 1.0]})
    left, right = fig.axes
    assert left.get_ylabel() == "cosine" and "cosine" in left.get_title()
    assert [t.get_text() for t in left.get_xticklabels()] == ["window", "micro"]
    # a box's median is a horizontal segment: two points, equal y, different x
    segments = [line for line in left.get_lines() if len(line.get_ydata()) == 2]
    medians = [line.get_ydata()[0] for line in segments
               if line.get_ydata()[0] == line.get_ydata()[1]
               and line.get_xdata()[0] != line.get_xdata()[1]]
    assert 0.75 in medians and 0.5 in medians
    assert right.get_xlabel() == "samples processed"
    curves = {line.get_label(): list(line.get_ydata()) for line in right.get_lines()}
    assert curves == {"acc": [2.3, 2.0, 1.8], "each": [2.3, 1.5, 1.0]}
    assert [t.get_text() for t in right.get_legend().get_texts()] == ["acc", "each"]


def test_costs_figure_stacks_the_memory_parts_and_plots_the_time():
    reports = [{"parameters": 1024, "gradients": 1024, "optimizer_state": 0,
                "activations": 8192},
               {"parameters": 1024, "gradients": 1024, "optimizer_state": 0,
                "activations": 2048}]
    fig = claims.costs_figure([64, 16], reports, {16: 3.0, 64: 1.0}, global_batch=64,
                              timed_batch=64)
    left, right = fig.axes
    assert "64" in left.get_title() and left.get_ylabel() == "peak memory (KiB)"
    bars = left.patches
    assert [b.get_height() for b in bars] == [1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 8.0, 2.0]
    assert [b.get_y() for b in bars[2:4]] == [1.0, 1.0]  # gradients sit on the parameters
    assert [b.get_y() for b in bars[6:8]] == [2.0, 2.0]  # activations on top
    assert [t.get_text() for t in left.get_legend().get_texts()] == \
        ["parameters", "gradients", "optimizer state", "activations"]
    (line,) = right.get_lines()
    assert list(line.get_xdata()) == [16, 64] and list(line.get_ydata()) == [3.0, 1.0]
    assert right.get_xscale() == right.get_yscale() == "log"
