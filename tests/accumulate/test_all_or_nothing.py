"""Every state-changing call is all-or-nothing: after ANY error (``KeyboardInterrupt``
included) the parameters, ``.grad``, buffers, optimizer moments and count, the schedule and
the pending window are exactly (``==``) what they were before the call.

The snapshots are copies of every array and number; comparing them with ``==`` is exact
whatever the arithmetic, because a correct rollback puts back the very same arrays.
"""

import json
import zipfile
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minigrad import Tensor, checkpoint, nn, optim
from minigrad.accumulate import Accumulator, accumulated_gradients
from minigrad.accumulate import commit as commit_module
from minigrad.accumulate import step as accumulate_step
from minigrad.engine import backend


def _copy(value):
    if backend.is_array(value):
        return backend.to_numpy(value).copy()
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_copy(v) for v in value]
    return value


def state(model, optimizer=None, scheduler=None, acc=None):
    """Copies of every piece of training state, for an exact before/after comparison."""
    return {
        "model": _copy(model.state_dict()),
        "grads": [_copy(p.grad) for p in model.parameters()],
        "optimizer": _copy(optimizer.state_dict()) if optimizer is not None else None,
        "scheduler": (scheduler.t, scheduler._seen_updates) if scheduler is not None else None,
        "accumulator": _copy(acc.state_dict()) if acc is not None else None,
    }


def assert_equal_state(a, b):
    """``a == b`` exactly, arrays compared elementwise (no tolerance)."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        assert isinstance(a, np.ndarray) and isinstance(b, np.ndarray)
        assert a.dtype == b.dtype and a.shape == b.shape
        assert np.array_equal(a, b)
    elif isinstance(a, dict):
        assert a.keys() == b.keys()
        for k in a:
            assert_equal_state(a[k], b[k])
    elif isinstance(a, list):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            assert_equal_state(x, y)
    else:
        assert a == b


def setup(norm="batch", optimizer="adam", seed=0):
    """A trained-for-one-update model (so moments and counts are non-trivial) and data."""
    gen = np.random.default_rng(seed)
    model = nn.MLP([3, 6, 2], norm=norm, seed=seed)
    opt = optim.Adam(model.parameters(), lr=0.01) if optimizer == "adam" else \
        optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    sched = optim.Scheduler(opt, optim.step_decay(0.01, 1, 0.5))
    x, y = gen.normal(size=(8, 3)), gen.integers(0, 2, size=8)
    accumulate_step(model, nn.CrossEntropyLoss(), opt, x, y, micro_batch_size=4, scheduler=sched)
    return model, opt, sched, x, y


class Boom(Exception):
    pass


def failing_loss(fail_on_call, error=Boom):
    """Cross-entropy that raises ``error`` on its ``fail_on_call``-th call (0-based)."""
    loss = nn.CrossEntropyLoss()
    calls = [0]

    class Failing(nn.Module):
        def forward(self, logits, target, reduction=None):
            calls[0] += 1
            if calls[0] - 1 == fail_on_call:
                raise error("injected")
            return loss(logits, target, reduction)

        def num_items(self, target):
            return loss.num_items(target)

    return Failing()


# ----- 1. the schedule: computed and checked before anything changes ---------------------------
@pytest.mark.parametrize("schedule, error", [
    (lambda t: [0.1, 0.05][t], IndexError),  # a list indexed past its end at t = 2
    (lambda t: float("nan") if t >= 2 else 0.1, ValueError),
    (lambda t: -0.1 if t >= 2 else 0.1, ValueError),
    (lambda t: "0.1" if t >= 2 else 0.1, TypeError),
])
def test_a_failing_schedule_changes_nothing_and_a_retry_applies_the_window_once(schedule, error):
    model, opt, _, x, y = setup()
    sched = optim.Scheduler(opt, lambda t: 0.1)
    sched.schedule = schedule  # t is 0 now; the next rate it gives is schedule(2) after 1 step
    accumulate_step(model, nn.CrossEntropyLoss(), opt, x, y, micro_batch_size=4,
                    scheduler=sched)
    acc = Accumulator(model, nn.CrossEntropyLoss(), opt, scheduler=sched)
    acc.add(x[:4], y[:4])
    acc.add(x[4:], y[4:])
    before = state(model, opt, sched, acc)
    with pytest.raises(error):
        acc.update()
    assert_equal_state(state(model, opt, sched, acc), before)
    assert acc.pending_num_micro_batches == 2
    # Retry with a working schedule: exactly one update from the window, as a fresh run does.
    sched.schedule = lambda t: 0.05
    twin, twin_opt, _, _, _ = setup()
    twin_sched = optim.Scheduler(twin_opt, lambda t: 0.1)
    twin_sched.schedule = schedule
    accumulate_step(twin, nn.CrossEntropyLoss(), twin_opt, x, y, micro_batch_size=4,
                    scheduler=twin_sched)
    twin_sched.schedule = lambda t: 0.05
    acc.update()
    accumulate_step(twin, nn.CrossEntropyLoss(), twin_opt, x, y, micro_batch_size=4,
                    scheduler=twin_sched)
    assert_equal_state(state(model, opt, sched), state(twin, twin_opt, twin_sched))
    assert opt.step_count == 3 and sched.t == 2


def test_a_scheduler_of_another_optimizer_is_refused_before_anything_runs():
    model, opt, _, x, y = setup()
    other = optim.SGD(nn.MLP([3, 6, 2]).parameters(), lr=0.1)
    sched = optim.Scheduler(other, optim.constant(0.1))
    before = state(model, opt)
    with pytest.raises(ValueError, match="scheduler drives another optimizer"):
        accumulate_step(model, nn.CrossEntropyLoss(), opt, x, y, scheduler=sched)
    with pytest.raises(ValueError, match="scheduler drives another optimizer"):
        Accumulator(model, nn.CrossEntropyLoss(), opt, scheduler=sched)
    assert_equal_state(state(model, opt), before)


def test_scheduler_step_checks_the_rate_before_it_advances():
    _, opt, _, _, _ = setup()
    sched = optim.Scheduler(opt, lambda t: 0.1 if t < 1 else float("inf"))
    opt.step_count += 1  # as if an update happened
    with pytest.raises(ValueError, match="rate for update 1.*lr must be a finite number"):
        sched.step()
    assert sched.t == 0 and opt.lr == 0.1
    with pytest.raises(ValueError, match="lr must be a finite number"):
        opt.lr = float("nan")
    assert opt.lr == 0.1


# ----- 2. KeyboardInterrupt from inside a loss function --------------------------------------
@pytest.mark.parametrize("error", [KeyboardInterrupt, Boom])
@pytest.mark.parametrize("strategy", ["micro", "exact_batchnorm"])
def test_an_interrupt_in_micro_batch_two_changes_nothing(error, strategy):
    model, opt, sched, x, y = setup()
    before = state(model, opt, sched)
    # exact BatchNorm makes several passes: fail in the last (real) one's second micro-batch
    fail_on = 1 if strategy == "micro" else 3
    with pytest.raises(error):
        accumulate_step(model, failing_loss(fail_on, error), opt, x, y, micro_batch_size=4,
                        scheduler=sched, strategy=strategy)
    assert_equal_state(state(model, opt, sched), before)


@pytest.mark.parametrize("error", [KeyboardInterrupt, Boom])
def test_accumulated_gradients_restores_grads_and_running_statistics(error):
    model, opt, _, x, y = setup()
    for p in model.parameters():
        p.grad = p.data * 0.5  # stale gradients must survive as they are
    before = state(model)
    with pytest.raises(error):
        accumulated_gradients(model, failing_loss(1, error), x, y, micro_batch_size=3)
    assert_equal_state(state(model), before)


def test_streaming_add_restores_everything_on_interrupt():
    model, opt, sched, x, y = setup()
    acc = Accumulator(model, failing_loss(1, KeyboardInterrupt), opt, scheduler=sched)
    acc.add(x[:4], y[:4])
    before = state(model, opt, sched, acc)
    with pytest.raises(KeyboardInterrupt):
        acc.add(x[4:], y[4:])
    assert_equal_state(state(model, opt, sched, acc), before)


# ----- 3. loading state: everything is checked before anything is written ----------------------
def test_accumulator_load_state_dict_validates_first():
    model, opt, sched, x, y = setup()
    acc = Accumulator(model, nn.CrossEntropyLoss(), opt)
    acc.add(x[:4], y[:4])
    good = acc.state_dict()
    before = state(model, opt, sched, acc)
    broken = [
        ({k: v for k, v in good.items() if k != "pending_items"}, ValueError, "missing"),
        ({**good, "pending_items": -1}, ValueError, "pending_items must be an integer >= 0"),
        ({**good, "pending_num_micro_batches": True}, TypeError, "pending_num_micro_batches"),
        ({**good, "pending_loss_sum": float("nan")}, ValueError, "pending_loss_sum"),
        ({**good, "grads": good["grads"][:-1]}, ValueError, "gradients"),
        ({**good, "grads": [g[..., :1] if g.ndim > 1 else g for g in good["grads"]]},
         ValueError, "shape"),
        ({**good, "grads": ["x"] + good["grads"][1:]}, TypeError,
         "accumulator gradient 0: .* must be numbers"),
        ({**good, "pending_num_micro_batches": 0}, ValueError, "do not fit together"),
        ("not a dict", ValueError, "must be a dict"),
    ]
    for bad, error, message in broken:
        with pytest.raises(error, match=message):
            acc.load_state_dict(bad)
        assert_equal_state(state(model, opt, sched, acc), before)


def test_scheduler_and_optimizer_load_validate_first():
    model, opt, sched, _, _ = setup()
    before = state(model, opt, sched)
    for bad, error in (({}, ValueError), ({"t": -1}, ValueError), ({"t": 1.5}, TypeError)):
        with pytest.raises(error):
            sched.load_state_dict(bad)
    bad_opt = {**opt.state_dict(), "step_count": -3}
    with pytest.raises(ValueError, match="step_count"):
        opt.load_state_dict(bad_opt)
    assert_equal_state(state(model, opt, sched), before)


def _write(path, meta=None, arrays=None, raw_meta=None):
    marker = raw_meta if raw_meta is not None else json.dumps(meta)
    with open(path, "wb") as f:
        np.savez(f, __minigrad__=np.asarray(marker), **(arrays or {}))


def _nested(depth):
    node = {"value": 1}
    for _ in range(depth):
        node = {"list": [node], "tuple": False}
    return node


@pytest.mark.parametrize("craft", [
    lambda p: _write(p, raw_meta="{not json"),
    lambda p: _write(p, raw_meta="[" * 100_000 + "]" * 100_000),
    lambda p: _write(p, {"format": "minigrad-checkpoint-1"}),
    lambda p: _write(p, {"format": "minigrad-checkpoint-1", "tree": {"array": "missing"}}),
    lambda p: _write(p, {"format": "minigrad-checkpoint-1", "tree": _nested(200)}),
    lambda p: _write(p, {"format": "minigrad-checkpoint-1", "tree": {"dict": {"model": {
        "dict": {"0.weight": {"value": [1, 2]}}}}}}),
    lambda p: _write(p, {"format": "minigrad-checkpoint-1", "tree": {"dict": {"model": {
        "dict": {}}}}}),
    lambda p: _write(p, raw_meta="3"),
    lambda p: zipfile.ZipFile(p, "w").close(),
    lambda p: open(p, "wb").write(b"\x93NUMPY garbage"),
])
def test_checkpoint_load_raises_value_error_for_crafted_files_and_changes_nothing(tmp_path,
                                                                                  craft):
    model, opt, sched, _, _ = setup()
    path = tmp_path / "crafted.npz"
    craft(path)
    before = state(model, opt, sched)
    with pytest.raises(ValueError):
        checkpoint.load(path, model, opt, scheduler=sched)
    assert_equal_state(state(model, opt, sched), before)


def test_checkpoint_of_another_architecture_is_a_value_error_and_changes_nothing(tmp_path):
    other = nn.MLP([3, 5, 2], seed=1)
    checkpoint.save(tmp_path / "other.npz", other)
    model, opt, sched, _, _ = setup()
    before = state(model, opt, sched)
    with pytest.raises(ValueError, match="the model state does not fit"):
        checkpoint.load(tmp_path / "other.npz", model)
    assert_equal_state(state(model, opt, sched), before)


def test_an_interrupt_while_loading_a_checkpoint_rolls_every_part_back(tmp_path, monkeypatch):
    model, opt, sched, x, y = setup()
    checkpoint.save(tmp_path / "c.npz", model, opt, scheduler=sched)
    accumulate_step(model, nn.CrossEntropyLoss(), opt, x, y, scheduler=sched)
    before = state(model, opt, sched)

    def interrupted(self, state_dict):
        raise KeyboardInterrupt

    monkeypatch.setattr(optim.Scheduler, "load_state_dict", interrupted)
    with pytest.raises(KeyboardInterrupt):
        checkpoint.load(tmp_path / "c.npz", model, opt, scheduler=sched)
    monkeypatch.undo()
    assert_equal_state(state(model, opt, sched), before)


# ----- 4. step trusts nothing it is given --------------------------------------------------
def test_an_optimizer_of_another_model_is_refused():
    model, opt, sched, x, y = setup()
    rebuilt = nn.MLP([3, 6, 2], norm="batch", seed=0)  # e.g. rebuilt after opt was made
    before = state(rebuilt)
    with pytest.raises(ValueError, match=r"optimizer.params\[0\] is not a parameter of the model"):
        accumulate_step(rebuilt, nn.CrossEntropyLoss(), opt, x, y)
    with pytest.raises(ValueError, match="is not a parameter of the model"):
        Accumulator(rebuilt, nn.CrossEntropyLoss(), opt)
    assert_equal_state(state(rebuilt), before)


def test_an_optimizer_of_some_of_the_parameters_trains_only_those():
    model, _, _, x, y = setup(norm=None)
    first = model.parameters()[:2]
    opt = optim.SGD(first, lr=0.1)
    frozen = [backend.to_numpy(p.data).copy() for p in model.parameters()[2:]]
    accumulate_step(model, nn.CrossEntropyLoss(), opt, x, y, micro_batch_size=3)
    assert all(np.array_equal(p.data, f) for p, f in zip(model.parameters()[2:], frozen))
    assert opt.step_count == 1


@pytest.mark.parametrize("x, y, kwargs, error, message", [
    (np.zeros((0, 3)), np.zeros(0, dtype=np.int64), {}, ValueError, "the batch is empty"),
    ([[0.0, 1.0, 2.0]], np.zeros(1, dtype=np.int64), {}, TypeError, "x must be an array"),
    (np.zeros((4, 3)), [0, 1, 0, 1], {}, TypeError, "y must be an array"),
    (np.zeros((4, 3)), np.zeros(3, dtype=np.int64), {}, ValueError, "4 samples but y has 3"),
    (np.zeros((4, 3)), np.zeros(4, dtype=np.int64), {"sizes": [2.0, 2.0]}, TypeError,
     r"sizes\[0\] must be a positive int"),
    (np.zeros((4, 3)), np.zeros(4, dtype=np.int64), {"sizes": [2, 1]}, ValueError,
     "sum to the batch size 4"),
    (np.zeros((4, 3)), np.zeros(4, dtype=np.int64), {"micro_batch_size": True}, TypeError,
     "micro_batch_size must be a positive int"),
    (np.zeros((4, 3)), np.zeros(4, dtype=np.int64), {"strategy": "Exact"}, ValueError,
     "strategy must be one of"),
    (np.zeros((4, 3)), np.zeros(4, dtype=np.int64), {"max_grad_norm": float("nan")},
     ValueError, "max_grad_norm must be a finite number"),
])
def test_step_refuses_bad_batches_with_a_clear_error(x, y, kwargs, error, message):
    model, opt, sched, _, _ = setup()
    before = state(model, opt, sched)
    with pytest.raises(error, match=message):
        accumulate_step(model, nn.CrossEntropyLoss(), opt, x, y, **kwargs)
    assert_equal_state(state(model, opt, sched), before)


def test_step_takes_tensors_and_numpy_integer_sizes():
    model, opt, _, x, y = setup()
    twin, twin_opt, _, _, _ = setup()
    accumulate_step(model, nn.CrossEntropyLoss(), opt, Tensor(x), Tensor(y),
                    micro_batch_size=np.int64(4))
    accumulate_step(twin, nn.CrossEntropyLoss(), twin_opt, x, y, micro_batch_size=4)
    assert_equal_state(state(model, opt), state(twin, twin_opt))


# ----- 5. a failure injected anywhere changes nothing (property) -------------------------------
POINTS = ("loss", "clip", "rule", "schedule", "decide")


@settings(max_examples=60, deadline=None)
@given(point=st.sampled_from(POINTS), micro_batch=st.integers(0, 3),
       parameter=st.integers(0, 3), interrupt=st.booleans(),
       optimizer=st.sampled_from(["adam", "sgd"]), norm=st.sampled_from([None, "batch"]),
       api=st.sampled_from(["step", "stream"]))
def test_a_failure_injected_at_any_point_changes_nothing(point, micro_batch, parameter,
                                                         interrupt, optimizer, norm, api):
    """``step`` (one call) or the streaming ``Accumulator`` (a call per micro-batch and one
    ``update``): the call that fails leaves everything as it was before that call."""
    error = KeyboardInterrupt if interrupt else Boom
    model, opt, sched, x, y = setup(norm=norm, optimizer=optimizer)
    loss = failing_loss(micro_batch if point == "loss" else -1, error)
    patches = []

    def patch(obj, name, replacement):
        patches.append((obj, name, getattr(obj, name)))
        setattr(obj, name, replacement)

    def raise_on(call, original):
        calls = [0]

        def wrapped(*args, **kwargs):
            calls[0] += 1
            if calls[0] - 1 == call:
                raise error("injected")
            return original(*args, **kwargs)

        return wrapped

    # The points where an update can fail are before its commit (which writes in place with
    # Ctrl-C held and cannot fail: tests/faults.py sends real signals there).
    if point == "clip":
        patch(commit_module, "clip_coefficient", raise_on(0, commit_module.clip_coefficient))
    elif point == "rule":  # the optimizer's plan for parameter `parameter`
        patch(opt._rule, "reserve", raise_on(parameter, opt._rule.reserve))
    elif point == "schedule":
        sched.schedule = raise_on(0, sched.schedule)
    elif point == "decide":  # the window's one read of the device
        patch(Accumulator, "decide", raise_on(0, Accumulator.decide))
    if api == "step":
        calls = [lambda: accumulate_step(model, loss, opt, x, y, micro_batch_size=2,
                                         scheduler=sched, max_grad_norm=1.0)]
    else:
        acc = Accumulator(model, loss, opt, scheduler=sched, max_grad_norm=1.0)
        calls = [lambda j=j: acc.add(x[j:j + 2], y[j:j + 2]) for j in range(0, 8, 2)]
        calls.append(acc.update)
    try:
        for call in calls:
            before = state(model, opt, sched, acc if api == "stream" else None)
            try:
                call()
            except error:
                break
        else:
            pytest.fail("the injected failure did not happen")
    finally:
        for obj, name, original in reversed(patches):
            setattr(obj, name, original)
    assert_equal_state(state(model, opt, sched, acc if api == "stream" else None), before)


def test_a_refused_checkpoint_part_puts_back_what_state_dicts_leave_out(tmp_path):
    # The scheduler's count of updates seen is not in its state_dict: loading a checkpoint
    # sets it, and a later part's refusal must put the old value back, not reload it.
    model, opt, sched, x, y = setup()
    small = nn.MLP([3, 2], seed=0)
    small_acc = Accumulator(small, nn.CrossEntropyLoss(),
                            optim.SGD(small.parameters(), lr=0.1))
    checkpoint.save(tmp_path / "c.npz", model, opt, scheduler=sched, accumulator=small_acc)
    accumulate_step(model, nn.CrossEntropyLoss(), opt, x, y)  # an update the schedule missed
    assert sched._seen_updates != opt.step_count
    acc = Accumulator(model, nn.CrossEntropyLoss(), opt)
    acc.add(x[:4], y[:4])
    before = state(model, opt, sched, acc)
    with pytest.raises(ValueError, match="the accumulator state does not fit"):
        checkpoint.load(tmp_path / "c.npz", model, opt, scheduler=sched, accumulator=acc)
    assert_equal_state(state(model, opt, sched, acc), before)


# ----- 6. more arguments step and the accumulator refuse by name -------------------------------
def test_accumulation_arguments_that_pytorch_users_get_wrong():
    from minigrad.accumulate import micro_batches, split_sizes
    from minigrad.analysis.exact import to_exact, to_fractions

    model, opt, sched, x, y = setup(norm=None)
    before = state(model, opt, sched)
    with pytest.raises(TypeError, match=r"pass an instance, e.g. CrossEntropyLoss\(\)"):
        accumulate_step(model, nn.CrossEntropyLoss, opt, x, y)
    with pytest.raises(ValueError, match="n must be a positive int, got 0"):
        split_sizes(0)
    with pytest.raises(ValueError, match="x has 10 samples but y has 8"):
        list(micro_batches(np.zeros((10, 3)), np.zeros(8), [5, 5]))
    acc = Accumulator(model, nn.CrossEntropyLoss(), opt)
    for bad, error in (("abc", TypeError), (np.array([0.5, 1.5]), TypeError),
                       (np.arange(3), ValueError)):
        with pytest.raises(error, match="sample_index must"):
            acc.add(x[:2], y[:2], sample_index=bad)
    ignored = np.full(8, -100)
    with pytest.raises(FloatingPointError, match="no items"):
        accumulated_gradients(model, nn.CrossEntropyLoss(), x, ignored, micro_batch_size=4)
    assert_equal_state(state(model, opt, sched), before)
    exact = to_exact(nn.MLP([3, 2], seed=0))
    exact_opt = optim.SGD(exact.parameters(), lr=Fraction(1, 8))
    with pytest.raises(TypeError, match="x has dtype float64: convert it with"):
        accumulate_step(exact, nn.MSELoss(), exact_opt, x, to_fractions(np.zeros((8, 2))))
    assert exact_opt.step_count == 0


def test_exact_batchnorm_with_one_sample_is_a_clear_error():
    model, opt, sched, x, y = setup()
    before = state(model, opt, sched)
    with pytest.raises(ValueError, match="more than 1 value per channel"):
        accumulate_step(model, nn.CrossEntropyLoss(), opt, x[:1], y[:1], strategy="exact_batchnorm")
    assert_equal_state(state(model, opt, sched), before)
