"""The Accumulator counts one window: the per-item gradient sums (in ``.grad``), the item
count and the loss sum; it divides once, clips, steps and schedules in ``update``, and
``snapshot``/``restore`` make every driver all-or-nothing. Running forward and backward on
a micro-batch is the other job, done by ``minigrad.accumulate.micro`` (``add`` is the
streaming loop's checked door to it)."""

from dataclasses import dataclass, replace
from fractions import Fraction

from minigrad import nn
from minigrad.accumulate.guard import (
    TrainingState,
    as_batch,
    check_optimizer,
    check_scheduler,
    finite_number,
    nonfinite,
)
from minigrad.accumulate.micro import add_micro_batch
from minigrad.accumulate.split import MicroBatch, positions
from minigrad.engine import backend, interrupts, validate
from minigrad.nn import functional as F
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


def as_loss(loss_fn):
    """A loss object with ``(input, target, reduction=...)`` and ``num_items(target)``."""
    if isinstance(loss_fn, type):
        raise TypeError(f"loss_fn must be a loss object, got the class {loss_fn.__name__}; "
                        f"pass an instance, e.g. {loss_fn.__name__}()")
    if hasattr(loss_fn, "num_items"):
        return loss_fn
    if loss_fn is F.cross_entropy:
        return nn.CrossEntropyLoss()
    if loss_fn is F.mse_loss:
        return nn.MSELoss()
    raise TypeError("loss_fn must be functional.cross_entropy, functional.mse_loss or a loss "
                    "with num_items(target), such as nn.CrossEntropyLoss(ignore_index=...)")


@dataclass(frozen=True)
class Ready:
    """One checked update (``Accumulator.prepare``): the optimizer's plan, the schedule's
    next rate, and the window's mean loss per item."""

    plan: object  # None: an optimizer without ``plan`` steps on ``grads`` instead
    lr: object
    mean_loss: object
    grads: list | None = None


@dataclass(frozen=True)
class Window:
    """What the pending window holds: micro-batches, samples, items and their loss sum.

    Replaced, never mutated, so keeping a reference is a snapshot. ``loss_sum`` starts as
    the int 0, so exact (Fraction) losses stay exact.
    """

    items: int = 0
    num_micro_batches: int = 0
    samples: int = 0
    loss_sum: object = 0

    def __add__(self, other):
        return Window(self.items + other.items,
                      self.num_micro_batches + other.num_micro_batches,
                      self.samples + other.samples, self.loss_sum + other.loss_sum)


class Accumulator:
    """One accumulation window at a time: per-item gradient sums, counts, ONE update.

    ``add(x, y)`` runs forward and backward on one micro-batch and adds its per-item loss
    sum's gradient into ``.grad``; ``update()`` divides once by what the window holds,
    clips, steps the optimizer and the schedule, and zeroes the gradients. With
    ``every=k`` an update happens by itself after every k-th micro-batch; a short final
    window is flushed by calling ``update()`` and scaled by the items it actually holds.

    Every call is all-or-nothing: if it raises anything (``KeyboardInterrupt`` included),
    the parameters, ``.grad``, buffers, optimizer, schedule and the pending window are as
    they were before the call, or, where the call made an update (``update()``, or
    ``add()`` with ``every``) and a Ctrl-C arrived during its commit, as they are after that
    update (the interrupt is held until the update's last write, then raised). The
    optimizer must hold parameters of ``model`` (all of them, or some to train only those),
    and the scheduler must drive that optimizer. An optimizer of your own (one that
    overrides ``step``) is stepped on divided gradients; its ``step`` must not fail after it
    has written anything in place, since that cannot be undone.

    Drivers that run a whole window (``accumulate.step`` and its strategies) use the
    counting half directly: ``record`` counts what a backward pass added, ``load_sums``
    takes sums reduced across processes, and ``snapshot``/``restore`` put everything back.
    ``divided=True`` says that the window's sums arrive divided by its item count already
    (the driver passes a strategy's ``divided``): the update then divides them by 1.
    """

    def __init__(self, model, loss_fn, optimizer, *, every=None, normalize="items",
                 max_grad_norm=None, scheduler=None, on_nonfinite="raise", step_index=0,
                 divided=False):
        self.normalize = validate.choice("normalize", normalize, NORMALIZE)
        self.divided = validate.boolean("divided", divided)
        self.on_nonfinite = validate.choice("on_nonfinite", on_nonfinite, ON_NONFINITE)
        self.every = validate.optional(validate.positive_int, "every", every)
        self.max_grad_norm = validate.optional(validate.real, "max_grad_norm", max_grad_norm,
                                               strict_low=True)
        self.step_index = validate.integer("step_index", step_index, low=0)
        if not isinstance(model, nn.Module):
            raise TypeError(f"model must be an nn.Module, got {type(model).__name__}")
        self.params = model.parameters()
        check_optimizer(optimizer, self.params)
        check_scheduler(scheduler, optimizer)
        self.model, self.loss, self.optimizer = model, as_loss(loss_fn), optimizer
        self.scheduler = scheduler
        self.window = Window()
        self.skipped_updates = 0
        self.on_commit = []  # what a strategy must write with the update (see commit)
        self.commits = 0  # updates committed: a snapshot taken before one cannot undo it
        self.counts = None  # items per sample of a driver's batch (read_labels)

    pending_items = property(lambda self: self.window.items)
    pending_num_micro_batches = property(lambda self: self.window.num_micro_batches)
    pending_samples = property(lambda self: self.window.samples)
    pending_loss_sum = property(lambda self: self.window.loss_sum)

    @property
    def update_count(self):
        """The update this window will make (the optimizer's step count, else
        ``step_index``): with the sample index, what keys the dropout masks."""
        return self.optimizer.step_count if self.optimizer is not None else self.step_index

    # ----- one micro-batch, checked: the streaming loop -----------------------------------
    def add(self, x, y, sample_index=None):
        """Forward and backward on one micro-batch; returns its loss sum (a float), or
        ``None`` when a non-finite loss made it drop the window (``on_nonfinite="skip"``).

        Dropout masks are keyed by the update count and ``sample_index`` (default: the
        running position of these samples within the window). If the loss is not finite,
        the micro-batch is not added: with ``on_nonfinite="raise"`` a ``FloatingPointError``
        leaves the accumulator as it was before this call; with ``"skip"`` the whole
        window is dropped.
        """
        x, y = as_batch(x, y)
        self.check_exact(x, y)
        if sample_index is None:
            sample_index = positions(x, self.pending_samples)
        else:
            sample_index = F.check_sample_index(sample_index, x)
        saved = self.snapshot()
        try:
            pending = self.window.loss_sum
            loss_sum = add_micro_batch(self, MicroBatch(x, y, sample_index))
            if not isinstance(loss_sum, (int, float, Fraction)):
                loss_sum = float(backend.to_numpy(loss_sum))  # this call returns it: a read
                self.window = replace(self.window, loss_sum=pending + loss_sum)  # on the host
            if not finite_number(loss_sum):
                # Not added (nor NaN left in the running statistics by its forward); then
                # FloatingPointError, or the window is dropped and the skip counted.
                self.restore(saved)
                return self.refuse(f"loss of a micro-batch is {loss_sum}")
            if self.every is not None and self.pending_num_micro_batches == self.every:
                self.update()
        except BaseException:
            self.restore(saved)
            raise
        return loss_sum

    def read_labels(self, y):
        """Read the whole batch's targets once, for a driver that splits it: the loss then
        checks each micro-batch from that read and ``counts`` holds each sample's items
        (a loss without ``for_batch`` reads per micro-batch, as before)."""
        self.counts = None
        if callable(getattr(self.loss, "for_batch", None)):
            self.loss, self.counts = self.loss.for_batch(y)

    def check_exact(self, x, y):
        """Exact (Fraction) parameters need exact or integer data: refuse floats."""
        if any(backend.is_exact(p.data) for p in self.params):
            for name, a in (("x", x), ("y", y)):
                if not (backend.is_exact(a) or backend.get_namespace(a).isdtype(a.dtype,
                                                                                "integral")):
                    raise TypeError(f"the parameters are exact Fractions but {name} has dtype "
                                    f"{a.dtype}: convert it with analysis.exact.to_fractions")

    # ----- counting ------------------------------------------------------------------------
    def record(self, items, samples, loss_sum, num_micro_batches=1):
        """Count what a backward pass just added into ``.grad``: its items, samples and
        loss sum (a strategy calls this once per micro-batch it back-propagated)."""
        self.window = self.window + Window(items, num_micro_batches, samples, loss_sum)

    def load_sums(self, grads, window):
        """Replace the window's gradient sums (``None`` where a parameter got none) and its
        counts by ``grads`` and ``window``: what a reduction added up over processes."""
        for p, g in zip(self.params, grads):
            p.grad = g
        self.window = window

    # ----- one update: validate, then commit -------------------------------------------
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

    def discard(self):
        """Drop the pending window: gradients to ``None``, counts to zero."""
        for p in self.params:
            p.grad = None
        self.window = Window()

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

    # ----- state -------------------------------------------------------------------------
    def snapshot(self):
        """Everything a call may change (parameters, ``.grad``, buffers, the window, the
        optimizer and the schedule), by reference: arrays are replaced, never mutated, so
        this is cheap. ``restore`` puts it back; every driver brackets its work with them."""
        return TrainingState.of(self)

    def restore(self, saved):
        """Put back what ``snapshot()`` returned."""
        saved.restore(self)

    def state_dict(self):
        """Pending gradients (``None`` where absent) and counts: enough to resume mid-window."""
        return {"grads": [p.grad for p in self.params],
                "pending_items": self.pending_items,
                "pending_num_micro_batches": self.pending_num_micro_batches,
                "pending_samples": self.pending_samples,
                "pending_loss_sum": self.pending_loss_sum,
                "skipped_updates": self.skipped_updates}

    def load_state_dict(self, state):
        """Restore a ``state_dict()``; everything is checked before anything is written. A
        state saved before the count of micro-batches got its name (``"pending_micro_batches"``)
        loads too."""
        if isinstance(state, dict) and "pending_num_micro_batches" not in state \
                and "pending_micro_batches" in state:
            state = {("pending_num_micro_batches" if k == "pending_micro_batches" else k): v
                     for k, v in state.items()}
        keys = ("grads", "pending_items", "pending_num_micro_batches", "pending_samples",
                "pending_loss_sum", "skipped_updates")
        if not isinstance(state, dict) or any(k not in state for k in keys):
            missing = [k for k in keys if not isinstance(state, dict) or k not in state]
            raise ValueError(f"accumulator state must be a dict with {list(keys)}; "
                             f"missing {missing}")
        grads = state["grads"]
        if not isinstance(grads, (list, tuple)) or len(grads) != len(self.params):
            count = len(grads) if isinstance(grads, (list, tuple)) else type(grads).__name__
            raise ValueError(f"accumulator state holds {count} gradients, the model has "
                             f"{len(self.params)} parameters")
        staged = [None if g is None else backend.like(g, p.data, f"accumulator gradient {i}")
                  for i, (p, g) in enumerate(zip(self.params, grads))]
        counts = [validate.integer(k, state[k], low=0) for k in keys[1:4]]
        loss_sum = state["pending_loss_sum"]
        if not isinstance(loss_sum, Fraction):
            loss_sum = validate.real("pending_loss_sum", loss_sum, low=None)
        skipped = validate.integer("skipped_updates", state["skipped_updates"], low=0)
        window = Window(*counts, loss_sum)
        if (window.num_micro_batches == 0) != (window.samples == 0) or window.items > 0 and \
                window.num_micro_batches == 0:
            raise ValueError(f"accumulator counts do not fit together: {window}")
        saved = self.snapshot()
        try:
            for p, g in zip(self.params, staged):
                p.grad = g
            self.window, self.skipped_updates = window, skipped
        except BaseException:
            self.restore(saved)
            raise


def _plans(optimizer):
    """Whether ``optimizer`` updates by ``plan`` and an in-place commit: a minigrad
    optimizer whose ``step`` is its own (a subclass that overrides ``step``, or a duck-typed
    optimizer, is stepped through ``step()`` on divided gradients, as before)."""
    return isinstance(optimizer, Optimizer) and type(optimizer).step is Optimizer.step \
        and "step" not in vars(optimizer)
