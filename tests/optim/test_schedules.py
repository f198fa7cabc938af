"""Learning-rate schedules: exact values, torch's repeated multiplication in step decay,
validation, and the Scheduler that sets the lr once per optimizer update."""

import math
from fractions import Fraction

import numpy as np
import pytest
from optim_oracle import U64, arr

from minigrad import optim
from minigrad.engine.tensor import Parameter
from minigrad.optim import SGD


def test_schedules_exact_values():
    assert [optim.constant(0.1)(t) for t in (0, 5)] == [0.1, 0.1]
    assert [optim.step_decay(1.0, 2, 0.5)(t) for t in range(6)] == [1, 1, 0.5, 0.5, 0.25, 0.25]
    # (1 + cos(pi * t / 4)) / 2 = 1, 0.853.., 0.5, 0.146.., 0; then it stays at min_lr
    cos = optim.cosine(1.1, total_steps=4, min_lr=0.1)
    assert [cos(t) for t in (0, 2, 4, 9)] == [1.1, 0.6, 0.1, 0.1]
    assert cos(1) == pytest.approx(0.1 + (1 + math.sqrt(0.5)) / 2, rel=4 * U64)
    # factor 0.25 + 0.75 * t / 4 = 0.25, 0.4375, 0.625, 0.8125; then the inner schedule at t - 4
    warm = optim.linear_warmup(optim.step_decay(1.0, 1, 0.5), warmup_steps=4, start_factor=0.25)
    assert [warm(t) for t in range(7)] == [0.25, 0.4375, 0.625, 0.8125, 1.0, 0.5, 0.25]


def test_step_decay_multiplies_repeatedly_like_torch():
    # torch's StepLR.step() multiplies by gamma at each boundary; 0.1**4 differs in the last
    # bit from 0.1 * 0.1 * 0.1 * 0.1
    # (the correctly rounded 0.1^4, computed exactly: no libm pow involved)
    repeated = 1.0 * 0.1 * 0.1 * 0.1 * 0.1
    assert optim.step_decay(1.0, 1, 0.1)(4) == repeated != float(Fraction(0.1) ** 4)


@pytest.mark.parametrize("make, message", [
    (lambda: optim.constant(-1.0), "lr must be"),
    (lambda: optim.step_decay(0.1, 0), "step_size must be an integer >= 1"),
    (lambda: optim.cosine(0.1, 0), "total_steps must be an integer >= 1"),
    (lambda: optim.cosine(0.1, 10, min_lr=-1.0), "min_lr must be"),
    (lambda: optim.linear_warmup(optim.constant(0.1), -1), "warmup_steps must be"),
    (lambda: optim.linear_warmup(optim.constant(0.1), 5, start_factor=2.0), "start_factor"),
    (lambda: optim.constant(0.1)(-1), "t must be an integer >= 0"),
])
def test_schedule_validation(make, message):
    with pytest.raises(ValueError, match=message):
        make()


def test_scheduler_sets_lr_once_per_update_and_refuses_micro_batch_steps(xp):
    # lr_t = 0.5^t, p = 0, g = 1: p = -1, -1.5, -1.75
    w = Parameter(arr(xp, [0.0]))
    opt = SGD([w], lr=99.0)
    sched = optim.Scheduler(opt, optim.step_decay(1.0, 1, 0.5))
    assert opt.lr == 1.0
    for expected in (-1.0, -1.5, -1.75):
        w.grad = arr(xp, [1.0])
        opt.step()
        sched.step()
        assert float(w.data[0]) == expected
    with pytest.raises(RuntimeError, match="once per optimizer.step"):
        sched.step()
    assert (sched.t, opt.lr) == (3, 0.125)
    again = optim.Scheduler(opt, optim.step_decay(1.0, 1, 0.5))
    again.load_state_dict(sched.state_dict())
    assert (again.t, opt.lr) == (3, 0.125)


def test_an_interrupt_while_setting_the_rate_changes_nothing_and_a_retry_steps(monkeypatch):
    # Ctrl-C inside the optimizer's lr setter (its check): the old step had already moved t
    # and the count of updates seen, so the rate stayed old and the retry was refused.
    w = Parameter([0.0])
    opt = SGD([w], lr=99.0)
    sched = optim.Scheduler(opt, optim.step_decay(1.0, 1, 0.5))
    w.grad = np.array([1.0])
    opt.step()
    checks = []

    def check_lr(value):  # next_lr checks the rate first; the setter checks it again
        checks.append(value)
        if len(checks) == 2:
            raise KeyboardInterrupt
        return float(value)

    monkeypatch.setattr(opt, "check_lr", check_lr)
    with pytest.raises(KeyboardInterrupt):
        sched.step()
    monkeypatch.undo()
    assert (sched.t, opt.lr, sched._seen_updates) == (0, 1.0, 0)
    sched.step()
    assert (sched.t, opt.lr) == (1, 0.5)


def test_step_decay_is_fast_at_any_t_and_equals_its_repeated_products():
    s = optim.step_decay(0.1, 1, 0.5)
    assert s(10**11) == 0.0  # closed form: no loop of 10^11 products
    sequential = [s(t) for t in range(6)]
    value, expected = 0.1, []
    for _ in range(6):
        expected.append(value)
        value *= 0.5
    assert sequential == expected  # the chained products, bit for bit, as StepLR.step()
    assert s(3) == expected[3]  # going back recomputes from the start
    with pytest.raises(ValueError, match="start_factor must be a finite number with 0 <"):
        optim.linear_warmup(optim.constant(0.1), 3, start_factor=0)
