"""The framework map (docs/frameworks.md): its blocks run, its prose types no measured
number, and what the prose says about each experiment holds for the numbers printed.

The blocks are executed the way markdown-exec runs them at build time (blocks of one
``session`` share their names), as tests/docs/test_concepts.py does for the concept pages.
"""

from pathlib import Path

import numpy as np
from helpers import FENCE, exec_page, first_number, relative_rounding, table_rows, typed_numbers

from minigrad.analysis import bounds

PAGE = Path(__file__).resolve().parents[2] / "docs" / "frameworks.md"
U = 2.0**-53
_RUN = {}


def run():
    """(outputs of the blocks, the session's names), run once per test session."""
    if not _RUN:
        assert all('session="fw"' in m["options"] for m in FENCE.finditer(PAGE.read_text()))
        outputs, sessions = exec_page(PAGE)
        _RUN.update(outputs=outputs, scope=sessions["fw"])
    return _RUN["outputs"], _RUN["scope"]


def rounding(scope, x, y):
    return relative_rounding(scope["make"], scope["loss"], x, y)


rows, number = table_rows, first_number


def test_the_blocks_run_and_print_four_experiments():
    outputs, _ = run()
    assert len(outputs) == 5 and not outputs[0].strip()
    assert all(rows(out) for out in outputs[1:])


def test_prose_types_no_measured_number():
    assert not typed_numbers(PAGE.read_text())


def test_a_normaliser_over_the_wrong_window_rescales_each_update_by_its_share():
    # buggy = (n_w / n_G) g_acc; the least-squares c leaves at most what c = n_w / n_G
    # leaves, (n_w / n_G) |g_acc - g_full| / |g_full| <= (n_w / n_G) rounding
    outputs, scope = run()
    table = rows(outputs[1])
    assert len(table) == 3
    for w, n_w, n_g, c, _share, rest in table:
        assert int(n_w) < int(n_g)
        assert abs(number(c) - int(n_w) / int(n_g)) <= 1e-6  # printed to six decimals
        part = slice(8 * int(w) - 8, 8 * int(w))
        limit = rounding(scope, scope["x"][part], scope["y"][part])
        assert number(rest) <= 1.05 * int(n_w) / int(n_g) * limit  # printed to 2 digits
    assert len({number(r[3]) for r in table}) > 1  # the scale changes between windows


def test_dividing_twice_gives_one_over_k():
    outputs, scope = run()
    limit = rounding(scope, scope["x"], scope["y"])
    for k, c, _one_over_k, rest in rows(outputs[2]):
        assert abs(number(c) - 1 / int(k)) <= 1e-6
        assert number(rest) <= 1.05 * limit / int(k)


def test_the_undivided_sum_of_means_scales_with_k_and_the_divided_one_does_not():
    outputs, _ = run()
    for k, window, _total, ratio, divided in rows(outputs[3]):
        assert abs(number(ratio) - int(k)) <= 1e-6
        assert abs(number(divided) - number(window)) <= 1e-6


def test_sgd_rescales_exactly_and_adam_only_up_to_eps():
    # SGD: each run computes theta' = fl(theta - fl(lr g)) and the change fl(theta' - theta),
    # three roundings of values <= |theta| + |lr g| (2-norms: <= 3u (|theta| + |d|) per run,
    # d the change), and the gradients differ by rounding: |g_sum - n g_mean| <= rounding |g|
    # (the division by n adds one more u)
    outputs, scope = run()
    table = rows(outputs[4])
    sgd, adams = table[0], table[1:]
    theta = np.linalg.norm(bounds.flat(p.data for p in scope["make"]().parameters()))
    d = np.linalg.norm(scope["change"](scope["sgd"], "items", scope["n"] * scope["lr"]))
    limit = 6 * U * (theta + d) / d + rounding(scope, scope["x"], scope["y"]) + U
    assert number(sgd[2]) <= 1.05 * limit  # sum at lr == mean at n lr, up to rounding
    assert number(sgd[1]) > 1  # and not the mean at lr
    gaps = [number(r[1]) for r in adams]
    assert gaps == sorted(gaps) and gaps[0] > limit  # grows with eps, beyond rounding
    n = scope["n"]
    assert all(abs(number(r[2]) - (n - 1) / n) < 0.1 for r in adams)  # n times too large
    assert np.isfinite(gaps).all()
