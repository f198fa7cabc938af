"""``minigrad check``: is my set-up accumulation-safe?

``register(commands)`` adds the sub-command to the ``minigrad`` parser; ``run(args)`` trains
the set-up full batch and accumulated (``minigrad.analysis.check``), prints the gap after
every update against the floating-point bound and the verdict, and returns the exit status
(``STATUS``; 2, argparse's status for a usage error, is a bad argument).
"""

import argparse
import functools
import json
import re

from minigrad import optim
from minigrad.accumulate import NORMALIZE
from minigrad.accumulate import strategy as strategies
from minigrad.analysis import charlm, check, check_setup, contrastive_check
from minigrad.analysis.power import NO_VERDICT
from minigrad.analysis.trajectory import Diverged
from minigrad.apps.args import number, widths
from minigrad.engine import validate
from minigrad.nn.mlp import ACTIVATIONS

DESCRIPTION = """\
Train an MLP on seeded random data twice from the same start, full batch and accumulated
over micro-batches (minigrad.accumulate.step), and compare the parameters after every update
with the floating-point bound that minigrad.analysis.bounds derives. Exit status 0: accumulated
training IS full-batch training within the bound at every update; 1: it is not (the reasons
are printed); 2: a bad argument, or a learning rate at which full-batch training diverges;
3: no verdict, the comparison could not have failed (the reason is printed): a run that
accumulates nothing (every gradient 0) would have passed too, as with one output class
(cross-entropy over one class is identically 0) or --lr 0. Each row shows that run's gap
over the bound as idle/bound: the check can fail only where it exceeds 1.

With --model charlm: the character-level language model nn.CharMLP (--vocab-size,
--context, --embedding-dim, --hidden; tanh) on seeded token sequences of 1 to --max-length
tokens and a boundary token, padded with ignored targets, so that micro-batches hold
different numbers of real tokens, the items of the loss. --global-batch and the split count
sequences; --sizes, --activation, --norm, --dropout, --loss and --ignore-fraction do not
apply (only their charlm values are accepted: tanh, none, 0, cross-entropy, 0).

With --loss contrastive: a dual encoder (two MLP towers, --sizes) on pairs of views of
scikit-learn's digits (left and right halves), symmetric InfoNCE, and a contrastive strategy
(--strategy naive, gradcache or bank); the strategy's gradient is compared with the full
batch's at the same parameters before every update. Every other flag has a default: towers
32,16,8 and an uneven split of the global batch."""

EPILOG = """\
examples:
  minigrad check --sizes 64,32,10 --norm batch --micro-batch 16
  minigrad check --sizes 64,32,10 --norm group --micro-batch 7 --ignore-fraction 0.3 \\
      --optimizer adam --lr 0.001 --json
  minigrad check --model charlm --micro-batches 4 --normalize micro_batch_mean
  minigrad check --loss contrastive --strategy gradcache"""

# the exit status of each verdict: IS, NOT, no verdict (argparse exits 2 on a bad argument)
STATUS = {True: 0, False: 1, None: 3}

# check's argument names -> their flags (messages about two arguments name both)
FLAGS = {name: "--" + name.replace("_", "-") for name in (
    "model", "sizes", *charlm.DEFAULTS, "activation", "norm", "dropout", "loss",
    "ignore_fraction", "optimizer", "lr", "weight_decay", "clip", "global_batch", "micro_batch",
    "normalize", "strategy", "steps", "dtype", "seed")}
FLAGS["num_micro_batches"] = "--micro-batches"


def register(commands):
    """Add ``check`` to ``commands`` (what ``ArgumentParser.add_subparsers`` returns)."""
    p = commands.add_parser("check", help="is accumulated training full-batch training?",
                            description=DESCRIPTION, epilog=EPILOG,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    count = functools.partial(number, int, validate.positive_int)
    rate = functools.partial(number, float, validate.real)
    default = " (default: %(default)s)"
    p.add_argument("--model", choices=check_setup.MODELS, default="mlp",
                   help="mlp: an MLP of --sizes; charlm: the character-level language model "
                        "nn.CharMLP on token sequences" + default)
    p.add_argument("--sizes", type=widths,
                   help="MLP widths, inputs first and classes (outputs) last, e.g. 64,32,10 "
                        "(required, except with --loss contrastive: each tower's widths, "
                        "default 32,16,8; not with --model charlm)")
    p.add_argument("--activation", choices=tuple(ACTIVATIONS),
                   help="(default: relu; tanh, the only one, with --model charlm)")
    p.add_argument("--norm", choices=check_setup.NORMS, default="none",
                   help="normalisation after each hidden Linear" + default)
    p.add_argument("--dropout", type=number(float, validate.probability, "--dropout"),
                   default=0.0, help="dropout probability" + default)
    p.add_argument("--loss", choices=(*check_setup.LOSSES, "contrastive"), default="cross-entropy",
                   help=default)
    p.add_argument("--ignore-fraction", default=0.0,
                   type=number(float, validate.probability, "--ignore-fraction"),
                   help="share of cross-entropy targets set to ignore_index -100" + default)
    p.add_argument("--optimizer", choices=optim.OPTIMIZERS, default="sgd",
                   help="momentum is SGD with momentum 0.9" + default)
    p.add_argument("--lr", type=rate("--lr"), default=0.01,
                   help="learning rate" + default)
    p.add_argument("--weight-decay", type=rate("--weight-decay"), default=0.0,
                   help="L2 (sgd, momentum, adam) or decoupled (adamw)" + default)
    p.add_argument("--clip", type=rate("--clip", strict_low=True), default=None,
                   help="clip the accumulated gradient to this global norm (default: none)")
    p.add_argument("--global-batch", type=count("--global-batch"), default=64,
                   help="samples in one update" + default)
    split = p.add_mutually_exclusive_group()  # one is required, except for contrastive
    split.add_argument("--micro-batch", type=count("--micro-batch"),
                       help="samples per micro-batch (the last may be smaller)")
    split.add_argument("--micro-batches", type=count("--micro-batches"),
                       dest="num_micro_batches", metavar="MICRO_BATCHES",
                       help="number of near-equal micro-batches")
    p.add_argument("--normalize", choices=NORMALIZE, default="items",
                   help="items: divide once by the update's items; micro_batch_mean: the "
                        "textbook mean per micro-batch over their count; sum: no division"
                        + default)
    kinds = ("plain", "contrastive")  # minigrad.accumulate.strategy.STRATEGIES, by kind
    p.add_argument("--strategy", choices=[n for kind in kinds for n in strategies.names(kind)],
                   help="how a window is run: micro (each micro-batch alone, the default), "
                        "exact_batchnorm (BatchNorm with the global batch's statistics); "
                        "with --loss contrastive: naive, gradcache (the default) or bank")
    p.add_argument("--steps", type=count("--steps"), default=20, help="updates" + default)
    p.add_argument("--dtype", choices=check_setup.DTYPES, default="float64", help=default)
    p.add_argument("--seed", type=number(int, validate.integer, "--seed", low=0), default=0,
                   help="seed of the data and the initial weights" + default)
    lm = p.add_argument_group("--model charlm", "the language model and its sequences")
    lm.add_argument("--vocab-size", type=number(int, validate.integer, "--vocab-size", low=2),
                    help=f"tokens, the boundary token 0 included (default: "
                         f"{charlm.DEFAULTS['vocab_size']})")
    lm.add_argument("--context", type=count("--context"),
                    help=f"previous tokens the model sees (default: "
                         f"{charlm.DEFAULTS['context']})")
    lm.add_argument("--embedding-dim", type=count("--embedding-dim"),
                    help=f"width of a token's embedding (default: "
                         f"{charlm.DEFAULTS['embedding_dim']})")
    lm.add_argument("--hidden", type=count("--hidden"),
                    help=f"tanh units (default: {charlm.DEFAULTS['hidden']})")
    lm.add_argument("--max-length", type=count("--max-length"),
                    help=f"the longest sequence: lengths are uniform in 1..MAX_LENGTH tokens, "
                         f"then the boundary (default: {charlm.DEFAULTS['max_length']})")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(run=run, error=p.error)
    return p


def run(args):
    """Check the set-up that ``args`` describes; 0: equivalent, 1: not, 3: no verdict. A bad
    combination of values, or a full-batch run that diverges, exits 2 through ``args.error``."""
    if args.loss == "contrastive" and args.model == "mlp":
        return _run_contrastive(args)
    if args.strategy in strategies.names("contrastive"):
        args.error(f"--strategy {args.strategy} is for --loss contrastive, got --loss {args.loss}")
    if args.sizes is None and args.model == "mlp":
        args.error("the following arguments are required: --sizes")
    if args.micro_batch is None and args.num_micro_batches is None:
        args.error("one of the arguments --micro-batch --micro-batches is required")
    args.strategy = args.strategy or "micro"
    options = {name: getattr(args, name) for name in FLAGS}
    try:
        options = check.configuration(**options)
    except (TypeError, ValueError) as err:
        args.error(_as_flags(str(err)))
    try:
        result = check.check(**options)
    except Diverged as err:  # a set-up that cannot be trained, like sizes too large for memory
        args.error(f"{err}, so there is nothing to compare with: lower --lr")
    if args.json:
        print(json.dumps(result, allow_nan=False))
    else:
        _print(result)
    return STATUS[result["equivalent"]]


def _run_contrastive(args):
    """``run`` for ``--loss contrastive`` (``minigrad.analysis.contrastive_check``)."""
    for flag, value, allowed in (("--ignore-fraction", args.ignore_fraction, 0.0),
                                 ("--normalize", args.normalize, "items")):
        if value != allowed:
            args.error(f"{flag} must be {allowed} with --loss contrastive, got {value}")
    for name in charlm.DEFAULTS:
        if getattr(args, name) is not None:
            args.error(f"{FLAGS[name]} applies to --model charlm only, got {getattr(args, name)}")
    try:
        from minigrad.studies.data import paired_digits

        pool = paired_digits(seed=args.seed)[0]
    except ImportError as err:
        args.error(f"--loss contrastive trains on scikit-learn's digits: {err}")
    names = ("sizes", "activation", "norm", "dropout", "optimizer", "lr", "weight_decay", "clip",
             "global_batch", "micro_batch", "num_micro_batches", "steps", "dtype", "seed")
    options = {name: getattr(args, name) for name in names}
    options["activation"] = args.activation or "relu"
    options["strategy"] = args.strategy or "gradcache"
    try:
        contrastive_check.configuration(pool, **options)
    except (TypeError, ValueError) as err:
        args.error(_as_flags(str(err)))
    try:
        result = contrastive_check.check(pool, **options)
    except FloatingPointError as err:
        args.error(f"{err}, so there is nothing to compare with: lower --lr")
    if args.json:
        print(json.dumps(result, allow_nan=False))
        return STATUS[result["equivalent"]]
    c = result["config"]
    print(f"dual encoder, towers {c['sizes']} ({c['activation']}, norm {c['norm']}, dropout "
          f"{c['dropout']:g}), {c['loss']}, {c['optimizer']} lr={c['lr']:g}, {c['dtype']}")
    print(f"global batch {c['global_batch']} as micro-batches {_split(result['sizes'])} "
          f"(strategy={c['strategy']}), seed {c['seed']}")
    print(f"{'step':>6}  {'max |gap|':>10}  {'bound':>10}  {'gap/bound':>10}  "
          f"{'idle/bound':>10}  (gradients)")
    _rows_and_verdict(result, contrastive_check.NOT_EQUIVALENT)
    return STATUS[result["equivalent"]]


def _as_flags(message):
    """A library message with flags for argument names: ``norm='batch'`` -> ``--norm batch``,
    ``micro_batch`` -> ``--micro-batch``."""
    names = "|".join(sorted(FLAGS, key=len, reverse=True))

    def flag(match):
        name, value = match[1], match[2] or match[3]
        text = FLAGS[name]
        return text if value is None else f"{text} {value}"

    return re.sub(rf"(?<![\w'-])({names})(?:='([^']*)'|=([^\s,;)]+))?(?![\w'])", flag, message)


def _print(result):
    """The set-up, one row per update, the verdict."""
    c = result["config"]
    loss = c["loss"] + (f" ({c['ignore_fraction']:g} ignored)" if c["ignore_fraction"] else "")
    rule = f"{c['optimizer']} lr={c['lr']:g}" + (f" weight_decay={c['weight_decay']:g}"
                                                 if c["weight_decay"] else "")
    rule += f" clip={c['clip']:g}" if c["clip"] is not None else ""
    if c["model"] == "charlm":
        print(f"model=charlm: CharMLP(vocab_size={c['vocab_size']}, context={c['context']}, "
              f"embedding_dim={c['embedding_dim']}, hidden={c['hidden']}), tanh, sequences of "
              f"1-{c['max_length']} tokens (padding ignored), {loss}, {rule}, {c['dtype']}")
    else:
        print(f"MLP {c['sizes']} ({c['activation']}, norm {c['norm']}, dropout "
              f"{c['dropout']:g}), {loss}, {rule}, {c['dtype']}")
    unit = " sequences" if c["model"] == "charlm" else ""
    print(f"global batch {c['global_batch']}{unit} as micro-batches {_split(result['sizes'])} "
          f"(normalize={c['normalize']}, strategy={c['strategy']}), seed {c['seed']}")
    print(f"{'step':>6}  {'max |gap|':>10}  {'bound':>10}  {'gap/bound':>10}  "
          f"{'idle/bound':>10}")
    _rows_and_verdict(result, check.NOT_EQUIVALENT)


def _rows_and_verdict(result, not_equivalent):
    """One row per update, then the verdict (and its reasons), then the notes."""
    for row in result["updates"]:
        print(f"{row['step']:>6}  {_number(row['max_abs']):>10}  {_number(row['bound']):>10}  "
              f"{_number(row['ratio'], '.3g'):>10}  {_number(row['idle_ratio'], '.3g'):>10}")
    if result["equivalent"]:
        print(result["verdict"])
    else:
        print(f"{not_equivalent if result['equivalent'] is False else NO_VERDICT}:")
        for reason in result["reasons"]:
            print(f"  - {reason}")
    for note in result["notes"]:
        print(f"note: {note}")


def _number(value, spec=".3e"):
    return "inf" if value is None else format(value, spec)


def _split(sizes):
    """[7, 7, 7, 1] -> "3 x 7 + 1"."""
    runs = []
    for size in sizes:
        if runs and runs[-1][0] == size:
            runs[-1][1] += 1
        else:
            runs.append([size, 1])
    return " + ".join(f"{n} x {size}" if n > 1 else f"{size}" for size, n in runs)
