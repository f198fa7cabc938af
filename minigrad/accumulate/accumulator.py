"""The Accumulator counts one window: the per-item gradient sums (in ``.grad``), the item
count and the loss sum (its ``Window`` record); ``snapshot``/``restore`` make every driver
all-or-nothing, and ``state_dict``/``load_state_dict`` save and resume it mid-window. What
it does with a full window, divide once, clip, step and schedule, is its ``update``, in
``minigrad.accumulate.commit``. Running forward and backward on a micro-batch is the other
job, done by ``minigrad.accumulate.micro`` (``add`` is the streaming loop's checked door to
it)."""

from dataclasses import dataclass, replace
from fractions import Fraction

from minigrad import nn
from minigrad.accumulate.commit import NORMALIZE, ON_NONFINITE, UpdateMixin
from minigrad.accumulate.guard import (
    TrainingState,
    as_batch,
    as_loss,
    check_optimizer,
    check_scheduler,
    finite_number,
)
from minigrad.accumulate.micro import add_micro_batch
from minigrad.accumulate.split import MicroBatch, positions
from minigrad.engine import backend, validate
from minigrad.nn import functional as F


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


class Accumulator(UpdateMixin):
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

    def discard(self):
        """Drop the pending window: gradients to ``None``, counts to zero."""
        for p in self.params:
            p.grad = None
        self.window = Window()

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
