"""The ``minigrad`` command line.

``minigrad demo`` trains an MLP on interleaved spirals with full-batch gradient descent
and prints the loss and training accuracy as it goes.
"""

import argparse
import contextlib
import functools
import time

from minigrad import nn
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
    x, y = data.to_namespace(*data.spirals(args.samples, args.classes, args.noise, seed=args.seed))
    x = Tensor(x)
    sizes = [2, args.hidden, args.hidden, args.classes]
    model = nn.MLP(sizes, seed=args.seed)
    print(f"MLP {sizes} on {args.classes} spirals ({args.samples} samples), "
          f"full-batch SGD, lr={args.lr}")
    print(f"{'epoch':>7}  {'loss':>9}  {'accuracy':>8}")
    with _one_blas_thread():
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
        if epoch % args.every == 0 or epoch == args.epochs:
            print(f"{epoch:>7}  {loss.item():>9.5f}  {accuracy(logits, y):>8.1%}")
        if epoch == args.epochs:
            break
        model.zero_grad()
        loss.backward()
        for p in model.parameters():
            p.data = p.data - args.lr * p.grad  # plain arrays: nothing is recorded
    return time.perf_counter() - start


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
    return parser


def main(argv=None):
    """Entry point of the ``minigrad`` command; returns the exit status."""
    args = build_parser().parse_args(argv)
    return args.run(args)
