"""What one data-parallel update communicates: ``Counting`` wraps an MPI communicator and
counts the collectives and bytes that pass through it; ``traffic`` runs one update of
``minigrad.accumulate.distributed.step`` per number of micro-batches and counts.

However many micro-batches a rank runs, the gradient is all-reduced once per update, so
the ``Allreduce`` count and bytes do not grow with the number of micro-batches
(``minigrad mpi-demo`` prints the table, ``tests/apps/test_mpi_demo.py`` checks it).
"""

import pickle

from minigrad.accumulate import distributed


class Counting:
    """A communicator that counts what passes through it: the collectives called, the bytes
    of the arrays given to ``Allreduce``/``Bcast`` and the pickled bytes of ``allgather``
    (what this rank sends)."""

    def __init__(self, comm):
        self.comm = comm
        self.calls = {"Allreduce": 0, "allgather": 0, "Bcast": 0}
        self.bytes = dict.fromkeys(self.calls, 0)

    def Get_rank(self):  # noqa: N802 (mpi4py's names)
        return self.comm.Get_rank()

    def Get_size(self):  # noqa: N802
        return self.comm.Get_size()

    def allgather(self, obj):
        self._count("allgather", len(pickle.dumps(obj)))
        return self.comm.allgather(obj)

    def Allreduce(self, send, receive, *op):  # noqa: N802
        self._count("Allreduce", send.nbytes)
        return self.comm.Allreduce(send, receive, *op)

    def Bcast(self, buffer, root=0):  # noqa: N802
        self._count("Bcast", buffer.nbytes)
        return self.comm.Bcast(buffer, root=root)

    def _count(self, name, nbytes):
        self.calls[name] += 1
        self.bytes[name] += nbytes


def traffic(comm, make, make_optimizer, loss, x, y, shards, micro_batch_counts):
    """What ONE update communicates (counted on this rank) for each number of micro-batches
    per rank: rows ``{"num_micro_batches", "Allreduce", "Allreduce_bytes", "allgather",
    "allgather_bytes"}``. Each update runs on a fresh replica from the same start."""
    rows = []
    for k in micro_batch_counts:
        model = make()
        opt = make_optimizer(model.parameters())
        xr, yr = distributed.shard(x, y, comm, sizes=shards)
        counting = Counting(comm)
        distributed.step(model, loss, opt, xr, yr, comm=counting,
                         num_micro_batches=min(k, xr.shape[0]))
        rows.append({"num_micro_batches": k, **{name: counting.calls[name] for name in
                                            ("Allreduce", "allgather")},
                     **{f"{name}_bytes": counting.bytes[name] for name in
                        ("Allreduce", "allgather")}})
    return rows
