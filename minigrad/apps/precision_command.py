"""``minigrad precision``: how precise is a window's gradient sum in each buffer?

``register(commands)`` adds the sub-command to the ``minigrad`` parser; ``run(args)`` prints
the table of ``minigrad.studies.precision.sums`` (dtype x accumulator x order x loss scale x K)
and writes it as JSON with ``--json PATH``.
"""

import argparse
import json

from minigrad.apps.args import number
from minigrad.engine import validate
from minigrad.studies.precision import sums as precision

DESCRIPTION = """\
Sum K seeded micro-batch gradient sums (random signs; minigrad.studies.precision.sums) the way
minigrad.accumulate.Precision does, in every buffer (param, float32, kahan) and order
(sum_then_divide, divide_then_sum), without and with a loss scale of 2^8, and compare each
mean gradient with the exact (Fraction) one. Columns: the rms error relative to the rms
exact mean; the largest error over its derived bound (- : no bound, K u >= 1); the share of
terms that divide-then-sum flushes to zero; the statistical model u sqrt(K/6) with u of the
buffer (- for kahan). "overflow":
a value exceeded the dtype's range."""

MAX_K = 16384


def _list(kind, allowed=None, check=None):
    """An argparse ``type``: comma-separated values, each in ``allowed`` or passing ``check``."""
    def parse(text):
        parts = [part.strip() for part in text.split(",")]
        if not all(parts):
            raise argparse.ArgumentTypeError(f"expected comma-separated {kind}, got {text!r}")
        if allowed is not None:
            bad = [p for p in parts if p not in allowed]
            if bad:
                raise argparse.ArgumentTypeError(f"{bad[0]!r} is not one of {list(allowed)}")
            return tuple(dict.fromkeys(parts))
        return tuple(dict.fromkeys(check(p) for p in parts))

    return parse


_k = number(int, validate.integer, "--k", low=1, high=MAX_K)


def register(commands):
    """Add ``precision`` to ``commands`` (what ``ArgumentParser.add_subparsers`` returns)."""
    p = commands.add_parser("precision", help="gradient-sum error per buffer, order and dtype",
                            description=DESCRIPTION,
                            formatter_class=argparse.RawDescriptionHelpFormatter,
                            epilog="example: minigrad precision --dtypes float16 --k 1,64,1024 "
                                   "--json precision.json")
    p.add_argument("--dtypes", type=_list("dtypes", precision.DTYPES),
                   default=precision.DTYPES,
                   help="compute dtypes, comma-separated (default: float16,bfloat16,float32)")
    p.add_argument("--k", type=_list("integers", check=_k), default=precision.KS,
                   help=f"numbers of micro-batches, each 1..{MAX_K} "
                        "(default: 1,4,16,64,256,1024)")
    p.add_argument("--seed", type=number(int, validate.integer, "--seed", low=0), default=0,
                   help="seed of the terms (default: %(default)s)")
    p.add_argument("--json", metavar="PATH", default=None,
                   help="also write the table as JSON to PATH")
    p.set_defaults(run=run, error=p.error)


def _number(value, digits=2):
    return "overflow" if value is None else f"{value:.{digits}e}"


def run(args):
    """Print the table (and write it as JSON); exit status 0."""
    rows = precision.table(args.dtypes, args.k, precision.SCALES, seed=args.seed)
    if args.json is not None:
        try:
            with open(args.json, "w") as f:
                json.dump({"entries": precision.ENTRIES, "items": precision.ITEMS,
                           "seed": args.seed, "rows": rows}, f, indent=1)
        except OSError as err:
            args.error(f"--json: cannot write {args.json!r}: {err.strerror}")
    print(f"{'dtype':9} {'buffer':8} {'order':16} {'scale':>5} {'K':>6} {'rel. error':>10} "
          f"{'/ bound':>8} {'flushed':>8} {'model':>8}")
    for r in rows:
        ratio = "-" if r["bound_ratio"] is None and r["relative_error"] is not None else \
            _number(r["bound_ratio"], 1)
        print(f"{r['dtype']:9} {r['accumulate']:8} {r['order']:16} {r['scale']:5g} "
              f"{r['k']:6d} {_number(r['relative_error']):>10} {ratio:>8} "
              f"{r['flushed']:8.1%} {'-' if r['model'] is None else format(r['model'], '.1e'):>8}")
    return 0
