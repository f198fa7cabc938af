"""The token-level figures (minigrad.studies.tokens.figures): titles, labels, legends and
data, not pixels."""

import matplotlib
import numpy as np
import pytest

matplotlib.use("Agg")

from minigrad.studies import text  # noqa: E402
from minigrad.studies.figures import pyplot  # noqa: E402
from minigrad.studies.tokens.figures import (  # noqa: E402
    ERROR_LABEL,
    layouts,
    micro_batch_shares,
    spread_errors,
)


@pytest.fixture(autouse=True)
def _close():
    yield
    pyplot().close("all")


def test_spread_errors_draw_each_rule_and_the_bound_on_a_log_axis():
    errors = {"item-weighted": [1e-16, 0.0, 2e-16], "textbook": [1e-16, 0.03, 0.2]}
    fig = spread_errors([0, 3, 9], errors, [1e-13] * 3, title="two micro-batches")
    (ax,) = fig.axes
    assert ax.get_title() == "two micro-batches" and ax.get_ylabel() == ERROR_LABEL
    assert ax.get_yscale() == "log"
    items, textbook, bound = ax.lines
    assert items.get_xdata().tolist() == [0, 9]  # the exact zero is left out, and said
    assert items.get_label() == "item-weighted (exactly 0 at 1 of 3: not drawn)"
    assert textbook.get_ydata().tolist() == errors["textbook"]
    assert bound.get_label() == "rounding bound" and bound.get_linestyle() == "--"


@pytest.mark.parametrize("errors, bound, message", [
    ({"a": [1e-16, -1.0]}, [1e-13] * 2, r"errors\['a'\] must hold 2 finite numbers >= 0"),
    ({"a": [1e-16, 1e-16]}, [1e-13, 0.0], "bound must be > 0 everywhere"),
    ([1e-16, 1e-16], [1e-13] * 2, "non-empty dict of label"),
])
def test_spread_errors_refuse_what_they_cannot_draw(errors, bound, message):
    with pytest.raises((TypeError, ValueError), match=message):
        spread_errors([0, 1], errors, bound, title="t")


def test_micro_batch_shares_draw_one_group_of_bars_per_micro_batch():
    shares = {"tokens": [0.5, 0.25, 0.25], "textbook": [1 / 3] * 3}
    fig = micro_batch_shares([14, 7, 7], shares, title="shares")
    (ax,) = fig.axes
    assert len(ax.patches) == 6
    heights = [p.get_height() for p in ax.patches]
    assert heights == shares["tokens"] + shares["textbook"]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["1 (14)", "2 (7)", "3 (7)"]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["tokens", "textbook"]


def test_layouts_colour_each_name_and_leave_padding_blank():
    vocab = text.vocabulary(["emma", "ava", "jo"])
    windows = {"padded": text.padded_windows(["emma", "ava", "jo"], vocab, 3),
               "packed": text.packed_windows(["emma", "ava", "jo"], vocab, 3, 9)}
    fig = layouts(windows, title="rows")
    padded, packed = fig.axes
    assert [padded.get_title(), packed.get_title()] == ["padded", "packed"]
    image = np.ma.filled(packed.images[0].get_array().astype(float), np.nan)
    assert image.shape == (2, 9)
    assert np.isnan(image[1, 3:]).all() and not np.isnan(image[0]).any()
    with pytest.raises(TypeError, match="non-empty dict"):
        layouts({}, title="rows")
