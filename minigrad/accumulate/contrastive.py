"""Losses with in-batch negatives under accumulation: three strategies, three objectives.

InfoNCE (``nn.InfoNCELoss``) compares each query with every passage of its batch, so the
loss of a global batch B is not a sum over its micro-batches: the accumulation contract of
``minigrad.accumulate`` does not hold, whatever the normalisation. The strategies here say
what they do instead:

* ``Naive`` ("naive"): each micro-batch's loss with its own passages as the negatives, the
  usual loop (``Micro``). A query of a micro-batch of n_j samples meets n_j - 1 negatives
  instead of N - 1: a different objective, and the accumulated gradient is not the
  full-batch one.
* ``GradCache`` ("gradcache", Gao et al., 2021, *Scaling Deep Contrastive Learning Batch
  Size under Memory Limited Setup*): EXACT. Pass 1 runs every micro-batch without a graph
  and keeps only the representations R = (q, p); the loss of the whole batch and its
  gradient G = dL/dR are computed on them (the graph of the loss ends at R); pass 2 runs
  each micro-batch again WITH its graph and back-propagates its rows of G. By the chain
  rule, sum_j J_j^T G_j is the full-batch gradient, at the memory of one micro-batch plus
  the representations, for one extra forward pass. Dropout masks are keyed by (update,
  sample), so pass 2 draws pass 1's masks; a layer that drew fresh ones would break it.
  Over MPI the representations are gathered from every process (``reduction.gather``),
  so the negatives are those of the GLOBAL batch; every process computes the same G and
  back-propagates only ITS rows of it, and the reduction adds the gradient sums.
* ``Bank`` ("bank", after CONTACCUM: Kim, Lee and Kang, 2024, *A Gradient Accumulation
  Method for Dense Retriever under Memory Constraint*): each micro-batch's loss with
  extra, detached representations of earlier updates kept in memory banks, queries and
  passages (``dual=True``; ``dual=False`` keeps passages only). More negatives than
  "naive", no second pass, but stale representations: a third objective. Its first update
  is "naive"'s (the banks are empty); from the second on it differs.

Each back-propagates a seed gradient G through the representations with
``Tensor.backward(gradient)``: the loss runs on leaves ``Tensor(R, requires_grad=True)``,
then the towers' graphs are walked from R with the leaves' ``.grad``.
"""

from minigrad import nn
from minigrad.accumulate.micro import Micro, forward
from minigrad.engine import Tensor, backend, no_grad, validate
from minigrad.nn.contrastive import representations


def check_contrastive(acc, name):
    """``TypeError`` unless the loss couples the batch (``in_batch_negatives``)."""
    if not getattr(acc.loss, "in_batch_negatives", False):
        raise TypeError(f"strategy={name!r} is for losses with in-batch negatives "
                        f"(nn.InfoNCELoss, or a loss with in_batch_negatives = True), got "
                        f"{type(acc.loss).__name__}")


def check_window(acc, name):
    """A contrastive loss; ``normalize`` "items" or "sum": the window's loss is one sum."""
    check_contrastive(acc, name)
    if acc.normalize == "micro_batch_mean":
        raise ValueError(f"strategy={name!r} adds the window's loss sum; it needs "
                         f"normalize='items' or 'sum', got 'micro_batch_mean'")


def pair(acc, mb, name):
    """The model's ``(q, p)`` on ``mb``, with its dropout masks."""
    try:
        return representations(forward(acc, mb))
    except TypeError as err:
        raise TypeError(f"strategy={name!r}: {err}") from None


def loss_on(loss, q, p, y):
    """The SUM of ``loss`` on representations ``q``, ``p`` (arrays) with targets ``y``, and
    its gradient with respect to them (``None``, ``None`` when the loss is not finite)."""
    leaves = Tensor(q, requires_grad=True), Tensor(p, requires_grad=True)
    loss_sum = loss(leaves, y, reduction="sum")
    if backend.is_exact(loss_sum.data) or bool(loss_sum.xp.isfinite(loss_sum.data)):
        loss_sum.backward()
        return loss_sum.item(), *(zeros_if_none(t) for t in leaves)
    return loss_sum.item(), None, None


def zeros_if_none(leaf):
    """A leaf's ``.grad``, or zeros of its shape where the loss did not reach it."""
    return leaf.grad if leaf.grad is not None else leaf.xp.zeros_like(leaf.data)


def backpropagate(out, gq, gp):
    """Add d(q . gq + p . gp)/d(theta) into ``.grad``: the towers' backward from a seed."""
    for r, g in zip(out, (gq, gp)):
        if r.requires_grad:
            r.backward(g)


def concat(xp, arrays):
    """The arrays stacked along the sample axis (one array: itself, not a copy)."""
    return arrays[0] if len(arrays) == 1 else xp.concat(arrays, axis=0)


class Naive(Micro):
    """Each micro-batch's loss with in-micro-batch negatives: ``Micro``, named for what it
    does to a contrastive loss."""

    name, kind, label = "naive", "contrastive", "naive (in-micro-batch negatives)"

    def check(self, acc):
        check_contrastive(acc, self.name)


class GradCache:
    """The full-batch gradient of a contrastive loss at micro-batch memory, by two passes."""

    name, kind, label = "gradcache", "contrastive", "GradCache"

    def check(self, acc):
        check_window(acc, self.name)
        coupled = [n for n, m in acc.model.named_modules()
                   if isinstance(m, nn.BatchNorm1d) and m.training]
        if coupled:
            raise ValueError(f"strategy='gradcache' needs representations that depend on "
                             f"their own sample alone; BatchNorm1d in training mode at "
                             f"{coupled} couples each micro-batch (use LayerNorm or GroupNorm)")

    def run(self, acc, micro_batches, reduction):
        xp = backend.get_namespace(micro_batches[0].x)
        with no_grad():  # pass 1: representations only, no graph
            reps = [pair(acc, mb, self.name) for mb in micro_batches]
        local = tuple(concat(xp, [r[k].data for r in reps]) for k in (0, 1)) + (
            concat(xp, [mb.y for mb in micro_batches]),)
        gathered = reduction.gather("gathering the representations", local)
        q, p, y = (concat(xp, [g[k] for g in gathered]) for k in range(3))
        loss_sum, gq, gp = loss_on(acc.loss, q, p, y)
        if gq is None:
            return acc.refuse(f"loss of the global batch is {loss_sum}")
        start = int(micro_batches[0].index[0])  # this process's first row of the batch
        counted = start != 0  # the loss sum is counted once: where sample 0 is
        for mb in micro_batches:  # pass 2: the same masks, now with the graph
            rows = slice(start, start + mb.x.shape[0])
            backpropagate(pair(acc, mb, self.name), gq[rows, ...], gp[rows, ...])
            acc.record(acc.loss.num_items(mb.y), mb.x.shape[0], 0 if counted else loss_sum)
            start, counted = rows.stop, True
        return reduction.update(acc)


class Bank:
    """CONTACCUM-style memory banks: detached representations of the last ``size`` pairs of
    earlier updates join every micro-batch's loss as extra rows (``dual``: queries and
    passages) or extra negatives (passages only).

    One object keeps its banks across updates: make one and pass it to every step (a name
    would start an empty one each time). The banks take a window's representations, from
    every process, only once its update is made.
    """

    name, kind, label = "bank", "contrastive", "memory bank"
    stateful = True

    def __init__(self, size=64, dual=True):
        self.size = validate.integer("size", size, low=0)
        self.dual = validate.boolean("dual", dual)
        self.queries = self.passages = self.targets = None  # newest last

    def __repr__(self):
        held = 0 if self.passages is None else self.passages.shape[0]
        return f"Bank(size={self.size}, dual={self.dual}, held={held})"

    def snapshot(self):
        """The banks (arrays are replaced, never written into): the driver puts them back
        if the window raises after they moved."""
        return self.queries, self.passages, self.targets

    def restore(self, state):
        self.queries, self.passages, self.targets = state

    def check(self, acc):
        check_window(acc, self.name)
        if not self.dual and getattr(acc.loss, "symmetric", False):
            raise ValueError("Bank(dual=False) keeps passages only, which a symmetric loss "
                             "cannot use as queries; use dual=True or symmetric=False")

    def run(self, acc, micro_batches, reduction):
        xp = backend.get_namespace(micro_batches[0].x)
        fresh = []
        for mb in micro_batches:
            out = pair(acc, mb, self.name)
            q, p, y = out[0].data, out[1].data, mb.y
            fresh.append((q, p, y))
            if self.passages is not None:
                p = xp.concat([p, self.passages], axis=0)
                if self.dual:
                    q = xp.concat([q, self.queries], axis=0)
                    y = xp.concat([y, self.targets], axis=0)
            loss_sum, gq, gp = loss_on(acc.loss, q, p, y)
            if gq is None:
                return acc.refuse(f"loss of a micro-batch is {loss_sum}")
            n = mb.x.shape[0]
            backpropagate(out, gq[:n, ...], gp[:n, ...])
            acc.record(acc.loss.num_items(y), n, loss_sum)
        local = tuple(concat(xp, [f[k] for f in fresh]) for k in range(3))
        gathered = reduction.gather("gathering the representations for the banks", local)
        banks = self._pushed([concat(xp, [g[k] for g in gathered]) for k in range(3)])
        acc.on_commit.append(lambda: self._set(banks))  # the banks move on with the update
        return reduction.update(acc)

    def _pushed(self, window):
        """The banks with the window's (queries, passages, targets) appended, the newest
        ``size`` kept; computed before the update, set in its commit (``_set``)."""
        if self.size == 0:
            return None, None, None
        banks = [self.queries, self.passages, self.targets]
        if banks[0] is not None:
            window = [backend.get_namespace(a).concat([a, b], axis=0)
                      for a, b in zip(banks, window)]
        start = max(window[0].shape[0] - self.size, 0)
        return tuple(a[start:, ...] for a in window)

    def _set(self, banks):
        self.queries, self.passages, self.targets = banks
