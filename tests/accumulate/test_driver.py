"""Gradient accumulation by ``step`` and ``accumulated_gradients``: the argument checks,
the exact 1,2,3,4 case, one test per row of the step-accounting table
(``minigrad.accumulate``'s docstring), and the normalize modes.

Exactness: most tests use the dyadic model and data of ``dyadic.py``, whose docstring shows
why accumulated and full-batch gradients can be compared with ``==``.
"""

import numpy as np
import pytest
from dyadic import N, coarsen, dyadic_mlp, params_of, regression
from helpers import assert_same, to_np
from hypothesis import given
from hypothesis import strategies as st

from minigrad import Tensor, backend, nn, optim
from minigrad.accumulate import Accumulator, accumulated_gradients, micro_batches
from minigrad.accumulate import step as accumulate_step
from minigrad.nn import functional as F
from minigrad.optim import adam, clip_by_global_norm

U = np.finfo(np.float64).eps / 2  # unit roundoff of float64


# ----- helpers ----------------------------------------------------------------------------
def full_batch_gradients(model, loss_fn, x, y, dropout_step=0):
    """The textbook full-batch gradient: ``loss_fn`` (a mean) on all of x, then backward."""
    xp = backend.get_namespace(x)
    with nn.dropout_keys(dropout_step, xp.arange(x.shape[0])):
        loss_fn(model(x), y).backward()
    grads = {n: p.grad for n, p in model.named_parameters()}
    model.zero_grad()
    return grads


@st.composite
def splits(draw, n=N):
    """Any composition of n: positive sizes, in order, summing to n."""
    cuts = sorted(draw(st.sets(st.integers(1, n - 1))))
    points = [0, *cuts, n]
    return [b - a for a, b in zip(points, points[1:])]


# ----- step's arguments -------------------------------------------------------------------
def test_step_refuses_two_ways_of_splitting_and_mismatched_batches(xp):
    model = dyadic_mlp(xp)
    opt = optim.SGD(model.parameters(), lr=0.5)
    x, y = regression(xp)
    with pytest.raises(ValueError, match="at most one of micro_batch_size, num_micro_batches"):
        accumulate_step(model, nn.MSELoss(), opt, x, y, micro_batch_size=2, sizes=[4, 4])
    with pytest.raises(ValueError, match="x has 8 samples but y has 7"):
        accumulate_step(model, nn.MSELoss(), opt, x, y[:7, ...])
    assert opt.step_count == 0


# ----- the exact tiny case (optax's MultiSteps test) --------------------------------------
@pytest.mark.parametrize("how", [{"sizes": [1, 1, 1, 1]}, {"sizes": [1, 3]},
                                 {"sizes": [2, 2]}, {}], ids=["1+1+1+1", "1+3", "2+2", "4"])
def test_gradients_1_2_3_4_give_one_update_of_their_mean(xp, how):
    # One weight w = 0, inputs 1 and targets -i/2: l_i = (w - y_i)^2 has gradient
    # 2 (w - y_i) = i. Mean 10 / 4 = 2.5, so ONE SGD update with lr = 1/2 gives w = -1.25.
    model = nn.Linear(1, 1, bias=False, xp=xp)
    model.weight.data = xp.zeros((1, 1), dtype=xp.float64)
    opt = optim.SGD(model.parameters(), lr=0.5)
    x = xp.ones((4, 1), dtype=xp.float64)
    y = xp.asarray([[-0.5], [-1.0], [-1.5], [-2.0]])
    per_item = accumulated_gradients(model, nn.MSELoss(), x, y, sizes=[1, 1, 1, 1],
                                     normalize="sum")
    assert float(per_item["weight"][0, 0]) == 10.0  # 1 + 2 + 3 + 4
    accumulate_step(model, nn.MSELoss(), opt, x, y, **how)
    assert float(model.weight.data[0, 0]) == -1.25
    assert opt.step_count == 1


def test_streaming_1_2_3_4_gives_one_update_of_their_mean(xp):
    model = nn.Linear(1, 1, bias=False, xp=xp)
    model.weight.data = xp.zeros((1, 1), dtype=xp.float64)
    opt = optim.SGD(model.parameters(), lr=0.5)
    acc = Accumulator(model, nn.MSELoss(), opt, every=4)
    for i in (1, 2, 3, 4):
        assert float(model.weight.data[0, 0]) == 0.0 and opt.step_count == 0
        acc.add(xp.ones((1, 1), dtype=xp.float64), xp.asarray([[-i / 2]]))
    assert float(model.weight.data[0, 0]) == -1.25
    assert opt.step_count == 1


# ----- the step-accounting table, one test per row ----------------------------------------
def test_row_zeroing_stale_gradients_are_dropped_and_none_after(xp):
    x, y = regression(xp)
    stale, fresh = dyadic_mlp(xp), dyadic_mlp(xp)
    for p in stale.parameters():
        p.grad = xp.full(p.shape, 1000.0, dtype=xp.float64)
    for model in (stale, fresh):
        accumulate_step(model, nn.MSELoss(), optim.SGD(model.parameters(), lr=0.5), x, y,
                        sizes=[3, 5])
        assert all(p.grad is None for p in model.parameters())
    assert_same(params_of(stale), params_of(fresh))


@given(sizes=splits())
def test_row_division_once_uneven_splits_give_the_full_batch_gradient(xp, sizes):
    model = dyadic_mlp(xp)
    x, y = regression(xp)
    full = full_batch_gradients(model, nn.MSELoss(), x, y)
    accumulated = accumulated_gradients(model, nn.MSELoss(), x, y, sizes=sizes)
    assert all(backend.get_namespace(g) is xp and g.dtype == xp.float64
               for g in accumulated.values())
    assert_same(to_np(accumulated), to_np(full))


def test_row_division_once_the_returned_loss_is_the_full_batch_mean(xp):
    model = dyadic_mlp(xp)
    x, y = regression(xp)
    expected = F.mse_loss(model(x), y).item()
    loss = accumulate_step(model, nn.MSELoss(), optim.SGD(model.parameters(), lr=0.5), x, y,
                           sizes=[1, 2, 5])
    assert loss == expected


def linear_classifier(xp, classes=4):
    """Linear(3 -> classes), no bias, weights multiples of 1/8: with integer inputs the
    logits are exact, so only the softmax and the batch sum round (see ce_bound)."""
    model = nn.Linear(3, classes, bias=False, generator=1, xp=xp)
    model.weight.data = xp.round(model.weight.data * 8.0) / 8.0
    return model


def integer_classification(xp, ignored):
    rng = np.random.default_rng(3)
    x = rng.integers(-4, 5, size=(N, 3)).astype(np.float64)
    y = rng.integers(0, 4, size=N)
    y[list(ignored)] = -100
    return xp.asarray(x), xp.asarray(y)


def ce_bound(weight, x, y):
    """A bound on |accumulated - full-batch| for the weight gradient of linear_classifier.

    Entry (c, d) of either gradient is (1/K) sum_i t_i over the K kept items, with
    t_i = (p_ic - [y_i = c]) x_id. Each side computes each t_i (and its share of 1/K) with
    at most 16 roundings (max, subtract, exp, a sum of 4, log, subtract, exp, multiply,
    subtract, scale by 1/K, multiply by x; counted generously), each relative to
    m_i = (p_ic + [y_i = c]) |x_id|, and sums the N terms in some order (N - 1 roundings
    relative to sum_i m_i). So each side is within gamma_{N+16} * sum_i m_i / K of the
    exact value (gamma_n = n u / (1 - n u)), and the two within twice that.
    """
    w, x, y = (np.asarray(backend.to_numpy(a)) for a in (weight, x, y))
    logits = x @ w.T
    p = np.exp(logits - logits.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    kept = y != -100
    onehot = np.zeros_like(p)
    onehot[np.arange(len(y))[kept], y[kept]] = 1.0
    magnitude = ((p + onehot) * kept[:, None]).T @ np.abs(x)
    n = N + 16
    return 2 * (n * U / (1 - n * U)) * magnitude / kept.sum()


def test_row_division_once_ignore_index_divides_by_the_kept_targets(xp):
    ignored = (0, 2, 3)  # 5 of 8 targets kept: the micro-batches [3, 5] hold 1 and 4
    model = linear_classifier(xp)
    x, y = integer_classification(xp, ignored)
    loss = nn.CrossEntropyLoss()
    assert loss.num_items(y) == 5
    means = accumulated_gradients(model, loss, x, y, sizes=[3, 5])["weight"]
    sums = accumulated_gradients(model, loss, x, y, sizes=[3, 5], normalize="sum")["weight"]
    # The same split on both sides: the same sum, divided once by 5 kept targets (not 8).
    assert bool(xp.all(means == sums / 5.0))
    full = full_batch_gradients(model, loss, x, y)["weight"]
    gap = np.abs(backend.to_numpy(means) - backend.to_numpy(full))
    assert np.all(gap <= ce_bound(model.weight.data, x, y))


def test_row_clipping_is_applied_once_to_the_accumulated_gradient(xp):
    x, y = regression(xp)
    sizes, max_norm, lr = [3, 5], 0.5, 0.5
    model = dyadic_mlp(xp)
    grads = accumulated_gradients(model, nn.MSELoss(), x, y, sizes=sizes)
    clipped, total = clip_by_global_norm(list(grads.values()), max_norm)
    assert total > 2 * max_norm  # clipping is active
    expected = {name: p.data - lr * g for (name, p), g in zip(model.named_parameters(), clipped)}
    accumulate_step(model, nn.MSELoss(), optim.SGD(model.parameters(), lr=lr), x, y,
                    sizes=sizes, max_grad_norm=max_norm)
    assert_same(params_of(model), to_np(expected))
    # The accumulated gradient is the full-batch one (exactly, dyadic), so clipping it is
    # clipping the full-batch gradient: the same parameters as a full-batch clipped step.
    full = dyadic_mlp(xp)
    accumulate_step(full, nn.MSELoss(), optim.SGD(full.parameters(), lr=lr), x, y,
                    max_grad_norm=max_norm)
    assert_same(params_of(model), params_of(full))


def test_row_clipping_each_micro_batch_separately_is_a_different_update(xp):
    x, y = regression(xp)
    sizes, max_norm = [3, 5], 0.5
    model = dyadic_mlp(xp)
    full = full_batch_gradients(model, nn.MSELoss(), x, y)
    right, _ = clip_by_global_norm(list(full.values()), max_norm)
    # The wrong way: clip each micro-batch's mean gradient, then weight it by its items.
    wrong = [0.0] * len(right)
    for _, xj, yj in micro_batches(x, y, sizes):
        gj = full_batch_gradients(model, nn.MSELoss(), xj, yj)
        clipped_j, _ = clip_by_global_norm(list(gj.values()), max_norm)
        wrong = [w + (xj.shape[0] / N) * c for w, c in zip(wrong, clipped_j)]
    gap = max(float(xp.max(xp.abs(r - w))) for r, w in zip(right, wrong))
    # 0.062 for this data, 12% of the clipped norm 0.5: not a rounding effect.
    assert gap > 0.05


def test_row_optimizer_step_once_adam_count_and_bias_correction_t_1(xp):
    x, y = regression(xp)
    sizes, lr = [2, 3, 3], 0.01
    model = dyadic_mlp(xp)
    opt = optim.Adam(model.parameters(), lr=lr)
    grads = accumulated_gradients(model, nn.MSELoss(), x, y, sizes=sizes)
    before = [xp.asarray(p.data, copy=True) for p in model.parameters()]  # updated in place
    expected, _ = adam.update(list(grads.values()), adam.init(before), before, lr=lr)
    accumulate_step(model, nn.MSELoss(), opt, x, y, sizes=sizes)
    assert opt.step_count == 1 and [s.count for s in opt.state] == [1, 1, 1, 1]
    assert_same(params_of(model), to_np(dict(zip(grads, expected))))
    # By hand: at t = 1, m_hat = g and v_hat = g^2, so each entry moves by lr * g / (|g| + eps):
    # lr * sign(g) up to lr * eps / |g| (< lr * 1e-5 where |g| > 1e-3), plus a few roundings
    # of Adam's arithmetic (~1e-17 relative to lr) and of p (|p| < 1: ~1e-16), under 1e-15.
    for p0, p1, g in zip(before, model.parameters(), grads.values()):
        g, moved = backend.to_numpy(g), backend.to_numpy(p0) - backend.to_numpy(p1.data)
        big = np.abs(g) > 1e-3
        assert big.any()
        assert np.all(np.abs(moved[big] - lr * np.sign(g[big])) <= lr * 1e-5 + 1e-15)
    for _ in range(2):
        accumulate_step(model, nn.MSELoss(), opt, x, y, sizes=sizes)
    assert opt.step_count == 3 and [s.count for s in opt.state] == [3, 3, 3, 3]


def test_row_schedule_advances_once_per_update(xp):
    x, y = regression(xp)
    model = dyadic_mlp(xp)
    opt = optim.SGD(model.parameters(), lr=1.0)

    def schedule(t):
        return 0.5 ** (t + 1)  # 0.5, 0.25, 0.125, ...: exact

    scheduler = optim.Scheduler(opt, schedule)
    for t in range(3):  # the same split on both sides: the same operations
        assert scheduler.t == t and opt.lr == schedule(t)
        grads = accumulated_gradients(model, nn.MSELoss(), x, y, sizes=[2, 2, 2, 2])
        expected = {n: p.data - schedule(t) * g
                    for (n, p), g in zip(model.named_parameters(), grads.values())}
        accumulate_step(model, nn.MSELoss(), opt, x, y, sizes=[2, 2, 2, 2], scheduler=scheduler)
        assert_same(params_of(model), to_np(expected))  # this update used schedule(t)
    assert scheduler.t == 3 and opt.step_count == 3 and opt.lr == schedule(3)


def test_row_weight_decay_applied_once(xp):
    x, y = regression(xp)
    lr, decay = 0.5, 0.25
    model = dyadic_mlp(xp)
    grads = accumulated_gradients(model, nn.MSELoss(), x, y, sizes=[1, 1, 6])
    # torch's SGD: p <- p - lr * (g + decay * p), once, whatever the number of micro-batches.
    expected = {n: p.data - lr * (g + decay * p.data)
                for (n, p), g in zip(model.named_parameters(), grads.values())}
    opt = optim.SGD(model.parameters(), lr=lr, weight_decay=decay)
    accumulate_step(model, nn.MSELoss(), opt, x, y, sizes=[1, 1, 6])
    assert_same(params_of(model), to_np(expected))


def test_row_dropout_masks_are_keyed_by_the_update_count(xp):
    x, y = regression(xp)
    model = dyadic_mlp(xp, dropout=0.5)
    at_0 = to_np(full_batch_gradients(model, nn.MSELoss(), x, y, dropout_step=0))
    at_1 = to_np(full_batch_gradients(model, nn.MSELoss(), x, y, dropout_step=1))
    model.eval()
    no_dropout = to_np(full_batch_gradients(model, nn.MSELoss(), x, y))
    model.train()
    for sizes in ([8], [3, 5], [1, 2, 5], [1] * 8):
        for t, expected in ((0, at_0), (1, at_1)):
            got = accumulated_gradients(model, nn.MSELoss(), x, y, sizes=sizes, step_index=t)
            assert_same(to_np(got), expected)
    assert not np.array_equal(at_0["0.weight"], at_1["0.weight"])  # new masks next update
    assert not np.array_equal(at_0["0.weight"], no_dropout["0.weight"])  # masks do act


def test_row_dropout_training_with_any_split_follows_the_full_batch(xp):
    x, y = regression(xp)
    full, split = dyadic_mlp(xp, dropout=0.5), dyadic_mlp(xp, dropout=0.5)
    opt_full = optim.SGD(full.parameters(), lr=0.5)
    opt_split = optim.SGD(split.parameters(), lr=0.5)
    for sizes in ([3, 5], [1, 1, 6]):  # update 0, then update 1: new masks, same on both
        accumulate_step(full, nn.MSELoss(), opt_full, x, y)
        accumulate_step(split, nn.MSELoss(), opt_split, x, y, sizes=sizes)
        assert_same(params_of(split), params_of(full))
        coarsen(full)
        coarsen(split)
    assert opt_full.step_count == opt_split.step_count == 2


def test_row_batchnorm_running_statistics_move_once_per_micro_batch(xp):
    x, y = regression(xp)
    split = dyadic_mlp(xp, norm="batch")
    full = dyadic_mlp(xp, norm="batch")
    for model, plan in ((split, [[3, 5], [2, 2, 4]]), (full, [[8], [8]])):
        opt = optim.SGD(model.parameters(), lr=0.5)
        for sizes in plan:
            accumulate_step(model, nn.MSELoss(), opt, x, y, sizes=sizes)
        assert opt.step_count == 2
    assert int(dict(split.named_buffers())["1.num_batches_tracked"]) == 2 + 3
    assert int(dict(full.named_buffers())["1.num_batches_tracked"]) == 1 + 1
    # The documented exception: statistics per micro-batch, so the training differs.
    assert not np.array_equal(params_of(split)["0.weight"], params_of(full)["0.weight"])


# ----- normalize modes --------------------------------------------------------------------
@pytest.mark.parametrize("sizes", [[4, 4], [2, 2, 2, 2], [1] * 8])
def test_micro_batch_normalization_is_right_for_even_splits(xp, sizes):
    # Each mean S_j / (16 / k), divided by k: exactly S / 16 in dyadic arithmetic.
    model = dyadic_mlp(xp)
    x, y = regression(xp)
    full = full_batch_gradients(model, nn.MSELoss(), x, y)
    naive = accumulated_gradients(model, nn.MSELoss(), x, y, sizes=sizes,
                                  normalize="micro_batch_mean")
    assert_same(to_np(naive), to_np(full))


def max_gap(a, b):
    return max(float(np.max(np.abs(u - v))) for u, v in zip(to_np(a).values(),
                                                           to_np(b).values()))


def test_micro_batch_normalization_is_wrong_for_uneven_splits(xp):
    model = dyadic_mlp(xp)
    x, y = regression(xp)
    full = full_batch_gradients(model, nn.MSELoss(), x, y)
    right = accumulated_gradients(model, nn.MSELoss(), x, y, sizes=[5, 3])
    naive = accumulated_gradients(model, nn.MSELoss(), x, y, sizes=[5, 3],
                                  normalize="micro_batch_mean")
    assert_same(to_np(right), to_np(full))
    # The naive rule weights the 3 samples of the second micro-batch as much as the 5 of
    # the first: 0.468 off for this data, far from any rounding effect.
    assert max_gap(naive, full) > 0.4


def test_micro_batch_normalization_is_wrong_with_ignore_index_even_for_even_splits(xp):
    model = linear_classifier(xp)
    x, y = integer_classification(xp, ignored=(4, 5, 6))  # kept: 4 then 1 in [4, 4]
    loss = nn.CrossEntropyLoss()
    full = full_batch_gradients(model, loss, x, y)
    right = accumulated_gradients(model, loss, x, y, sizes=[4, 4])
    naive = accumulated_gradients(model, loss, x, y, sizes=[4, 4], normalize="micro_batch_mean")
    bound = ce_bound(model.weight.data, x, y)
    assert np.all(np.abs(to_np(right)["weight"] - to_np(full)["weight"]) <= bound)
    # The one kept target of the second micro-batch counts as much as the four of the
    # first: 0.492 off for this data, while the bound on rounding is 1.2e-14.
    assert max_gap(naive, full) > 0.4 > 1e10 * float(np.max(bound))


def test_sum_normalization_is_the_item_count_times_the_mean(xp):
    model = dyadic_mlp(xp)
    x, y = regression(xp)
    full = full_batch_gradients(model, nn.MSELoss(), x, y)
    summed = accumulated_gradients(model, nn.MSELoss(), x, y, sizes=[5, 3], normalize="sum")
    assert_same(to_np(summed), to_np({n: 16.0 * g for n, g in full.items()}))  # 8 x 2 items


class Doubled(nn.CrossEntropyLoss):
    """A loss of one's own: twice cross-entropy (its forward must be the one that runs)."""

    def forward(self, logits, target, reduction=None):
        return super().forward(logits, target, reduction) * 2.0


class Halved(nn.MSELoss):
    """A count of one's own: each target row is one item (not each element)."""

    def num_items(self, target):
        return target.shape[0]


@pytest.mark.parametrize("loss", [Doubled(), Halved()], ids=["forward", "num_items"])
def test_a_loss_subclass_is_what_the_driver_runs(loss):
    """The driver reads a built-in loss's targets once per batch; a subclass that brings its
    own forward or item count is run as it is, micro-batch by micro-batch."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(12, 3))
    y = rng.integers(0, 3, size=12) if isinstance(loss, nn.CrossEntropyLoss) \
        else rng.normal(size=(12, 3))
    model = nn.MLP([3, 5, 3], seed=0)
    grads = accumulated_gradients(model, loss, x, y, sizes=[5, 7])
    model.zero_grad()
    out = loss(model(Tensor(x)), y, reduction="sum") / loss.num_items(y)
    out.backward()
    # A bypassed subclass is off by a factor 2 (forward) or 3 (items); the two float64 sums
    # over 12 items differ only by rounding, far below 1e-12 relative.
    for name, p in model.named_parameters():
        assert np.allclose(grads[name], p.grad, rtol=1e-12, atol=1e-15), name
