"""The ``Precision`` strategy: buffers, orders, emulated float16/bfloat16, loss scaling.

Bit-identity claims are asserted with ``==``: a float32 buffer over float32 gradients adds
them as the plain strategy's backward does, and a power-of-two loss scale multiplies every
intermediate by 2^k exactly unless a value overflows or leaves the normal range.
"""

import numpy as np
import pytest
from helpers import to_np
from hypothesis import given
from hypothesis import strategies as st

from minigrad import backend, nn, optim
from minigrad.accumulate import STRATEGIES, Precision, accumulated_gradients, step
from minigrad.accumulate.precision import round_to
from minigrad.optim import GradScaler


def data(xp=np, n=16, seed=0, size=1.0):
    rng = np.random.default_rng(seed)
    x = (size * rng.normal(size=(n, 3))).astype(np.float32)
    return xp.asarray(x), xp.asarray(rng.integers(0, 2, size=n))


OVERFLOW = pytest.mark.filterwarnings("ignore:overflow:RuntimeWarning",
                                      "ignore:invalid value:RuntimeWarning")  # expected


def train(strategy, x, y, xp=np, updates=1, scheduler=False, max_grad_norm=None, **split):
    model = nn.MLP([3, 5, 2], seed=0, dtype="float32", xp=xp)
    opt = optim.SGD(model.parameters(), lr=0.5, momentum=0.5)
    sched = optim.Scheduler(opt, optim.step_decay(0.5, 1, 0.5)) if scheduler else None
    losses = [step(model, nn.CrossEntropyLoss(), opt, x, y, strategy=strategy,
                   scheduler=sched, max_grad_norm=max_grad_norm,
                   **(split or {"micro_batch_size": 4}))
              for _ in range(updates)]
    return to_np(model.state_dict()), opt, sched, losses


def same(a, b):
    return all(np.array_equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("accumulate", ["param", "float32"])
def test_float32_buffers_equal_the_plain_strategy_bit_for_bit(xp, accumulate):
    x, y = data(xp)
    plain, *_ = train("micro", x, y, xp, updates=3)
    mine, *_ = train(Precision(accumulate), x, y, xp, updates=3)
    assert same(plain, mine)


def test_the_name_gives_the_default_object():
    assert STRATEGIES["precision"] is Precision
    x, y = data()
    assert same(train("precision", x, y)[0], train(Precision(), x, y)[0])


@given(st.integers(-40, 60), st.integers(0, 20), st.sampled_from([[16], [4] * 4, [1, 7, 8]]))
def test_a_power_of_two_scale_leaves_float32_training_bit_identical(k, seed, sizes):
    # Condition: no scaled or unscaled intermediate overflows float32 or falls below its
    # smallest normal 2^-126; here |values| lie in about [2^-40, 2^10] times 2^k.
    x, y = data(seed=seed)
    plain, *_ = train(Precision("float32"), x, y, sizes=sizes, updates=2)
    scaled, *_ = train(Precision("float32", scaler=GradScaler(2.0**k, growth_interval=1)),
                       x, y, sizes=sizes, updates=2)
    assert same(plain, scaled)


def test_the_sum_is_unscaled_once_before_clipping():
    # Clipping to 1e-3 acts on the unscaled gradient: with S = 2^12 the run is bit-identical
    # to the unscaled one (clipping a scaled gradient would give a 2^12 times smaller update).
    x, y = data()
    plain, *_ = train(Precision(), x, y, updates=2, max_grad_norm=1e-3)
    scaled, *_ = train(Precision(scaler=GradScaler(2.0**12)), x, y, updates=2,
                       max_grad_norm=1e-3)
    unclipped, *_ = train(Precision(), x, y, updates=2)
    assert same(plain, scaled) and not same(plain, unclipped)


@OVERFLOW
def test_loss_scaling_rescues_float16_gradients_that_underflow():
    # Inputs near 1e-7 survive float16 (as subnormals), the first layer's weight gradients
    # (near 1e-9, below float16's smallest 2^-24) do not, unless the loss is scaled by 2^8.
    x, y = data(size=1e-7)
    nonzero = {}
    for name, run in (("float32", "micro"),
                      ("float16", Precision(compute_dtype="float16")),
                      ("scaled", Precision(compute_dtype="float16", scaler=GradScaler(2.0**8)))):
        model = nn.MLP([3, 5, 2], seed=0, dtype="float32")
        g = accumulated_gradients(model, nn.CrossEntropyLoss(), x, y, micro_batch_size=4,
                                  strategy=run)
        nonzero[name] = np.count_nonzero(g["0.weight"])
    assert nonzero["scaled"] == nonzero["float32"] > nonzero["float16"]


@OVERFLOW
def test_an_overflow_skips_the_window_then_the_scale_backs_off_once_per_window():
    x, y = data()
    scaler = GradScaler(init_scale=2.0**40, growth_interval=1000)
    run = Precision("float32", compute_dtype="float16", scaler=scaler)
    model = nn.MLP([3, 5, 2], seed=0, dtype="float32")
    opt = optim.SGD(model.parameters(), lr=0.5)
    sched = optim.Scheduler(opt, optim.step_decay(0.5, 1, 0.5))
    before, scales, skipped = to_np(model.state_dict()), [], 0
    while opt.step_count == 0:
        loss = step(model, nn.CrossEntropyLoss(), opt, x, y, micro_batch_size=4,
                    strategy=run, scheduler=sched)
        scales.append(scaler.get_scale())
        if np.isnan(loss):
            skipped += 1
            assert same(before, to_np(model.state_dict())) and sched.t == 0
    # float16 holds |v| <= 65504 < 2^16: scales from 2^40 halve once per skipped window.
    assert scales[:skipped] == [2.0 ** (39 - i) for i in range(skipped)]
    assert 10 <= skipped <= 40 and sched.t == 1 and opt.step_count == 1


def test_the_scale_grows_once_per_window_not_per_micro_batch():
    x, y = data()
    scaler = GradScaler(init_scale=4.0, growth_interval=2)
    train(Precision(compute_dtype="float16", scaler=scaler), x, y, updates=4,
          micro_batch_size=2)  # 8 micro-batches per window
    assert scaler.get_scale() == 16.0


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_master_weights_stay_float32_and_close_to_the_float32_run(dtype):
    x, y = data()
    ref, *_ = train("micro", x, y)
    low, *_ = train(Precision("float32", compute_dtype=dtype), x, y)
    eps = float(np.finfo(np.float16).eps) if dtype == "float16" else 2.0**-7
    assert all(low[k].dtype == np.float32 for k in low)
    assert not same(ref, low)
    # One SGD step of lr 0.5 moves weights by at most lr * |g|; the gradient's relative
    # error from a few roundings of relative size eps is a small multiple of eps.
    assert max(float(np.max(np.abs(ref[k] - low[k]))) for k in ref) < 0.5 * 16 * eps


@OVERFLOW
def test_round_to_is_the_nearest_value_of_the_dtype():
    a = np.array([1 + 2.0**-11, 1 + 3 * 2.0**-11, 70000.0, 2.0**-25], np.float32)
    assert round_to(a, "float16").tolist() == [1.0, 1 + 2.0**-9, np.inf, 0.0]
    assert round_to(np.array([1 + 2.0**-8], np.float32), "bfloat16").tolist() == [1.0]


@pytest.mark.parametrize("kwargs, error, text", [
    ({"accumulate": "float64"}, ValueError, "accumulate"),
    ({"order": "divide"}, ValueError, "order"),
    ({"compute_dtype": "float8"}, ValueError, "compute_dtype"),
    ({"scaler": 2.0}, TypeError, "scaler"),
])
def test_bad_arguments_name_the_argument(kwargs, error, text):
    with pytest.raises(error, match=text):
        Precision(**kwargs)


def test_refusals_before_anything_runs(xp):
    x, y = data(xp)
    model = nn.MLP([3, 5, 2], seed=0, xp=xp)  # float64
    opt = optim.SGD(model.parameters(), lr=0.1)
    before = to_np(model.state_dict())
    with pytest.raises(TypeError, match="float32 master"):
        step(model, nn.CrossEntropyLoss(), opt, x, y, strategy=Precision(
            compute_dtype="float16"))
    with pytest.raises(ValueError, match="normalize must be 'items'"):
        step(model, nn.CrossEntropyLoss(), opt, x, y, strategy="precision",
             normalize="sum")
    model32 = nn.MLP([3, 5, 2], seed=0, xp=xp, dtype="float32")
    opt32 = optim.SGD(model32.parameters(), lr=0.1)
    if backend.namespace_name(xp) != "numpy":
        with pytest.raises(TypeError, match="bfloat16"):
            step(model32, nn.CrossEntropyLoss(), opt32, x, y,
                 strategy=Precision(compute_dtype="bfloat16"))
    if not hasattr(xp, "float16"):
        with pytest.raises(TypeError, match="no float16"):
            step(model32, nn.CrossEntropyLoss(), opt32, x, y,
                 strategy=Precision(compute_dtype="float16"))
    assert same(before, to_np(model.state_dict())) and opt.step_count == 0


@OVERFLOW
@pytest.mark.parametrize("init_scale", [2.0**8, 2.0**40], ids=["updates", "skips"])
def test_a_fault_anywhere_leaves_everything_as_before_or_after(init_scale):
    from types import SimpleNamespace

    from faults import check_all_or_nothing

    def make():
        model = nn.MLP([3, 5, 2], seed=0, dtype="float32")
        opt = optim.SGD(model.parameters(), lr=0.5, momentum=0.5)
        sched = optim.Scheduler(opt, optim.step_decay(0.5, 1, 0.5))
        scaler = GradScaler(init_scale, growth_interval=1)
        return SimpleNamespace(model=model, opt=opt, sched=sched, scaler=scaler, xy=data())

    def call(s):
        run = Precision("kahan", compute_dtype="float16", scaler=s.scaler)
        step(s.model, nn.CrossEntropyLoss(), s.opt, *s.xy, micro_batch_size=4, strategy=run,
             scheduler=s.sched, max_grad_norm=1.0)

    def snapshot(s):
        return {"model": s.model.state_dict(), "opt": s.opt.state_dict(), "t": s.sched.t,
                "grads": [p.grad for p in s.model.parameters()],
                "scaler": s.scaler.state_dict()}

    # the scaler is the strategy's state: the driver's snapshot/restore covers it too
    assert check_all_or_nothing(make, call, snapshot) >= 2
