"""The streaming accumulator: micro-batches added one at a time, one update per window."""

from dataclasses import dataclass

from minigrad import nn
from minigrad.accumulate.split import micro_batches
from minigrad.engine import backend
from minigrad.nn import functional as F
from minigrad.optim import clip_grad_norm_

NORMALIZE = ("items", "micro_batches", "sum")
ON_NONFINITE = ("raise", "skip")


def as_loss(loss_fn):
    """A loss object with ``(input, target, reduction=...)`` and ``num_items(target)``."""
    if hasattr(loss_fn, "num_items"):
        return loss_fn
    if loss_fn is F.cross_entropy:
        return nn.CrossEntropyLoss()
    if loss_fn is F.mse_loss:
        return nn.MSELoss()
    raise TypeError("loss_fn must be functional.cross_entropy, functional.mse_loss or a loss "
                    "with num_items(target), such as nn.CrossEntropyLoss(ignore_index=...)")


def _all_finite(arrays):
    for a in arrays:
        if backend.is_exact(a):
            continue  # Fractions are always finite
        xp = backend.get_namespace(a)
        if not bool(xp.all(xp.isfinite(a))):
            return False
    return True


@dataclass(frozen=True)
class Window:
    """What the pending window holds: micro-batches, samples, items and their loss sum.

    Replaced, never mutated, so keeping a reference is a snapshot. ``loss_sum`` starts as
    the int 0, so exact (Fraction) losses stay exact.
    """

    items: int = 0
    micro_batches: int = 0
    samples: int = 0
    loss_sum: object = 0


class Accumulator:
    """Streaming accumulation for loops where micro-batches arrive one at a time.

    ``add(x, y)`` runs forward and backward on one micro-batch and adds its per-item loss
    sum's gradient into ``.grad``; ``update()`` divides once by what the window holds,
    clips, steps the optimizer and the schedule, and zeroes the gradients. With
    ``every=k`` an update happens by itself after every k-th micro-batch; a short final
    window is flushed by calling ``update()`` and scaled by the items it actually holds.
    """

    def __init__(self, model, loss_fn, optimizer, *, every=None, normalize="items",
                 max_grad_norm=None, scheduler=None, on_nonfinite="raise", step_index=0):
        if normalize not in NORMALIZE:
            raise ValueError(f"normalize must be one of {NORMALIZE}, got {normalize!r}")
        if on_nonfinite not in ON_NONFINITE:
            raise ValueError(f"on_nonfinite must be one of {ON_NONFINITE}, got {on_nonfinite!r}")
        if every is not None and (not isinstance(every, int) or every < 1):
            raise ValueError(f"every must be a positive int or None, got {every!r}")
        if max_grad_norm is not None and not max_grad_norm > 0:
            raise ValueError(f"max_grad_norm must be positive or None, got {max_grad_norm!r}")
        self.model, self.loss, self.optimizer = model, as_loss(loss_fn), optimizer
        self.every, self.normalize, self.max_grad_norm = every, normalize, max_grad_norm
        self.scheduler, self.on_nonfinite = scheduler, on_nonfinite
        self.params = model.parameters()
        self.window = Window()
        self.skipped_updates = 0
        self.step_index = step_index  # the dropout key's step when there is no optimizer

    pending_items = property(lambda self: self.window.items)
    pending_micro_batches = property(lambda self: self.window.micro_batches)
    pending_samples = property(lambda self: self.window.samples)
    pending_loss_sum = property(lambda self: self.window.loss_sum)

    # ----- one micro-batch ---------------------------------------------------------------
    def add(self, x, y, sample_index=None):
        """Forward and backward on one micro-batch; returns its loss sum (a float), or
        ``None`` when a non-finite loss made it drop the window (``on_nonfinite="skip"``).

        Dropout masks are keyed by the update count and ``sample_index`` (default: the
        running position of these samples within the window). If the loss is not finite,
        the micro-batch is not added: with ``on_nonfinite="raise"`` a ``FloatingPointError``
        leaves the accumulator as it was before this call; with ``"skip"`` the whole
        window is dropped.
        """
        saved = self._snapshot()
        try:
            loss_sum = self._forward_backward(x, y, sample_index)
        except Exception:
            self._restore(saved)
            raise
        if loss_sum is None:
            # Skipped: the window is dropped, and this micro-batch's forward must not leave
            # NaN in the running statistics either.
            self._restore(saved)
            self.discard()
            return None
        if self.every is not None and self.pending_micro_batches == self.every:
            self.update()
        return loss_sum

    def _forward_backward(self, x, y, sample_index):
        xp = backend.get_namespace(x)
        n = x.shape[0]
        if sample_index is None:
            start = self.pending_samples
            sample_index = xp.arange(start, start + n, device=backend.device(x))
        step_index = self.optimizer.step_count if self.optimizer is not None else self.step_index
        with nn.dropout_keys(step_index, sample_index):
            out = self.model(x)
        loss_sum = self.loss(out, y, reduction="sum")
        items = self.loss.num_items(y)
        value = loss_sum.item()
        if not _all_finite([loss_sum.data]):
            return self._refuse(f"loss of a micro-batch is {value}")
        objective = loss_sum
        if self.normalize == "micro_batches":
            # The textbook loop: this micro-batch's mean. When all its targets are ignored,
            # torch's mean is NaN with a zero gradient: the micro-batch adds nothing.
            objective = loss_sum / items if items else loss_sum * 0.0
        objective.backward()
        w = self.window
        self.window = Window(w.items + items, w.micro_batches + 1, w.samples + n,
                             w.loss_sum + value)
        return value

    # ----- one update ---------------------------------------------------------------------
    def update(self):
        """Divide once, clip, step, schedule, zero. Returns the window's mean loss per item.

        Returns ``None`` and does nothing when no micro-batch is pending.
        """
        if self.pending_micro_batches == 0:
            return None
        if self.normalize == "items" and self.pending_items == 0:
            return self._refuse("the window holds no items (every target is ignore_index), "
                                "so its mean gradient is 0 / 0")
        if not _all_finite([p.grad for p in self.params if p.grad is not None]):
            return self._refuse("the accumulated gradient is not finite")
        sums = [p.grad for p in self.params]
        for p, g in zip(self.params, self.gradients()):
            p.grad = g
        try:
            if self.max_grad_norm is not None:
                clip_grad_norm_(self.params, self.max_grad_norm)
            self.optimizer.step()  # checks everything before it writes anything
        except Exception:
            for p, g in zip(self.params, sums):
                p.grad = g  # the window is still pending, as sums, as it was
            raise
        if self.scheduler is not None:
            self.scheduler.step()
        mean_loss = self.pending_loss_sum / self.pending_items if self.pending_items \
            else float("nan")
        self.discard()
        return mean_loss

    def gradients(self):
        """The window's gradient, divided once as ``normalize`` says (``None`` where absent)."""
        scale = {"items": self.pending_items, "micro_batches": self.pending_micro_batches,
                 "sum": 1}[self.normalize]
        if scale == 1:
            return [p.grad for p in self.params]
        return [None if p.grad is None else p.grad / scale for p in self.params]

    def discard(self):
        """Drop the pending window: gradients to ``None``, counts to zero."""
        for p in self.params:
            p.grad = None
        self.window = Window()

    def _refuse(self, reason):
        if self.on_nonfinite == "raise":
            raise FloatingPointError(f"update refused: {reason}; parameters and optimizer "
                                     "state are unchanged")
        self.skipped_updates += 1
        self.discard()
        return None

    # ----- state -------------------------------------------------------------------------
    def _snapshot(self):
        # Gradients are replaced, never mutated, so keeping references is a snapshot.
        return [p.grad for p in self.params], dict(self.model.named_buffers()), self.window

    def _restore(self, saved):
        grads, buffers, self.window = saved
        for p, g in zip(self.params, grads):
            p.grad = g
        self.model.set_buffers(buffers)

    def state_dict(self):
        """Pending gradients (``None`` where absent) and counts: enough to resume mid-window."""
        return {"grads": [p.grad for p in self.params],
                "pending_items": self.pending_items,
                "pending_micro_batches": self.pending_micro_batches,
                "pending_samples": self.pending_samples,
                "pending_loss_sum": self.pending_loss_sum,
                "skipped_updates": self.skipped_updates}

    def load_state_dict(self, state):
        grads = list(state["grads"])
        if len(grads) != len(self.params):
            raise ValueError(f"accumulator state holds {len(grads)} gradients, the model has "
                             f"{len(self.params)} parameters")
        staged = []
        for i, (p, g) in enumerate(zip(self.params, grads)):
            if g is not None:
                g = backend.move(g, p.xp, device=p.device)
                if tuple(g.shape) != p.shape:
                    raise ValueError(f"accumulator gradient {i} has shape {tuple(g.shape)}, "
                                     f"parameter has {p.shape}")
                g = p.xp.astype(g, p.dtype)
            staged.append(g)
        for p, g in zip(self.params, staged):
            p.grad = g
        self.window = Window(int(state["pending_items"]), int(state["pending_micro_batches"]),
                             int(state["pending_samples"]), float(state["pending_loss_sum"]))
        self.skipped_updates = int(state["skipped_updates"])


def run_window(acc, x, y, sizes):
    """Add every micro-batch of ``(x, y)`` split by ``sizes`` to ``acc``, then update.

    Returns the window's mean loss, or ``None`` if a non-finite value made ``acc`` skip.
    """
    for _, xj, yj in micro_batches(x, y, sizes):
        if acc.add(xj, yj) is None:
            return None
    return acc.update()
