"""Learning-rate schedules: ``schedule(t) -> lr`` for the update index t = 0, 1, 2, ...

t counts optimizer updates, never micro-batches: with gradient accumulation over k
micro-batches, t advances once per k micro-batches (once per ``optimizer.step()``).

>>> s = linear_warmup(cosine(1.0, total_steps=4), warmup_steps=2, start_factor=0.5)
>>> [round(s(t), 12) for t in range(7)]
[0.5, 0.75, 1.0, 0.853553390593, 0.5, 0.146446609407, 0.0]
"""

import math

from minigrad.optim import _checks


def _index(t):
    return _checks.integer("t", t, low=0)


def constant(lr):
    """lr_t = lr."""
    lr = _checks.real("lr", lr)

    def schedule(t):
        _index(t)
        return lr

    return schedule


def step_decay(lr, step_size, gamma=0.1):
    """lr_t = lr * gamma^floor(t / step_size), as torch's ``StepLR``.

    Computed by repeated multiplication, as ``StepLR.step()`` does, so values agree to the
    bit; the schedule remembers its last value, so t = 0, 1, 2, ... costs O(1) per call. A
    jump of more than ``MAX_PRODUCTS`` decays at once uses the closed form
    ``lr * gamma ** k``, as torch's ``StepLR`` does when given an epoch.
    """
    lr = _checks.real("lr", lr)
    step_size = _checks.integer("step_size", step_size, low=1)
    gamma = _checks.real("gamma", gamma)
    last = [0, lr]  # (decays k, lr * gamma^k as repeated products)

    def schedule(t):
        k = _index(t) // step_size
        done, value = last if k >= last[0] else (0, lr)
        if k - done > MAX_PRODUCTS:
            return lr * gamma**k
        for _ in range(k - done):
            value *= gamma
        last[:] = [k, value]
        return value

    return schedule


MAX_PRODUCTS = 100_000


def cosine(lr, total_steps, min_lr=0.0):
    """lr_t = min_lr + (lr - min_lr) * (1 + cos(pi * t / T)) / 2 for t <= T = total_steps.

    torch's ``CosineAnnealingLR`` in closed form; after T it stays at min_lr (torch's would
    rise again: its cosine is periodic).
    """
    lr = _checks.real("lr", lr)
    total_steps = _checks.integer("total_steps", total_steps, low=1)
    min_lr = _checks.real("min_lr", min_lr)

    def schedule(t):
        t = min(_index(t), total_steps)
        return min_lr + (lr - min_lr) * (1 + math.cos(math.pi * t / total_steps)) / 2

    return schedule


def linear_warmup(schedule, warmup_steps, start_factor=1.0 / 3):
    """Linear warmup for W = warmup_steps updates, then ``schedule`` from its own t = 0:

        lr_t = schedule(0) * (f + (1 - f) * t / W)     for t < W    (f = start_factor)
        lr_t = schedule(t - W)                         for t >= W

    The factor goes f, ..., 1 - (1 - f) / W over the warmup: torch's ``LinearLR`` with
    ``total_iters=W`` (default f = 1/3 as there), then ``schedule``, chained as by
    ``SequentialLR``.
    """
    if not callable(schedule):
        raise TypeError(f"schedule must be a callable t -> lr, got {type(schedule).__name__}")
    warmup_steps = _checks.integer("warmup_steps", warmup_steps, low=0)
    start_factor = _checks.real("start_factor", start_factor, high=1.0, strict_low=True)

    def warmed_up(t):
        t = _index(t)
        if t >= warmup_steps:
            return schedule(t - warmup_steps)
        return schedule(0) * (start_factor + (1 - start_factor) * t / warmup_steps)

    return warmed_up


class Scheduler:
    """Sets ``optimizer.lr = schedule(t)``, t = the number of updates so far.

    Call ``step()`` once per optimizer update, right after ``optimizer.step()``, never per
    micro-batch: calling it again with no update in between raises ``RuntimeError``.
    Construction sets ``optimizer.lr = schedule(0)``, the rate of the first update. Each
    rate is computed and checked (finite, >= 0) before anything changes, so a schedule that
    raises or returns nonsense leaves the scheduler and the optimizer as they were.
    """

    def __init__(self, optimizer, schedule):
        if not callable(schedule):
            raise TypeError(f"schedule must be a callable t -> lr, got {type(schedule).__name__}")
        if not hasattr(optimizer, "check_lr"):
            raise TypeError(f"optimizer must be a minigrad optimizer, got "
                            f"{type(optimizer).__name__}")
        lr = self._rate(optimizer, schedule, 0)
        self.optimizer = optimizer
        self.schedule = schedule
        self.t = 0
        self._seen_updates = optimizer.step_count
        optimizer.lr = lr

    @staticmethod
    def _rate(optimizer, schedule, t):
        """``schedule(t)``, checked as the optimizer's learning rate."""
        lr = schedule(t)
        try:
            return optimizer.check_lr(lr)
        except (TypeError, ValueError) as err:
            raise type(err)(f"the schedule's rate for update {t}: {err}") from None

    def next_lr(self):
        """The rate of the next update, ``schedule(t + 1)``, checked; changes nothing.

        ``accumulate`` computes it before the optimizer's update and hands it to ``step``,
        so a schedule that fails leaves the parameters untouched too.
        """
        return self._rate(self.optimizer, self.schedule, self.t + 1)

    def step(self, lr=None):
        """Advance t by one and set the optimizer's ``lr`` (``next_lr()`` unless given)."""
        if self.optimizer.step_count == self._seen_updates:
            raise RuntimeError("Scheduler.step() with no optimizer update since the last call: "
                               "the schedule advances once per optimizer.step(), "
                               "never per micro-batch")
        lr = self.next_lr() if lr is None else self.optimizer.check_lr(lr)
        self._commit(lr, self.t + 1)

    def state_dict(self):
        return {"t": self.t}

    def load_state_dict(self, state_dict):
        """Resume at update index ``state_dict["t"]`` and set the optimizer's ``lr`` for it."""
        if not isinstance(state_dict, dict) or "t" not in state_dict:
            raise ValueError(f"scheduler state must be a dict with 't', got {state_dict!r}")
        t = _checks.integer("t", state_dict["t"], low=0)
        lr = self._rate(self.optimizer, self.schedule, t)
        self._commit(lr, t)

    def _commit(self, lr, t):
        """Set the optimizer's ``lr`` and then ``t``, all or nothing.

        The ``lr`` setter runs code (its check), which an interrupt can stop: it goes first,
        and ``t`` and the update count follow in the same statement, so the pair never
        disagrees; on any error all three are put back and a retry is accepted.
        """
        saved = self.optimizer.lr, self.t, self._seen_updates
        try:
            self.optimizer.lr, self.t, self._seen_updates = lr, t, self.optimizer.step_count
        except BaseException:
            self.optimizer.lr, self.t, self._seen_updates = saved
            raise
