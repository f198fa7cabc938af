"""Strategies and reductions: the extension point of ``accumulate.step``.

A strategy written in a test file (``custom_strategy.Reversed``, under 30 lines) runs
through ``step``, ``accumulated_gradients``, the all-or-nothing guard and checkpoints without
any change to the library (and over MPI: test_distributed.py). On the dyadic MLP of
``dyadic.py`` every sum is exact in any order, so reversing the micro-batches must give
parameters EQUAL (``==``) to the plain strategy and to the full batch.
"""

import numpy as np
import pytest
from custom_strategy import Reversed
from dyadic import coarsen, dyadic_mlp, params_of, regression
from helpers import assert_same, to_np

from minigrad import checkpoint, nn, optim
from minigrad.accumulate import (
    STRATEGIES,
    Accumulator,
    ExactBatchNorm,
    Micro,
    accumulated_gradients,
    reduction,
    split,
    step,
)
from minigrad.accumulate import strategy as strategies
from minigrad.accumulate.micro import add_micro_batch
from minigrad.analysis import equivalence, reference


def sgd(model):
    return optim.SGD(model.parameters(), lr=0.125, momentum=0.5)


@pytest.mark.parametrize("sizes", [[8], [3, 5], [1, 2, 2, 3], [1] * 8])
def test_a_strategy_from_a_test_file_equals_micro_and_full_batch(xp, sizes):
    runs = {}
    for name, strategy, split_kwargs in (("full", "micro", {}),
                                         ("micro", "micro", {"sizes": sizes}),
                                         ("reversed", Reversed(), {"sizes": sizes})):
        model = dyadic_mlp(xp, dropout=0.5)
        opt = sgd(model)
        losses = []
        for t in range(3):
            x, y = regression(xp, seed=t)
            losses.append(step(model, nn.MSELoss(), opt, x, y, strategy=strategy,
                               **split_kwargs))
            coarsen(model)  # back to multiples of 1/8: the next sums stay exact
        runs[name] = (params_of(model), losses, strategy)
    for name in ("micro", "reversed"):
        assert_same(runs[name][0], runs["full"][0])
        assert runs[name][1] == runs["full"][1]
    starts = np.cumsum([0] + sizes[:-1]).tolist()
    assert runs["reversed"][2].visited == [starts[::-1]] * 3


def test_names_and_objects_are_the_same_strategies(xp):
    x, y = regression(xp, n=10)
    for name, cls in (("micro", Micro), ("exact_batchnorm", ExactBatchNorm)):
        assert STRATEGIES[name] is cls
        params = []
        for strategy in (name, cls()):
            model = nn.MLP([3, 6, 2], norm="batch", seed=1, xp=xp)
            step(model, nn.MSELoss(), optim.Adam(model.parameters(), lr=0.01), x, y,
                 sizes=[4, 6], strategy=strategy)
            params.append(to_np(model.state_dict()))
        assert_same(*params)


def test_accumulated_gradients_takes_a_strategy(xp):
    x, y = regression(xp)
    model = dyadic_mlp(xp, dropout=0.5)
    full = to_np(accumulated_gradients(model, nn.MSELoss(), x, y))
    strategy = Reversed()
    assert_same(to_np(accumulated_gradients(model, nn.MSELoss(), x, y, sizes=[2, 1, 5],
                                            strategy=strategy)), full)
    assert strategy.visited == [[3, 2, 0]]
    assert all(p.grad is None for p in model.parameters())


@pytest.mark.parametrize("strategy, kwargs, error, text", [
    ("ghost", {}, ValueError, f"strategy must be one of {sorted(STRATEGIES)} or a strategy "
                              f"object, got 'ghost'"),
    (Reversed, {}, TypeError, f"strategy must be one of {sorted(STRATEGIES)} or an object "
                              f"with a str name and check() and run() methods"),
    (object(), {}, TypeError, "or an object with a str name"),
    (Reversed(), {"normalize": "micro_batch_mean"}, ValueError, "Reversed accumulates item sums"),
    ("exact_batchnorm", {"normalize": "sum"}, ValueError,
     "strategy='exact_batchnorm' needs normalize='items', got 'sum'"),
])
def test_refused_strategies_change_nothing(strategy, kwargs, error, text):
    model = nn.MLP([3, 4, 2], norm="batch", seed=0)
    opt = optim.Adam(model.parameters(), lr=0.1)
    x, y = regression(np)
    before = to_np(model.state_dict())
    with pytest.raises(error) as info:
        step(model, nn.MSELoss(), opt, x, y, micro_batch_size=4, strategy=strategy, **kwargs)
    assert text in str(info.value)
    assert_same(to_np(model.state_dict()), before)
    assert opt.step_count == 0


class Failing:
    """Adds two micro-batches, then raises ``error``: the driver must put everything back
    (a committed update is final, so a strategy fails before its update, or not at all)."""

    name = "failing"

    def __init__(self, error):
        self.error = error

    def check(self, acc):
        pass

    def run(self, acc, micro_batches, reduction):
        for mb in micro_batches[:2]:
            add_micro_batch(acc, mb)  # gradients, counts and BatchNorm statistics move
        raise self.error("a deliberate failure inside a strategy")


@pytest.mark.parametrize("error", [KeyboardInterrupt, RuntimeError])
def test_a_strategy_that_raises_changes_nothing(error):
    model = nn.MLP([3, 6, 2], norm="batch", dropout=0.25, seed=0)
    opt = optim.Adam(model.parameters(), lr=0.1)
    scheduler = optim.Scheduler(opt, optim.cosine(0.1, 5))
    x, y = regression(np)
    before = to_np({"model": model.state_dict(), "opt": opt.state_dict(), "t": scheduler.t,
                    "grads": [p.grad for p in model.parameters()]})
    with pytest.raises(error, match="a deliberate failure inside a strategy"):
        step(model, nn.MSELoss(), opt, x, y, micro_batch_size=3, scheduler=scheduler,
             strategy=Failing(error))
    assert_same(to_np({"model": model.state_dict(), "opt": opt.state_dict(), "t": scheduler.t,
                       "grads": [p.grad for p in model.parameters()]}), before)


def test_a_skipped_window_under_a_custom_strategy_changes_nothing():
    model = nn.MLP([3, 6, 2], seed=0)
    opt = optim.SGD(model.parameters(), lr=0.1)
    x, y = regression(np)
    x[5, 0] = np.nan
    before = to_np(model.state_dict())
    loss = step(model, nn.MSELoss(), opt, x, y, micro_batch_size=3, strategy=Reversed(),
                on_nonfinite="skip")
    assert np.isnan(loss) and opt.step_count == 0
    assert_same(to_np(model.state_dict()), before)


def test_a_custom_strategy_resumes_from_a_checkpoint(tmp_path):
    def run(model, opt, seeds):
        for t in seeds:
            x, y = regression(np, n=10, seed=t)
            step(model, nn.MSELoss(), opt, x, y, sizes=[4, 3, 3], strategy=Reversed())

    def make():
        model = nn.MLP([3, 6, 2], dropout=0.25, seed=2)
        return model, optim.Adam(model.parameters(), lr=0.01)

    model, opt = make()
    run(model, opt, range(4))
    stopped, stopped_opt = make()
    run(stopped, stopped_opt, range(2))
    checkpoint.save(tmp_path / "run.npz", stopped, stopped_opt)
    resumed, resumed_opt = make()
    checkpoint.load(tmp_path / "run.npz", resumed, resumed_opt)
    run(resumed, resumed_opt, range(2, 4))
    assert_same(to_np(resumed.state_dict()), to_np(model.state_dict()))
    assert resumed_opt.step_count == opt.step_count == 4


# ----- sums that arrive divided: the protocol's ``divided`` --------------------------------------
class DividedAlready:
    """``Micro``, with the window's sums divided by its items before the update, as the
    protocol allows when it says so (``divided``)."""

    name = "divided_already"

    def __init__(self, divided=True):
        self.divided = divided

    def check(self, acc):
        pass

    def run(self, acc, micro_batches, reduction):
        for mb in micro_batches:
            add_micro_batch(acc, mb)
        for p in acc.params:
            p.grad = None if p.grad is None else p.grad / acc.pending_items
        return reduction.update(acc)


class Seen(reduction.OneProcess):
    """One process, noting what the update is told: ``normalize`` and ``divided``."""

    def __init__(self):
        self.seen = []

    def update(self, acc):
        self.seen.append((acc.normalize, acc.divided))
        return super().update(acc)


def test_a_strategy_whose_sums_arrive_divided_says_so_and_gets_the_same_update(xp):
    # Dyadic: 16 items, so dividing before the update is exact and the updates are EQUAL.
    runs = {}
    for name, strategy in (("micro", "micro"), ("divided", DividedAlready()),
                           ("not said", DividedAlready(divided=False))):
        model = dyadic_mlp(xp)
        seen = Seen()
        step(model, nn.MSELoss(), sgd(model), *regression(xp), sizes=[3, 5],
             strategy=strategy, reduction=seen)
        runs[name] = params_of(model), seen.seen
    assert_same(runs["divided"][0], runs["micro"][0])
    assert runs["micro"][1] == [("items", False)] and runs["divided"][1] == [("items", True)]
    # Without saying so the update divides again: 16 times too small a step.
    assert any(not np.array_equal(runs["not said"][0][k], runs["micro"][0][k])
               for k in runs["micro"][0])


def test_precision_says_its_sums_arrive_divided_and_leaves_normalize_alone():
    from minigrad.accumulate import Precision

    for order, divided in (("sum_then_divide", False), ("divide_then_sum", True)):
        model = nn.MLP([3, 4, 2], seed=0)
        seen = Seen()
        step(model, nn.MSELoss(), sgd(model), *regression(np), micro_batch_size=3,
             strategy=Precision(order=order), reduction=seen)
        assert Precision(order=order).divided is divided
        assert seen.seen == [("items", divided)]


def test_divided_must_be_a_bool():
    model = nn.MLP([3, 4, 2], seed=0)
    with pytest.raises(TypeError, match="^divided must be True or False, got str 'yes'"):
        step(model, nn.MSELoss(), sgd(model), *regression(np),
             strategy=DividedAlready(divided="yes"))


# ----- the one registry of strategy names ------------------------------------------------------
def test_the_registry_names_each_strategy_by_its_own_name_kind_and_label():
    assert list(STRATEGIES) == ["micro", "exact_batchnorm", "naive", "gradcache", "bank",
                                "precision"]
    for name, cls in STRATEGIES.items():
        assert cls.name == name and cls.kind in strategies.KINDS and cls.label
    assert strategies.names("plain") == ("micro", "exact_batchnorm")
    assert strategies.names("contrastive") == ("naive", "gradcache", "bank")
    assert strategies.names("precision") == ("precision",)
    with pytest.raises(ValueError, match="^kind must be one of 'plain', 'contrastive'"):
        strategies.names("ghost")


def test_the_checks_read_the_registry(monkeypatch):
    from minigrad.analysis import check, contrastive_check

    class Plain(Micro):
        name, kind, label = "plain_too", "plain", "another plain strategy"

    monkeypatch.setitem(STRATEGIES, "plain_too", Plain)
    assert check.configuration([3, 2], micro_batch=2, strategy="plain_too")["strategy"] == \
        "plain_too"
    with pytest.raises(ValueError, match="strategy must be one of 'micro', 'exact_batchnorm', "
                                         "'plain_too', got 'naive'"):
        check.configuration([3, 2], micro_batch=2, strategy="naive")
    pool = np.zeros((8, 2, 3))
    with pytest.raises(ValueError, match="strategy must be one of 'naive', 'gradcache', "
                                         "'bank', got 'plain_too'"):
        contrastive_check.configuration(pool, global_batch=8, strategy="plain_too")


def test_the_contrastive_explorer_labels_the_registrys_strategies():
    from minigrad.studies.contrastive import explorer

    assert explorer.CONTRASTIVE_STRATEGIES == {
        "naive": "naive (in-micro-batch negatives)", "gradcache": "GradCache",
        "bank": "memory bank"}
    assert all(label == STRATEGIES[name].label
               for name, label in explorer.CONTRASTIVE_STRATEGIES.items())


class Recording(reduction.OneProcess):
    """One process, noting every ``gather``: what a strategy asks of a reduction."""

    def __init__(self):
        self.gathered = []

    def gather(self, what, payload):
        self.gathered.append(what)
        return super().gather(what, payload)


def test_exact_batchnorm_gathers_each_layers_statistics_then_sums_in_reverse():
    model = nn.MLP([3, 6, 6, 2], norm="batch", seed=0)
    recording = Recording()
    step(model, nn.MSELoss(), optim.SGD(model.parameters(), lr=0.1), *regression(np),
         micro_batch_size=4, strategy="exact_batchnorm", reduction=recording)
    assert recording.gathered == [
        "gathering the statistics of BatchNorm layer 1",
        "gathering the statistics of BatchNorm layer 4",
        "gathering the gradient sums of BatchNorm layer 4",
        "gathering the gradient sums of BatchNorm layer 1"]


def test_a_reduction_is_checked():
    model = nn.MLP([3, 4, 2], seed=0)
    with pytest.raises(TypeError, match=r"reduction must be an object with the methods"):
        step(model, nn.MSELoss(), optim.SGD(model.parameters(), lr=0.1), *regression(np),
             reduction=object())


def test_snapshot_and_restore_are_a_public_pair():
    model = nn.MLP([3, 4, 2], norm="batch", seed=0)
    opt = optim.Adam(model.parameters(), lr=0.1)
    acc = Accumulator(model, nn.MSELoss(), opt)
    x, y = regression(np)
    acc.add(x, y)
    before = to_np({"model": model.state_dict(), "acc": acc.state_dict(),
                    "opt": opt.state_dict()})
    saved = acc.snapshot()
    acc.add(x, y)  # gradients, counts, BatchNorm statistics (an update is final: in place)
    assert acc.pending_num_micro_batches == 2
    acc.restore(saved)
    assert_same(to_np({"model": model.state_dict(), "acc": acc.state_dict(),
                       "opt": opt.state_dict()}), before)


# ----- one split.sizes_for for every entry ---------------------------------------------------
@pytest.mark.parametrize("entry", ["step", "accumulated_gradients", "gradient_report",
                                   "reference"])
def test_every_entry_refuses_two_ways_of_splitting(entry):
    x, y = regression(np)
    model = nn.MLP([3, 4, 2], seed=0)
    calls = {
        "step": lambda **s: step(model, nn.MSELoss(), sgd(model), x, y, **s),
        "accumulated_gradients": lambda **s: accumulated_gradients(model, nn.MSELoss(), x, y,
                                                                   **s),
        "gradient_report": lambda **s: equivalence.gradient_report(
            lambda: nn.MLP([3, 4, 2], seed=0), nn.MSELoss(), x, y, **s),
        "reference": lambda **s: reference.accumulated_gradients(model, nn.MSELoss(), x, y,
                                                                 **s),
    }
    with pytest.raises(ValueError, match=r"give at most one of micro_batch_size, "
                                         r"num_micro_batches, sizes; got micro_batch_size=4, "
                                         r"sizes=\[4, 4\]"):
        calls[entry](micro_batch_size=4, sizes=[4, 4])
    assert split.sizes_for(8, sizes=[4, 4]) == [4, 4]
