"""The streaming ``Accumulator`` (windows of ``every`` micro-batches, ``update``,
``discard``, its arguments and losses), and "a non-finite or failing micro-batch changes
nothing": the refusal lives in the accumulator's window, which ``step`` runs too.

Exactness: the dyadic model and data of ``dyadic.py`` (its docstring says why ``==`` holds).
"""

import math

import numpy as np
import pytest
from dyadic import N, coarsen, dyadic_mlp, params_of, regression
from helpers import assert_same, to_np

from minigrad import backend, nn, optim
from minigrad.accumulate import Accumulator, accumulated_gradients, micro_batches
from minigrad.accumulate import step as accumulate_step
from minigrad.nn import functional as F


# ----- helpers ----------------------------------------------------------------------------
def everything(model, optimizer=None, scheduler=None):
    """Every piece of training state, as NumPy copies: parameters, .grad, buffers,
    the optimizer's state_dict (arrays, counts, lr) and the schedule's t."""
    state = {"params": {n: p.data for n, p in model.named_parameters()},
             "grads": {n: p.grad for n, p in model.named_parameters()},
             "buffers": dict(model.named_buffers())}
    if optimizer is not None:
        state["optimizer"] = optimizer.state_dict()
    if scheduler is not None:
        state["scheduler"] = {"t": scheduler.t, "lr": scheduler.optimizer.lr}
    return to_np(state)


def classification(xp, n=N, classes=4, seed=0, ignored=()):
    """Normal inputs (n, 3) and labels in [0, classes), -100 at the ``ignored`` indices."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 3))
    y = rng.integers(0, classes, size=n)
    y[list(ignored)] = -100
    return xp.asarray(x), xp.asarray(y)


# ----- arguments and losses ---------------------------------------------------------------
@pytest.mark.parametrize("kwargs, message", [
    ({"normalize": "mean"}, "normalize must be one of"),
    ({"on_nonfinite": "ignore"}, "on_nonfinite must be one of"),
    ({"every": 0}, "every must be a positive int, got 0"),
    ({"max_grad_norm": 0.0}, "max_grad_norm must be a finite number with max_grad_norm > 0, "
                             "got 0.0"),
    ({"max_grad_norm": float("inf")}, "max_grad_norm must be a finite number"),
    ({"step_index": -1}, "step_index must be an integer >= 0, got -1"),
])
def test_accumulator_argument_errors(xp, kwargs, message):
    model = dyadic_mlp(xp)
    with pytest.raises(ValueError, match=message):
        Accumulator(model, nn.MSELoss(), optim.SGD(model.parameters(), lr=0.5), **kwargs)


def test_plain_loss_functions_are_accepted_and_others_refused(xp):
    model = dyadic_mlp(xp)
    x, y = regression(xp)
    by_function = accumulated_gradients(model, F.mse_loss, x, y, sizes=[5, 3])
    by_module = accumulated_gradients(model, nn.MSELoss(), x, y, sizes=[5, 3])
    assert_same(to_np(by_function), to_np(by_module))
    with pytest.raises(TypeError, match="loss_fn must be functional.cross_entropy"):
        accumulated_gradients(model, lambda out, target: out, x, y)


# ----- the streaming Accumulator ----------------------------------------------------------
def test_streaming_every_k_and_a_short_final_window_match_full_batch_windows(xp):
    x, y = regression(xp, n=9)
    sizes = [3, 1, 2, 2, 1]  # windows of every=2 micro-batches: [3, 1], [2, 2], then [1]
    model, reference = dyadic_mlp(xp), dyadic_mlp(xp)
    opt = optim.SGD(model.parameters(), lr=0.5)
    opt_ref = optim.SGD(reference.parameters(), lr=0.5)
    acc = Accumulator(model, nn.MSELoss(), opt, every=2)
    # The reference: one full-batch step per window, which divides by what the window holds
    # (8, 8, then 2 items): the updates are equal bit for bit.
    windows = {1: (0, 4), 3: (4, 8)}  # the micro-batch that completes a window: its samples
    expected = [(6, 1, 0), (0, 0, 1), (4, 1, 1), (0, 0, 2), (2, 1, 2)]
    for j, ((_, xj, yj), counts) in enumerate(zip(micro_batches(x, y, sizes), expected)):
        acc.add(xj, yj)
        assert (acc.pending_items, acc.pending_num_micro_batches, opt.step_count) == counts
        if j in windows:
            lo, hi = windows[j]
            accumulate_step(reference, nn.MSELoss(), opt_ref, x[lo:hi, ...], y[lo:hi, ...])
            assert_same(params_of(model), params_of(reference))
            coarsen(model)
            coarsen(reference)
    last = acc.update()  # flush the short window
    assert opt.step_count == 3 and acc.pending_num_micro_batches == acc.pending_items == 0
    assert all(p.grad is None for p in model.parameters())
    assert last == accumulate_step(reference, nn.MSELoss(), opt_ref, x[8:, ...], y[8:, ...])
    assert_same(params_of(model), params_of(reference))


def test_update_with_nothing_pending_returns_none_and_changes_nothing(xp):
    model = dyadic_mlp(xp)
    opt = optim.Adam(model.parameters(), lr=0.01)
    scheduler = optim.Scheduler(opt, optim.step_decay(0.01, 1, 0.5))
    acc = Accumulator(model, nn.MSELoss(), opt, scheduler=scheduler)
    before = everything(model, opt, scheduler)
    assert acc.update() is None
    assert_same(everything(model, opt, scheduler), before)


def test_discard_drops_the_window(xp):
    x, y = regression(xp)
    model, reference = dyadic_mlp(xp), dyadic_mlp(xp)
    opt = optim.SGD(model.parameters(), lr=0.5)
    acc = Accumulator(model, nn.MSELoss(), opt)
    before = params_of(model)
    acc.add(x[:3, ...], y[:3, ...])
    acc.add(x[3:5, ...], y[3:5, ...])
    assert (acc.pending_items, acc.pending_num_micro_batches) == (10, 2)
    acc.discard()
    assert all(p.grad is None for p in model.parameters())
    assert (acc.pending_items, acc.pending_num_micro_batches, acc.pending_samples) == (0, 0, 0)
    assert acc.update() is None and opt.step_count == 0
    assert_same(params_of(model), before)
    # The next window knows nothing of the discarded one.
    acc.add(x[5:, ...], y[5:, ...])
    acc.update()
    accumulate_step(reference, nn.MSELoss(), optim.SGD(reference.parameters(), lr=0.5),
                    x[5:, ...], y[5:, ...])
    assert_same(params_of(model), params_of(reference))


# ----- non-finite values and failures change nothing -------------------------------------
def trained(xp):
    """A BatchNorm + dropout classifier, Adam and a schedule after one update, with stale
    .grad set: every kind of state that a refused update must leave alone."""
    model = nn.MLP([3, 6, 4], norm="batch", dropout=0.25, seed=1, xp=xp)
    opt = optim.Adam(model.parameters(), lr=0.01)
    scheduler = optim.Scheduler(opt, optim.step_decay(0.01, 1, 0.5))
    x, y = classification(xp)
    accumulate_step(model, nn.CrossEntropyLoss(), opt, x, y, sizes=[4, 4], scheduler=scheduler)
    for p in model.parameters():
        p.grad = xp.full(p.shape, 0.25, dtype=xp.float64)
    return model, opt, scheduler, x, y


def with_value(xp, x, index, value):
    a = np.array(backend.to_numpy(x), copy=True)
    a[index] = value
    return xp.asarray(a)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # NumPy warns about the inf we put in
@pytest.mark.parametrize("bad", [math.inf, math.nan], ids=["inf", "nan"])
def test_nonfinite_input_raises_and_changes_nothing(xp, bad):
    model, opt, scheduler, x, y = trained(xp)
    before = everything(model, opt, scheduler)
    x = with_value(xp, x, (5, 1), bad)  # in the second micro-batch
    with pytest.raises(FloatingPointError, match="loss is not finite"):
        accumulate_step(model, nn.CrossEntropyLoss(), opt, x, y, sizes=[4, 4],
                        scheduler=scheduler)
    assert_same(everything(model, opt, scheduler), before)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_nonfinite_input_with_skip_returns_nan_and_changes_nothing(xp):
    model, opt, scheduler, x, y = trained(xp)
    before = everything(model, opt, scheduler)
    x = with_value(xp, x, (5, 1), math.inf)
    loss = accumulate_step(model, nn.CrossEntropyLoss(), opt, x, y, sizes=[4, 4],
                           scheduler=scheduler, on_nonfinite="skip")
    assert math.isnan(loss)
    assert_same(everything(model, opt, scheduler), before)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # the overflow is the point
@pytest.mark.parametrize("on_nonfinite", ["raise", "skip"])
def test_nonfinite_accumulated_gradient_with_finite_losses_is_refused(xp, on_nonfinite):
    # w = 1, x = a, y = 0 with a^2 = 6e307: each item's loss a^2 and gradient 2 a^2 =
    # 1.2e308 are finite, but the sum of two gradients overflows to inf.
    model = nn.Linear(1, 1, bias=False, xp=xp)
    model.weight.data = xp.ones((1, 1), dtype=xp.float64)
    opt = optim.SGD(model.parameters(), lr=0.5)
    x = xp.full((2, 1), math.sqrt(6e307), dtype=xp.float64)
    y = xp.zeros((2, 1), dtype=xp.float64)
    before = everything(model, opt)
    if on_nonfinite == "raise":
        with pytest.raises(FloatingPointError, match="the accumulated gradient is not finite"):
            accumulate_step(model, nn.MSELoss(), opt, x, y, sizes=[1, 1])
    else:
        assert math.isnan(accumulate_step(model, nn.MSELoss(), opt, x, y, sizes=[1, 1],
                                          on_nonfinite="skip"))
    assert_same(everything(model, opt), before)


def test_a_window_of_ignored_targets_only_is_refused(xp):
    # Its mean gradient is 0 / 0: before the fix it wrote NaN into every parameter.
    model, opt, scheduler, x, _ = trained(xp)
    y = xp.full((N,), -100, dtype=xp.int64)
    before = everything(model, opt, scheduler)
    with pytest.raises(FloatingPointError, match="holds no items"):
        accumulate_step(model, nn.CrossEntropyLoss(), opt, x, y, sizes=[4, 4],
                        scheduler=scheduler)
    assert_same(everything(model, opt, scheduler), before)


def test_an_error_in_a_later_micro_batch_changes_nothing(xp):
    model, opt, scheduler, x, y = trained(xp)
    before = everything(model, opt, scheduler)
    y = with_value(xp, y, 6, 7)  # label 7 of 4 classes, in the second micro-batch
    with pytest.raises(ValueError, match=r"target labels must lie in \[0, 4\)"):
        accumulate_step(model, nn.CrossEntropyLoss(), opt, x, y, sizes=[4, 4],
                        scheduler=scheduler)
    # The first micro-batch had moved the BatchNorm statistics: they are back.
    assert_same(everything(model, opt, scheduler), before)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_streaming_nonfinite_micro_batch_is_not_added(xp):
    model, opt, scheduler, x, y = trained(xp)
    acc = Accumulator(model, nn.CrossEntropyLoss(), opt, scheduler=scheduler)
    acc.add(x[:4, ...], y[:4, ...])
    pending = everything(model, opt, scheduler)
    counts = (acc.pending_items, acc.pending_num_micro_batches, acc.pending_samples)
    with pytest.raises(FloatingPointError, match="loss of a micro-batch is nan"):
        acc.add(with_value(xp, x, (5, 1), math.inf)[4:, ...], y[4:, ...])
    assert_same(everything(model, opt, scheduler), pending)
    assert (acc.pending_items, acc.pending_num_micro_batches, acc.pending_samples) == counts


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_streaming_skip_drops_the_window_and_keeps_buffers_finite(xp):
    model, opt, scheduler, x, y = trained(xp)
    acc = Accumulator(model, nn.CrossEntropyLoss(), opt, scheduler=scheduler,
                      on_nonfinite="skip")
    acc.add(x[:4, ...], y[:4, ...])
    after_first = everything(model, opt, scheduler)
    assert acc.add(with_value(xp, x, (5, 1), math.inf)[4:, ...], y[4:, ...]) is None
    assert acc.skipped_updates == 1
    assert (acc.pending_items, acc.pending_num_micro_batches) == (0, 0)
    assert all(p.grad is None for p in model.parameters())
    # Before the fix the bad forward left inf/NaN running statistics in the model.
    state = everything(model, opt, scheduler)
    assert_same(state["buffers"], after_first["buffers"])
    assert_same(state["params"], after_first["params"])
    assert_same(state["optimizer"], after_first["optimizer"])


def test_a_failing_optimizer_step_leaves_the_window_pending_as_sums(xp):
    model = nn.MLP([3, 4, 2], seed=0, xp=xp)
    opt = optim.SGD(model.parameters(), lr=0.1)
    acc = Accumulator(model, nn.MSELoss(), opt)
    rng = np.random.default_rng(0)
    for _ in range(2):
        acc.add(xp.asarray(rng.normal(size=(3, 3))), xp.asarray(rng.normal(size=(3, 2))))
    sums = [p.grad for p in model.parameters()]
    before = [backend.to_numpy(p.data).copy() for p in model.parameters()]
    opt.params[0].grad = xp.zeros((1, 1), dtype=xp.float64)  # wrong shape: step() refuses
    sums[0] = opt.params[0].grad
    with pytest.raises(ValueError, match="shape"):
        acc.update()
    assert all(p.grad is g for p, g in zip(model.parameters(), sums))
    assert acc.pending_num_micro_batches == 2 and acc.pending_items == 12
    assert all(np.array_equal(backend.to_numpy(p.data), b)
               for p, b in zip(model.parameters(), before))
    assert opt.step_count == 0
