"""One optimizer update from a whole global batch split into micro-batches (``step``), and
the gradient that update would use, without updating (``accumulated_gradients``).

Both are the same driver: check everything once, then a strategy runs the window
(``minigrad.accumulate.strategy``) and a reduction adds its sums over the processes
(``minigrad.accumulate.reduction``), all inside one snapshot of the training state.
"""

from minigrad.accumulate import reduction as reductions
from minigrad.accumulate import strategy as strategies
from minigrad.accumulate.accumulator import Accumulator
from minigrad.accumulate.guard import as_batch
from minigrad.accumulate.split import parts, sizes_for


def step(model, loss_fn, optimizer, x, y, *, micro_batch_size=None, num_micro_batches=None,
         sizes=None, normalize="items", max_grad_norm=None, scheduler=None,
         on_nonfinite="raise", strategy="micro", reduction=None):
    """Exactly ONE optimizer update from the whole ``(x, y)``; returns its mean loss per item.

    The batch is split by ``micro_batch_size``, ``num_micro_batches`` or explicit ``sizes``
    (none of them: full-batch training). Any stale gradients are dropped first. If any
    micro-batch fails or is not finite, nothing is updated (see ``minigrad.accumulate``).

    ``strategy`` runs the window: ``"micro"`` lets BatchNorm use each micro-batch's
    statistics, as every framework does (not equivalent to full batch);
    ``"exact_batchnorm"`` runs the extra passes of ``minigrad.accumulate.exact_batchnorm`` so
    the update equals the full-batch one (``normalize`` must then be ``"items"``); or any
    object of the protocol in ``minigrad.accumulate.strategy``. ``reduction`` says where the
    sums meet: this process alone (``None``) or ``mpi.AllReduce`` (``distributed.step``).

    >>> import numpy as np
    >>> from minigrad import nn, optim
    >>> model = nn.MLP([2, 4, 1], seed=0)
    >>> opt = optim.SGD(model.parameters(), lr=0.1)
    >>> x, y = np.ones((6, 2)), np.zeros((6, 1))
    >>> loss = step(model, nn.MSELoss(), opt, x, y, micro_batch_size=4)
    >>> opt.step_count
    1
    """
    reduction = reductions.check(reductions.OneProcess() if reduction is None else reduction)
    reduction.start()
    try:
        if optimizer is None:
            raise TypeError("optimizer must be a minigrad optimizer (optim.SGD, ...), got None; "
                            "accumulated_gradients() gives the gradient without an update")
        acc, run, x, y, split = _prepare(model, loss_fn, optimizer, x, y, micro_batch_size,
                                         num_micro_batches, sizes, strategy, normalize=normalize,
                                         max_grad_norm=max_grad_norm, scheduler=scheduler,
                                         on_nonfinite=on_nonfinite)
        reduction.check(acc)
        call = (run.name, optimizer.step_count, type(optimizer).__name__,
                [(p.shape, str(p.dtype)) for p in acc.params])
    except BaseException as error:
        reduction.abort(error)  # MPI: every rank learns of it and raises
        raise
    offset = reduction.begin(acc, x.shape[0], call)
    mean_loss = run_window(acc, run, parts(x, y, split, offset, acc.counts), reduction)
    return float("nan") if mean_loss is None else mean_loss


def accumulated_gradients(model, loss_fn, x, y, *, micro_batch_size=None,
                          num_micro_batches=None, sizes=None, normalize="items", step_index=0,
                          strategy="micro"):
    """Name -> the gradient ``step`` would hand the optimizer, without updating anything.

    The model's ``.grad`` are left as they were; BatchNorm running statistics do move
    (once per micro-batch, or once with ``strategy="exact_batchnorm"``), as in training,
    unless it raises: then they are as they were too. Dropout masks are keyed by
    ``step_index``.

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
    >>> gap() < 1e-15, gap(normalize="micro_batch_mean") > 0.1
    (True, True)
    """
    acc, run, x, y, split = _prepare(model, loss_fn, None, x, y, micro_batch_size,
                                     num_micro_batches, sizes, strategy, normalize=normalize,
                                     step_index=step_index)
    kept = reductions.Gradients([p.grad for p in acc.params])  # .grad is given back
    run_window(acc, run, parts(x, y, split, 0, acc.counts), kept)  # non-finite: raises
    return dict(zip((name for name, _ in model.named_parameters()), kept.grads))


def run_window(acc, strategy, micro_batches, reduction):
    """``strategy.run`` inside one snapshot: the mean loss, or ``None`` (everything as it
    was) when the window was dropped; on any error everything is put back and it raises,
    the strategy's own state too when it keeps some (``snapshot``/``restore``)."""
    saved = acc.snapshot()
    kept = strategy.snapshot() if callable(getattr(strategy, "snapshot", None)) else None
    try:
        acc.discard()
        mean_loss = strategy.run(acc, micro_batches, reduction)
        if mean_loss is None:
            reduction.skip()
    except reductions.WindowSkipped:
        mean_loss = None
    except BaseException as error:
        if acc.commits == saved.commits:  # else the update is made (an interrupt held by
            acc.restore(saved)            # its commit arrived after it): that state stays
            if kept is not None:
                strategy.restore(kept)  # a memory bank, a loss scale: as before the call
        reduction.abort(error)
        raise
    if mean_loss is None:
        acc.restore(saved)
    return mean_loss


def _prepare(model, loss_fn, optimizer, x, y, micro_batch_size, num_micro_batches, sizes,
             strategy, **options):
    """Everything checked once: the accumulator, the strategy, the batch and its split."""
    x, y = as_batch(x, y)
    split = sizes_for(x.shape[0], micro_batch_size=micro_batch_size,
                      num_micro_batches=num_micro_batches, sizes=sizes)
    run = strategies.as_strategy(strategy)
    acc = Accumulator(model, loss_fn, optimizer, divided=getattr(run, "divided", False),
                      **options)
    acc.check_exact(x, y)
    run.check(acc)
    acc.read_labels(y)
    return acc, run, x, y, split
