"""The training figures (minigrad.studies.figures): what each figure contains, its
titles, labels, legends and line data, not its pixels."""

import matplotlib
import pytest

matplotlib.use("Agg")

from minigrad.studies.figures import (  # noqa: E402
    LOSS_LABEL,
    gap_vs_bound,
    loss_curves,
    pyplot,  # noqa: E402
)


@pytest.fixture(autouse=True)
def _close():
    yield
    pyplot().close("all")


def test_loss_curves_draw_each_run_with_its_data_and_a_distinct_style():
    curves = {"full": [2.0, 1.5, 1.25, 1.0], "accumulated": [2.0, 1.5, 1.25, 1.0],
              "other": [2.0, 1.75, 1.5, 1.5]}
    fig = loss_curves(curves, title="same global batch")
    (ax,) = fig.axes
    assert ax.get_title() == "same global batch"
    assert ax.get_xlabel() == "update (optimizer step)"
    assert ax.get_ylabel() == LOSS_LABEL
    lines = ax.lines
    assert [line.get_label() for line in lines] == list(curves)
    for line, values in zip(lines, curves.values()):
        assert line.get_xdata().tolist() == [1, 2, 3, 4]
        assert line.get_ydata().tolist() == values
    # identical curves stay visible: the first solid without markers, later ones not solid
    assert lines[0].get_linestyle() == "-" and lines[0].get_marker() in (None, "None", "")
    assert all(line.get_linestyle() != "-" for line in lines[1:])
    assert all(line.get_marker() not in (None, "None", "") for line in lines[1:])
    assert len({line.get_linestyle() for line in lines}) == 3
    assert [t.get_text() for t in ax.get_legend().get_texts()] == list(curves)


def test_loss_curves_draw_into_a_given_panel():
    plt = pyplot()
    fig, (left, right) = plt.subplots(1, 2)
    out = loss_curves({"a": [1.0, 0.5]}, title="right panel", ylabel="loss (nats)", ax=right)
    assert out is fig
    assert right.get_title() == "right panel" and right.get_ylabel() == "loss (nats)"
    assert len(right.lines) == 1 and not left.lines


@pytest.mark.parametrize("curves, error, match", [
    ({}, TypeError, "non-empty dict"),
    ([1.0, 2.0], TypeError, "non-empty dict"),
    ({"a": []}, ValueError, r"curves\['a'\] must be a non-empty 1-d"),
    ({"a": [1.0, float("nan")]}, ValueError, "finite"),
    ({"a": [[1.0, 2.0]]}, ValueError, "1-d"),
    ({str(i): [1.0] for i in range(7)}, ValueError, "at most 6"),
])
def test_loss_curves_refuse_bad_curves(curves, error, match):
    with pytest.raises(error, match=match):
        loss_curves(curves, title="t")


def test_gap_vs_bound_draws_gap_bound_and_ratio_on_log_axes():
    gaps = {"SGD": [1e-17, 2e-16, 4e-16], "Adam": [3e-17, 1e-16, 2e-16]}
    bounds = {"SGD": [1e-14, 1e-12, 2e-12], "Adam": [1e-7, 1e-6, 2e-6]}
    ratios = {"SGD": [1e-3, 2e-3, 2e-3], "Adam": [1e-9, 1e-9, 1e-9]}
    fig = gap_vs_bound(gaps, bounds, ratios=ratios, title="B=8 vs B=2 x 4")
    left, right = fig.axes
    assert fig._suptitle.get_text() == "B=8 vs B=2 x 4"
    assert left.get_yscale() == "log" and right.get_yscale() == "log"
    assert "θ_acc − θ_full" in left.get_ylabel()
    assert left.get_xlabel() == right.get_xlabel() == "update (optimizer step)"
    by_label = {line.get_label(): line for line in left.lines}
    assert by_label["SGD: gap"].get_ydata().tolist() == gaps["SGD"]
    assert by_label["Adam: rounding bound"].get_ydata().tolist() == bounds["Adam"]
    assert by_label["SGD: rounding bound"].get_linestyle() == "--"
    assert by_label["SGD: gap"].get_color() == by_label["SGD: rounding bound"].get_color()
    right_labels = {line.get_label(): line for line in right.lines}
    assert right_labels["Adam"].get_ydata().tolist() == ratios["Adam"]
    assert list(right_labels["bound (ratio 1)"].get_ydata()) == [1.0, 1.0]
    assert left.get_legend() is not None and right.get_legend() is not None


def test_gap_vs_bound_without_ratios_has_one_panel_and_leaves_zeros_out():
    fig = gap_vs_bound({"SGD": [0.0, 1e-16, 0.0]}, {"SGD": [1e-14, 1e-13, 1e-12]})
    (ax,) = fig.axes
    gap = next(line for line in ax.lines if line.get_label().startswith("SGD: gap"))
    assert gap.get_xdata().tolist() == [2] and gap.get_ydata().tolist() == [1e-16]
    assert "exactly 0 at 2 of 3 updates" in gap.get_label()


def test_gap_vs_bound_refuses_mismatched_labels():
    with pytest.raises(ValueError, match="same labels"):
        gap_vs_bound({"a": [1e-16]}, {"b": [1e-14]})
    with pytest.raises(ValueError, match="ratios must have the labels"):
        gap_vs_bound({"a": [1e-16]}, {"a": [1e-14]}, ratios={"b": [0.1]})


def test_panel_makes_a_labelled_axis_or_labels_the_one_given():
    from minigrad.studies.figures import panel

    fig, ax = panel(None, "a title", "x (unit)", "y (unit)", width=6.0, height=4.0)
    assert fig.axes == [ax] and tuple(fig.get_size_inches()) == (6.0, 4.0)
    assert (ax.get_title(), ax.get_xlabel(), ax.get_ylabel()) == ("a title", "x (unit)",
                                                                  "y (unit)")
    outer, (left, right) = pyplot().subplots(1, 2)
    fig, ax = panel(right, "right", "x", "y", width=6.0, height=4.0)
    assert fig is outer and ax is right and len(outer.axes) == 2
    assert (right.get_title(), right.get_xlabel(), left.get_title()) == ("right", "x", "")
