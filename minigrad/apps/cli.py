"""The ``minigrad`` command line.

``minigrad demo`` trains an MLP on interleaved spirals with full-batch gradient descent
and prints the loss and training accuracy as it goes. ``minigrad plan`` picks the largest
micro-batch size whose update fits a memory budget (``minigrad.analysis.planner``).
"""

import argparse
import contextlib
import functools
import json
import math
import sys
import time
import warnings

import numpy as np

from minigrad import nn, optim
from minigrad.analysis import planner
from minigrad.analysis.metrics import accuracy
from minigrad.apps import data
from minigrad.engine import validate
from minigrad.engine.tensor import Tensor
from minigrad.nn import functional as F


class _Parser(argparse.ArgumentParser):
    """argparse, with a bad value reported in one line (no usage block) and exit status 2."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _value(kind, check, flag, **limits):
    """An argparse ``type``: parse ``kind`` (int or float), then ``check`` it as
    ``minigrad.engine.validate`` does for the library, so both judge a value the same."""
    def parse(text):
        try:
            value = kind(text)
        except ValueError:
            noun = "an integer" if kind is int else "a number"
            raise argparse.ArgumentTypeError(f"expected {noun}, got {text!r}") from None
        try:
            return check(flag, value, **limits)
        except (TypeError, ValueError) as err:
            raise argparse.ArgumentTypeError(str(err).removeprefix(f"{flag} ")) from None

    return parse


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
    """Full-batch SGD on spirals: p <- p - lr * dL/dp, L the mean cross-entropy."""
    if args.samples < args.classes:
        args.error(f"--samples ({args.samples}) must be at least --classes ({args.classes})")
    try:
        points = data.spirals(args.samples, args.classes, args.noise, seed=args.seed)
    except ValueError as err:  # e.g. --noise so large that the data overflow
        args.error(str(err).replace("noise=", "--noise "))
    x, y = data.to_namespace(*points)
    x = Tensor(x)
    sizes = [2, args.hidden, args.hidden, args.classes]
    model = nn.MLP(sizes, seed=args.seed)
    print(f"MLP {sizes} on {args.classes} spirals ({args.samples} samples), "
          f"full-batch SGD, lr={args.lr}")
    print(f"{'epoch':>7}  {'loss':>9}  {'accuracy':>8}")
    # An overflow is reported once, as divergence (exit 1), not as NumPy's warning per op.
    with _one_blas_thread(), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        seconds = _train(model, x, y, args)
        final = accuracy(model(x), y)
    print(f"final training accuracy: {final:.1%} "
          f"after {args.epochs} epochs ({seconds:.1f} s)")
    return 0


def _train(model, x, y, args):
    """Full-batch SGD, printing a table row every ``args.every`` epochs; returns seconds."""
    start = time.perf_counter()
    # Row e shows the model after e updates; the last forward pass is only evaluated.
    for epoch in range(args.epochs + 1):
        logits = model(x)
        loss = F.cross_entropy(logits, y)
        if not math.isfinite(loss.item()):
            raise Diverged(f"the loss became {loss.item()} at epoch {epoch}: the learning "
                           f"rate --lr {args.lr} (or the data's --noise) is too large")
        if epoch % args.every == 0 or epoch == args.epochs:
            print(f"{epoch:>7}  {loss.item():>9.5f}  {accuracy(logits, y):>8.1%}")
        if epoch == args.epochs:
            break
        model.zero_grad()
        loss.backward()
        for p in model.parameters():
            p.data = p.data - args.lr * p.grad  # plain arrays: nothing is recorded
    return time.perf_counter() - start


def plan(args):
    """Measure one update of an MLP on random data (cross-entropy, a seeded NumPy Generator)
    at a few micro-batch sizes and print the largest that fits --memory; the global batch,
    and so the update, stays the same. Exit status 0: a size fits; 1: none fits, not even
    1 (the error names the smallest budget measured to fit); 2: a bad argument."""
    rng = np.random.default_rng(args.seed)
    n, sizes = args.global_batch, args.sizes
    x = rng.normal(size=(n, sizes[0])).astype(args.dtype)
    y = rng.integers(0, sizes[-1], size=n)
    model = nn.MLP(sizes, seed=args.seed, dtype=args.dtype)
    # The learning rate changes no array size; SGD is plain (no momentum buffers).
    optimizer = optim.SGD(model.parameters(), lr=0.01) if args.optimizer == "sgd" else \
        optim.Adam(model.parameters())
    try:
        with _one_blas_thread():  # the probes' small products; BLAS workspace is not counted
            result = planner.plan(model, nn.CrossEntropyLoss(), optimizer, x, y, args.memory)
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
    size = planner.format_bytes
    print(f"MLP {sizes} ({args.dtype}, {args.optimizer}), global batch {n}, "
          f"budget {size(args.memory)}")
    print(f"micro-batch size:  {result['micro_batch_size']} "
          f"({result['num_micro_batches']} micro-batches, one update)")
    print(f"predicted peak:    {size(result['predicted_peak'])} "
          f"({size(round(result['a']))} + {size(round(result['b']))} per sample)")
    print(f"measured peak:     {size(result['measured_peak'])} "
          f"({result['measured_peak'] / args.memory:.1%} of the budget; "
          f"{result['runs']} measured updates)")
    print(f"budget:            {size(result['budget'])}")
    return 0


def _widths(text):
    """``--sizes``: comma-separated widths, inputs first, at least two, each positive."""
    try:
        sizes = [int(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers such as "
                                         f"784,256,10, got {text!r}") from None
    if len(sizes) < 2:
        raise argparse.ArgumentTypeError(f"expected at least 2 widths (inputs, ..., "
                                         f"classes), got {text!r}")
    try:
        return [validate.positive_int(f"sizes[{i}]", s) for i, s in enumerate(sizes)]
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def _memory(text):
    """``--memory``: a size such as 256MB, 1.5GiB or 4096 (bytes)."""
    try:
        return planner.parse_bytes(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def build_parser():
    parser = _Parser(prog="minigrad", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    p = commands.add_parser("demo", help="train an MLP on spirals and print the loss",
                            description=demo.__doc__)
    count = functools.partial(_value, int, validate.positive_int)
    p.add_argument("--epochs", type=count("--epochs"), default=1000,
                   help="full-batch updates (default: %(default)s)")
    p.add_argument("--lr", type=_value(float, validate.real, "--lr", strict_low=True),
                   default=0.5, help="learning rate (default: %(default)s)")
    p.add_argument("--seed", type=_value(int, validate.integer, "--seed", low=0), default=0,
                   help="seed of the data and the initial weights (default: %(default)s)")
    p.add_argument("--hidden", type=count("--hidden"), default=64,
                   help="width of both hidden layers (default: %(default)s)")
    p.add_argument("--classes", type=_value(int, validate.integer, "--classes", low=2),
                   default=2, help="number of spiral arms (default: %(default)s)")
    p.add_argument("--samples", type=count("--samples"), default=400,
                   help="number of training points (default: %(default)s)")
    p.add_argument("--noise", type=_value(float, validate.real, "--noise"), default=0.1,
                   help="noise standard deviation per coordinate (default: %(default)s)")
    p.add_argument("--every", type=count("--every"), default=100,
                   help="print a row every this many epochs (default: %(default)s)")
    p.set_defaults(run=demo, error=p.error)
    p = commands.add_parser("plan", help="the largest micro-batch whose update fits a budget",
                            description=plan.__doc__)
    p.add_argument("--sizes", type=_widths, required=True,
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
    p.add_argument("--seed", type=_value(int, validate.integer, "--seed", low=0), default=0,
                   help="seed of the data and the initial weights (default: %(default)s)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(run=plan, error=p.error)
    return parser


class Diverged(RuntimeError):
    """Training produced a non-finite loss (exit status 1)."""


def main(argv=None):
    """Entry point of the ``minigrad`` command; returns the exit status: 0 done, 1 the run
    failed (training diverged), 2 bad arguments (including sizes too large for memory)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.run(args)
    except Diverged as err:
        print(f"minigrad {args.command}: error: {err}", file=sys.stderr)
        return 1
    except MemoryError as err:
        parser.exit(2, f"minigrad {args.command}: error: not enough memory for these sizes "
                       f"({err})\n")
