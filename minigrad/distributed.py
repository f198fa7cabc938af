"""``minigrad.distributed``: data-parallel training over MPI (the optional extra ``dist``).

The names of ``minigrad.accumulate.distributed``, where the code and its explanation live:
``step`` (one update from every rank's shard), ``shard`` and ``shard_sizes``,
``broadcast_parameters``, ``check_identical``, ``RankFailed`` and ``world``. mpi4py is
imported on first use, so importing this module needs no MPI. The demo is
``mpirun -n 2 minigrad mpi-demo`` (``minigrad.apps.mpi_demo``).
"""

from minigrad.accumulate.distributed import (
    RankFailed,
    broadcast_parameters,
    check_identical,
    shard,
    shard_sizes,
    step,
    world,
)

__all__ = ["RankFailed", "broadcast_parameters", "check_identical", "shard", "shard_sizes",
           "step", "world"]
