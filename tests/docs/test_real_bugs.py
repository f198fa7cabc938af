"""The page of real bugs (docs/real-bugs.md): its blocks run, its prose types no measured
number, what the prose says about each experiment holds for the numbers printed, and every
test, notebook and session it names exists.

The blocks are executed the way markdown-exec runs them at build time (blocks of one
``session`` share their names), as tests/docs/test_frameworks.py does for the framework map.
"""

import re
from pathlib import Path

import numpy as np
from helpers import FENCE, exec_page, first_number, relative_rounding, table_rows, typed_numbers

from minigrad.analysis import bounds

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "real-bugs.md"
SESSION = 'session="realbugs"'
U = 2.0**-53
_RUN = {}


def run():
    """(outputs of the blocks, the session's names), run once per test session."""
    if not _RUN:
        outputs, sessions = exec_page(PAGE)
        _RUN.update(outputs=outputs, scope=sessions["realbugs"])
    return _RUN["outputs"], _RUN["scope"]


def rounding(scope, x, y):
    return relative_rounding(scope["make"], scope["loss"], x, y)


rows, number = table_rows, first_number


def pair(cell):
    c, rest = cell.split(",")
    return number(c), number(rest)


def test_the_blocks_share_one_session_of_their_own_and_print_eight_tables():
    blocks = list(FENCE.finditer(PAGE.read_text()))
    assert all(SESSION in m["options"] for m in blocks)
    others = [p for p in (ROOT / "docs").rglob("*.md") if p != PAGE and SESSION in p.read_text()]
    assert not others, f"another page uses this page's session: {others}"
    outputs, _ = run()
    assert len(outputs) == 9 and not outputs[0].strip()
    assert all(rows(out) for out in outputs[1:])


def test_prose_types_no_measured_number():
    assert not typed_numbers(PAGE.read_text())


def test_the_tests_and_notebooks_the_page_names_exist():
    text = PAGE.read_text()
    named, current = [], None
    for path, name in re.findall(r"`(tests/[\w/]+\.py)?::(test_\w+)`", text):
        current = path or current
        named.append((current, name))
    assert len(named) >= 10
    for path, name in named:
        assert f"def {name}(" in (ROOT / path).read_text(), f"{path}::{name}"
    notebooks = re.findall(r"\]\(notebooks/(\d\d_\w+\.ipynb)\)", text)
    assert notebooks and all((ROOT / "notebooks" / nb).exists() for nb in notebooks)


def test_every_bug_of_the_map_has_a_linked_reference_a_rule_and_a_lesson():
    table = PAGE.read_text().split("## The map", 1)[1].split("\n## ", 1)[0]
    lines = [line for line in table.splitlines() if line.startswith("| ")][1:]
    assert len(lines) >= 13
    for line in lines:
        bug, reported, rule, lesson = [c.strip() for c in line.strip("|").split(" | ")]
        assert re.search(r"\[#\d+\]\(https://github\.com/[\w.-]+/[\w.-]+/(pull|issues)/\d+\)",
                         reported), bug
        assert re.search(r"item-weighted|once per update|split invariance|same computation",
                         rule), bug
        assert re.search(r"\]\(|`tests/", lesson), bug


def test_one_count_for_the_sequence_is_the_full_gradient_for_every_number_of_shards():
    # sum over the shards of their sums, divided once, against the sums of the whole: the
    # same per-item gradients added in another order, within gradient_bound; the one
    # division rounds once in each (2u). The least-squares c leaves at most what c = 1 leaves.
    outputs, scope = run()
    limit = rounding(scope, scope["x"], scope["y"]) + 2 * U
    table = rows(outputs[1])
    assert [int(r[0]) for r in table] == [1, 2, 3, 4, 6]
    for k, counts, local, whole in table:
        c, rest = pair(whole)
        assert abs(c - 1) <= 1e-6 and rest <= 1.05 * limit  # printed to 6 and 2 digits
        c, rest = pair(local)
        if len(set(counts.split(", "))) > 1:  # uneven shards: another direction, not rounding
            assert rest > limit, k


def test_a_single_token_gives_one_over_k():
    # one shard divides that token's gradient by 1, the mean over k shards by k (a power of
    # two here, exact); the zero gradients of the masked tokens add nothing
    outputs, scope = run()
    limit = rounding(scope, scope["x"], scope["y_one"]) + 2 * U
    for k, c, _one_over_k, rest in rows(outputs[2]):
        assert abs(number(c) - 1 / int(k)) <= 1e-6
        assert number(rest) <= 1.05 * limit / int(k)


def test_a_skipped_micro_batch_still_counted_scales_the_update_by_the_kept_share():
    # the same vector divided by two counts: one rounding each, 2u relative
    outputs, scope = run()
    (n_all, n_kept, c, share, rest), = rows(outputs[3])
    assert int(n_kept) < int(n_all)
    assert abs(number(c) - int(n_kept) / int(n_all)) <= 1e-6
    assert abs(number(share) - int(n_kept) / int(n_all)) <= 1e-6
    assert number(rest) <= 1.05 * 2 * U


def test_minigrad_counts_only_what_it_added():
    outputs, scope = run()
    counts = [n for *_, n in scope["shards"](scope["x"], scope["y"], 4)]
    table = {mode: (pending, third) for mode, pending, third in rows(outputs[4])}
    pending, third = table["raise"]
    assert third == "raised, not added"
    expected = np.cumsum([n if j != 2 else 0 for j, n in enumerate(counts)])
    assert [int(n) for n in pending.split(", ")] == list(expected)
    assert int(pending.split(", ")[-1]) == sum(counts) - counts[2]
    pending, third = table["skip"]
    assert third == "dropped the window"
    assert [int(n) for n in pending.split(", ")][2:] == [0, counts[3]]


def test_a_sum_of_micro_batch_means_is_k_times_the_gradient_only_for_equal_counts():
    # g = sum_j fl(s_j / n_j) against k fl(S / N): the sums s_j add the per-item gradients in
    # another order than S (within k times gradient_bound, relative to |S / N|), and the k
    # divided terms are rounded and added with k + 1 roundings of values <= sum_j |s_j / n_j|
    outputs, scope = run()
    for name, k, counts, c, rest in rows(outputs[5]):
        k = int(k)
        targets = scope["y_all"] if name == "none masked" else scope["y"]
        x = scope["x"]
        ref = scope["sums"](x, targets) / scope["loss"].num_items(targets)
        terms = [scope["sums"](xj, yj) / n for xj, yj, n in scope["shards"](x, targets, k) if n]
        magnitude = np.linalg.norm(sum(np.abs(t) for t in terms)) / np.linalg.norm(ref)
        limit = k * rounding(scope, x, targets) + bounds.gamma(k + 1) * magnitude
        if len(set(counts.split(", "))) == 1:
            assert abs(number(c) - k) <= 1e-6 and number(rest) <= 1.05 * limit
        else:
            assert number(rest) > limit


def test_the_validation_loss_averaged_per_batch_depends_on_the_batch_and_the_items_do_not():
    outputs, _ = run()
    table = rows(outputs[6])
    assert [int(r[0]) for r in table] == [1, 2, 4, 8]
    assert len({r[2] for r in table}) == 1  # item-weighted: the same for every b
    assert table[-1][1] == table[-1][2]  # one batch of the whole set: the same value
    per_batch = {number(r[1]) for r in table[:-1]}
    assert any(abs(v - number(table[0][2])) > 1e-6 for v in per_batch)


def test_only_the_generator_of_its_own_breaks_recomputation_and_check_finds_it():
    outputs, _ = run()
    own, keyed = rows(outputs[7])
    assert own[1] == "False" and number(own[2]) > 0 and own[3] == "raises"
    assert keyed[1] == "True" and number(keyed[2]) == 0 and keyed[3] == "passes"


def test_rows_gathered_in_rank_blocks_change_the_loss_and_the_global_order_restores_it():
    # the rows put back in the global order are the one-process array itself: same bits
    outputs, _ = run()
    for ranks, right, value, one, gap, fixed in rows(outputs[8]):
        ranks = int(ranks)
        assert right == f"{8 // ranks} of 8"
        assert number(fixed) == 0
        if ranks == 1:
            assert value == one and number(gap) == 0
        else:
            assert value != one and number(gap) > 0
