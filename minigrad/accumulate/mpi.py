"""The MPI plumbing: the communicator (``world``), ``RankFailed``, host buffers (``Packed``)
and ``AllReduce``, the reduction that makes every strategy data-parallel.

Every collective call is an ``allgather`` of each rank's outcome: ``(stage, status,
payload)``. A rank whose own work raised sends ``status="failed"`` with its error at the
collective the others are waiting in, so no rank is left waiting; then every rank raises
``RankFailed`` naming the failing ranks and the stage the others had reached, and every
rank puts its state back (the driver's ``acc.restore``). A ``KeyboardInterrupt`` or a
``MemoryError`` (and any ``BaseException`` that is not an ``Exception``) is re-raised as
itself on its rank; the other ranks raise ``RankFailed``. Not
covered: a process that dies, or an error inside the MPI calls; then the launcher
(``mpirun``) ends the whole job.

mpi4py is imported on first use (``world``), never by ``import minigrad``.
"""

import math

import numpy as np

from minigrad.accumulate.accumulator import Window
from minigrad.accumulate.reduction import WindowSkipped
from minigrad.engine import backend, interrupts

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
        raise ImportError("minigrad.accumulate.distributed needs mpi4py and an MPI library: "
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


class Packed:
    """Arrays of one namespace and device as one contiguous NumPy buffer per dtype, for MPI:
    joined on their device first, so each dtype costs ONE read from the device; ``unpack``
    gives arrays of the inputs' namespace, device, dtype and shape back."""

    def __init__(self, arrays):
        self.like = [(backend.get_namespace(a), backend.device(a), tuple(a.shape),
                      str(a.dtype)) for a in arrays]
        self.dtypes = list(dict.fromkeys(key for *_, key in self.like))
        groups = {d: [a for a, (*_, key) in zip(arrays, self.like) if key == d]
                  for d in self.dtypes}
        self.buffers = [np.ascontiguousarray(backend.to_numpy(_joined(groups[d])))
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
        for xp, device, shape, key in self.like:
            size = math.prod(shape)
            start = offsets[key]
            offsets[key] = start + size
            flat = buffers[self.dtypes.index(key)][start:start + size]
            out.append(backend.move(np.reshape(flat, shape), xp, device))
        return out


def _joined(arrays):
    """One flat array of ``arrays`` (one dtype), on their device: nothing is read."""
    xp = backend.get_namespace(*arrays)
    if len(arrays) == 1:
        return xp.reshape(arrays[0], (-1,))
    return xp.concat([xp.reshape(a, (-1,)) for a in arrays])


def _host(tree, move):
    """``tree`` (tuples, lists, numbers, arrays) with every array passed through ``move``."""
    if isinstance(tree, (list, tuple)):
        return type(tree)(_host(t, move) for t in tree)
    return move(tree) if backend.is_array(tree) else tree


class AllReduce:
    """The reduction over the ranks of ``comm``: ONE ``Allreduce`` of the gradient sums per
    update (a buffer per dtype), plus small ``allgather`` calls of counts and outcomes."""

    ACCUMULATING, UPDATING = "accumulating the micro-batches", "updating the parameters"

    def __init__(self, comm=None):
        self.comm = world(comm)
        self.start()

    def start(self):
        self.stage, self.done, self.like = "checking the arguments", False, None
        self.last_traffic = 0  # bytes all-reduced in this call

    def check(self, acc):
        if any(backend.is_exact(p.data) for p in acc.params):
            raise TypeError("exact Fraction parameters cannot be all-reduced by MPI; train "
                            "them in one process (minigrad.exact)")
        self.like = (acc.params[0].xp, acc.params[0].device)

    def _exchange(self, stage, status, payload):
        """One ``allgather`` of every rank's outcome; ``RankFailed`` if a rank failed,
        ``WindowSkipped`` if one dropped its window, else every rank's payload."""
        outcomes = self.comm.allgather((stage, status, payload))
        failures = {rank: p for rank, (_, s, p) in enumerate(outcomes) if s == "failed"}
        if failures:
            self.done = True  # every rank knows: nothing more to tell
            healthy = [s for s, status, _ in outcomes if status != "failed"]
            raise RankFailed(healthy[0] if healthy else outcomes[0][0], failures)
        if any(s == "skipped" for _, s, _ in outcomes):
            self.done = True
            raise WindowSkipped()
        self.stage = self.ACCUMULATING  # what the local work after a collective is called
        return [p for _, _, p in outcomes]

    def begin(self, acc, samples, call):
        counts, calls = zip(*self._exchange("checking the arguments", "ok", (samples, call)))
        if any(c != calls[0] for c in calls):
            self.done = True
            raise ValueError(f"the ranks called step differently (strategy, optimizer step "
                             f"count, optimizer, parameter shapes and dtypes): {list(calls)}")
        return sum(counts[:self.comm.Get_rank()])

    def gather(self, what, payload):
        gathered = self._exchange(what, "ok", _host(payload, backend.to_numpy))
        xp, device = self.like
        return [_host(p, lambda a: backend.move(a, xp, device)) for p in gathered]

    def update(self, acc):
        """Every rank's sums added up with ONE read of this rank's device per dtype (the
        gradient sums and the loss sum joined on the device); whether they are finite is
        then known on the host, so the update's ``prepare`` reads nothing more. Every rank
        prepares, they agree that all of them could, and only then does each commit."""
        present = [p.grad is not None for p in acc.params]
        loss = acc.window.loss_sum
        on_device = not isinstance(loss, (int, float))
        arrays = [p.grad if p.grad is not None else p.xp.zeros_like(p.data)
                  for p in acc.params]
        packed = Packed(arrays + ([backend.get_namespace(loss).reshape(loss, (1,))]
                                  if on_device else []))
        window = (acc.window.items, acc.window.num_micro_batches, acc.window.samples,
                  None if on_device else loss)
        gathered = self._exchange(self.ACCUMULATING, "ok", (window, present))
        sums = packed.allreduce(self.comm)
        self.last_traffic = packed.nbytes
        windows, presents = zip(*gathered)
        used = [any(flags) for flags in zip(*presents)]
        unpacked = packed.unpack(sums)
        grads = [backend.like(g, p.data, f"reduced gradient {i}") if used[i] else None
                 for i, (p, g) in enumerate(zip(acc.params, unpacked))]
        loss_sum = float(sums[packed.dtypes.index(packed.like[-1][3])][-1]) if on_device \
            else sum(w[3] for w in windows)
        finite = backend.all_finite(sums) and math.isfinite(loss_sum)  # on the host
        self.stage = self.UPDATING
        acc.load_sums(grads, Window(*(sum(w[k] for w in windows) for k in range(3)),
                                    loss_sum))
        ready = acc.prepare(decided=(finite, loss_sum))  # divides once by the global items
        if ready is None:
            return None  # not finite on every rank alike (the same sums): all skip
        # Every rank could: now all commit. Ctrl-C is held from before the last exchange, so
        # no rank stops between learning that the others commit and committing itself.
        with interrupts.deferred():
            self._exchange(self.UPDATING, "ok", None)
            self.done = True  # nothing more to tell
            acc.commit(ready)
        return ready.mean_loss

    def skip(self):
        if not self.done:
            self._exchange(self.ACCUMULATING, "skipped", None)

    def abort(self, error):
        """Tell the other ranks that this one failed; ``RankFailed`` for an ``Exception``
        other than ``MemoryError`` (that, and interrupts, go on as themselves)."""
        if self.done or isinstance(error, (RankFailed, WindowSkipped)):
            return  # every rank already knows
        try:
            self._exchange(self.stage, "failed", f"{type(error).__name__}: {error}")
        except RankFailed as failed:
            if isinstance(error, Exception) and not isinstance(error, MemoryError):
                raise failed from error
