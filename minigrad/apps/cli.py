"""The ``minigrad`` command line.

``minigrad demo`` trains one MLP on digits with and without accumulation and says which
runs are full-batch training (``minigrad.apps.demo``). ``minigrad plan`` picks the largest
micro-batch size whose update fits a memory budget (``minigrad.analysis.planner``).
``minigrad check`` answers "is my set-up accumulation-safe?" (``minigrad.analysis.check``),
or says that its comparison could not have failed (no verdict, exit status 3).
``mpirun -n 2 minigrad mpi-demo`` shows that data-parallel training over MPI is full-batch
training (``minigrad.apps.mpi_demo``). ``minigrad precision`` measures the error of each
gradient-sum buffer in low precision (``minigrad.apps.precision_command``).
"""

import argparse
import contextlib
import functools
import json
import os
import sys

import numpy as np

from minigrad import nn, optim
from minigrad.analysis import planner
from minigrad.apps import check_command, mpi_demo, precision_command
from minigrad.apps.args import number, widths
from minigrad.engine import validate


class _Parser(argparse.ArgumentParser):
    """argparse, with a bad value reported in one line (no usage block) and exit status 2."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _directory(text):
    """An output folder: created if missing; an existing file is refused."""
    if os.path.exists(text) and not os.path.isdir(text):
        raise argparse.ArgumentTypeError(f"{text!r} is a file, not a folder")
    return text


def _one_blas_thread():
    """One BLAS thread, where threadpoolctl is installed (``make`` installs it).

    The demo's matrices (samples x hidden) are too small to gain from BLAS threads, and an
    OpenBLAS pool whose threads spin-wait makes every call slow when another process holds
    one of the cores.
    """
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        return contextlib.nullcontext()
    return threadpool_limits(limits=1, user_api="blas")


def demo(args):
    """Train one MLP on scikit-learn's digits in several ways with the same global batch and
    updates (full batch; accumulated with the item-weighted rule and with the textbook mean
    over an uneven split; BatchNorm plainly and in exact mode; GroupNorm) and say which runs
    ARE full-batch training. Prints a table and writes a figure to --out."""
    from minigrad.apps import demo as run_demo

    return run_demo.main(args)


def plan(args):
    """Measure one update of an MLP on random data (cross-entropy, a seeded NumPy Generator)
    at a few micro-batch sizes and print the largest that fits --memory; the global batch,
    and so the update, stays the same. Exit status 0: a size fits; 1: none fits, not even
    1 (the error names the smallest budget measured to fit); 2: a bad argument. With
    --recompute all or auto, hidden layers are recomputed in the backward (nn.Recompute)
    and each choice measured is listed with its time per update."""
    rng = np.random.default_rng(args.seed)
    n, sizes = args.global_batch, args.sizes
    if args.recompute != "none" and len(sizes) < 3:
        args.error(f"argument --recompute: {args.recompute} recomputes hidden layers, and "
                   f"--sizes {','.join(map(str, sizes))} has none; give --recompute none")
    x = rng.normal(size=(n, sizes[0])).astype(args.dtype)
    y = rng.integers(0, sizes[-1], size=n)
    model = nn.MLP(sizes, seed=args.seed, dtype=args.dtype)
    # The learning rate changes no array size; SGD is plain (no momentum buffers).
    optimizer = optim.SGD(model.parameters(), lr=0.01) if args.optimizer == "sgd" else \
        optim.Adam(model.parameters())
    try:
        with _one_blas_thread():  # the probes' small products; BLAS workspace is not counted
            result = planner.plan(model, nn.CrossEntropyLoss(), optimizer, x, y, args.memory,
                                  recompute=args.recompute)
    except planner.BudgetTooSmall as err:
        print(f"minigrad plan: error: no micro-batch size fits --memory "
              f"{planner.format_bytes(args.memory)}; the smallest peak measured is "
              f"{planner.format_bytes(err.smallest)} (micro-batch size {err.size}): give "
              f"--memory {err.smallest} or more", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps({"sizes": sizes, "global_batch": n, "optimizer": args.optimizer,
                          "dtype": args.dtype, **result}))
        return 0
    print(_plan_text(args, result))
    return 0


def _plan_text(args, result):
    """``minigrad plan``'s answer as lines of text."""
    size = planner.format_bytes
    lines = [f"MLP {args.sizes} ({args.dtype}, {args.optimizer}), global batch "
             f"{args.global_batch}, budget {size(args.memory)}",
             f"micro-batch size:  {result['micro_batch_size']} "
             f"({result['num_micro_batches']} micro-batches, one update)"]
    if args.recompute != "none":
        lines.append(f"recompute:         {_runs_text(result['recompute'])} (--recompute "
                     f"{args.recompute}; the update is the same either way)")
    lines += [f"predicted peak:    {size(result['predicted_peak'])} "
              f"({size(round(result['a']))} + {size(round(result['b']))} per sample)",
              f"measured peak:     {size(result['measured_peak'])} "
              f"({result['measured_peak'] / args.memory:.1%} of the budget; "
              f"{result['runs']} measured updates)",
              f"budget:            {size(result['budget'])}"]
    if args.recompute != "none":
        lines.append("choices measured (seconds per update; the same micro-batch size with "
                     "nothing recomputed):")
        for c in result["candidates"]:
            mark = "  <- chosen" if c["recompute"] == result["recompute"] else ""
            lines.append(f"  recompute {_runs_text(c['recompute']):<22} micro-batch "
                         f"{c['micro_batch_size']:>6}  peak {size(c['measured_peak']):>10}  "
                         f"{c['seconds_per_update'] * 1e3:8.1f} ms "
                         f"({c['seconds_without_recompute'] * 1e3:.1f} ms){mark}")
    return "\n".join(lines)


def _runs_text(runs):
    """Hidden-layer runs ``[[0, 1], [3, 3]]`` as ``'hidden layers 0-1, 3'``."""
    if not runs:
        return "nothing"
    return "hidden layers " + ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in runs)


def _memory(text):
    """``--memory``: a size such as 256MB, 1.5GiB or 4096 (bytes)."""
    try:
        return planner.parse_bytes(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def build_parser():
    """The ``minigrad`` argument parser, with the sub-commands ``demo``, ``plan`` and ``check``."""
    parser = _Parser(prog="minigrad", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    p = commands.add_parser("demo", help="accumulation vs full-batch training on digits",
                            description=demo.__doc__,
                            epilog="example: minigrad demo --quick --out figures")
    p.add_argument("--quick", action="store_true",
                   help="12 updates instead of 60 (under 15 s)")
    p.add_argument("--out", type=_directory, default=".",
                   help="folder for the figure demo.png (default: the current folder)")
    p.add_argument("--seed", type=number(int, validate.integer, "--seed", low=0), default=0,
                   help="seed of the data order and the initial weights (default: %(default)s)")
    p.set_defaults(run=demo, error=p.error)
    count = functools.partial(number, int, validate.positive_int)
    p = commands.add_parser("plan", help="the largest micro-batch whose update fits a budget",
                            description=plan.__doc__, epilog="example: minigrad plan --sizes "
                            "784,1024,1024,10 --global-batch 4096 --memory 256MB")
    p.add_argument("--sizes", type=widths, required=True,
                   help="MLP widths, inputs first and classes last, e.g. 784,1024,1024,10")
    p.add_argument("--global-batch", type=count("--global-batch"), required=True,
                   help="samples in one update (the global batch)")
    p.add_argument("--memory", type=_memory, required=True,
                   help="budget for one update: B, KB, MB, GB, KiB, MiB or GiB, e.g. 256MB")
    p.add_argument("--optimizer", choices=("sgd", "adam"), default="sgd",
                   help="plain SGD or Adam, whose moments take 2 parameters' worth "
                        "(default: %(default)s)")
    p.add_argument("--dtype", choices=("float32", "float64"), default="float64",
                   help="dtype of the model and the data (default: %(default)s)")
    p.add_argument("--seed", type=number(int, validate.integer, "--seed", low=0), default=0,
                   help="seed of the data and the initial weights (default: %(default)s)")
    p.add_argument("--recompute", choices=planner.RECOMPUTE, default="none",
                   help="hidden layers to recompute in the backward instead of keeping their "
                        "activations: none, all, or auto (the fastest update that fits; "
                        "measures each choice) (default: %(default)s)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(run=plan, error=p.error)
    check_command.register(commands)
    mpi_demo.register(commands)
    precision_command.register(commands)
    return parser


def main(argv=None):
    """Entry point of the ``minigrad`` command; returns the exit status: 0 done, 1 a negative
    answer (``check``: not equivalent; ``plan``: nothing fits), 2 bad arguments (including
    sizes too large for memory), 3 no answer (``check``: no verdict, the comparison could
    not have failed)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.run(args)
    except MemoryError as err:
        parser.exit(2, f"minigrad {args.command}: error: not enough memory for these sizes "
                       f"({err})\n")
