"""One update of an accumulation window: validate, then commit.

``UpdateMixin`` is the half of ``Accumulator`` that turns a full window into ONE update:
``prepare`` computes and checks everything that can fail (finiteness and the loss sum in
one read from the device, ``decide``; the divisor, ``scale``; the clip coefficient; the
schedule's next rate; the optimizer's plan) and writes nothing; ``commit`` then writes it
in place with Ctrl-C held. ``NORMALIZE`` and ``ON_NONFINITE`` are the choices of what the
update divides by and of what it does with a window that is not finite.
"""

from dataclasses import dataclass
from fractions import Fraction

from minigrad.accumulate.guard import finite_number, nonfinite
from minigrad.engine import backend, interrupts
from minigrad.optim import in_place
from minigrad.optim.clip import clip_coefficient
from minigrad.optim.optimizer import Optimizer

NORMALIZE = ("items", "micro_batch_mean", "sum")
"""The choices of ``normalize``: ``"items"`` divides the window's summed gradient once by its
item count (the default, right for every split); ``"micro_batch_mean"`` is the textbook mean:
each micro-batch's mean, divided by their number; ``"sum"`` never divides."""
ON_NONFINITE = ("raise", "skip")
"""The choices of ``on_nonfinite``: refuse the update (``FloatingPointError``) or drop it;
either way the parameters, the optimizer and the buffers stay as they were."""
NO_ITEMS = ("the window holds no items (every target is ignore_index), so its mean gradient "
            "is 0 / 0")


@dataclass(frozen=True)
class Ready:
    """One checked update (``Accumulator.prepare``): the optimizer's plan, the schedule's
    next rate, and the window's mean loss per item."""

    plan: object  # None: an optimizer without ``plan`` steps on ``grads`` instead
    lr: object
    mean_loss: object
    grads: list | None = None


class UpdateMixin:
    """The update of ``Accumulator``'s window: divide once, clip, step, schedule, zero.

    A base of ``Accumulator``, which holds what it reads: ``params`` and their ``.grad``
    (the window's sums), ``window``, ``optimizer``, ``scheduler``, ``normalize``,
    ``divided``, ``max_grad_norm`` and ``on_nonfinite``, and what it keeps: ``on_commit``,
    ``commits`` and ``skipped_updates``; ``discard`` drops the window.
    """

    def update(self):
        """Divide once, clip, step, schedule, zero. Returns the window's mean loss per item.

        Returns ``None`` and does nothing when no micro-batch is pending (or when a
        non-finite window is dropped, ``on_nonfinite="skip"``). ``prepare`` computes and
        checks everything that can fail, writing nothing; ``commit`` then writes the
        parameters, the optimizer state and the schedule in place, with Ctrl-C held until
        it ends. On any error before the commit everything, the pending window included, is
        as it was, so a retry applies the window once.
        """
        if self.pending_num_micro_batches == 0:
            return None
        ready = self.prepare()
        if ready is None:
            return None
        self.commit(ready)
        return ready.mean_loss

    def prepare(self, decided=None):
        """Everything an update needs that can fail, nothing written but a refusal's count:
        a ``Ready`` for ``commit``, or ``None`` when the window is dropped because it is not
        finite (``on_nonfinite="skip"``; with ``"raise"``: ``FloatingPointError``).

        The device is read once here (``decide``): whether the gradient sums and the loss
        sum are finite, and the loss sum; ``decided`` gives both instead (MPI's reduction
        knows them from its host buffer)."""
        if self.optimizer is None:
            raise RuntimeError("update() needs an optimizer; this accumulator has none")
        if self.normalize == "items" and self.pending_items == 0:
            return self.refuse(NO_ITEMS)
        finite, loss_sum = self.decide() if decided is None else decided
        if not finite:
            return self.refuse_nonfinite(loss_sum)
        next_lr = self.scheduler.next_lr() if self.scheduler is not None else None
        scale = self.scale()
        present = [p.grad for p in self.params if p.grad is not None]
        coef = None
        if self.max_grad_norm is not None and present:
            coef = clip_coefficient(present, self.max_grad_norm, scale)
        mean_loss = loss_sum / self.pending_items if self.pending_items else float("nan")
        if _plans(self.optimizer):
            return Ready(self.optimizer.plan(scale=scale, coef=coef), next_lr, mean_loss)
        grads = self.gradients()  # an optimizer of its own reads new arrays from .grad
        if coef is not None:
            grads = [None if g is None else g * backend.get_namespace(g).astype(coef, g.dtype)
                     for g in grads]
        return Ready(None, next_lr, mean_loss, grads)

    def commit(self, ready):
        """Write ``ready`` (from ``prepare``): the optimizer's update in place, the schedule,
        what the strategy handed to ``on_commit``, and the window dropped. Ctrl-C waits until
        the block ends; nothing in it can fail or allocates arrays."""
        saved = self.snapshot() if ready.plan is None else None
        try:
            with interrupts.deferred():
                if ready.plan is None:  # an optimizer of its own: it must not write in place
                    for p, g in zip(self.params, ready.grads):
                        p.grad = g
                    self.optimizer.step()
                else:
                    in_place.write(self.optimizer, ready.plan)
                if self.scheduler is not None:
                    self.scheduler.step(ready.lr)
                self.close_commit()
        except BaseException:
            if saved is not None:  # its step() raised: references put back
                self.restore(saved)
            raise

    def close_commit(self):
        """The end of every commit (an update's, or ``accumulated_gradients``' window): what
        the strategy handed to ``on_commit``, the window dropped, the commit counted. The
        caller holds ``interrupts.deferred()``."""
        for action in self.on_commit:
            action()
        self.on_commit = []
        self.discard()
        self.commits += 1

    def decide(self):
        """``(finite, loss_sum)``: whether every gradient sum and the loss sum are finite,
        and the loss sum as a Python number, with ONE read from the device."""
        grads = [p.grad for p in self.params if p.grad is not None]
        loss = self.window.loss_sum
        if isinstance(loss, (int, float, Fraction)):  # on the host (a NumPy float64 is a float)
            loss = loss if isinstance(loss, Fraction) else float(loss)  # as Python's
            return finite_number(loss) and backend.all_finite(grads), loss
        xp = backend.get_namespace(loss)  # the flag and the loss sum joined: one read
        ok = xp.astype(backend.finite_flag([loss, *grads]), loss.dtype)
        ok, value = (float(v) for v in backend.to_numpy(xp.stack([ok, loss])))
        return ok == 1.0, value

    def scale(self):
        """What the window's gradient sums are divided by, as ``normalize`` says; 1 when they
        arrive divided already (``divided``)."""
        if self.divided:
            return 1
        scale = {"items": self.pending_items, "micro_batch_mean": self.pending_num_micro_batches,
                 "sum": 1}[self.normalize]
        if scale == 0 and self.pending_num_micro_batches:
            raise FloatingPointError(NO_ITEMS)
        return scale

    def gradients(self):
        """The window's gradient, divided once as ``normalize`` says (``None`` where absent):
        new arrays (an update divides in its commit instead, into its workspace)."""
        scale = self.scale()
        if scale == 1:
            return [p.grad for p in self.params]
        return [None if p.grad is None else p.grad / scale for p in self.params]

    def refuse_nonfinite(self, loss_sum):
        """``refuse`` a window that ``decide`` found not finite, saying which part was."""
        return self.refuse(nonfinite(loss_sum))

    def refuse(self, reason):
        """A non-finite value: raise ``FloatingPointError`` (``on_nonfinite="raise"``) or
        drop the window, count the skip and return ``None`` (``"skip"``)."""
        if self.on_nonfinite == "raise":
            raise FloatingPointError(f"update refused: {reason}; parameters and optimizer "
                                     "state are unchanged")
        self.skipped_updates += 1
        self.discard()
        return None


def _plans(optimizer):
    """Whether ``optimizer`` updates by ``plan`` and an in-place commit: a minigrad
    optimizer whose ``step`` is its own (a subclass that overrides ``step``, or a duck-typed
    optimizer, is stepped through ``step()`` on divided gradients, as before)."""
    return isinstance(optimizer, Optimizer) and type(optimizer).step is Optimizer.step \
        and "step" not in vars(optimizer)
