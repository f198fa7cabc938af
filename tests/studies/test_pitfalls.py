"""The step-accounting mistakes of minigrad.studies.step_accounting.pitfalls: the hand-written
loop without a mistake is ``accumulate.step`` to the bit; each mistake does exactly what its row of
the module's table says, on hand-checkable cases; each one leaves the rounding bound of full-batch
training while the right loop stays within it; bad arguments are refused by name.

Exactness: the dyadic model and data of ``dyadic.py`` keep every gradient sum exact, and the
micro-batch sizes used here are powers of 2, so dividing a sum by them and multiplying back
is exact too. Where a test builds the expected value with the same operations in the same
order as the code, ``==`` holds whatever the rounding.
"""

import numpy as np
import pytest
from dyadic import dyadic_mlp, params_of, regression
from helpers import assert_same, to_np

from minigrad import nn, optim
from minigrad.accumulate import accumulated_gradients, micro_batches
from minigrad.accumulate import step as accumulate_step
from minigrad.analysis.bounds import gamma
from minigrad.optim import adam, clip_by_global_norm
from minigrad.studies.step_accounting import pitfalls

SIZES = [2, 2, 4]  # powers of 2: sums divided and multiplied back by them stay exact


def schedule(t):
    return 0.5 ** (t + 1)  # 0.5, 0.25, ...: exact rates


@pytest.mark.parametrize("make_opt", [
    lambda ps: optim.SGD(ps, lr=0.25, momentum=0.5, weight_decay=0.125),
    lambda ps: optim.Adam(ps, lr=0.01, weight_decay=0.1),
    lambda ps: optim.AdamW(ps, lr=0.01),
], ids=["sgd", "adam", "adamw"])
def test_the_loop_without_a_mistake_is_accumulate_step_to_the_bit(xp, make_opt):
    x, y = regression(xp)
    runs = []
    for hand in (True, False):
        model = dyadic_mlp(xp)
        opt = make_opt(model.parameters())
        sched = optim.Scheduler(opt, schedule)
        for _ in range(3):
            if hand:
                pitfalls.update(model, nn.MSELoss(), opt, x, y, SIZES, max_grad_norm=0.5,
                                scheduler=sched)
            else:
                accumulate_step(model, nn.MSELoss(), opt, x, y, sizes=SIZES, max_grad_norm=0.5,
                                scheduler=sched)
        runs.append((params_of(model), opt.step_count, sched.t))
    assert_same(runs[0][0], runs[1][0])
    assert runs[0][1:] == runs[1][1:] == (3, 3)


def test_adam_count_uses_t_equal_k_in_the_bias_corrections(xp):
    x, y = regression(xp)
    model = dyadic_mlp(xp)
    opt = optim.Adam(model.parameters(), lr=0.01)
    grads = list(accumulated_gradients(model, nn.MSELoss(), x, y, sizes=SIZES).values())
    before = [p.data for p in model.parameters()]
    # the moments are still zero, but the count says k - 1 updates were done
    state = adam.AdamState(count=len(SIZES) - 1, mu=adam.init(before).mu, nu=adam.init(before).nu)
    expected, _ = adam.update(grads, state, before, lr=0.01)
    pitfalls.update(model, nn.MSELoss(), opt, x, y, SIZES, mistake="adam_count")
    assert opt.step_count == 1 and [s.count for s in opt.state] == [3, 3, 3, 3]
    assert_same(params_of(model), to_np(dict(zip(params_of(model), expected))))


def test_schedule_per_micro_batch_runs_k_times_too_fast(xp):
    x, y = regression(xp)
    model = dyadic_mlp(xp)
    opt = optim.SGD(model.parameters(), lr=1.0)
    sched = optim.Scheduler(opt, schedule)
    used = []
    for u in range(3):
        used.append(opt.lr)
        pitfalls.update(model, nn.MSELoss(), opt, x, y, SIZES, mistake="schedule",
                        scheduler=sched)
        assert sched.t == 3 * (u + 1) and opt.step_count == u + 1
    assert used == [schedule(0), schedule(3), schedule(6)]  # right: schedule(0), (1), (2)


@pytest.mark.parametrize("kind", ["sgd", "adamw"])
def test_weight_decay_per_micro_batch_decays_k_times(xp, kind):
    """With all-zero inputs the first layer's weight gets a zero gradient (dL/dW = g x^T),
    so all it does in one update is decay: k times instead of once."""
    x, y = regression(xp)
    x = x * 0.0
    lr, decay, k = 0.25, 0.5, len(SIZES)
    model = dyadic_mlp(xp)
    w0 = model[0].weight.data
    if kind == "sgd":
        opt = optim.SGD(model.parameters(), lr=lr, weight_decay=decay)
        # the loop adds (k - 1) decay w, the optimizer decay w: w - lr (0 + (k-1) d w + d w)
        expected = w0 - lr * ((0.0 * w0 + (k - 1) * decay * w0) + decay * w0)
    else:
        opt = optim.AdamW(model.parameters(), lr=lr, weight_decay=decay)
        expected = w0
        for _ in range(k):  # k - 1 decays in the loop, the k-th by AdamW; Adam's move is 0
            expected = expected * (1.0 - lr * decay)
    pitfalls.update(model, nn.MSELoss(), opt, x, y, SIZES, mistake="weight_decay")
    assert_same(to_np(model[0].weight.data), to_np(expected))
    right = dyadic_mlp(xp)
    once = optim.SGD if kind == "sgd" else optim.AdamW
    accumulate_step(right, nn.MSELoss(), once(right.parameters(), lr=lr, weight_decay=decay),
                    x, y, sizes=SIZES)
    assert not np.array_equal(to_np(right[0].weight.data), to_np(expected))


def test_clipping_per_micro_batch_averages_the_clipped_micro_batch_gradients(xp):
    x, y = regression(xp)
    max_norm, n = 0.5, x.shape[0]
    model = dyadic_mlp(xp)
    expected = None
    for _, xj, yj in micro_batches(x, y, SIZES):
        mean = list(accumulated_gradients(model, nn.MSELoss(), xj, yj).values())
        clipped, total = clip_by_global_norm(mean, max_norm)
        assert total > 2 * max_norm  # every micro-batch is clipped
        weighted = [c * (2 * xj.shape[0]) for c in clipped]  # times its items (2 outputs)
        expected = weighted if expected is None else [e + w for e, w in zip(expected, weighted)]
    expected = [p.data - 1.0 * (e / (2 * n)) for p, e in zip(model.parameters(), expected)]
    pitfalls.update(model, nn.MSELoss(), optim.SGD(model.parameters(), lr=1.0), x, y, SIZES,
                    mistake="clipping", max_grad_norm=max_norm)
    assert_same(params_of(model), to_np(dict(zip(params_of(model), expected))))
    # a threshold no micro-batch reaches: the same update as clipping once (which does not
    # clip either), to the bit
    runs = []
    for mistake in ("clipping", "none"):
        m = dyadic_mlp(xp)
        pitfalls.update(m, nn.MSELoss(), optim.SGD(m.parameters(), lr=1.0), x, y, SIZES,
                        mistake=mistake, max_grad_norm=1e6)
        runs.append(params_of(m))
    assert_same(runs[0], runs[1])


def test_zeroing_every_micro_batch_keeps_only_the_last_micro_batch(xp):
    x, y = regression(xp)
    model = dyadic_mlp(xp)
    last = list(micro_batches(x, y, SIZES))[-1]
    g = accumulated_gradients(model, nn.MSELoss(), last[1], last[2], normalize="sum")
    items = 2 * x.shape[0]  # MSE: samples x outputs; the window's count, not the last's
    expected = {n: p.data - 1.0 * (g[n] / items) for n, p in model.named_parameters()}
    pitfalls.update(model, nn.MSELoss(), optim.SGD(model.parameters(), lr=1.0), x, y, SIZES,
                    mistake="zero_grad")
    assert_same(params_of(model), to_np(expected))


def test_stepping_every_micro_batch_is_training_on_the_micro_batches(xp):
    x, y = regression(xp)
    runs = []
    for hand in (True, False):
        model = dyadic_mlp(xp)
        opt = optim.SGD(model.parameters(), lr=0.25, momentum=0.5)
        sched = optim.Scheduler(opt, schedule)
        if hand:
            pitfalls.update(model, nn.MSELoss(), opt, x, y, SIZES, mistake="step_each",
                            max_grad_norm=0.5, scheduler=sched)
        else:  # one full-batch step per micro-batch
            for _, xj, yj in micro_batches(x, y, SIZES):
                accumulate_step(model, nn.MSELoss(), opt, xj, yj, max_grad_norm=0.5,
                                scheduler=sched)
        runs.append((params_of(model), opt.step_count, sched.t))
    assert_same(runs[0][0], runs[1][0])
    assert runs[0][1:] == runs[1][1:] == (3, 3)  # k updates, k steps of the schedule


def test_each_mistake_leaves_the_rounding_bound_and_the_right_loop_does_not():
    rng = np.random.default_rng(0)
    batches = [(rng.normal(size=(8, 3)), rng.integers(0, 3, size=8)) for _ in range(3)]

    def make():
        return nn.MLP([3, 8, 3], activation="tanh", seed=0)

    def make_opt(params):
        return optim.AdamW(params, lr=0.05, weight_decay=0.1)

    def make_sched(opt):
        return optim.Scheduler(opt, optim.cosine(0.05, total_steps=3))

    result = pitfalls.compare(make, make_opt, nn.CrossEntropyLoss(), batches, [4, 4],
                              mistakes=pitfalls.MISTAKES[1:], max_grad_norm=0.05,
                              make_scheduler=make_sched)
    assert set(result["gap"]) == {"accumulated", *pitfalls.MISTAKES[1:]}
    assert len(result["bound"]) == 3 and all(b > 0 for b in result["bound"])
    assert all(r <= 1 for r in result["ratio"]["accumulated"])
    for mistake in pitfalls.MISTAKES[1:]:
        assert result["ratio"][mistake][-1] > 1, mistake
        assert result["gap"][mistake][-1] > result["bound"][-1], mistake
    # the same start: the first losses differ only by how the 8 per-item losses (all > 0)
    # were summed, at most 2 gamma_(8+2) relative (the sum's roundings, split or not)
    full, acc = result["loss"]["full"][0], result["loss"]["accumulated"][0]
    assert abs(full - acc) <= 2 * gamma(10) * full


@pytest.mark.parametrize("mistake, make_opt, kwargs, message", [
    ("typo", lambda ps: optim.SGD(ps, lr=0.1), {}, "mistake"),
    ("adam_count", lambda ps: optim.SGD(ps, lr=0.1), {}, "needs optim.Adam or optim.AdamW"),
    ("schedule", lambda ps: optim.SGD(ps, lr=0.1), {}, "needs a scheduler"),
    ("weight_decay", lambda ps: optim.SGD(ps, lr=0.1), {}, "weight_decay > 0"),
    ("clipping", lambda ps: optim.SGD(ps, lr=0.1), {}, "needs max_grad_norm"),
    ("none", lambda ps: optim.SGD(ps, lr=0.1), {"max_grad_norm": -1.0}, "max_grad_norm"),
])
def test_bad_arguments_are_refused_by_name_and_change_nothing(xp, mistake, make_opt, kwargs,
                                                              message):
    x, y = regression(xp)
    model = dyadic_mlp(xp)
    opt = make_opt(model.parameters())
    before = params_of(model)
    with pytest.raises(ValueError, match=message):
        pitfalls.update(model, nn.MSELoss(), opt, x, y, SIZES, mistake=mistake, **kwargs)
    assert_same(params_of(model), before)
    assert opt.step_count == 0
    with pytest.raises(TypeError, match="optimizer must be"):
        pitfalls.update(model, nn.MSELoss(), None, x, y, SIZES)
    with pytest.raises(ValueError, match="sum to the batch size"):
        pitfalls.update(model, nn.MSELoss(), opt, x, y, [3, 3])


def test_a_window_without_items_is_refused():
    x, y = np.ones((4, 3)), np.full(4, -100)  # every target ignored
    model = nn.MLP([3, 4, 2], seed=0)
    opt = optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(ValueError, match="no items"):
        pitfalls.update(model, nn.CrossEntropyLoss(), opt, x, y, [2, 2])
    assert opt.step_count == 0
