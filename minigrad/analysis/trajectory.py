"""The trajectory bound: how far a run's parameters may drift from a reference run's, update
by update, in floating point (``TrajectoryBound``), replayed beside the two runs by
``TrajectoryReplay`` and, for full-batch against accumulated training, by
``trajectory_bounds``. The gradient bound it starts from is ``minigrad.analysis.bounds``'s.

The bound itself, one optimizer update at a time, is ``update_bound``'s (``TrajectoryBound``,
re-exported here with ``optimizer_kind`` and ``optimizer_state``).
"""

import contextlib
from dataclasses import dataclass

import numpy as np

from minigrad import nn
from minigrad.accumulate import accumulated_gradients, step
from minigrad.analysis.bounds import (
    U64,
    bound_ratio,
    condition_number,
    flat,
    gradient_bound,
    linear_widths,
    per_item_gradients,
    summed_terms,
)
from minigrad.analysis.update_bound import TrajectoryBound, optimizer_kind, optimizer_state


class Diverged(FloatingPointError):
    """A run's loss or gradient stopped being finite: ``run`` ("full-batch", "accumulated",
    or as ``TrajectoryReplay``'s ``runs`` name it) at ``update`` (from 1), for ``reason``."""

    def __init__(self, run, update, reason):
        super().__init__(f"the {run} run stopped at update {update}: {reason}")
        self.run, self.update = run, update


@contextlib.contextmanager
def _run(name, t):
    try:
        yield
    except FloatingPointError as err:
        reason = str(err).split(";")[0].removeprefix("update refused: ")
        raise Diverged(name, t + 1, reason) from err


@contextlib.contextmanager
def _buffers_kept(model):
    # A measurement runs training-mode forwards, which move BatchNorm's running statistics;
    # buffers are replaced, never written into, so keeping the references keeps the values.
    saved = dict(model.named_buffers())
    try:
        yield
    finally:
        model.set_buffers(saved)


@dataclass(frozen=True)
class Observation:
    """One update of a replay: ``step`` (counted from 1) and, flat over all parameters,
    ``gap`` = |theta_other - theta_ref| after it and its elementwise ``bound``."""

    step: int
    gap: np.ndarray
    bound: np.ndarray

    @property
    def max_abs(self):
        """The largest gap."""
        return float(np.max(self.gap))

    @property
    def ratio(self):
        """max gap / bound (``bound_ratio``): the bound holds where it is <= 1."""
        return bound_ratio(self.gap, self.bound)


class TrajectoryReplay:
    """The trajectory bound of another run against a reference run, one update at a time.

    Built from the reference run's ``model``, ``optimizer`` and ``loss``. For each update,
    in order: ``measure(model, x, y)`` before it, on a model holding the other run's
    parameters (its gradient bound and the curvature term of dg_t, measured in full-batch
    computations); then the caller runs both updates; then ``observe(theta)``, with the
    other run's parameters after it (flat, ``flat`` order), returns its ``Observation``.
    ``runs`` names the reference and the other run in ``Diverged``. ``rounding(model, x, y,
    t)``, where given, is the gradient bound at the other run's parameters (name -> array) in
    place of ``bounds.gradient_bound`` over per-item gradients (one backward pass per item):
    a model with a bound of its own, the language model's per-token one, say.
    """

    def __init__(self, model, optimizer, loss, *, max_grad_norm=None, u=U64,
                 runs=("full-batch", "accumulated"), rounding=None):
        self.model, self.optimizer, self.loss, self.runs = model, optimizer, loss, runs
        self.rounding = rounding if rounding is not None else self._per_item
        self.bound = TrajectoryBound(optimizer_kind(optimizer), optimizer.hyperparams,
                                     max_grad_norm, u)
        self.batch_norm = any(isinstance(m, nn.BatchNorm1d) for _, m in model.named_modules())
        self.updates, self._measured = 0, None

    def measure(self, model, x, y):
        """Before the update: dg = gradient_bound(at theta_other) + |g_ref(theta_other) -
        g_ref(theta_ref)|, and the reference's parameters, gradient, state and lr."""
        t, (reference, other) = self.updates, self.runs
        if self._measured is not None:
            raise RuntimeError(f"measure(model, x, y) was called twice for update {t + 1}: "
                               f"observe(theta) comes after the update")
        shapes = [tuple(p.shape) for p in self.model.parameters()]
        if [tuple(p.shape) for p in model.parameters()] != shapes:
            raise ValueError(f"model must hold parameters of the reference's shapes {shapes}, "
                             f"got {[tuple(p.shape) for p in model.parameters()]}")
        with _buffers_kept(self.model), _run(reference, t):
            g = flat(accumulated_gradients(self.model, self.loss, x, y, step_index=t).values())
        with _buffers_kept(model), _run(other, t):
            g_at = flat(accumulated_gradients(model, self.loss, x, y, step_index=t).values())
            rounding = self.rounding(model, x, y, t)
        self._measured = {"dg": flat(rounding.values()) + np.abs(g_at - g), "g": g,
                          "theta": flat(p.data for p in self.model.parameters()),
                          "before": optimizer_state(self.optimizer), "lr": self.optimizer.lr,
                          "steps": self.optimizer.step_count}

    def _per_item(self, model, x, y, t):
        """``bounds.gradient_bound`` at ``model``'s parameters, from its per-item gradients."""
        return gradient_bound(per_item_gradients(model, self.loss, x, y, t),
                              self.loss.num_items(y), linear_widths(model),
                              condition_number(model, self.loss, x, y, t),
                              x.shape[0] if self.batch_norm else 0, u=self.bound.u,
                              terms=summed_terms(x))

    def observe(self, theta):
        """After the update (the reference's and the other run's): its ``Observation``."""
        measured, t = self._measured, self.updates
        if measured is None:
            raise RuntimeError(f"observe(theta) of update {t + 1} needs measure(model, x, y) "
                               f"before the update")
        steps = self.optimizer.step_count - measured["steps"]
        if steps != 1:
            raise RuntimeError(f"observe(theta) comes after one update of the reference run; "
                               f"its optimizer made {steps} since measure(model, x, y)")
        theta = np.asarray(theta)
        if theta.shape != measured["theta"].shape:
            raise ValueError(f"theta must be the other run's parameters, flat: shape "
                             f"{measured['theta'].shape}, got {theta.shape}")
        bound = self.bound.update(measured["dg"], measured["theta"], measured["g"],
                                  measured["before"], optimizer_state(self.optimizer),
                                  measured["lr"])
        self.updates, self._measured = t + 1, None
        return Observation(t + 1, np.abs(theta - flat(p.data for p in self.model.parameters())),
                           bound)


def trajectory_bounds(make, make_optimizer, loss, batches, sizes, *, max_grad_norm=None,
                      make_scheduler=None, normalize="items", strategy="micro", u=U64):
    """Full-batch and accumulated training side by side from the same start, one update per
    ``(x, y)`` of ``batches``, as ``trajectory_report`` runs them; the accumulated run splits
    each batch into micro-batches of ``sizes``.

    After each update yields ``(full, acc, bound)``: the two models and the elementwise
    bound on |theta_acc - theta_full| (flat over all parameters, ``flat`` order). A run whose
    loss or gradient stops being finite raises ``Diverged`` naming it.
    """
    full, acc = make(), make()
    opts = {"full": make_optimizer(full.parameters()), "acc": make_optimizer(acc.parameters())}
    scheds = {key: make_scheduler(opt) if make_scheduler else None for key, opt in opts.items()}
    replay = TrajectoryReplay(full, opts["full"], loss, max_grad_norm=max_grad_norm, u=u)
    for t, (x, y) in enumerate(batches):
        assert opts["acc"].lr == opts["full"].lr
        replay.measure(acc, x, y)
        with _run("full-batch", t):
            step(full, loss, opts["full"], x, y, max_grad_norm=max_grad_norm,
                 scheduler=scheds["full"])
        with _run("accumulated", t):
            step(acc, loss, opts["acc"], x, y, sizes=sizes, normalize=normalize,
                 strategy=strategy, max_grad_norm=max_grad_norm, scheduler=scheds["acc"])
        yield full, acc, replay.observe(flat(p.data for p in acc.parameters())).bound
