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

``step`` is ``accumulate.step`` with the MPI reduction (``mpi.AllReduce``): every strategy
runs unchanged. Communication per update: one ``Allreduce`` of the gradient (one contiguous
NumPy buffer per parameter dtype, the size of the parameters) however many micro-batches
each rank runs, plus three ``allgather`` calls of a few hundred bytes each (the call, the
window's counts, the outcome of the update). ``strategy="exact_batchnorm"`` adds, per
BatchNorm layer, two small ``allgather`` calls that carry the statistics and the sums A, B of
``minigrad.accumulate.exact_batchnorm`` (sync BatchNorm); with the default ``"micro"``
BatchNorm uses each rank's micro-batch statistics, and the running statistics stay local
(they differ across ranks).

A rank that fails does not leave the others waiting: every collective call exchanges each
rank's outcome first (``minigrad.accumulate.mpi``). If any rank raised, every rank puts
back its parameters, gradients, buffers, optimizer and schedule (all-or-nothing, as in
``minigrad.accumulate``) and raises ``RankFailed`` naming the failing ranks and their
errors; a ``KeyboardInterrupt`` is re-raised as itself on its rank.

Tested with two Open MPI ranks on CPU, NumPy arrays (``tests/accumulate/
test_distributed.py``). Arrays of other namespaces go through host NumPy buffers
(``backend.to_numpy``) and come back to their namespace, device and dtype; that round trip is
tested in one process for NumPy, array-api-strict and PyTorch CPU tensors. Reducing device
buffers directly (CuPy with a CUDA-aware MPI, or NCCL) is not done and not tested. Exact
``Fraction`` parameters are refused: MPI reduces numbers, not Python objects.

mpi4py is imported on first use (``mpi.world``), never by ``import minigrad``.
"""

import hashlib

import numpy as np

from minigrad import nn
from minigrad.accumulate.driver import step as accumulate_step
from minigrad.accumulate.guard import as_batch
from minigrad.accumulate.mpi import AllReduce, Packed, RankFailed, world
from minigrad.accumulate.split import split_sizes
from minigrad.engine import Tensor, backend, validate

__all__ = ["AllReduce", "RankFailed", "broadcast_parameters", "check_identical", "shard",
           "shard_sizes", "step", "world"]


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
    packed = Packed(state.values())
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
         num_micro_batches=None, sizes=None, normalize="items", max_grad_norm=None,
         scheduler=None, on_nonfinite="raise", strategy="micro"):
    """ONE optimizer update, on every rank, from the global batch whose shard ``(x, y)`` this
    rank holds; returns the global mean loss per item (the same on every rank).

    A collective call: every rank of ``comm`` calls it, with its own shard (``shard``) and
    the same arguments otherwise. It is ``accumulate.step`` with ``reduction=
    AllReduce(comm)``: the shard is split into micro-batches as there, dropout masks are
    keyed by the global sample index (the shards in rank order), so they do not depend on
    the split either, and any ``strategy`` runs over the global batch
    (``"exact_batchnorm"`` is sync BatchNorm). If any rank fails, every rank raises
    ``RankFailed`` and nothing changes (see the module docstring).
    """
    return accumulate_step(model, loss_fn, optimizer, x, y, micro_batch_size=micro_batch_size,
                           num_micro_batches=num_micro_batches, sizes=sizes,
                           normalize=normalize, max_grad_norm=max_grad_norm,
                           scheduler=scheduler, on_nonfinite=on_nonfinite, strategy=strategy,
                           reduction=AllReduce(comm))
