"""What a window holds, beyond its result: the split a driver actually runs, windows of one
item and of none, parameters that get no gradient, a resume at a window boundary, and the
streaming path's sample positions.

These are the behaviours that split-invariance hides: every split of the dyadic batch gives
the same gradient (``dyadic.py``), so a driver that ran another split than the one asked for,
or a window that counted its samples wrongly, passed every test of the result. Mutation
testing (docs/mutation.md) found each hole; each test here says which behaviour it pins.
"""

import re
from fractions import Fraction

import numpy as np
import pytest
from dyadic import N, coarsen, dyadic_mlp, params_of, regression
from helpers import assert_same, to_np

from minigrad import backend, nn, optim
from minigrad.accumulate import Accumulator, accumulated_gradients, micro, split
from minigrad.accumulate import reduction as reduction_module
from minigrad.accumulate import step as accumulate_step
from minigrad.analysis import exact


class Recording(micro.Micro):
    """The plain strategy, recording each window's micro-batches: sizes and positions."""

    name = "recording"

    def __init__(self):
        self.windows = []

    def run(self, acc, micro_batches, reduction):
        self.windows.append([(int(mb.x.shape[0]), [int(i) for i in to_np(mb.index)])
                             for mb in micro_batches])
        return super().run(acc, micro_batches, reduction)


def spans(sizes):
    """The positions of consecutive micro-batches of ``sizes``."""
    out, start = [], 0
    for size in sizes:
        out.append((size, list(range(start, start + size))))
        start += size
    return out


SPLITS = [({}, [8]), ({"micro_batch_size": 3}, [3, 3, 2]), ({"micro_batch_size": 8}, [8]),
          ({"num_micro_batches": 3}, [3, 3, 2]), ({"num_micro_batches": 8}, [1] * 8),
          ({"num_micro_batches": 1}, [8]), ({"sizes": [1, 5, 2]}, [1, 5, 2])]


# ----- the split a driver runs ------------------------------------------------------------
@pytest.mark.parametrize("how, sizes", SPLITS, ids=[str(h) for h, _ in SPLITS])
@pytest.mark.parametrize("driver", ["step", "accumulated_gradients"])
def test_a_driver_runs_the_split_it_is_given(xp, driver, how, sizes):
    model, (x, y), run = dyadic_mlp(xp), regression(xp), Recording()
    if driver == "step":
        opt = optim.SGD(model.parameters(), lr=0.5)
        accumulate_step(model, nn.MSELoss(), opt, x, y, strategy=run, **how)
    else:
        accumulated_gradients(model, nn.MSELoss(), x, y, strategy=run, **how)
    assert run.windows == [spans(sizes)]


@pytest.mark.parametrize("driver", ["step", "accumulated_gradients"])
@pytest.mark.parametrize("how", [{"num_micro_batches": 2, "sizes": [4, 4]},
                                 {"micro_batch_size": 2, "num_micro_batches": 4},
                                 {"micro_batch_size": 4, "sizes": [4, 4]}])
def test_two_ways_of_naming_a_split_are_refused_naming_both(xp, driver, how):
    model, (x, y) = dyadic_mlp(xp), regression(xp)
    before = to_np(params_of(model))
    opt = optim.SGD(model.parameters(), lr=0.5)
    shown = ", ".join(f"{k}={v!r}" for k, v in how.items())
    with pytest.raises(ValueError, match=rf"at most one of .*; got {re.escape(shown)}$"):
        if driver == "step":
            accumulate_step(model, nn.MSELoss(), opt, x, y, **how)
        else:
            accumulated_gradients(model, nn.MSELoss(), x, y, **how)
    assert opt.step_count == 0
    assert_same(to_np(params_of(model)), before)


@pytest.mark.parametrize("sizes, message", [
    ("44", "sizes must be a sequence of positive ints, got str"),
    (b"44", "sizes must be a sequence of positive ints, got bytes"),
    (8, "sizes must be a sequence of positive ints, got int"),
    ([4, 0, 4], r"sizes\[1\] must be a positive int, got 0"),
    ([4, 3], r"micro-batch sizes \[4, 3\] must be positive and sum to the batch size 8"),
])
def test_sizes_that_are_not_a_split_of_the_batch_are_refused(sizes, message):
    with pytest.raises((TypeError, ValueError), match=message):
        split.sizes_for(N, sizes=sizes)


def test_num_micro_batches_splits_into_near_equal_parts_first_ones_larger():
    assert split.sizes_for(10, num_micro_batches=4) == [3, 3, 2, 2]
    assert split.sizes_for(10, num_micro_batches=10) == [1] * 10
    assert split.sizes_for(7, num_micro_batches=1) == [7]
    with pytest.raises(ValueError, match="num_micro_batches must be an integer in"):
        split.sizes_for(7, num_micro_batches=8)
    with pytest.raises(ValueError, match="num_micro_batches must be an integer in"):
        split.sizes_for(7, num_micro_batches=0)


def test_parts_carry_each_samples_global_position_and_item_count(xp):
    x, y = regression(xp)
    mbs = split.parts(x, y, [3, 5], offset=16, counts=np.arange(1, 9))
    assert [to_np(mb.index).tolist() for mb in mbs] == [[16, 17, 18], list(range(19, 24))]
    assert [mb.items for mb in mbs] == [1 + 2 + 3, 4 + 5 + 6 + 7 + 8]
    assert [int(mb.y.shape[0]) for mb in mbs] == [3, 5]
    assert [mb.items for mb in split.parts(x, y, [3, 5])] == [None, None]
    assert [mb.items for mb in split.parts(x, y, [3, 5], counts=[2] * 8)] == [6, 10]


# ----- windows of one item and of none ------------------------------------------------------
def one_sample(xp):
    x, y = regression(xp)
    return x[:1, ...], y[:1, ...]


@pytest.mark.parametrize("how", ["step", "streaming", "every"])
def test_a_window_of_one_sample_updates_as_the_full_batch_of_one(xp, how):
    x, y = one_sample(xp)
    model, reference = dyadic_mlp(xp), dyadic_mlp(xp)
    opt, ref_opt = (optim.SGD(m.parameters(), lr=0.5) for m in (model, reference))
    nn.MSELoss()(reference(x), y).backward()
    ref_opt.step()
    if how == "step":
        accumulate_step(model, nn.MSELoss(), opt, x, y, sizes=[1])
    elif how == "streaming":
        acc = Accumulator(model, nn.MSELoss(), opt)
        acc.add(x, y)
        assert (acc.pending_items, acc.pending_samples, acc.pending_num_micro_batches) == \
            (2, 1, 1)  # MSE's items: the sample's two outputs
        acc.update()
    else:
        Accumulator(model, nn.MSELoss(), opt, every=1).add(x, y)
    assert opt.step_count == 1
    assert_same(to_np(params_of(model)), to_np(params_of(reference)))


def test_a_window_of_one_item_is_updated_on_not_refused(xp):
    # Cross-entropy: one counted target among ignored ones is a window of exactly one item.
    x, _ = regression(xp)
    y = xp.asarray(np.array([-100, 1, -100, -100, -100, -100, -100, -100]))
    model = nn.Linear(3, 2, generator=0, xp=xp)
    opt = optim.SGD(model.parameters(), lr=0.5)
    acc = Accumulator(model, nn.CrossEntropyLoss(), opt)
    acc.add(x[:4, ...], y[:4])
    acc.add(x[4:, ...], y[4:])
    assert acc.pending_items == 1
    assert acc.update() is not None and opt.step_count == 1
    assert accumulate_step(model, nn.CrossEntropyLoss(), opt, x, y, sizes=[2, 6]) > 0
    assert opt.step_count == 2


def ignored_everywhere(xp):
    x, _ = regression(xp)
    return x, xp.asarray(np.full(N, -100))


@pytest.mark.parametrize("how", ["step", "streaming"])
def test_a_window_of_no_items_is_skipped_and_counted_with_skip(xp, how):
    x, y = ignored_everywhere(xp)
    model = nn.Linear(3, 2, generator=0, xp=xp)
    before = to_np(params_of(model))
    opt = optim.SGD(model.parameters(), lr=0.5)
    acc = Accumulator(model, nn.CrossEntropyLoss(), opt, on_nonfinite="skip")
    for window in range(3):  # each empty window is one more skip, not "a skip"
        if how == "step":
            assert np.isnan(accumulate_step(model, nn.CrossEntropyLoss(), opt, x, y,
                                            sizes=[3, 5], on_nonfinite="skip"))
        else:
            acc.add(x[:3, ...], y[:3])
            acc.add(x[3:, ...], y[3:])
            assert acc.update() is None
            assert acc.skipped_updates == window + 1
            assert (acc.pending_items, acc.pending_num_micro_batches) == (0, 0)
            assert all(p.grad is None for p in model.parameters())
    assert opt.step_count == 0
    assert_same(to_np(params_of(model)), before)


def test_a_window_of_no_items_is_refused_under_every_rule_that_divides_by_items(xp):
    x, y = ignored_everywhere(xp)
    model = nn.Linear(3, 2, generator=0, xp=xp)
    opt = optim.SGD(model.parameters(), lr=0.5)
    with pytest.raises(FloatingPointError, match="holds no items"):
        accumulate_step(model, nn.CrossEntropyLoss(), opt, x, y, sizes=[3, 5])
    # "sum" never divides: a zero gradient is a (no-op) update of SGD
    accumulate_step(model, nn.CrossEntropyLoss(), opt, x, y, sizes=[3, 5], normalize="sum")
    assert opt.step_count == 1


def test_an_all_ignored_micro_batch_adds_nothing_under_the_textbook_mean(xp):
    # normalize="micro_batch_mean": that micro-batch's mean is 0/0 in torch, a NaN loss with a
    # zero gradient; it must add a zero gradient (not NaN), and still count as a micro-batch.
    x, y = regression(xp)
    labels = np.array([0, 1, 1, 0, 1, -100, -100, -100])
    y = xp.asarray(labels)
    model = nn.Linear(3, 2, generator=0, xp=xp)
    got = accumulated_gradients(model, nn.CrossEntropyLoss(), x, y, sizes=[5, 3],
                                normalize="micro_batch_mean")
    nn.CrossEntropyLoss()(model(x[:5, ...]), y[:5]).backward()
    for name, p in model.named_parameters():
        want = to_np(p.grad) / 2  # the first micro-batch's mean, over 2 micro-batches
        assert np.all(np.isfinite(to_np(got[name])))
        np.testing.assert_allclose(to_np(got[name]), want, rtol=4 * np.finfo(float).eps)


# ----- parameters that get no gradient ------------------------------------------------------
class HalfUsed(nn.Module):
    """Two linear layers, only the first used: the second's parameters get no gradient."""

    def __init__(self, xp):
        super().__init__()
        self.used = nn.Linear(3, 2, generator=0, xp=xp)
        self.unused = nn.Linear(3, 2, generator=1, xp=xp)

    def forward(self, x):
        return self.used(x)


class OwnStep(optim.SGD):
    """An optimizer of its own (it overrides ``step``): updated through ``gradients()``."""

    def step(self):
        for p in self.params:
            if p.grad is not None:
                p.data = p.data - self.lr * p.grad
        self.step_count += 1


@pytest.mark.parametrize("optimizer", [optim.SGD, optim.Adam, OwnStep])
@pytest.mark.parametrize("normalize", ["items", "micro_batch_mean", "sum"])
def test_parameters_without_gradients_stay_as_they_were(xp, optimizer, normalize):
    x, y = regression(xp)
    model = HalfUsed(xp)
    unused = to_np(params_of(model.unused))
    opt = optimizer(model.parameters(), lr=0.5)
    acc = Accumulator(model, nn.MSELoss(), opt, normalize=normalize, max_grad_norm=1.0)
    acc.add(x[:3, ...], y[:3, ...])
    acc.add(x[3:, ...], y[3:, ...])
    assert model.unused.weight.grad is None
    assert acc.update() is not None
    assert_same(to_np(params_of(model.unused)), unused)
    assert all(p.grad is None for p in model.parameters())


@pytest.mark.parametrize("normalize, sizes, divisor", [("items", [3, 5], 16), ("sum", [3, 5], 1),
                                                       ("micro_batch_mean", [4, 4], 16)])
def test_an_optimizer_of_its_own_steps_on_the_divided_gradient(xp, normalize, sizes, divisor):
    # dyadic (tests/dyadic.py): every sum exact and the divisors powers of 2, hence ==; the
    # textbook mean of two micro-batches of 8 items each is the sum over 16 too
    x, y = regression(xp)
    model, reference = coarsen(HalfUsed(xp)), coarsen(HalfUsed(xp))
    nn.MSELoss(reduction="sum")(reference(x), y).backward()
    want = [to_np(p.grad) / divisor for p in reference.used.parameters()]
    seen = []

    class Seeing(OwnStep):
        def step(self):
            seen.extend(None if p.grad is None else to_np(p.grad) for p in self.params)
            super().step()

    acc = Accumulator(model, nn.MSELoss(), Seeing(model.parameters(), lr=0.5),
                      normalize=normalize)
    acc.add(x[:sizes[0], ...], y[:sizes[0], ...])
    acc.add(x[sizes[0]:, ...], y[sizes[0]:, ...])
    acc.update()
    assert seen[2] is None and seen[3] is None  # the unused layer: no gradient, not zeros
    assert_same(seen[:2], want)


# ----- resume at a window boundary -----------------------------------------------------------
@pytest.mark.parametrize("every", [None, 2])
def test_a_state_saved_at_a_window_boundary_resumes_exactly(xp, every):
    x, y = regression(xp)

    def trained(resume_at):
        model = dyadic_mlp(xp)
        opt = optim.Adam(model.parameters(), lr=0.125)
        acc = Accumulator(model, nn.MSELoss(), opt, every=every)
        for k, start in enumerate(range(0, N, 2)):
            if k == resume_at:  # a fresh accumulator takes over from the saved state
                state = acc.state_dict()
                assert state["pending_num_micro_batches"] == 0  # a boundary: nothing pending
                acc = Accumulator(model, nn.MSELoss(), opt, every=every)
                acc.load_state_dict(state)
            acc.add(x[start:start + 2, ...], y[start:start + 2, ...])
            if every is None and k % 2 == 1:
                acc.update()
        return to_np(params_of(model)), opt.step_count, acc.state_dict()

    whole, steps, state = trained(resume_at=None)
    resumed, resumed_steps, resumed_state = trained(resume_at=2)
    assert steps == resumed_steps == 2
    assert_same(resumed, whole)
    assert_same(to_np(resumed_state), to_np(state))


# ----- the streaming path's positions --------------------------------------------------------
def test_streaming_adds_key_dropout_by_each_samples_position_in_the_window(xp):
    # Row dropout keyed by (update, position): micro-batches of 3, 1 and 4 samples added one
    # by one must see the masks of the full batch, so the window's gradient is its gradient.
    x, y = regression(xp)
    model, reference = dyadic_mlp(xp, dropout=0.5), dyadic_mlp(xp, dropout=0.5)
    with nn.dropout_keys(0, xp.arange(N)):
        nn.MSELoss(reduction="sum")(reference(x), y).backward()
    acc = Accumulator(model, nn.MSELoss(), None)
    for start, stop in ((0, 3), (3, 4), (4, 8)):
        acc.add(x[start:stop, ...], y[start:stop, ...])
        assert acc.pending_samples == stop
    assert_same(to_np({n: p.grad for n, p in model.named_parameters()}),
                to_np({n: p.grad for n, p in reference.named_parameters()}))


def test_streaming_sample_index_overrides_the_running_position(xp):
    x, y = regression(xp)
    model, reference = dyadic_mlp(xp, dropout=0.5), dyadic_mlp(xp, dropout=0.5)
    order = np.array([5, 2, 7, 0, 1, 3, 4, 6])
    with nn.dropout_keys(0, xp.asarray(order)):
        nn.MSELoss(reduction="sum")(reference(x), y).backward()
    acc = Accumulator(model, nn.MSELoss(), None)
    acc.add(x[:4, ...], y[:4, ...], sample_index=xp.asarray(order[:4]))
    acc.add(x[4:, ...], y[4:, ...], sample_index=xp.asarray(order[4:]))
    assert_same(to_np({n: p.grad for n, p in model.named_parameters()}),
                to_np({n: p.grad for n, p in reference.named_parameters()}))


@pytest.mark.parametrize("bad", ["x", "y"])
def test_exact_parameters_refuse_float_data_in_the_streaming_path(bad):
    model = exact.to_exact(nn.Linear(2, 1, generator=0))
    acc = Accumulator(model, nn.MSELoss(), None)
    x = exact.to_fractions(np.ones((2, 2)))
    y = exact.to_fractions(np.ones((2, 1)))
    if bad == "x":
        x = np.ones((2, 2))
    else:
        y = np.ones((2, 1))
    with pytest.raises(TypeError, match=rf"exact Fractions but {bad} has dtype float64"):
        acc.add(x, y)
    assert acc.pending_num_micro_batches == 0


# ----- the loss sum a window keeps ----------------------------------------------------------
def test_a_loss_sum_is_kept_as_the_device_would_give_it(xp):
    x, y = regression(xp)
    model = nn.Linear(3, 2, generator=0, xp=xp, dtype="float32")
    x32 = backend.get_namespace(x).astype(x, backend.get_namespace(x).float32)
    loss = nn.MSELoss()(model(x32), backend.get_namespace(y).astype(
        y, backend.get_namespace(y).float32), reduction="sum")
    value = micro.loss_value(loss)
    if backend.on_host(loss.data):  # NumPy: a Python float, read at no cost
        assert type(value) is float
    else:  # a device array, not read: a 0-d float64 array, so sums add as Python's would
        xpv = backend.get_namespace(value)
        assert value.shape == () and value.dtype == xpv.float64
    assert float(to_np(value)) == float(to_np(loss.data))


def test_an_exact_loss_sum_stays_a_fraction():
    model = exact.to_exact(nn.Linear(2, 1, generator=0))
    x = exact.to_fractions(np.ones((2, 2)))
    y = exact.to_fractions(np.ones((2, 1)))
    value = micro.loss_value(nn.MSELoss()(model(x), y, reduction="sum"))
    assert isinstance(value, Fraction)


# ----- loading a window's state: what fits together, and the messages -----------------------
def pending_state(xp):
    """A model, its accumulator and the state of a window holding one micro-batch."""
    x, y = regression(xp)
    model = dyadic_mlp(xp)
    acc = Accumulator(model, nn.MSELoss(), optim.SGD(model.parameters(), lr=0.5))
    acc.add(x[:2, ...], y[:2, ...])
    return model, acc, acc.state_dict()


COUNTS = ("pending_items", "pending_num_micro_batches", "pending_samples")


@pytest.mark.parametrize("counts, fits", [
    ((0, 0, 0), True),  # an empty window: a state saved at a boundary
    ((1, 1, 1), True),  # one item in one sample of one micro-batch
    ((0, 1, 1), True),  # a micro-batch whose targets were all ignored
    ((0, 1, 3), True),
    ((0, 0, 1), False),  # samples without a micro-batch
    ((0, 1, 0), False),  # a micro-batch without samples
    ((1, 0, 0), False),  # items without a micro-batch
    ((4, 0, 2), False),
])
def test_the_counts_of_a_loaded_window_must_fit_together(counts, fits):
    model, acc, state = pending_state(np)
    state = {**state, **dict(zip(COUNTS, counts))}
    if fits:
        acc.load_state_dict(state)
        assert (acc.pending_items, acc.pending_num_micro_batches, acc.pending_samples) == counts
    else:
        with pytest.raises(ValueError, match="accumulator counts do not fit together: Window"):
            acc.load_state_dict(state)
        assert acc.pending_num_micro_batches == 1 and acc.pending_samples == 2


def test_a_state_with_the_old_and_the_new_name_of_the_count_keeps_the_new_one():
    model, acc, state = pending_state(np)
    acc.load_state_dict({**state, "pending_micro_batches": 7})  # a stray old key: ignored
    assert acc.pending_num_micro_batches == 1
    old = {("pending_micro_batches" if k == "pending_num_micro_batches" else k): v
           for k, v in state.items()}
    acc.discard()
    acc.load_state_dict(old)
    assert acc.pending_num_micro_batches == 1


@pytest.mark.parametrize("change, error, message", [
    (lambda s: {k: v for k, v in s.items() if k not in ("pending_items", "pending_samples")},
     ValueError, r"must be a dict with \[.*\]; missing \['pending_items', 'pending_samples'\]$"),
    (lambda s: ["not", "a", "dict"], ValueError,
     r"missing \['grads', 'pending_items', 'pending_num_micro_batches', 'pending_samples', "
     r"'pending_loss_sum', 'skipped_updates'\]$"),
    (lambda s: {**s, "grads": s["grads"][:3]}, ValueError,
     r"^accumulator state holds 3 gradients, the model has 4 parameters$"),
    (lambda s: {**s, "grads": 5}, ValueError,
     r"^accumulator state holds int gradients, the model has 4 parameters$"),
    (lambda s: {**s, "skipped_updates": -1}, ValueError,
     r"^skipped_updates must be an integer >= 0, got -1$"),
    (lambda s: {**s, "skipped_updates": 1.5}, TypeError, r"^skipped_updates must be an int"),
    (lambda s: {**s, "pending_loss_sum": "1.0"}, TypeError, r"^pending_loss_sum must be"),
    (lambda s: {**s, "pending_loss_sum": float("inf")}, ValueError, r"^pending_loss_sum must"),
])
def test_a_state_that_does_not_load_is_named_and_changes_nothing(change, error, message):
    model, acc, state = pending_state(np)
    before = to_np(acc.state_dict())
    with pytest.raises(error, match=message):
        acc.load_state_dict(change(state))
    assert_same(to_np(acc.state_dict()), before)


def test_a_negative_loss_sum_loads():
    # A loss may be negative (a log-likelihood of a density, a margin): its sum is any real.
    model, acc, state = pending_state(np)
    acc.load_state_dict({**state, "pending_loss_sum": -2.5, "skipped_updates": 3})
    assert acc.pending_loss_sum == -2.5 and acc.skipped_updates == 3


# ----- what the driver hands a reduction and a strategy -------------------------------------
class Spy(reduction_module.OneProcess):
    """One process, recording every call of the reduction protocol; ``begin`` returns
    ``offset``, ``update`` may raise ``WindowSkipped`` (another rank dropped the window)."""

    def __init__(self, offset=0, skipped_elsewhere=False):
        self.calls, self.offset, self.skipped_elsewhere = [], offset, skipped_elsewhere

    def start(self):
        self.calls.append(("start",))

    def check(self, acc):
        self.calls.append(("check", acc))

    def begin(self, acc, samples, call):
        self.calls.append(("begin", acc, samples, call))
        return self.offset

    def update(self, acc):
        self.calls.append(("update", acc))
        if self.skipped_elsewhere:
            raise reduction_module.WindowSkipped
        return acc.update()

    def skip(self):
        self.calls.append(("skip",))

    def abort(self, error):
        self.calls.append(("abort", error))


def test_step_tells_the_reduction_the_call_and_takes_its_offset(xp):
    model, (x, y), run, spy = dyadic_mlp(xp), regression(xp), Recording(), Spy(offset=16)
    opt = optim.Adam(model.parameters(), lr=0.125)
    accumulate_step(model, nn.MSELoss(), opt, x, y, sizes=[3, 5], strategy=run, reduction=spy)
    names = [c[0] for c in spy.calls]
    assert names == ["start", "check", "begin", "update"]
    acc = spy.calls[1][1]
    assert spy.calls[2][1] is acc and spy.calls[3][1] is acc
    assert spy.calls[2][2] == N
    assert spy.calls[2][3] == ("recording", 0, "Adam",
                               [(p.shape, str(p.dtype)) for p in model.parameters()])
    assert all(str(p.dtype).endswith("float64") for p in model.parameters())
    # this process's samples start at the offset the reduction gave: the dropout keys
    assert run.windows == [[(3, [16, 17, 18]), (5, [19, 20, 21, 22, 23])]]


def test_a_refused_call_is_reported_to_the_reduction_as_its_own_error(xp):
    model, (x, y), spy = dyadic_mlp(xp), regression(xp), Spy()
    opt = optim.SGD(model.parameters(), lr=0.5)
    with pytest.raises(ValueError, match="must be positive and sum to the batch size") as e:
        accumulate_step(model, nn.MSELoss(), opt, x, y, sizes=[3, 4], reduction=spy)
    assert spy.calls[-1] == ("abort", e.value)


class Failing(micro.Micro):
    """A strategy that keeps a state of its own, changes it, then fails mid-window."""

    name = "failing"

    def __init__(self):
        self.state = 0

    def snapshot(self):
        return self.state

    def restore(self, saved):
        self.state = saved

    def run(self, acc, micro_batches, reduction):
        self.state += 1
        micro.add_micro_batch(acc, micro_batches[0])
        raise RuntimeError("mid-window")


def test_a_failing_window_puts_back_the_strategys_state_and_tells_the_reduction(xp):
    model, (x, y), spy, run = dyadic_mlp(xp), regression(xp), Spy(), Failing()
    opt = optim.SGD(model.parameters(), lr=0.5)
    before = to_np(params_of(model))
    with pytest.raises(RuntimeError, match="mid-window") as e:
        accumulate_step(model, nn.MSELoss(), opt, x, y, sizes=[3, 5], strategy=run,
                        reduction=spy)
    assert run.state == 0  # its snapshot, put back
    assert spy.calls[-1] == ("abort", e.value)
    assert all(p.grad is None for p in model.parameters()) and opt.step_count == 0
    assert_same(to_np(params_of(model)), before)


@pytest.mark.parametrize("where", ["here", "elsewhere"])
def test_a_dropped_window_is_nan_and_changes_nothing(xp, where):
    model, (x, y) = dyadic_mlp(xp), regression(xp)
    if where == "here":
        x = xp.asarray(np.where(np.arange(N)[:, None] == 5, np.inf, to_np(x)))
    spy = Spy(skipped_elsewhere=where == "elsewhere")
    opt = optim.SGD(model.parameters(), lr=0.5)
    before = to_np(params_of(model))
    loss = accumulate_step(model, nn.MSELoss(), opt, x, y, sizes=[3, 5], reduction=spy,
                           on_nonfinite="skip")
    assert isinstance(loss, float) and np.isnan(loss)
    assert [c[0] for c in spy.calls].count("skip") == (1 if where == "here" else 0)
    assert opt.step_count == 0 and all(p.grad is None for p in model.parameters())
    assert_same(to_np(params_of(model)), before)


def test_a_kept_window_is_not_reported_as_skipped(xp):
    model, (x, y), spy = dyadic_mlp(xp), regression(xp), Spy()
    opt = optim.SGD(model.parameters(), lr=0.5)
    accumulate_step(model, nn.MSELoss(), opt, x, y, sizes=[3, 5], reduction=spy)
    assert "skip" not in [c[0] for c in spy.calls] and opt.step_count == 1


def test_accumulated_gradients_key_dropout_by_update_zero_unless_told(xp):
    x, y = regression(xp)
    model = dyadic_mlp(xp, dropout=0.5)
    default = accumulated_gradients(model, nn.MSELoss(), x, y, sizes=[3, 5])
    at_0 = accumulated_gradients(model, nn.MSELoss(), x, y, sizes=[3, 5], step_index=0)
    at_1 = accumulated_gradients(model, nn.MSELoss(), x, y, sizes=[3, 5], step_index=1)
    assert_same(to_np(default), to_np(at_0))
    assert not np.array_equal(to_np(default["0.weight"]), to_np(at_1["0.weight"]))


def test_positions_start_at_zero_without_an_offset(xp):
    x, y = regression(xp)
    assert [to_np(mb.index).tolist() for mb in split.parts(x, y, [3, 5])] == \
        [[0, 1, 2], [3, 4, 5, 6, 7]]


def test_one_sample_cannot_be_cut_in_two():
    with pytest.raises(ValueError, match=r"num_micro_batches must be an integer in \[1, 1\]"):
        split.sizes_for(1, num_micro_batches=2)
    assert split.sizes_for(1, num_micro_batches=1) == [1]


@pytest.mark.parametrize("driver", ["step", "accumulated_gradients"])
@pytest.mark.parametrize("bad", ["x", "y"])
def test_exact_parameters_refuse_float_data_in_the_drivers(driver, bad):
    model = exact.to_exact(nn.Linear(2, 1, generator=0))
    x = exact.to_fractions(np.ones((2, 2)))
    y = exact.to_fractions(np.ones((2, 1)))
    x, y = (np.ones((2, 2)), y) if bad == "x" else (x, np.ones((2, 1)))
    with pytest.raises(TypeError, match=rf"exact Fractions but {bad} has dtype float64"):
        if driver == "step":
            opt = optim.SGD(model.parameters(), lr=Fraction(1, 2))
            accumulate_step(model, nn.MSELoss(), opt, x, y)
        else:
            accumulated_gradients(model, nn.MSELoss(), x, y)


# ----- an optimizer of its own: stepped on divided gradients, put back when it fails ----------
class FailingStep(OwnStep):
    def step(self):
        raise RuntimeError("step failed before writing")


def test_an_optimizer_of_its_own_that_fails_leaves_the_window_as_sums(xp):
    x, y = regression(xp)
    model = coarsen(HalfUsed(xp))
    acc = Accumulator(model, nn.MSELoss(), FailingStep(model.parameters(), lr=0.5))
    acc.add(x[:3, ...], y[:3, ...])
    acc.add(x[3:, ...], y[3:, ...])
    sums = to_np([p.grad for p in model.parameters()])
    params = to_np(params_of(model))
    with pytest.raises(RuntimeError, match="step failed before writing"):
        acc.update()
    assert_same(to_np([p.grad for p in model.parameters()]), sums)  # sums, not divided
    assert_same(to_np(params_of(model)), params)
    assert acc.pending_num_micro_batches == 2 and acc.commits == 0


class DuckTyped:
    """An optimizer that is not a minigrad ``Optimizer``: params, step, zero_grad."""

    def __init__(self, params, lr):
        self.params, self.lr, self.step_count = list(params), lr, 0

    def step(self):
        for p in self.params:
            if p.grad is not None:
                p.data = p.data - self.lr * p.grad
        self.step_count += 1

    def zero_grad(self):
        for p in self.params:
            p.grad = None


def test_a_duck_typed_optimizer_is_stepped_on_the_divided_gradient(xp):
    x, y = regression(xp)
    model, reference = dyadic_mlp(xp), dyadic_mlp(xp)
    nn.MSELoss()(reference(x), y).backward()
    want = {n: to_np(p.data - 0.5 * p.grad) for n, p in reference.named_parameters()}
    acc = Accumulator(model, nn.MSELoss(), DuckTyped(model.parameters(), lr=0.5))
    acc.add(x[:3, ...], y[:3, ...])
    acc.add(x[3:, ...], y[3:, ...])
    acc.update()
    assert_same(to_np(params_of(model)), want)


def test_load_sums_replaces_the_windows_sums_and_counts(xp):
    # what a reduction does with sums added over processes (mpi.AllReduce, Precision)
    x, y = regression(xp)
    model = dyadic_mlp(xp)
    acc = Accumulator(model, nn.MSELoss(), optim.SGD(model.parameters(), lr=0.5))
    acc.add(x[:2, ...], y[:2, ...])
    grads = [None if i == 1 else p.grad * 2.0 for i, p in enumerate(model.parameters())]
    window = type(acc.window)(items=8, num_micro_batches=2, samples=4, loss_sum=3.0)
    acc.load_sums(grads, window)
    assert all(p.grad is g for p, g in zip(model.parameters(), grads))
    assert acc.window == window


# ----- the textbook mean of a micro-batch without items, for a loss with a graph --------------
class MaskedMSE:
    """A loss of one's own: squared errors where the target is not 0, counted by
    ``num_items``; its sum keeps a graph even when every entry is masked."""

    def __call__(self, out, y, reduction="mean"):
        xp = backend.get_namespace(y)
        mask = xp.astype(y != 0, y.dtype)
        total = ((out - y) * (out - y) * mask).sum()
        return total if reduction == "sum" else total / max(self.num_items(y), 1)

    def num_items(self, y):
        xp = backend.get_namespace(y)
        return int(xp.sum(xp.astype(y != 0, xp.int64)))


def test_a_micro_batch_without_items_adds_a_zero_gradient_for_any_loss(xp):
    # its loss sum is 0 with a graph; the textbook mean must not divide it by 0 items (0/0:
    # NaN gradients) but add zeros, and count it as a micro-batch
    x, y = regression(xp)
    y = xp.asarray(np.concatenate([to_np(y)[:5], np.zeros((3, 2))]))
    model = coarsen(nn.Linear(3, 2, generator=0, xp=xp))
    got = accumulated_gradients(model, MaskedMSE(), x, y, sizes=[5, 3],
                                normalize="micro_batch_mean")
    MaskedMSE()(model(x[:5, ...]), y[:5, ...]).backward()
    want = {n: to_np(p.grad) / 2 for n, p in model.named_parameters()}
    assert_same(to_np(got), want)


# ----- counting commits, the in-place path, and the own optimizer's clipped gradient ----------
def test_each_update_is_one_commit(xp):
    x, y = regression(xp)
    model = dyadic_mlp(xp)
    acc = Accumulator(model, nn.MSELoss(), optim.SGD(model.parameters(), lr=0.5), every=2)
    for k in range(6):
        acc.add(x[k:k + 1, ...], y[k:k + 1, ...])
    assert acc.commits == 3 and acc.optimizer.step_count == 3


@pytest.mark.parametrize("optimizer", [optim.SGD, optim.Adam, optim.AdamW])
def test_a_minigrad_optimizer_divides_in_its_commit_not_through_gradients(xp, optimizer,
                                                                          monkeypatch):
    # plan + commit divide the sums into the workspace: no divided copy (``gradients()``)
    x, y = regression(xp)
    model = dyadic_mlp(xp)
    acc = Accumulator(model, nn.MSELoss(), optimizer(model.parameters(), lr=0.125),
                      max_grad_norm=1.0)
    acc.add(x, y)

    def copied():
        raise AssertionError("the divided copy of the gradients was made")

    monkeypatch.setattr(acc, "gradients", copied)
    assert acc.update() is not None and acc.optimizer.step_count == 1


def test_an_optimizer_whose_step_is_replaced_on_the_instance_is_stepped(xp):
    x, y = regression(xp)
    model = dyadic_mlp(xp)
    opt = optim.SGD(model.parameters(), lr=0.5)
    calls = []
    opt.step = lambda: calls.append([None if p.grad is None else to_np(p.grad)
                                     for p in opt.params])
    acc = Accumulator(model, nn.MSELoss(), opt)
    acc.add(x, y)
    acc.update()
    assert len(calls) == 1 and calls[0][0] is not None


def test_an_optimizer_of_its_own_steps_on_the_clipped_divided_gradient(xp):
    x, y = regression(xp)
    model, reference = coarsen(HalfUsed(xp)), coarsen(HalfUsed(xp))
    nn.MSELoss()(reference(x), y).backward()
    mean = [to_np(p.grad) for p in reference.used.parameters()]
    norm = float(np.sqrt(sum(np.sum(g * g) for g in mean)))
    seen = []

    class Seeing(OwnStep):
        def step(self):
            seen.extend(None if p.grad is None else to_np(p.grad) for p in self.params)

    acc = Accumulator(model, nn.MSELoss(), Seeing(model.parameters(), lr=0.5),
                      max_grad_norm=norm / 4)
    acc.add(x, y)
    acc.update()
    assert seen[2] is None and seen[3] is None
    # clip coefficient (norm / 4) / (norm + 1e-6), as torch's: each entry a quarter of the
    # mean gradient, up to the coefficient's rounding and the norm's eps (relative 1e-6 / norm)
    for got, g in zip(seen[:2], mean):
        np.testing.assert_allclose(got, g / 4, rtol=2e-6 / norm + 16 * np.finfo(float).eps)


@pytest.mark.parametrize("optimizer", ["minigrad", "own"])
def test_the_schedule_is_evaluated_once_per_update(xp, optimizer):
    x, y = regression(xp)
    model = dyadic_mlp(xp)
    opt = (optim.SGD if optimizer == "minigrad" else OwnStep)(model.parameters(), lr=0.5)
    seen = []
    sched = optim.Scheduler(opt, lambda t: seen.append(t) or 0.5 / (t + 1))
    acc = Accumulator(model, nn.MSELoss(), opt, scheduler=sched)
    for start in (0, 4):
        del seen[:]
        acc.add(x[start:start + 4, ...], y[start:start + 4, ...])
        acc.update()
        assert seen == [sched.t]  # once, for the rate of the next update, before the commit
    assert opt.lr == 0.5 / 3


def test_an_exact_window_keeps_its_mean_loss_exact():
    model = exact.to_exact(nn.Linear(2, 1, generator=0))
    x = exact.to_fractions(np.array([[1, 2], [3, 4], [5, 6]]))
    y = exact.to_fractions(np.array([[1], [0], [2]]))
    opt = optim.SGD(model.parameters(), lr=Fraction(1, 2))
    loss = accumulate_step(model, nn.MSELoss(), opt, x, y, sizes=[1, 2])
    assert isinstance(loss, Fraction)
