"""Dynamic loss scaling, as ``torch.amp.GradScaler``: small gradients survive a
low-precision backward because the loss is multiplied by a large factor ``S`` first.

Per optimizer update (with accumulation: per window, never per micro-batch)::

    loss_j * S       for every micro-batch j       scale(loss), the SAME S for all
    g <- g / S       once, after the window        unscale_(opt), before clipping
    step             only if every g is finite     step(opt); else skipped
    S <- S * 0.5     if a gradient was not finite  update(), once per window
    S <- S * 2       after growth_interval finite updates in a row

A skipped update changes nothing: no parameter, no optimizer state, no ``step_count``
(so no schedule step either). ``S`` is a float32 number, as torch keeps it; with a power of
two, scaling and unscaling are exact unless they overflow or underflow
(``minigrad.studies.precision.sums``).

>>> import numpy as np
>>> from minigrad.engine.tensor import Parameter
>>> from minigrad.optim import SGD
>>> w = Parameter([1.0])
>>> opt, scaler = SGD([w], lr=0.5), GradScaler(init_scale=4.0, growth_interval=1)
>>> w.grad = np.array([np.inf])      # what backward of scaler.scale(loss) gave
>>> scaler.step(opt), opt.step_count  # skipped
(None, 0)
>>> scaler.update(); scaler.get_scale()
2.0
>>> w.grad = np.array([2.0]); scaler.step(opt); scaler.update()
>>> w.data, opt.step_count, scaler.get_scale()
(array([0.5]), 1, 4.0)
"""

import numpy as np

from minigrad.engine import backend, interrupts
from minigrad.optim import _checks

_KEYS = ("scale", "growth_factor", "backoff_factor", "growth_interval", "_growth_tracker")


def _float32(value):
    """``value`` rounded to float32 (torch's scale dtype) as a Python float; inf past the
    largest float32."""
    with np.errstate(over="ignore"):
        return float(np.float32(value))


class GradScaler:
    """Loss scaling with torch's dynamic rule; ``enabled=False`` makes every method a
    pass-through (``scale`` returns the loss, ``step`` steps, ``get_scale`` is 1.0)."""

    def __init__(self, init_scale=2.0**16, growth_factor=2.0, backoff_factor=0.5,
                 growth_interval=2000, enabled=True):
        init_scale = _checks.real("init_scale", init_scale, low=0.0, strict_low=True)
        self.growth_factor = _checks.real("growth_factor", growth_factor, low=1.0,
                                          strict_low=True)
        self.backoff_factor = _checks.real("backoff_factor", backoff_factor, high=1.0,
                                           strict_low=True, strict_high=True)
        self.growth_interval = _checks.integer("growth_interval", growth_interval, low=1)
        self.enabled = _checks.boolean("enabled", enabled)
        self.scale_value = _float32(init_scale)
        self.growth_tracker = 0
        self._found_inf = {}  # id(optimizer) -> found a non-finite gradient; set by unscale_
        self._stepped = set()

    def get_scale(self):
        """The current scale ``S`` (1.0 when disabled)."""
        return self.scale_value if self.enabled else 1.0

    def scale(self, loss):
        """``loss * S`` (a Tensor, array or number); the loss itself when disabled."""
        return loss * self.scale_value if self.enabled else loss

    def unscale_(self, optimizer):
        """Divide every ``p.grad`` of ``optimizer`` by ``S`` (new arrays) and note whether any
        is not finite. At most once per optimizer between two ``update()`` calls."""
        if not self.enabled:
            return
        if id(optimizer) in self._found_inf:
            raise RuntimeError("unscale_() has already been called on this optimizer since "
                               "the last update()")
        params = [p for p in optimizer.params if p.grad is not None]
        unscaled, found_inf = self.unscale([p.grad for p in params])
        for p, g in zip(params, unscaled):
            p.grad = g
        self._found_inf[id(optimizer)] = found_inf

    def unscale(self, grads):
        """``([g / S for g in grads], found_inf)``: new arrays, and whether any is not
        finite. torch multiplies by the float32 reciprocal of ``S``: for a power-of-two
        ``S`` that is the exact division."""
        inv = _float32(1.0 / self.scale_value) if self.enabled else 1.0
        unscaled = [g * backend.get_namespace(g).asarray(inv, dtype=g.dtype,
                                                          device=backend.device(g))
                    for g in grads]
        return unscaled, not backend.all_finite(grads)

    def step(self, optimizer):
        """``optimizer.step()`` on the unscaled gradients, unless one is not finite: then
        nothing happens and it returns ``None`` (skipped)."""
        if not self.enabled:
            return optimizer.step()
        if id(optimizer) in self._stepped:
            raise RuntimeError("step() has already been called since the last update()")
        if id(optimizer) not in self._found_inf:
            self.unscale_(optimizer)
        if self._found_inf[id(optimizer)]:
            self._stepped.add(id(optimizer))
            return None
        with interrupts.deferred():  # a Ctrl-C held by the step's commit arrives after both
            result = optimizer.step()  # all-or-nothing itself; on an error nothing is noted
            self._stepped.add(id(optimizer))
        return result

    def found_inf(self):
        """Whether an optimizer unscaled since the last ``update()`` had a non-finite
        gradient (what makes ``update()`` back off)."""
        return any(self._found_inf.values())

    def update(self, new_scale=None, *, found_inf=None):
        """Once per update (per window): back off if a gradient was not finite, else count
        a success and grow ``S`` after ``growth_interval`` of them in a row (torch's
        ``_amp_update_scale_``); or set ``S = new_scale``. A driver that unscaled the
        window's gradients itself (``minigrad.accumulate.precision``) passes its verdict
        as ``found_inf`` instead of calling ``step``."""
        if not self.enabled:
            return
        found = self.found_inf() if found_inf is None else \
            _checks.boolean("found_inf", found_inf)
        if new_scale is not None:
            scale, tracker = _float32(_checks.real("new_scale", new_scale, strict_low=True)), \
                self.growth_tracker
        elif found_inf is None and not self._found_inf:
            raise RuntimeError("update() found no gradients: call step() or unscale_() "
                               "first, once per window")
        elif found:
            # As torch's kernel: the float32 scale times the double factor, rounded to float32.
            scale, tracker = _float32(self.scale_value * self.backoff_factor), 0
        elif self.growth_tracker + 1 == self.growth_interval:
            grown = _float32(self.scale_value * self.growth_factor)
            scale, tracker = (grown if grown != float("inf") else self.scale_value), 0
        else:
            scale, tracker = self.scale_value, self.growth_tracker + 1
        # One line: an interrupt lands before or after it, never half-way.
        self.scale_value, self.growth_tracker, self._found_inf, self._stepped = \
            scale, tracker, {}, set()

    def state_dict(self):
        """torch's keys: ``scale``, ``growth_factor``, ``backoff_factor``,
        ``growth_interval``, ``_growth_tracker`` (empty when disabled, as torch)."""
        if not self.enabled:
            return {}
        return {"scale": self.scale_value, "growth_factor": self.growth_factor,
                "backoff_factor": self.backoff_factor, "growth_interval": self.growth_interval,
                "_growth_tracker": self.growth_tracker}

    def load_state_dict(self, state):
        """Restore a ``state_dict()``; everything is checked before anything is written."""
        if not isinstance(state, dict):
            raise TypeError(f"state must be a dict (from GradScaler.state_dict()), got "
                            f"{type(state).__name__}")
        if not state:
            raise RuntimeError("the state_dict is empty: it came from a disabled GradScaler")
        missing = [k for k in _KEYS if k not in state]
        if missing:
            raise ValueError(f"state is missing {missing}; it must hold {list(_KEYS)}")
        checked = GradScaler(state["scale"], state["growth_factor"], state["backoff_factor"],
                             state["growth_interval"])
        tracker = _checks.integer("_growth_tracker", state["_growth_tracker"], low=0,
                                  high=checked.growth_interval - 1)
        (self.scale_value, self.growth_factor, self.backoff_factor, self.growth_interval,
         self.growth_tracker) = (checked.scale_value, checked.growth_factor,
                                 checked.backoff_factor, checked.growth_interval, tracker)
