"""``minigrad mpi-demo``: data-parallel training over MPI IS full-batch training.

Run it under MPI, e.g. ``mpirun -n 2 minigrad mpi-demo`` (as root Open MPI also wants
``--allow-run-as-root``; more ranks than cores want ``--oversubscribe``). Every rank trains
the same MLP on scikit-learn's digits with ``accumulate.distributed.step``: each global batch
is cut into uneven shards, one per rank, some targets are ``ignore_index``, each rank
accumulates its shard over micro-batches, and the ranks all-reduce the gradient sum and the
item count once per update. Rank 0 also trains the same model in one process on the whole
batch and, after every update, judges the parameter gap by the floating-point bound of
``minigrad.analysis.trajectory`` (the accumulation bound holds for any order of the sums, the
all-reduce's included). Beside it, one process simulates what averaging each rank's MEAN
gradient would do (``accumulate.step(sizes=shards, normalize="micro_batch_mean")``): wrong for
uneven shards. Last, it counts what one update communicates, for several numbers of
micro-batches per rank (``minigrad.studies.communication``).
"""

import argparse
import functools
import os
import shutil
import signal
import subprocess
import sys

import numpy as np

from minigrad import accumulate, nn, optim
from minigrad.accumulate import distributed
from minigrad.analysis.bounds import flat, unit_roundoff
from minigrad.analysis.metrics import eval_accuracy
from minigrad.analysis.trajectory import TrajectoryReplay
from minigrad.apps.args import number
from minigrad.engine import validate
from minigrad.studies import data as datasets
from minigrad.studies.communication import traffic

GLOBAL_BATCH = 128
SIZES = [64, 32, 10]
IGNORE_FRACTION = 0.1
OPTIMIZERS = {"sgd": lambda params: optim.SGD(params, lr=0.1, momentum=0.9),
              "adam": lambda params: optim.Adam(params, lr=1e-3)}


# How `launch` runs Open MPI on one machine: root allowed (containers run as root), TCP over the
# loopback interface only (no shared-memory segments to size, no network interfaces to probe;
# it also starts faster here than the default); and `--oversubscribe`: more ranks than cores.
MPI_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
           "OMPI_MCA_btl": "self,tcp", "OMPI_MCA_btl_tcp_if_include": "lo"}


def mpirun():
    """The ``mpirun`` beside ``sys.executable`` (the ``dist`` extra installs Open MPI into the
    environment), else the one on ``PATH``; ``None`` if there is none."""
    here = os.path.dirname(sys.executable)
    return shutil.which("mpirun", path=here) or shutil.which("mpirun")


def launch(ranks, argv, *, timeout=120):
    """Run ``python argv...`` on ``ranks`` MPI processes of this machine (``MPI_ENV``,
    ``--oversubscribe``); returns ``(exit status, stdout, stderr)``. Past ``timeout`` seconds
    mpirun is stopped (it passes SIGTERM on to the ranks; SIGKILL to its process group 5 s
    later) and ``subprocess.TimeoutExpired`` is raised: a hang fails instead of waiting."""
    command = mpirun()
    if command is None:
        raise FileNotFoundError("no mpirun found: pip install 'minigrad[dist]'")
    ranks = validate.positive_int("ranks", ranks)
    argv = [command, "-n", str(ranks), "--oversubscribe", sys.executable, *argv]
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env={**os.environ, **MPI_ENV}, start_new_session=True)
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.terminate()
        try:
            process.communicate(timeout=5)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.communicate()
        raise
    return process.returncode, out, err


def uneven_shards(n, ranks):
    """Rank r gets a share proportional to r + 2 (uneven on purpose); the last the rest.

    >>> uneven_shards(128, 2)
    [51, 77]
    """
    weights = [r + 2 for r in range(ranks)]
    sizes = [n * w // sum(weights) for w in weights[:-1]]
    return distributed.shard_sizes(n, ranks, sizes + [n - sum(sizes)])


def compare(comm, make, make_optimizer, loss, batches, *, shards=None, micro_batch_size=None,
            max_grad_norm=None, strategy="micro"):
    """Distributed training (every rank) beside one-process full-batch training (rank 0).

    Each ``(x, y)`` of ``batches`` is the global batch of one update; rank r trains on its
    shard (``shards``, default near-equal) in micro-batches of ``micro_batch_size``. After
    every update the replicas are checked to be bit-identical. Returns the distributed model
    and, on rank 0, per update ``{"step", "max_abs", "bound", "ratio"}`` (gap = |theta_dist -
    theta_full|, elementwise bound of ``analysis.trajectory.TrajectoryReplay``) and the
    full-batch model; on the other ranks ``None`` twice. With ``strategy="exact_batchnorm"``
    (sync BatchNorm) the full-batch model's plain BatchNorm is the reference.
    """
    rank = comm.Get_rank()
    model = make()
    distributed.broadcast_parameters(model, comm)
    opt = make_optimizer(model.parameters())
    rows = full = None
    if rank == 0:
        full, probe = make(), make()
        full_opt = make_optimizer(full.parameters())
        replay = TrajectoryReplay(full, full_opt, loss, max_grad_norm=max_grad_norm,
                                  u=unit_roundoff(full.parameters()[0].dtype))
        rows = []
    for x, y in batches:
        if rank == 0:  # the bound at the replicas' theta: a probe shares their arrays
            for q, p in zip(probe.parameters(), model.parameters()):
                q.data = p.data
            replay.measure(probe, x, y)
            accumulate.step(full, loss, full_opt, x, y, max_grad_norm=max_grad_norm)
        xr, yr = distributed.shard(x, y, comm, sizes=shards)
        distributed.step(model, loss, opt, xr, yr, comm=comm, micro_batch_size=micro_batch_size,
                         max_grad_norm=max_grad_norm, strategy=strategy)
        distributed.check_identical(model, comm, buffers=strategy == "exact_batchnorm")
        if rank == 0:
            seen = replay.observe(flat(p.data for p in model.parameters()))
            rows.append({"step": seen.step, "max_abs": seen.max_abs,
                         "bound": float(np.max(seen.bound)), "ratio": seen.ratio})
    return model, rows, full


def batches(x, y, updates, seed, ignore_fraction=IGNORE_FRACTION):
    """``updates`` global batches of ``GLOBAL_BATCH`` digits, a seeded share of their targets
    set to ``ignore_index`` -100 (unlabelled samples, as a masked loss sees them)."""
    rng = np.random.default_rng([seed, 14])
    out = []
    for _ in range(updates):
        index = rng.choice(len(y), size=GLOBAL_BATCH, replace=False)
        yb = y[index].copy()
        yb[rng.random(GLOBAL_BATCH) < ignore_fraction] = -100
        out.append((x[index], yb))
    return out


def main(args, comm=None):
    """Train, compare and print on rank 0; returns the exit status on every rank (0: the
    replicas ARE full-batch training within the bound, 1: not)."""
    comm = distributed.world(comm)
    rank, ranks = comm.Get_rank(), comm.Get_size()
    x_train, y_train, x_test, y_test = datasets.digits(seed=args.seed)
    updates = 3 if args.quick else 30
    data = batches(x_train, y_train, updates, args.seed)
    shards = uneven_shards(GLOBAL_BATCH, ranks)
    make = functools.partial(nn.MLP, SIZES, seed=args.seed)
    make_opt = OPTIMIZERS[args.optimizer]
    loss = nn.CrossEntropyLoss(ignore_index=-100)
    model, rows, full = compare(comm, make, make_opt, loss, data, shards=shards,
                          micro_batch_size=args.micro_batch)
    counted = traffic(comm, make, make_opt, loss, *data[0], shards, (1, 2, 4, 8))
    equivalent = comm.allgather(rows is None or all(r["ratio"] <= 1 for r in rows))[0]
    if rank == 0:
        naive = make()
        naive_opt = make_opt(naive.parameters())
        for x, y in data:
            accumulate.step(naive, loss, naive_opt, x, y, sizes=shards,
                            normalize="micro_batch_mean")
        _print(args, rows, (full, model, naive), (x_test, y_test), shards, counted, equivalent)
    return 0 if equivalent else 1


def _print(args, rows, models, test, shards, counted, equivalent):
    full, model, naive = models
    splits = " and ".join(str(accumulate.split_sizes(s, args.micro_batch)) for s in shards)
    print(f"Digits, MLP {SIZES}, {args.optimizer}, {len(rows)} updates of a global batch of "
          f"{GLOBAL_BATCH} ({IGNORE_FRACTION:.0%} of the targets ignored),")
    ranks = f"{len(shards)} rank{'s' if len(shards) > 1 else ''}"
    print(f"over {ranks} of MPI: shards {shards}, micro-batches {splits}.")
    print("max gap: the largest |theta - theta_full| over every parameter and update;")
    print("gap/bound: the largest ratio of an entry's gap to its rounding bound (<= 1: within);")
    print("mean of per-rank means: each shard's mean gradient averaged over the ranks, which "
          "weighs\nuneven shards (and their kept targets) equally: judged by the largest "
          "bound\n")
    gap = max(r["max_abs"] for r in rows)
    ratio = max(r["ratio"] for r in rows)
    naive_gap = float(np.max(np.abs(flat(p.data for p in naive.parameters())
                                    - flat(p.data for p in full.parameters()))))
    table = [
        ("1 process, full batch", full, "-", "-", "the reference"),
        (f"{ranks}, accumulate.distributed", model, f"{gap:.1e}", f"{ratio:.2g}",
         "IS full-batch training (within the bound)" if equivalent else
         "NOT within the bound"),
    ]
    if len(shards) > 1:
        verdict = "NOT full-batch training" if naive_gap > max(r["bound"] for r in rows) \
            else "full-batch training here (equal shards and item counts)"
        table.append(("mean of per-rank means", naive, f"{naive_gap:.1e}", "-",
                      f"{verdict} (one-process simulation)"))
    print(f"{'run':<32}{'test acc':>9}{'max gap':>10}{'gap/bound':>10}  verdict")
    print("-" * 98)
    for label, m, gap, ratio, verdict in table:
        accuracy = eval_accuracy(m, *test)
        print(f"{label:<32}{accuracy:>9.1%}{gap:>10}{ratio:>10}  {verdict}")
    print("\nthe replicas' parameters were bit-identical on every rank after every update "
          "(SHA-256)")
    n_params = sum(p.size for p in model.parameters())
    print(f"\ncommunication of one update, counted on rank 0 ({n_params} float64 parameters):")
    print(f"{'micro-batches per rank':>24}{'Allreduce':>11}{'bytes':>9}{'allgather':>11}"
          f"{'bytes':>9}")
    for r in counted:
        print(f"{r['num_micro_batches']:>24}{r['Allreduce']:>11}{r['Allreduce_bytes']:>9}"
              f"{r['allgather']:>11}{r['allgather_bytes']:>9}")


def register(commands):
    """Add ``mpi-demo`` to ``commands`` (what ``ArgumentParser.add_subparsers`` returns)."""
    p = commands.add_parser("mpi-demo", help="data-parallel training over MPI vs full batch",
                            description=__doc__.split("\n\n")[1],
                            epilog="example: mpirun -n 2 minigrad mpi-demo --quick",
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="3 updates instead of 30")
    p.add_argument("--optimizer", choices=tuple(OPTIMIZERS), default="sgd",
                   help="sgd: SGD(lr=0.1, momentum=0.9); adam: Adam(lr=1e-3) (default: "
                        "%(default)s)")
    p.add_argument("--micro-batch", type=number(int, validate.positive_int, "--micro-batch"),
                   default=20, help="samples per micro-batch on each rank (default: "
                                    "%(default)s)")
    p.add_argument("--seed", type=number(int, validate.integer, "--seed", low=0), default=0,
                   help="seed of the data order, the ignored targets and the initial weights "
                        "(default: %(default)s)")
    p.set_defaults(run=main, error=p.error)
    return p
