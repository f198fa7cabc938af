"""Gradient accumulation: many micro-batches, ONE optimizer update.

For a global batch B split into micro-batches B_1..B_k of any sizes and a loss that is a
mean over items (samples, or non-ignored targets), the full-batch gradient is

    g = (1 / |items(B)|) * sum_j sum_{i in B_j} grad l_i

so the rule is: accumulate per-item SUMS, divide ONCE by the item count of the whole
window (``normalize="items"``, the default, right for every split). The textbook loop,
each micro-batch mean divided by k (``normalize="micro_batches"``), is kept by name for
teaching: it is wrong for uneven splits and for ``ignore_index``. ``"sum"`` never divides.

Everything that happens "per step" happens once per optimizer update:

============================  =============================================  =========
what                          when                                           how often
============================  =============================================  =========
zeroing of gradients          after each update (and before ``step``)        1 / update
division by the item count    on the summed gradient, just before clipping   1 / update
gradient clipping             on the accumulated, divided gradient           1 / update
optimizer step (Adam's t,     ``optimizer.step()``                           1 / update
weight decay, momentum)
learning-rate schedule        ``scheduler.step()`` after the update          1 / update
dropout masks                 keyed by (seed, update count, sample index)    1 / update
BatchNorm running statistics  every forward in training mode                 k / update
============================  =============================================  =========

The last row is the exception minigrad shows rather than hides: BatchNorm couples the
samples of a micro-batch, so accumulated BatchNorm training is not full-batch training.

A non-finite loss or gradient never reaches the parameters: the update is refused
(``FloatingPointError``) or, with ``on_nonfinite="skip"``, dropped; the parameters, the
optimizer, the schedule and the model's buffers stay exactly as they were.
"""

from minigrad import backend, nn
from minigrad.nn import functional as F
from minigrad.optim import clip_grad_norm_

NORMALIZE = ("items", "micro_batches", "sum")
ON_NONFINITE = ("raise", "skip")


def split_sizes(n, micro_batch_size=None, num_micro_batches=None):
    """Sizes of the micro-batches that split ``n`` items, in order.

    By ``micro_batch_size`` (the last one may be smaller) or into ``num_micro_batches``
    near-equal parts (the first ``n % k`` get one more); neither: one batch of ``n``.

    >>> split_sizes(10, micro_batch_size=4)
    [4, 4, 2]
    >>> split_sizes(10, num_micro_batches=4)
    [3, 3, 2, 2]
    """
    if micro_batch_size is not None and num_micro_batches is not None:
        raise ValueError("give micro_batch_size or num_micro_batches, not both")
    if micro_batch_size is not None:
        if not isinstance(micro_batch_size, int) or micro_batch_size < 1:
            raise ValueError(f"micro_batch_size must be a positive int, got {micro_batch_size!r}")
        return [min(micro_batch_size, n - start) for start in range(0, n, micro_batch_size)]
    if num_micro_batches is not None:
        if not isinstance(num_micro_batches, int) or not 1 <= num_micro_batches <= n:
            raise ValueError(f"num_micro_batches must be an int in [1, {n}], "
                             f"got {num_micro_batches!r}")
        q, r = divmod(n, num_micro_batches)
        return [q + 1] * r + [q] * (num_micro_batches - r)
    return [n]


def micro_batches(x, y, sizes):
    """Yield ``(start, x_j, y_j)`` for consecutive slices of the given ``sizes``."""
    if sum(sizes) != x.shape[0] or any(s < 1 for s in sizes):
        raise ValueError(f"micro-batch sizes {list(sizes)} must be positive and sum to the "
                         f"batch size {x.shape[0]}")
    start = 0
    for size in sizes:
        stop = start + size
        yield start, x[start:stop, ...], y[start:stop, ...]
        start = stop


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
        xp = backend.namespace(a)
        if not bool(xp.all(xp.isfinite(a))):
            return False
    return True


class Accumulator:
    """Streaming accumulation for loops where micro-batches arrive one at a time.

    ``add(x, y)`` runs forward and backward on one micro-batch and adds its per-item loss
    sum's gradient into ``.grad``; ``update()`` divides once by what the window holds,
    clips, steps the optimizer and the schedule, and zeroes the gradients. With
    ``every=k`` an update happens by itself after every k-th micro-batch; a short final
    window is flushed by calling ``update()`` and scaled by the items it actually holds.
    """

    def __init__(self, model, loss_fn, optimizer, *, every=None, normalize="items",
                 max_grad_norm=None, scheduler=None, on_nonfinite="raise"):
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
        self.pending_items = 0
        self.pending_micro_batches = 0
        self.pending_samples = 0
        self.pending_loss_sum = 0  # an int, so exact (Fraction) losses stay exact
        self.skipped_updates = 0
        self.step_index = 0  # the dropout key's step when there is no optimizer

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
        xp = backend.namespace(x)
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
        self.pending_items += items
        self.pending_micro_batches += 1
        self.pending_samples += n
        self.pending_loss_sum += value
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
        self.pending_items = self.pending_micro_batches = self.pending_samples = 0
        self.pending_loss_sum = 0

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
        return ([p.grad for p in self.params], dict(self.model.named_buffers()),
                (self.pending_items, self.pending_micro_batches, self.pending_samples,
                 self.pending_loss_sum))

    def _restore(self, saved):
        grads, buffers, counts = saved
        for p, g in zip(self.params, grads):
            p.grad = g
        for prefix, module in self.model.named_modules():
            for name in module._buffers:
                key = f"{prefix}.{name}" if prefix else name
                if key in buffers:
                    module._buffers[name] = buffers[key]
        (self.pending_items, self.pending_micro_batches, self.pending_samples,
         self.pending_loss_sum) = counts

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
        self.pending_items = int(state["pending_items"])
        self.pending_micro_batches = int(state["pending_micro_batches"])
        self.pending_samples = int(state["pending_samples"])
        self.pending_loss_sum = float(state["pending_loss_sum"])
        self.skipped_updates = int(state["skipped_updates"])


def step(model, loss_fn, optimizer, x, y, *, micro_batch_size=None, num_micro_batches=None,
         sizes=None, normalize="items", max_grad_norm=None, scheduler=None,
         on_nonfinite="raise", batchnorm="micro"):
    """Exactly ONE optimizer update from the whole ``(x, y)``; returns its mean loss per item.

    The batch is split by ``micro_batch_size``, ``num_micro_batches`` or explicit ``sizes``
    (none of them: full-batch training). Any stale gradients are dropped first. If any
    micro-batch fails or is not finite, nothing is updated (see the module docstring).

    ``batchnorm="micro"`` lets BatchNorm use each micro-batch's statistics, as every
    framework does (not equivalent to full batch); ``"exact"`` runs the extra passes of
    ``minigrad.exact_batchnorm`` so the update equals the full-batch one (``normalize``
    must then be ``"items"``).

    >>> import numpy as np
    >>> from minigrad import nn, optim
    >>> model = nn.MLP([2, 4, 1], seed=0)
    >>> opt = optim.SGD(model.parameters(), lr=0.1)
    >>> x, y = np.ones((6, 2)), np.zeros((6, 1))
    >>> loss = step(model, nn.MSELoss(), opt, x, y, micro_batch_size=4)
    >>> opt.step_count
    1
    """
    if x.shape[0] != y.shape[0]:
        raise ValueError(f"x has {x.shape[0]} samples but y has {y.shape[0]}")
    given = [a for a in (micro_batch_size, num_micro_batches, sizes) if a is not None]
    if len(given) > 1:
        raise ValueError("give at most one of micro_batch_size, num_micro_batches, sizes")
    if sizes is None:
        sizes = split_sizes(x.shape[0], micro_batch_size, num_micro_batches)
    if batchnorm not in ("micro", "exact"):
        raise ValueError(f"batchnorm must be 'micro' or 'exact', got {batchnorm!r}")
    if batchnorm == "exact" and normalize != "items":
        raise ValueError(f"batchnorm='exact' needs normalize='items', got {normalize!r}")
    acc = Accumulator(model, loss_fn, optimizer, normalize=normalize,
                      max_grad_norm=max_grad_norm, scheduler=scheduler,
                      on_nonfinite=on_nonfinite)
    if batchnorm == "exact":
        from minigrad.exact_batchnorm import accumulate as run  # it builds on this module
    else:
        run = run_window
    saved = acc._snapshot()
    acc.discard()
    try:
        mean_loss = run(acc, x, y, sizes)
    except Exception:
        acc._restore(saved)
        raise
    if mean_loss is None:  # skipped: a non-finite value with on_nonfinite="skip"
        acc._restore(saved)
        return float("nan")
    return mean_loss


def run_window(acc, x, y, sizes):
    """Add every micro-batch of ``(x, y)`` split by ``sizes`` to ``acc``, then update.

    Returns the window's mean loss, or ``None`` if a non-finite value made ``acc`` skip.
    """
    for _, xj, yj in micro_batches(x, y, sizes):
        if acc.add(xj, yj) is None:
            return None
    return acc.update()

def accumulated_gradients(model, loss_fn, x, y, *, micro_batch_size=None,
                          num_micro_batches=None, sizes=None, normalize="items", step_index=0):
    """Name -> the gradient ``step`` would hand the optimizer, without updating anything.

    The model's ``.grad`` are left as they were; BatchNorm running statistics do move
    (once per micro-batch), as in training. Dropout masks are keyed by ``step_index``.
    """
    if sizes is None:
        sizes = split_sizes(x.shape[0], micro_batch_size, num_micro_batches)
    acc = Accumulator(model, loss_fn, None, normalize=normalize)
    acc.step_index = step_index
    saved = [p.grad for p in acc.params]
    acc.discard()
    try:
        for _, xj, yj in micro_batches(x, y, sizes):
            acc.add(xj, yj)
        grads = acc.gradients()
    finally:
        for p, g in zip(acc.params, saved):
            p.grad = g
    return dict(zip((name for name, _ in model.named_parameters()), grads))


__all__ = ["Accumulator", "accumulated_gradients", "as_loss", "micro_batches", "run_window",
           "split_sizes", "step"]
