"""Data parallelism over MPI: the accumulation contract, across processes.

P processes (ranks) hold the same model. The global batch B is cut into shards B_0..B_{P-1}
of any sizes, one per rank; each rank accumulates its shard over micro-batches, and ONE
all-reduce per update adds the ranks' sums up::

    rank 0:  B_0 = micro-batches -> sum of grad l_i, items(B_0) --+
    rank 1:  B_1 = micro-batches -> sum of grad l_i, items(B_1) --+--> all-reduce (SUM)
      ...                                                          |    g = sum / sum of items
                                                                   +--> the same update, every rank

    g = (1 / sum_r |items(B_r)|) * sum_r sum_{i in B_r} grad l_i

This is the rule of ``minigrad.accumulate`` with one more level of sums: the item count is
the sum over the ranks, so uneven shards and ``ignore_index`` stay exact. The division, the
clipping, the optimizer step and the schedule happen once per update, on every rank, from
the same reduced gradient, so parameters that start identical (``broadcast_parameters``)
stay identical (``check_identical`` verifies it bit for bit).

Communication per update (``step``): one ``Allreduce`` of the gradient (one contiguous
NumPy buffer per parameter dtype, the size of the parameters) however many micro-batches
each rank runs, plus three ``allgather`` calls of a few hundred bytes each (see below).
``batchnorm="exact"`` adds, per BatchNorm layer, two small ``allgather`` calls that carry
the statistics and the sums A, B of ``minigrad.accumulate.exact_batchnorm`` (sync
BatchNorm); with the default ``"micro"`` BatchNorm uses each rank's micro-batch statistics,
and the running statistics stay local (they differ across ranks).

A rank that fails does not leave the others waiting. ``step`` runs in stages; every
stage's own work (argument checks, forward and backward passes, the optimizer step) runs
inside ``try``, and every rank then takes part in an ``allgather`` of its outcome before
anything is communicated or kept. If any rank raised, every rank puts back its
parameters, gradients, buffers, optimizer and schedule (all-or-nothing, as in
``minigrad.accumulate``) and raises ``RankFailed`` naming the failing ranks and their
errors; a ``KeyboardInterrupt`` (any ``BaseException`` that is not an ``Exception``) is
re-raised as itself on its rank. Not covered: a process that dies, or an error inside the
MPI calls; then the launcher (``mpirun``) ends the whole job.

Tested with two Open MPI ranks on CPU, NumPy arrays (``tests/accumulate/
test_distributed.py``). Arrays of other namespaces go through host NumPy buffers
(``backend.to_numpy``) and come back to their namespace, device and dtype; that round trip is
tested in one process for NumPy, array-api-strict and PyTorch CPU tensors. Reducing device
buffers directly (CuPy with a CUDA-aware MPI, or NCCL) is not done and not tested. Exact
``Fraction`` parameters are refused: MPI reduces numbers, not Python objects.

mpi4py is imported on first use (``world``), never by ``import minigrad``.
"""

import hashlib
import math

import numpy as np

from minigrad import nn
from minigrad.accumulate.accumulator import Accumulator, Window
from minigrad.accumulate.exact_batchnorm import GlobalStatistics, _batchnorms
from minigrad.accumulate.guard import as_batch, like
from minigrad.accumulate.split import check_sizes, micro_batches, split_sizes
from minigrad.engine import Tensor, backend, no_grad, validate

BATCHNORM = ("micro", "exact")
COMM_METHODS = ("Get_rank", "Get_size", "allgather", "Allreduce", "Bcast")


def world(comm=None):
    """``comm`` (checked), or MPI's ``COMM_WORLD``; mpi4py is imported here, on first use."""
    if comm is not None:
        missing = [m for m in COMM_METHODS if not hasattr(comm, m)]
        if missing:
            raise TypeError(f"comm must be an mpi4py communicator, got {type(comm).__name__} "
                            f"without {missing}")
        return comm
    try:
        from mpi4py import MPI
    except ImportError as err:
        raise ImportError("minigrad.distributed needs mpi4py and an MPI library: "
                          "pip install 'minigrad[dist]'") from err
    return MPI.COMM_WORLD


class RankFailed(RuntimeError):
    """Raised on every rank when a rank failed during ``stage`` of a collective call;
    ``failures`` maps each failing rank to its error (type and message)."""

    def __init__(self, stage, failures):
        self.stage, self.failures = stage, dict(failures)
        ranks = ", ".join(str(r) for r in sorted(self.failures))
        details = "; ".join(f"rank {r}: {e}" for r, e in sorted(self.failures.items()))
        super().__init__(f"rank{'s' if len(self.failures) > 1 else ''} {ranks} failed while "
                         f"{stage}; every rank is as it was before the call ({details})")


class _Stage:
    """``with _Stage(comm, "what") as stage:`` local work, then every rank's outcome is
    exchanged (one ``allgather``): ``stage.gathered`` lists each rank's ``stage.payload``,
    or every rank raises ``RankFailed`` if any rank raised inside its block."""

    def __init__(self, comm, what):
        self.comm, self.what, self.payload, self.gathered = comm, what, None, None

    def __enter__(self):
        return self

    def __exit__(self, kind, error, traceback):
        failure = None if error is None else f"{kind.__name__}: {error}"
        outcomes = self.comm.allgather((failure, None if error else self.payload))
        failures = {rank: f for rank, (f, _) in enumerate(outcomes) if f is not None}
        if failures:
            if error is not None and not isinstance(error, Exception):
                return False  # KeyboardInterrupt and the like: re-raised as themselves
            raise RankFailed(self.what, failures) from error
        self.gathered = [payload for _, payload in outcomes]
        return False


class _Packed:
    """Arrays of any namespace as one contiguous NumPy buffer per dtype, for MPI; ``unpack``
    gives arrays of each input's namespace, device and dtype back."""

    def __init__(self, arrays):
        self.like = list(arrays)
        host = [np.ascontiguousarray(backend.to_numpy(a)) for a in self.like]
        self.dtypes = list(dict.fromkeys(h.dtype for h in host))
        self.buffers = [np.concatenate([h.ravel() for h in host if h.dtype == d])
                        for d in self.dtypes]
        self.nbytes = sum(b.nbytes for b in self.buffers)

    def allreduce(self, comm):
        """The elementwise sums over the ranks: one ``Allreduce`` per buffer (MPI only;
        mpi4py's default operation is the sum)."""
        sums = [np.empty_like(b) for b in self.buffers]
        for send, receive in zip(self.buffers, sums):
            comm.Allreduce(send, receive)
        return sums

    def unpack(self, buffers):
        out, offsets = [], dict.fromkeys(self.dtypes, 0)
        for a in self.like:
            h = backend.to_numpy(a)
            start = offsets[h.dtype]
            offsets[h.dtype] = start + h.size
            flat = buffers[self.dtypes.index(h.dtype)][start:start + h.size]
            out.append(backend.move(np.reshape(flat, h.shape), backend.get_namespace(a),
                                    backend.device(a)))
        return out


# ----- sharding -------------------------------------------------------------------------------
def shard_sizes(n, ranks, sizes=None):
    """How many of the global batch's ``n`` samples each of ``ranks`` ranks gets, in rank
    order: near-equal (the first ``n % ranks`` get one more), or explicit, uneven ``sizes``.
    Every rank needs at least one sample.

    >>> shard_sizes(10, 3)
    [4, 3, 3]
    >>> shard_sizes(10, 2, sizes=[7, 3])
    [7, 3]
    """
    n = validate.positive_int("n", n)
    ranks = validate.positive_int("ranks", ranks)
    if sizes is None:
        if n < ranks:
            raise ValueError(f"a global batch of {n} samples cannot give each of {ranks} "
                             f"ranks a sample")
        return split_sizes(n, num_micro_batches=ranks)
    if isinstance(sizes, (str, bytes)) or not hasattr(sizes, "__iter__"):
        raise TypeError(f"shard sizes must be a sequence of positive ints, got "
                        f"{type(sizes).__name__}")
    sizes = [validate.positive_int(f"sizes[{i}]", s) for i, s in enumerate(sizes)]
    if len(sizes) != ranks or sum(sizes) != n:
        raise ValueError(f"shard sizes {sizes} must name {ranks} ranks (one positive size "
                         f"each) and sum to the global batch of {n}")
    return sizes


def shard(x, y, comm=None, *, sizes=None):
    """This rank's consecutive slice ``(x_r, y_r)`` of the global batch (``shard_sizes``)."""
    comm = world(comm)
    x, y = as_batch(x, y)
    sizes = shard_sizes(x.shape[0], comm.Get_size(), sizes)
    start = sum(sizes[:comm.Get_rank()])
    stop = start + sizes[comm.Get_rank()]
    return x[start:stop, ...], y[start:stop, ...]


# ----- identical replicas ------------------------------------------------------------------------
def broadcast_parameters(model, comm=None, root=0):
    """Give every rank ``root``'s parameters, buffers and dropout seeds (a dropout seed is
    no parameter, but masks drawn from different seeds make the replicas drift apart)."""
    comm = world(comm)
    root = validate.integer("root", root, low=0, high=comm.Get_size() - 1)
    state = model.state_dict()
    dropouts = _dropouts(model)
    layouts = comm.allgather(([(k, tuple(v.shape), str(v.dtype)) for k, v in state.items()],
                              [m.seed for _, m in dropouts]))
    if any(layout[0] != layouts[root][0] or len(layout[1]) != len(dropouts)
           for layout in layouts):
        raise ValueError("the ranks' models differ in their parameters' names, shapes or "
                         "dtypes, or in their dropout layers; build the same model on every "
                         "rank")
    packed = _Packed(state.values())
    for buffer in packed.buffers:
        comm.Bcast(buffer, root=root)
    model.load_state_dict(dict(zip(state, packed.unpack(packed.buffers))))
    for (_, m), seed in zip(dropouts, layouts[root][1]):
        m.seed = seed


def check_identical(model, comm=None, *, buffers=False):
    """Raise ``RuntimeError`` on every rank unless every rank holds bit-identical parameters
    and dropout seeds (and buffers, with ``buffers=True``): SHA-256 digests, all-gathered."""
    comm = world(comm)
    named = list(model.named_parameters()) + (list(model.named_buffers()) if buffers else [])
    digests = [(name, hashlib.sha256(np.ascontiguousarray(backend.to_numpy(
        a.data if isinstance(a, Tensor) else a)).tobytes()).hexdigest()) for name, a in named]
    digests += [(f"{name}.seed", m.seed) for name, m in _dropouts(model)]
    everyone = comm.allgather(digests)
    differ = {rank: [name for (name, d), (_, d0) in zip(mine, everyone[0]) if d != d0]
              for rank, mine in enumerate(everyone) if mine != everyone[0]}
    if differ:
        raise RuntimeError("the replicas differ from rank 0: " + "; ".join(
            f"rank {r} in {', '.join(names) or 'their layout'}" for r, names in differ.items()))


def _dropouts(model):
    return [(name, m) for name, m in model.named_modules() if isinstance(m, nn.Dropout)]


# ----- one update ----------------------------------------------------------------------------
def step(model, loss_fn, optimizer, x, y, *, comm=None, micro_batch_size=None,
         num_micro_batches=None, sizes=None, max_grad_norm=None, scheduler=None,
         on_nonfinite="raise", batchnorm="micro"):
    """ONE optimizer update, on every rank, from the global batch whose shard ``(x, y)`` this
    rank holds; returns the global mean loss per item (the same on every rank).

    A collective call: every rank of ``comm`` calls it, with its own shard (``shard``) and
    the same arguments otherwise. The shard is split into micro-batches as in
    ``accumulate.step``; dropout masks are keyed by the global sample index (the shards in
    rank order), so they do not depend on the split either. ``batchnorm="exact"`` is sync
    BatchNorm: the statistics and gradient sums of the whole global batch. If any rank
    fails, every rank raises ``RankFailed`` and nothing changes (see the module docstring).
    """
    comm = world(comm)
    with _Stage(comm, "checking the arguments") as stage:
        acc, x, y, split = _prepare(model, loss_fn, optimizer, x, y, micro_batch_size,
                                    num_micro_batches, sizes, max_grad_norm, scheduler,
                                    on_nonfinite, batchnorm)
        stage.payload = (x.shape[0], (batchnorm, optimizer.step_count, type(optimizer).__name__,
                                      [(p.shape, str(p.dtype)) for p in acc.params]))
    counts, calls = zip(*stage.gathered)
    if any(call != calls[0] for call in calls):
        raise ValueError(f"the ranks called step differently (batchnorm, optimizer step "
                         f"count, optimizer, parameter shapes and dtypes): {list(calls)}")
    offset = sum(counts[:comm.Get_rank()])
    saved = acc._snapshot()
    try:
        acc.discard()
        run = _exact_window if batchnorm == "exact" else _window
        mean_loss = run(comm, acc, x, y, split, offset)
    except BaseException:
        acc._restore(saved)
        raise
    if mean_loss is None:  # skipped: a non-finite value with on_nonfinite="skip"
        acc._restore(saved)
        return math.nan
    return mean_loss


def _prepare(model, loss_fn, optimizer, x, y, micro_batch_size, num_micro_batches, sizes,
             max_grad_norm, scheduler, on_nonfinite, batchnorm):
    """Every argument checked, on this rank: the accumulator, the shard and its split."""
    x, y = as_batch(x, y)
    validate.choice("batchnorm", batchnorm, BATCHNORM)
    if optimizer is None:
        raise TypeError("optimizer must be a minigrad optimizer (optim.SGD, ...), got None")
    acc = Accumulator(model, loss_fn, optimizer, max_grad_norm=max_grad_norm,
                      scheduler=scheduler, on_nonfinite=on_nonfinite)
    if any(backend.is_exact(p.data) for p in acc.params):
        raise TypeError("exact Fraction parameters cannot be all-reduced by MPI; train them "
                        "in one process (minigrad.exact)")
    if batchnorm == "exact":
        _batchnorms(model)
    given = [a for a in (micro_batch_size, num_micro_batches, sizes) if a is not None]
    if len(given) > 1:
        raise ValueError("give at most one of micro_batch_size, num_micro_batches, sizes")
    split = split_sizes(x.shape[0], micro_batch_size, num_micro_batches) if sizes is None \
        else check_sizes(sizes, x.shape[0])
    return acc, x, y, split


def _index(xj, start):
    xp = backend.get_namespace(xj)
    return xp.arange(start, start + xj.shape[0], device=backend.device(xj))


def _window(comm, acc, x, y, split, offset, before=None, after=None):
    """Accumulate the shard, all-reduce the sums, update: ``None`` if the update is skipped.
    ``before`` runs first in the local stage, ``after`` after a successful update."""
    with _Stage(comm, "accumulating the micro-batches") as stage:
        if before is not None:
            before()
        for start, xj, yj in micro_batches(x, y, split):
            if acc.add(xj, yj, sample_index=_index(xj, offset + start)) is None:
                break  # skipped: the window was dropped
        else:
            present = [p.grad is not None for p in acc.params]
            grads = [p.grad if p.grad is not None else p.xp.zeros_like(p.data)
                     for p in acc.params]
            packed = _Packed(grads)
            stage.payload = (acc.window, present)
    if any(payload is None for payload in stage.gathered):
        return None  # a rank skipped, so every rank skips
    sums = packed.allreduce(comm)
    windows, presents = zip(*stage.gathered)
    with _Stage(comm, "updating the parameters") as stage:
        used = [any(flags) for flags in zip(*presents)]
        for i, (p, g) in enumerate(zip(acc.params, packed.unpack(sums))):
            p.grad = like(g, p, f"reduced gradient {i}") if used[i] else None
        acc.window = Window(sum(w.items for w in windows), sum(w.micro_batches for w in windows),
                            sum(w.samples for w in windows), sum(w.loss_sum for w in windows))
        mean_loss = acc.update()  # divides once by the global item count
        if mean_loss is not None and after is not None:
            after()
    return mean_loss


def _exact_window(comm, acc, x, y, split, offset):
    """``exact_batchnorm``'s passes with every BatchNorm layer's statistics and sums A, B
    taken over the whole global batch (sync BatchNorm), then ``_window``."""
    layers, bn_at = _batchnorms(acc.model)
    controls = [GlobalStatistics(layers[i]) for i in bn_at]
    step_index = acc.optimizer.step_count
    pending = []  # what the last stage gathered, to be merged at the start of the next one

    def run(xj, start, upto=None):
        with nn.dropout_keys(step_index, _index(xj, offset + start)):
            out = xj
            for layer in layers[:upto]:
                out = layer(out)
        return out

    def merge():
        """Every rank merges the gathered parts in rank order: the same bits everywhere."""
        if not pending:
            return
        control, what, gathered = pending.pop()
        xp, device = acc.params[0].xp, acc.params[0].device
        if what == "stats":
            control.parts = [(n, backend.move(m, xp, device), backend.move(s, xp, device))
                             for parts in gathered for n, m, s in parts]
            control.finish_stats()
        else:
            control.A, control.B = (sum(backend.move(g[j], xp, device) for g in gathered)
                                    for j in (0, 1))

    for i, control in zip(bn_at, controls):
        layers[i].global_stats = control
    try:
        for i, control in zip(bn_at, controls):
            with _Stage(comm, f"gathering the statistics of BatchNorm layer {i}") as stage:
                merge()
                with no_grad():
                    for start, xj, _ in micro_batches(x, y, split):
                        run(xj, start, upto=i + 1)
                stage.payload = [(n, backend.to_numpy(m), backend.to_numpy(s))
                                 for n, m, s in control.parts]
            pending.append((control, "stats", stage.gathered))
        for i, control in reversed(list(zip(bn_at, controls))):
            with _Stage(comm, f"gathering the gradient sums of BatchNorm layer {i}") as stage:
                merge()
                control.collect = True
                for start, xj, yj in micro_batches(x, y, split):
                    acc.loss(run(xj, start), yj, reduction="sum").backward()
                control.collect = False
                stage.payload = (backend.to_numpy(control.A), backend.to_numpy(control.B))
            pending.append((control, "sums", stage.gathered))

        def running_stats():
            for i, control in zip(bn_at, controls):
                layers[i].update_running_stats(control.mean, control.var, control.count)

        def start_window():
            merge()
            acc.discard()  # the passes above left gradients of their own

        return _window(comm, acc, x, y, split, offset, before=start_window, after=running_stats)
    finally:
        for i, control in zip(bn_at, controls):
            layers[i].global_stats = None
            control.collect = False
