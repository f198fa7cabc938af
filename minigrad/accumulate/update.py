"""One optimizer update from a whole global batch split into micro-batches, and the
gradient that update would use, without updating."""

from minigrad.accumulate.accumulator import Accumulator, run_window
from minigrad.accumulate.exact_batchnorm import run_exact_window
from minigrad.accumulate.guard import as_batch
from minigrad.accumulate.split import check_sizes, micro_batches, split_sizes
from minigrad.engine import validate


def step(model, loss_fn, optimizer, x, y, *, micro_batch_size=None, num_micro_batches=None,
         sizes=None, normalize="items", max_grad_norm=None, scheduler=None,
         on_nonfinite="raise", batchnorm="micro"):
    """Exactly ONE optimizer update from the whole ``(x, y)``; returns its mean loss per item.

    The batch is split by ``micro_batch_size``, ``num_micro_batches`` or explicit ``sizes``
    (none of them: full-batch training). Any stale gradients are dropped first. If any
    micro-batch fails or is not finite, nothing is updated (see the module docstring).

    ``batchnorm="micro"`` lets BatchNorm use each micro-batch's statistics, as every
    framework does (not equivalent to full batch); ``"exact"`` runs the extra passes of
    ``minigrad.accumulate.exact_batchnorm`` so the update equals the full-batch one (``normalize``
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
    x, y = as_batch(x, y)
    given = [a for a in (micro_batch_size, num_micro_batches, sizes) if a is not None]
    if len(given) > 1:
        raise ValueError("give at most one of micro_batch_size, num_micro_batches, sizes")
    sizes = _sizes(x, micro_batch_size, num_micro_batches, sizes)
    validate.choice("batchnorm", batchnorm, ("micro", "exact"))
    if optimizer is None:
        raise TypeError("optimizer must be a minigrad optimizer (optim.SGD, ...), got None; "
                        "accumulated_gradients() gives the gradient without an update")
    if batchnorm == "exact" and normalize != "items":
        raise ValueError(f"batchnorm='exact' needs normalize='items', got {normalize!r}")
    acc = Accumulator(model, loss_fn, optimizer, normalize=normalize,
                      max_grad_norm=max_grad_norm, scheduler=scheduler,
                      on_nonfinite=on_nonfinite)
    run = run_exact_window if batchnorm == "exact" else run_window
    saved = acc._snapshot()
    try:
        acc.discard()
        mean_loss = run(acc, x, y, sizes)
        if mean_loss is None:  # skipped: a non-finite value with on_nonfinite="skip"
            acc._restore(saved)
            return float("nan")
    except BaseException:
        acc._restore(saved)
        raise
    return mean_loss


def accumulated_gradients(model, loss_fn, x, y, *, micro_batch_size=None,
                          num_micro_batches=None, sizes=None, normalize="items", step_index=0):
    """Name -> the gradient ``step`` would hand the optimizer, without updating anything.

    The model's ``.grad`` are left as they were; BatchNorm running statistics do move
    (once per micro-batch), as in training, unless it raises: then they are as they were
    too. Dropout masks are keyed by ``step_index``.

    Over micro-batches of 1 and 5 samples the item-weighted rule gives the full-batch
    gradient up to rounding; the textbook mean (each micro-batch's mean over their number)
    weighs the lone sample like the other five together:

    >>> import numpy as np
    >>> from minigrad import nn
    >>> x, y = np.random.default_rng(0).normal(size=(6, 3)), np.array([0, 1, 2, 0, 1, 2])
    >>> model, loss = nn.Linear(3, 3, generator=0), nn.CrossEntropyLoss()
    >>> full = accumulated_gradients(model, loss, x, y)
    >>> def gap(**split):
    ...     g = accumulated_gradients(model, loss, x, y, sizes=[1, 5], **split)
    ...     return max(float(np.max(np.abs(g[name] - full[name]))) for name in full)
    >>> gap() < 1e-15, gap(normalize="micro_batches") > 0.1
    (True, True)
    """
    x, y = as_batch(x, y)
    sizes = _sizes(x, micro_batch_size, num_micro_batches, sizes)
    acc = Accumulator(model, loss_fn, None, normalize=normalize, step_index=step_index)
    saved = acc._snapshot()
    try:
        acc.discard()
        for _, xj, yj in micro_batches(x, y, sizes):
            acc.add(xj, yj)
        grads = acc.gradients()
    except BaseException:
        acc._restore(saved)  # .grad and the BatchNorm running statistics
        raise
    for p, g in zip(acc.params, saved.grads):
        p.grad = g
    return dict(zip((name for name, _ in model.named_parameters()), grads))


def _sizes(x, micro_batch_size, num_micro_batches, sizes):
    """The split of ``x``'s samples, checked: explicit ``sizes`` or ``split_sizes``."""
    if sizes is None:
        return split_sizes(x.shape[0], micro_batch_size, num_micro_batches)
    return check_sizes(sizes, x.shape[0])
