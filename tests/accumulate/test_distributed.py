"""Data parallelism over MPI (``minigrad.accumulate.distributed``).

Real MPI: ONE ``mpirun -n 2`` launch (``minigrad.apps.mpi_demo.launch``: loopback TCP,
``--oversubscribe``, root allowed, a timeout so that a hang fails) runs every case of
``CASES`` with this file as the script (``worker``); rank 0 prints every rank's results as one
JSON line, and the tests below judge them. What they show:

* exact: the dyadic MLP of ``dyadic.py`` (MSE, dropout 1/2), where every sum is exact in any
  order, so 2 ranks x uneven shards x micro-batches give parameters EQUAL (``==``) to one
  process on the full batch, for SGD and Adam; dropout masks keyed by the global sample
  index are what makes that hold;
* floating point: cross-entropy with ``ignore_index`` (one rank's shard wholly ignored in the
  first update), uneven shards, SGD with momentum and Adam with clipping, and sync BatchNorm
  (``strategy="exact_batchnorm"``): the gap to full-batch training is within the derived float64
  bound (``mpi_demo.compare``) at every update; BatchNorm with per-rank statistics is not
  (the comparison can fail);
* the replicas stay bit-identical, and ``check_identical`` notices one ulp of difference;
* a rank that fails (in its forward pass, in the optimizer step, on an argument, or by
  calling step differently) makes every rank raise and leaves every rank as it was, and the
  ranks go on training in step afterwards; a ``KeyboardInterrupt`` stays one on its rank.

Without MPI: the sharding rule, argument errors, and one rank (a single-process
communicator) equal to ``accumulate.step`` bit for bit on every namespace of the ``xp``
fixture (the gradient's round trip through a NumPy buffer, as under MPI, is exact).
"""

import os
import subprocess
import sys

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
if __name__ == "__main__":  # the MPI worker: the helpers that conftest.py puts on the path
    sys.path.insert(0, os.path.dirname(HERE))

from custom_strategy import Reversed  # noqa: E402
from dyadic import coarsen, dyadic_mlp, regression  # noqa: E402
from helpers import OneRank, launch_two_ranks, run_cases_on_ranks, to_np  # noqa: E402
from pairs import case_contrastive  # noqa: E402

from minigrad import backend, nn, optim  # noqa: E402
from minigrad.accumulate import distributed  # noqa: E402
from minigrad.accumulate import step as accumulate_step  # noqa: E402
from minigrad.apps import mpi_demo  # noqa: E402


# ----- the MPI worker (run by mpirun, not by pytest) -------------------------------------------
def flat_params(model):
    return np.concatenate([np.ravel(backend.to_numpy(p.data)) for p in model.parameters()])


def case_dyadic(comm, optimizer):
    """2 ranks, shards [5, 3], micro-batches of 2: parameters == full batch after each update."""
    xp = backend.resolve_namespace("numpy")
    make_opt = {"sgd": lambda ps: optim.SGD(ps, lr=0.125, momentum=0.5),
                "adam": lambda ps: optim.Adam(ps, lr=0.125)}[optimizer]
    model, full = dyadic_mlp(xp, dropout=0.5), dyadic_mlp(xp, dropout=0.5)
    distributed.broadcast_parameters(model, comm)
    opt, full_opt = make_opt(model.parameters()), make_opt(full.parameters())
    equal = []
    for t in range(3):
        x, y = regression(xp, seed=t)
        xr, yr = distributed.shard(x, y, comm, sizes=[5, 3])
        distributed.step(model, nn.MSELoss(), opt, xr, yr, comm=comm, micro_batch_size=2)
        accumulate_step(full, nn.MSELoss(), full_opt, x, y)
        equal.append(bool(np.array_equal(flat_params(model), flat_params(full))))
        coarsen(model), coarsen(full)  # back to multiples of 1/8: the next sums stay exact
    distributed.check_identical(model, comm)
    return {"equal": equal}


def case_bound(comm, optimizer, norm=None, strategy="micro"):
    """Cross-entropy with ignore_index over uneven shards: gap / bound per update."""
    xp = backend.resolve_namespace("numpy")
    rng = np.random.default_rng(14)
    sizes, shards = [5, 16, 16, 4], [17, 7] if norm is None else [9, 11]
    batches = []
    for t in range(3):
        x = rng.normal(size=(sum(shards), sizes[0]))
        y = rng.integers(0, sizes[-1], size=sum(shards))
        y[rng.random(len(y)) < 0.3] = -100
        if t == 0:
            y[shards[0]:] = -100  # rank 1 holds no item at all: its count is 0
        batches.append((xp.asarray(x), xp.asarray(y)))
    make_opt = {"sgd": lambda ps: optim.SGD(ps, lr=0.1, momentum=0.9),
                "adam": lambda ps: optim.Adam(ps, lr=0.01)}[optimizer]

    def make():
        return nn.MLP(sizes, activation="tanh", norm=norm, dropout=0.0 if norm else 0.2,
                      seed=3, xp=xp)

    _, rows, _ = mpi_demo.compare(comm, make, make_opt, nn.CrossEntropyLoss(), batches,
                                  shards=shards, micro_batch_size=3, strategy=strategy,
                                  max_grad_norm=1.0 if optimizer == "adam" else None)
    return {"ratios": None if rows is None else [r["ratio"] for r in rows],
            "gaps": None if rows is None else [r["max_abs"] for r in rows]}


def case_failure(comm, where):
    """Rank 1 fails ``where``; every rank reports what it raised and whether it is unchanged."""
    rank = comm.Get_rank()
    model = nn.MLP([3, 8, 2], seed=0)
    opt = optim.Adam(model.parameters(), lr=0.01)
    x, y = regression(backend.resolve_namespace("numpy"), n=12)
    xr, yr = distributed.shard(x, y, comm, sizes=[7, 5])
    loss, kwargs = nn.MSELoss(), {"micro_batch_size": 2}
    distributed.step(model, loss, opt, xr, yr, comm=comm, **kwargs)  # state to keep
    before = (flat_params(model), opt.step_count, [s.nu for s in opt.state])
    if rank == 1 and where == "forward":
        calls = []

        def loss(out, target, reduction="mean"):  # noqa: F811 (fails on its 2nd micro-batch)
            calls.append(1)
            if len(calls) == 2:
                raise ValueError("a deliberate failure in the forward pass")
            return nn.MSELoss()(out, target, reduction=reduction)

        loss.num_items = nn.MSELoss().num_items
    if rank == 1 and where in ("update", "interrupt"):
        error = RuntimeError if where == "update" else KeyboardInterrupt

        def refuse(*args, **kwargs):  # where an update can fail: before its commit
            raise error("a deliberate failure in the optimizer step")

        opt.plan = refuse
    if rank == 1 and where == "argument":
        kwargs = {"micro_batch_size": 0}
    if rank == 1 and where == "call":
        kwargs = {"micro_batch_size": 2, "strategy": "exact_batchnorm"}
    try:
        distributed.step(model, loss, opt, xr, yr, comm=comm, **kwargs)
        raised = None
    except distributed.RankFailed as err:
        raised = {"type": "RankFailed", "message": str(err), "ranks": sorted(err.failures)}
    except (ValueError, KeyboardInterrupt) as err:
        raised = {"type": type(err).__name__, "message": str(err)}
    unchanged = (np.array_equal(before[0], flat_params(model)) and before[1] == opt.step_count
                 and all(a is b for a, b in zip(before[2], [s.nu for s in opt.state]))
                 and all(p.grad is None for p in model.parameters()))
    vars(opt).pop("plan", None)  # the ranks go on, in step
    distributed.step(model, nn.MSELoss(), opt, xr, yr, comm=comm, micro_batch_size=2)
    distributed.check_identical(model, comm)
    return {"raised": raised, "unchanged": unchanged}


STRATEGIES = {"micro": lambda: "micro", "exact_batchnorm": lambda: "exact_batchnorm",
              "reversed": Reversed}  # the last one from a test file, unknown to minigrad


def case_strategies(comm):
    """Every strategy, the same code: on ONE MPI rank (a communicator of this rank alone)
    == one process, BatchNorm and dropout included (the same arithmetic); on the dyadic MLP,
    2 ranks == one process over the same micro-batches (every sum is exact)."""
    xp = backend.resolve_namespace("numpy")
    single = comm.Split(comm.Get_rank(), 0)
    results = {}
    for name, strategy in STRATEGIES.items():
        x, y = regression(xp, n=10, seed=3)
        models = [nn.MLP([3, 6, 2], norm="batch", dropout=0.25, seed=1, xp=xp) for _ in "ab"]
        opts = [optim.Adam(m.parameters(), lr=0.01) for m in models]
        for _ in range(2):
            accumulate_step(models[0], nn.MSELoss(), opts[0], x, y, sizes=[3, 3, 4],
                            strategy=strategy())
            distributed.step(models[1], nn.MSELoss(), opts[1], x, y, comm=single,
                             sizes=[3, 3, 4], strategy=strategy())
        one_rank = bool(np.array_equal(flat_params(models[0]), flat_params(models[1])))
        model, full = dyadic_mlp(xp, dropout=0.5), dyadic_mlp(xp, dropout=0.5)
        distributed.broadcast_parameters(model, comm)
        opt, full_opt = optim.SGD(model.parameters(), lr=0.125), optim.SGD(full.parameters(),
                                                                           lr=0.125)
        two_ranks = []
        for t in range(3):
            x, y = regression(xp, seed=t)
            xr, yr = distributed.shard(x, y, comm, sizes=[5, 3])
            distributed.step(model, nn.MSELoss(), opt, xr, yr, comm=comm, micro_batch_size=2,
                             strategy=strategy())
            accumulate_step(full, nn.MSELoss(), full_opt, x, y, sizes=[2, 2, 1, 2, 1],
                            strategy=strategy())
            two_ranks.append(bool(np.array_equal(flat_params(model), flat_params(full))))
            coarsen(model), coarsen(full)
        results[name] = {"one_rank": one_rank, "two_ranks": two_ranks}
    single.Free()
    return results


def case_one_ulp(comm):
    """check_identical raises on every rank when rank 1 differs by one ulp in one entry."""
    model = nn.MLP([3, 4, 2], seed=0)
    if comm.Get_rank() == 1:
        w = np.array(backend.to_numpy(model[2].bias.data))
        w[0] = np.nextafter(w[0], np.inf)
        model[2].bias.data = w
    try:
        distributed.check_identical(model, comm)
        return {"raised": None}
    except RuntimeError as err:
        return {"raised": str(err)}


CASES = {
    "dyadic_sgd": lambda comm: case_dyadic(comm, "sgd"),
    "dyadic_adam": lambda comm: case_dyadic(comm, "adam"),
    "bound_sgd": lambda comm: case_bound(comm, "sgd"),
    "bound_adam": lambda comm: case_bound(comm, "adam"),
    "sync_batchnorm": lambda comm: case_bound(comm, "sgd", norm="batch",
                                              strategy="exact_batchnorm"),
    "local_batchnorm": lambda comm: case_bound(comm, "sgd", norm="batch", strategy="micro"),
    "fail_forward": lambda comm: case_failure(comm, "forward"),
    "fail_update": lambda comm: case_failure(comm, "update"),
    "fail_argument": lambda comm: case_failure(comm, "argument"),
    "fail_call": lambda comm: case_failure(comm, "call"),
    "fail_interrupt": lambda comm: case_failure(comm, "interrupt"),
    "one_ulp": case_one_ulp,
    "strategies": case_strategies,
    "contrastive": case_contrastive,
}


if __name__ == "__main__":
    run_cases_on_ranks(CASES)
    raise SystemExit(0)


# ----- the tests: real MPI ----------------------------------------------------------------------
@pytest.fixture(scope="module")
def ranks():
    """Every case's result on rank 0 and rank 1, from one 2-rank launch."""
    return launch_two_ranks(os.path.abspath(__file__), timeout=240)


@pytest.mark.parametrize("name", ["dyadic_sgd", "dyadic_adam"])
def test_two_ranks_equal_one_process_exactly(ranks, name):
    assert ranks[0][name]["equal"] == [True, True, True]


@pytest.mark.parametrize("name", ["bound_sgd", "bound_adam", "sync_batchnorm"])
def test_two_ranks_are_full_batch_training_within_the_bound(ranks, name):
    ratios = ranks[0][name]["ratios"]
    assert len(ratios) == 3 and max(ratios) <= 1, ranks[0][name]
    assert ranks[1][name]["ratios"] is None  # rank 0 judges


def test_per_rank_batchnorm_statistics_are_not_full_batch_training(ranks):
    """The negative control: the same comparison fails where equivalence does not hold."""
    assert max(ranks[0]["local_batchnorm"]["ratios"]) > 1e3


@pytest.mark.parametrize("name, stage, text", [
    ("fail_forward", "accumulating the micro-batches", "ValueError: a deliberate failure"),
    ("fail_update", "updating the parameters", "RuntimeError: a deliberate failure"),
    ("fail_argument", "checking the arguments", "micro_batch_size must be a positive int"),
])
def test_a_failing_rank_makes_every_rank_raise_and_nothing_change(ranks, name, stage, text):
    for rank in (0, 1):
        result = ranks[rank][name]
        assert result["raised"]["type"] == "RankFailed" and result["raised"]["ranks"] == [1]
        assert f"rank 1 failed while {stage}" in result["raised"]["message"]
        assert text in result["raised"]["message"]
        assert result["unchanged"]


def test_ranks_that_call_step_differently_are_refused(ranks):
    for rank in (0, 1):
        raised = ranks[rank]["fail_call"]["raised"]
        assert raised["type"] == "ValueError" and "called step differently" in raised["message"]
        assert ranks[rank]["fail_call"]["unchanged"]


def test_an_interrupt_stays_an_interrupt_on_its_rank(ranks):
    assert ranks[1]["fail_interrupt"]["raised"]["type"] == "KeyboardInterrupt"
    assert ranks[0]["fail_interrupt"]["raised"]["ranks"] == [1]
    assert ranks[0]["fail_interrupt"]["unchanged"] and ranks[1]["fail_interrupt"]["unchanged"]


@pytest.mark.parametrize("name", list(STRATEGIES))
def test_every_strategy_runs_on_one_and_two_ranks_as_in_one_process(ranks, name):
    for rank in (0, 1):
        assert ranks[rank]["strategies"][name] == {"one_rank": True,
                                                   "two_ranks": [True, True, True]}


def test_gradcache_on_two_ranks_is_the_full_batch_gradient(ranks):
    """Representations gathered from every rank, each rank back-propagating its own rows of
    the global representations' gradient: within the bound of one process's full batch."""
    assert ranks[0]["contrastive"]["gradcache"] <= 1


def test_gathering_without_gradient_is_not(ranks):
    """The mistake, measured. Every rank's own rows of the WHOLE batch's loss, then DDP's
    mean over the ranks: the right gradient divided by the rank count (times 2 it is within
    the bound). Every rank's loss of its own rows only: wrong by no constant factor (its
    queries' gradient is right; its passages miss the other ranks' queries)."""
    result = ranks[0]["contrastive"]
    assert result["detached_global"] > 1e6 and result["detached_global_times_ranks"] <= 1
    assert result["detached_local"] > 1e6 and result["detached_local_times_ranks"] > 1e6
    assert min(result["detached_local_relative_gap"].values()) > 0.05


@pytest.mark.parametrize("name", ["naive_update_1", "naive_update_2", "bank_update_1",
                                  "bank_update_2"])
def test_naive_and_bank_on_two_ranks_are_one_process_over_the_same_micro_batches(ranks, name):
    assert ranks[0]["contrastive"][name] <= 1
    assert ranks[0]["contrastive"]["banks_equal"] and ranks[1]["contrastive"]["banks_equal"]


def test_check_identical_sees_one_ulp(ranks):
    for rank in (0, 1):
        assert ranks[rank]["one_ulp"]["raised"] == "the replicas differ from rank 0: rank 1 in " \
                                                   "2.bias"


# ----- the tests: one process, no MPI -----------------------------------------------------------
@pytest.mark.parametrize("n, ranks, sizes, expected", [
    (10, 3, None, [4, 3, 3]), (2, 2, None, [1, 1]), (10, 2, [7, 3], [7, 3]),
    (5, 1, None, [5]),
])
def test_shard_sizes(n, ranks, sizes, expected):
    assert distributed.shard_sizes(n, ranks, sizes) == expected


@pytest.mark.parametrize("n, ranks, sizes, error, text", [
    (1, 2, None, ValueError, "cannot give each of 2 ranks a sample"),
    (10, 2, [10, 0], ValueError, "sizes[1] must be a positive int"),
    (10, 2, [4, 4], ValueError, "must name 2 ranks (one positive size each) and sum to"),
    (10, 2, [4, 3, 3], ValueError, "must name 2 ranks"),
    (10, 2, "73", TypeError, "shard sizes must be a sequence of positive ints, got str"),
    (10, 0, None, ValueError, "ranks must be a positive int"),
])
def test_shard_sizes_errors(n, ranks, sizes, error, text):
    with pytest.raises(error) as info:
        distributed.shard_sizes(n, ranks, sizes)
    assert text in str(info.value)


def test_a_communicator_is_checked():
    with pytest.raises(TypeError, match=r"comm must be an mpi4py communicator, got object"):
        distributed.world(object())


def test_import_minigrad_needs_no_mpi():
    code = "import sys, minigrad; print('mpi4py' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "False", out.stderr


def test_one_rank_is_accumulate_step_bit_for_bit(xp):
    """One rank: the same micro-batches, sums and division as ``accumulate.step`` (the gradient
    makes a round trip through a NumPy buffer, which is exact), on every namespace."""
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 4, size=11)
    labels[rng.random(11) < 0.3] = -100
    x, y = xp.asarray(rng.normal(size=(11, 3))), xp.asarray(labels)
    models = [nn.MLP([3, 8, 4], norm="layer", dropout=0.25, seed=1, xp=xp) for _ in range(2)]
    opts = [optim.Adam(m.parameters(), lr=0.01) for m in models]
    for _ in range(2):
        a = distributed.step(models[0], nn.CrossEntropyLoss(), opts[0], x, y, comm=OneRank(),
                             micro_batch_size=4, max_grad_norm=0.5)
        b = accumulate_step(models[1], nn.CrossEntropyLoss(), opts[1], x, y,
                            micro_batch_size=4, max_grad_norm=0.5)
        assert a == b
    for (name, p), q in zip(models[0].named_parameters(), models[1].parameters()):
        assert backend.get_namespace(p.data) is backend.get_namespace(q.data)
        assert np.array_equal(to_np(p.data), to_np(q.data)), name


def test_one_rank_failure_is_rank_failed_and_nothing_changes():
    model = nn.MLP([3, 4, 2], seed=0)
    opt = optim.SGD(model.parameters(), lr=0.1)
    before = [p.data for p in model.parameters()]
    with pytest.raises(distributed.RankFailed) as info:
        distributed.step(model, nn.MSELoss(), opt, np.ones((4, 3)), np.ones((4, 2)),
                         comm=OneRank(), micro_batch_size=True)
    assert str(info.value).startswith("rank 0 failed while checking the arguments; every rank "
                                      "is as it was before the call (rank 0: TypeError: "
                                      "micro_batch_size must be a positive int, got bool True")
    assert info.value.failures == {0: str(info.value).split("(rank 0: ")[1][:-1]}
    assert all(p.data is b for p, b in zip(model.parameters(), before)) and opt.step_count == 0
