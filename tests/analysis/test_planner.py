"""The micro-batch planner: its choice fits the budget and the next size does not, the
planned update is full-batch training (within the trajectory bound of
``tests/equivalence_checks.py``), a budget too small gets an error naming one that fits;
and the byte sizes it reads and writes.

The model, MLP(8, 512, 4) in float64 on 64 samples, keeps 8 (6 * 512 + 4) = 24.6 kB per
sample in the backward pass against 53 kB of parameters, so one more sample per
micro-batch moves the peak by about 25 kB, far more than a re-measurement varies (0.2-1.5
kB seen; only the Python objects of a step vary, and they are about 15 KiB in all). Budgets
are set halfway between two measured peaks, so the checks below do not depend on that
variation.
"""

import math

import numpy as np
import pytest
from equivalence_checks import replay_with_bound

from minigrad import nn, optim
from minigrad.accumulate import split_sizes, step
from minigrad.analysis.memory import PYTHON_OBJECTS, peak_bytes, update_memory
from minigrad.analysis.planner import BudgetTooSmall, format_bytes, parse_bytes, plan
from minigrad.analysis.recompute_choice import run_sets, split_pairs

SIZES, N = [8, 512, 4], 64
RNG = np.random.default_rng(0)
X, Y = RNG.normal(size=(N, SIZES[0])), RNG.integers(0, SIZES[-1], N)


def make():
    return nn.MLP(SIZES, seed=0)


def sgd(model):
    return optim.SGD(model.parameters(), lr=0.1)


def measured(m):
    model = make()
    return update_memory(model, nn.CrossEntropyLoss(), sgd(model), X, Y,
                         micro_batch_size=m)["peak"]


def planned(budget):
    model = make()
    return plan(model, nn.CrossEntropyLoss(), sgd(model), X, Y, budget)


@pytest.mark.parametrize("m0", [5, 20, 40])
def test_the_choice_fits_and_one_more_sample_does_not(m0):
    """m0 = 20 splits the batch into 20, 20, 20, 4 (the sum of the first ones is alive in
    the second); m0 = 40 into 40, 24 (the first micro-batch is the largest)."""
    budget = (measured(m0) + measured(m0 + 1)) // 2
    result = planned(budget)
    m = result["micro_batch_size"]
    assert result["budget"] == budget and result["measured_peak"] <= budget
    assert result["num_micro_batches"] == math.ceil(N / m)
    assert measured(m) <= budget < measured(m + 1)


def test_a_budget_for_the_whole_batch_gives_one_micro_batch():
    result = planned(2 * measured(N))
    assert (result["micro_batch_size"], result["num_micro_batches"]) == (N, 1)


def test_the_line_predicts_the_peak_below_half_the_batch():
    """Below N/2 the largest micro-batch has the accumulated sum beside it, as it had at the
    probes, so peak(m) = a + b m holds to the per-micro-batch Python objects (< 1%)."""
    result = planned((measured(20) + measured(21)) // 2)
    assert result["b"] > 0
    assert abs(result["predicted_peak"] - result["measured_peak"]) < 0.01 * result["budget"]


def test_the_planned_update_is_full_batch_training():
    m = planned((measured(20) + measured(21)) // 2)["micro_batch_size"]
    assert 1 < m < N
    spec = {"kind": "sgd", "hyper": {"lr": 0.1}, "schedule": "constant",
            "max_grad_norm": None}
    gaps, worst = replay_with_bound(make, spec, nn.CrossEntropyLoss(), [(X, Y)],
                                    split_sizes(N, micro_batch_size=m))
    assert worst <= 1.0
    assert max(gaps[0].values()) > 0.0  # the split rounds differently: the bound is needed


def test_a_budget_too_small_names_one_that_fits():
    with pytest.raises(ValueError, match="no micro-batch size fits") as info:
        planned(1000)
    err = info.value
    assert isinstance(err, BudgetTooSmall) and str(err.smallest) in str(err)
    # Re-measured, the size it names fits that budget, up to a re-measurement's variation.
    # Only Python's own objects vary between two runs of the same step (free lists,
    # caches; the arrays are the same): at most their whole share of the peak,
    # memory.PYTHON_OBJECTS. Seen here: 0.2-1.5 KiB.
    assert 1000 < measured(err.size) <= err.smallest + PYTHON_OBJECTS


def test_the_callers_model_is_untouched():
    model = make()
    opt = sgd(model)
    data = [p.data for p in model.parameters()]
    plan(model, nn.CrossEntropyLoss(), opt, X, Y, 10**6)
    assert [p.data for p in model.parameters()] == data
    assert opt.step_count == 0 and all(p.grad is None for p in model.parameters())


@pytest.mark.parametrize("budget, error", [
    (0, ValueError), (-5, ValueError), (True, TypeError), (1.5e6, TypeError), ("1MB", TypeError),
])
def test_a_bad_budget_is_refused(budget, error):
    with pytest.raises(error, match="budget_bytes"):
        planned(budget)


def test_other_bad_arguments_are_refused():
    model = make()
    with pytest.raises(ValueError, match="samples"):
        plan(model, nn.CrossEntropyLoss(), sgd(model), X, Y[:10], 10**6)
    with pytest.raises(ValueError, match="not a parameter of the model"):
        plan(model, nn.CrossEntropyLoss(), sgd(make()), X, Y, 10**6)


# ----- recomputation ------------------------------------------------------------------------------
# MLP(16, 1024, 64, 1024, 64, 10) in float64 on 256 samples: 2 x 8 x 2176 values per sample
# of activations against 1.2 MB of parameters, so recomputing runs of hidden layers moves
# the largest micro-batch that fits (test_memory.py measures the lower peaks).
DEEP, DEEP_N = [16, 1024, 64, 1024, 64, 10], 256
DX, DY = RNG.normal(size=(DEEP_N, DEEP[0])), RNG.integers(0, DEEP[-1], DEEP_N)


def deep_measured(m, segments):
    model = nn.MLP(DEEP, seed=0).set_recompute(segments)
    return update_memory(model, nn.CrossEntropyLoss(), sgd(model), DX, DY,
                         micro_batch_size=m)["peak"]


def deep_planned(budget, recompute):
    model = nn.MLP(DEEP, seed=0)
    return plan(model, nn.CrossEntropyLoss(), sgd(model), DX, DY, budget, recompute=recompute,
                rounds=1)


@pytest.fixture(scope="module")
def auto():
    """The planner's choice at a budget halfway between m = 100 and 101 with nothing
    recomputed: recomputing runs reaches a larger m there."""
    budget = (deep_measured(100, []) + deep_measured(101, [])) // 2
    return budget, deep_planned(budget, "auto")


def test_the_auto_choice_fits_and_one_more_sample_with_the_same_choice_does_not(auto):
    budget, result = auto
    m, segments = result["micro_batch_size"], [tuple(s) for s in result["segments"]]
    assert result["measured_peak"] <= budget
    assert deep_measured(m, segments) <= budget < deep_measured(m + 1, segments)
    assert [tuple(s) for s in nn.MLP(DEEP).blocks(
        [k for a, b in result["recompute"] for k in range(a, b + 1)])] == \
        [s for a, b in result["recompute"] for s in nn.MLP(DEEP).blocks(range(a, b + 1))]


def test_auto_measures_the_choices_and_picks_the_fastest(auto):
    """Every choice planned fits; some recomputing choice reaches a larger micro-batch than
    recomputing nothing (the theory ranks them; the measurement confirms it); the pick is
    the fastest by the times it reports (one round each: no spread, so no ties)."""
    budget, result = auto
    candidates = result["candidates"]
    assert all(c["measured_peak"] <= budget for c in candidates)
    nothing = [c for c in candidates if c["recompute"] == []]
    assert nothing and nothing[0]["micro_batch_size"] == 100
    assert max(c["micro_batch_size"] for c in candidates) > 100
    assert result["seconds_per_update"] == min(c["seconds_per_update"] for c in candidates)
    assert all(c["seconds_without_recompute"] > 0 for c in candidates)


def test_the_planned_update_with_recomputation_is_the_update_without_it(auto):
    """Recomputation repeats the same operations: the update at the planned (m, runs) has the
    same bits as the update at m without it (==), and that one is full-batch training within
    the trajectory bound."""
    _, result = auto
    m, segments = result["micro_batch_size"], [tuple(s) for s in result["segments"]]
    after = []
    for runs in (segments, []):
        model = nn.MLP(DEEP, seed=0).set_recompute(runs)
        step(model, nn.CrossEntropyLoss(), sgd(model), DX, DY, micro_batch_size=m)
        after.append([p.data for p in model.parameters()])
    assert all((a == b).all() for a, b in zip(*after))
    spec = {"kind": "sgd", "hyper": {"lr": 0.1}, "schedule": "constant",
            "max_grad_norm": None}
    _, worst = replay_with_bound(lambda: nn.MLP(DEEP, seed=0).set_recompute(segments), spec,
                                 nn.CrossEntropyLoss(), [(DX, DY)],
                                 split_sizes(DEEP_N, micro_batch_size=m))
    assert worst <= 1.0


def test_recompute_all_plans_with_every_hidden_layer_recomputed():
    budget = (deep_measured(100, []) + deep_measured(101, [])) // 2
    result = deep_planned(budget, "all")
    assert result["recompute"] == [[0, 0], [1, 1], [2, 2], [3, 3]]
    assert result["segments"] == [[0, 2], [2, 4], [4, 6], [6, 8]]
    m = result["micro_batch_size"]
    segments = [tuple(s) for s in result["segments"]]
    assert deep_measured(m, segments) <= budget < deep_measured(m + 1, segments)


def test_recompute_none_ignores_the_models_own_runs_and_leaves_them_set():
    model = nn.MLP(SIZES, seed=0, recompute="all")
    result = plan(model, nn.CrossEntropyLoss(), sgd(model), X, Y,
                  (measured(20) + measured(21)) // 2)
    assert result["micro_batch_size"] == 20 and result["recompute"] == []
    assert model.recompute_segments == ((0, 2),)


def test_the_run_sets_are_every_set_of_disjoint_runs():
    """Each hidden layer is kept, starts a run or continues one (not after a kept one). With
    K(n) sets whose last layer is kept and R(n) whose last is in a run, K(n) = K + R and
    R(n) = K + 2R of n - 1: 2, 5, 13, 34 sets for 1 to 4 layers, all different."""
    for count, expected in zip(range(1, 5), (2, 5, 13, 34)):
        sets = [tuple(runs) for runs in run_sets(count)]
        assert len(sets) == len(set(sets)) == expected
        for runs in sets:
            layers = [k for a, b in runs for k in range(a, b + 1)]
            assert layers == sorted(set(layers)) and all(a <= b for a, b in runs)


@pytest.mark.parametrize("n", [1, 2, 7, 64, 100])
def test_the_micro_batch_pairs_are_those_of_the_split(n):
    for m in range(1, n + 1):
        sizes = split_sizes(n, micro_batch_size=m)
        assert split_pairs(n, m) == {(size, j > 0) for j, size in enumerate(sizes)}


def test_auto_ignores_the_models_own_runs_and_times_on_one_copy():
    """The caller's runs (here one the theory does not cover, through the last Linear) play
    no part in the choices; and the timing holds one copy of the model, not one per choice:
    the planner's own peak stays within the budget plus one model and optimizer copy."""
    budget = (deep_measured(100, []) + deep_measured(101, [])) // 2
    fresh = nn.MLP(DEEP, seed=0)
    copies = 2 * sum(p.data.nbytes for p in fresh.parameters())  # parameters and gradients
    plain, own = peak_bytes(plan, fresh, nn.CrossEntropyLoss(), sgd(fresh), DX, DY, budget,
                            recompute="auto", rounds=1)
    assert own <= budget + copies + PYTHON_OBJECTS * 20
    model = nn.MLP(DEEP, seed=0).set_recompute([(6, 9)])
    result = plan(model, nn.CrossEntropyLoss(), sgd(model), DX, DY, budget, recompute="auto",
                  rounds=1)
    assert [c["recompute"] for c in result["candidates"]] == \
        [c["recompute"] for c in plain["candidates"]]
    assert model.recompute_segments == ((6, 9),)


def test_bad_recompute_arguments_are_refused():
    model = make()
    with pytest.raises(ValueError, match=r"recompute must be one of .*got 'some'"):
        plan(model, nn.CrossEntropyLoss(), sgd(model), X, Y, 10**6, recompute="some")
    seq = nn.Sequential(nn.Linear(8, 4))
    with pytest.raises(TypeError, match="recompute='auto' chooses hidden layers of an nn.MLP"):
        plan(seq, nn.CrossEntropyLoss(), sgd(seq), X, Y, 10**6, recompute="auto")
    with pytest.raises(BudgetTooSmall):
        plan(model, nn.CrossEntropyLoss(), sgd(model), X, Y, 1000, recompute="auto")


# ----- byte sizes ---------------------------------------------------------------------------------
@pytest.mark.parametrize("text, size", [
    ("256MB", 256 * 10**6), ("256mb", 256 * 10**6), ("1.5 KiB", 1536), ("2kb", 2000),
    ("1GiB", 2**30), ("3 GB", 3 * 10**9), ("0.5MiB", 2**19), ("7", 7), ("12B", 12),
    (" 4 mib ", 4 * 2**20), ("1.0000001KB", 1000), (".5KB", 500),
])
def test_parse_bytes(text, size):
    assert parse_bytes(text) == size


@pytest.mark.parametrize("text", ["", "abc", "MB", "-1MB", "0", "0.5", "0KB", "1e3", "inf",
                                  "nan", "12TB", "1.2.3MB", "5 M B", "1,000"])
def test_parse_bytes_refuses_and_names_the_text(text):
    with pytest.raises(ValueError, match="memory must be a positive size") as info:
        parse_bytes(text)
    assert repr(text) in str(info.value)


def test_parse_bytes_wants_text():
    with pytest.raises(TypeError, match="string"):
        parse_bytes(256)


@pytest.mark.parametrize("size, text", [
    (0, "0 B"), (1023, "1023 B"), (1536, "1.5 KiB"), (43_200_000, "41.2 MiB"),
    (2**30, "1.0 GiB"),
])
def test_format_bytes(size, text):
    assert format_bytes(size) == text
