"""What one data-parallel update communicates, counted without MPI on a one-rank
communicator (``tests/apps/test_mpi_demo.py`` counts it over two real ranks)."""

import pickle

import numpy as np
from helpers import OneRank

from minigrad import nn, optim
from minigrad.studies.communication import Counting, traffic


def test_counting_counts_calls_and_the_bytes_this_rank_sends():
    counting = Counting(OneRank())
    receive = np.empty(3)
    counting.Allreduce(np.arange(3.0), receive)
    counting.Bcast(np.zeros(2, dtype=np.float32))
    assert counting.allgather({"n": 1}) == [{"n": 1}] and list(receive) == [0.0, 1.0, 2.0]
    assert counting.calls == {"Allreduce": 1, "allgather": 1, "Bcast": 1}
    assert counting.bytes == {"Allreduce": 24, "allgather": len(pickle.dumps({"n": 1})),
                              "Bcast": 8}


def test_one_allreduce_of_the_gradient_per_update_however_many_micro_batches():
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(12, 3)), rng.integers(0, 2, 12)

    def make():
        return nn.MLP([3, 4, 2], seed=0)

    rows = traffic(OneRank(), make, lambda ps: optim.SGD(ps, lr=0.1), nn.CrossEntropyLoss(),
                   x, y, [12], (1, 2, 4))
    n_params = sum(p.size for p in make().parameters())
    assert [row["num_micro_batches"] for row in rows] == [1, 2, 4]
    assert all(row["Allreduce"] == 1 and row["Allreduce_bytes"] == 8 * n_params for row in rows)
    assert len({(row["allgather"], row["allgather_bytes"]) for row in rows}) == 1
