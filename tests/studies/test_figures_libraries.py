"""The array-library figure: loss curves of every library, gaps (where not 0) and bounds."""

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402

from minigrad.studies.libraries.figures import plot_libraries  # noqa: E402
from minigrad.studies.libraries.runs import LibraryRun  # noqa: E402


def run(name, losses, gaps, bounds):
    return LibraryRun(name, "cpu", losses=losses, gaps=gaps, bounds=bounds,
                      ratios=[g / b if b else 0.0 for g, b in zip(gaps, bounds)])


@pytest.fixture
def figure():
    import matplotlib.pyplot as plt

    runs = {"numpy": run("numpy", [2.0, 1.5, 1.0], [0.0] * 3, [0.0] * 3),
            "array_api_strict": run("array_api_strict", [2.0, 1.5, 1.0], [0.0] * 3,
                                    [1e-14, 2e-14, 3e-14]),
            "torch": run("torch", [2.0, 1.5, 1.0 + 2**-52], [0.0, 1e-16, 2e-16],
                         [1e-14, 2e-14, 3e-14])}
    fig = plot_libraries(runs, title="three libraries")
    yield fig
    plt.close(fig)


def test_the_loss_panel_overlays_every_library(figure):
    left, _ = figure.axes
    assert figure._suptitle.get_text() == "three libraries"
    assert left.get_title() == "loss per update, every library"
    assert left.get_xlabel() == "update" and "loss (nats)" in left.get_ylabel()
    lines = {line.get_label(): line for line in left.get_lines()}
    assert list(lines) == ["numpy", "array_api_strict", "torch"]
    assert list(lines["torch"].get_xdata()) == [1, 2, 3]
    assert list(lines["torch"].get_ydata()) == [2.0, 1.5, 1.0 + 2**-52]
    # overlapping curves stay visible: each its own line style
    assert len({line.get_linestyle() for line in lines.values()}) == 3
    assert [t.get_text() for t in left.get_legend().get_texts()] == list(lines)


def test_the_gap_panel_draws_nonzero_gaps_with_their_bounds_on_a_log_axis(figure):
    _, right = figure.axes
    assert right.get_yscale() == "log" and right.get_xlabel() == "update"
    assert "theta_numpy" in right.get_ylabel()
    lines = {line.get_label(): line for line in right.get_lines()}
    assert list(lines) == [
        "torch: derived bound", "torch: gap (1 of 3 exactly 0, not drawn)",
        "array_api_strict: gap exactly 0 at every update"]
    gap = lines["torch: gap (1 of 3 exactly 0, not drawn)"]
    assert list(gap.get_xdata()) == [2, 3] and list(gap.get_ydata()) == [1e-16, 2e-16]
    assert list(lines["torch: derived bound"].get_ydata()) == [1e-14, 2e-14, 3e-14]
    assert len(lines["array_api_strict: gap exactly 0 at every update"].get_xdata()) == 0
    legend = [t.get_text() for t in right.get_legend().get_texts()]
    assert legend == list(lines)
