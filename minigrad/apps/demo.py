"""``minigrad demo``: is gradient accumulation the same as training on the big batch?

On scikit-learn's bundled handwritten digits, one MLP is trained with the same global batch
and the same number of updates in several ways, each against the full-batch run of the
same model:

* no normalisation layer: accumulated with the item-weighted rule over an uneven split,
  and with the textbook rule (each micro-batch's mean divided by the number of micro-batches);
* BatchNorm: accumulated plainly, and with ``strategy="exact_batchnorm"``;
* GroupNorm, the fix the community recommends: accumulated plainly.

Every run starts from the same weights and sees the same batches in the same order. After
each update the largest parameter gap to its full-batch run is measured (absolute and in
units in the last place); the verdict compares it with the rounding bound of
``minigrad.analysis.bounds``, carried through the optimizer update by update
(``minigrad.analysis.trajectory``).
"""

import contextlib
import math
import os
import sys
import time

import numpy as np

from minigrad import accumulate, nn, optim
from minigrad.analysis import memory
from minigrad.analysis.bounds import flat
from minigrad.analysis.metrics import eval_accuracy
from minigrad.analysis.trajectory import trajectory_bounds
from minigrad.studies import data as datasets

GLOBAL_BATCH = 128
SPLIT = [48, 48, 20, 12]  # uneven on purpose: the textbook rule weighs 12 samples like 48
HIDDEN = 64
LR, MOMENTUM = 0.1, 0.9

EXACT = {"sizes": SPLIT, "strategy": "exact_batchnorm"}
# The accumulation whose rounding bound each norm's runs are judged by: the one that is
# full-batch training mathematically.
EQUIVALENT = {None: {"sizes": SPLIT}, "batch": EXACT, "group": {"sizes": SPLIT}}
# (label, norm, accumulation options; None marks the full-batch reference of that norm)
RUNS = [
    ("no norm, full batch", None, None),
    ("no norm, item-weighted", None, {"sizes": SPLIT}),
    ("no norm, textbook mean", None, {"sizes": SPLIT, "normalize": "micro_batch_mean"}),
    ("BatchNorm, full batch", "batch", None),
    ("BatchNorm, accumulated", "batch", {"sizes": SPLIT}),
    ("BatchNorm, exact mode", "batch", EXACT),
    ("GroupNorm, full batch", "group", None),
    ("GroupNorm, accumulated", "group", {"sizes": SPLIT}),
]
REASONS = {
    "no norm, textbook mean": "the textbook rule divides uneven micro-batches by their count",
    "BatchNorm, accumulated": "BatchNorm normalises each micro-batch with its own statistics",
}


def batches(x, y, updates, seed):
    """``updates`` global batches of ``GLOBAL_BATCH`` samples: epochs of a seeded shuffle."""
    rng = np.random.default_rng(seed)
    order = np.concatenate([rng.permutation(len(y))
                            for _ in range(math.ceil(updates * GLOBAL_BATCH / len(y)))])
    return [(x[order[k * GLOBAL_BATCH:(k + 1) * GLOBAL_BATCH]],
             y[order[k * GLOBAL_BATCH:(k + 1) * GLOBAL_BATCH]]) for k in range(updates)]


def make_model(norm, seed):
    """The demo's MLP [64, HIDDEN, 10] with ``norm`` (None, "batch", "group"), seeded."""
    return nn.MLP([64, HIDDEN, 10], norm=norm, seed=seed)


def make_optimizer(params):
    """SGD(lr=LR, momentum=MOMENTUM) over ``params``."""
    return optim.SGD(params, lr=LR, momentum=MOMENTUM)


def train(norm, options, data, seed, progress):
    """One run: per-update losses and parameters, seconds per update, the model."""
    model = make_model(norm, seed)
    opt = make_optimizer(model.parameters())
    loss_fn = nn.CrossEntropyLoss()
    losses, states = [], []
    start = time.perf_counter()
    for x, y in data:
        losses.append(accumulate.step(model, loss_fn, opt, x, y, **(options or {})))
        states.append(flat(p.data for p in model.parameters()))
        progress()
    seconds = (time.perf_counter() - start) / len(data)
    return {"model": model, "optimizer": opt, "losses": losses, "states": states,
            "seconds": seconds}


def peak(run, options, x, y):
    """Peak extra memory of one more update of this run (on a copy; tracemalloc)."""
    return memory.update_memory(run["model"], nn.CrossEntropyLoss(), run["optimizer"], x, y,
                                **(options or {}))["peak"]


def gaps(run, reference, bounds):
    """Per update: the largest |theta - theta_full| over the parameters, that gap in units in
    the last place of the largest parameter (an entry near 0 has tiny ulps: counting its own
    would mislead), and whether every entry lies within its rounding bound."""
    abs_gaps, ulps, within = [], [], []
    for theta, full, bound in zip(run["states"], reference["states"], bounds):
        gap = np.abs(theta - full)
        abs_gaps.append(float(np.max(gap)))
        ulps.append(abs_gaps[-1] / float(np.spacing(np.max(np.abs(full)))))
        within.append(bool(np.all(gap <= bound)))
    return abs_gaps, ulps, all(within)


def main(args, bound=None):
    """Train every run, print the table and write the figure; returns the exit status.

    ``bound(norm, data, seed, progress)`` gives, per update, the elementwise bound on the
    parameter gap of the run that IS full-batch training mathematically for that norm
    (default: ``trajectory_bound``).
    """
    bound = bound or trajectory_bound
    seed = args.seed
    x_train, y_train, x_test, y_test = datasets.digits(seed=seed)
    updates = 10 if args.quick else 40
    data = batches(x_train, y_train, updates, seed)
    with _progress((len(RUNS) + len(EQUIVALENT)) * updates) as tick, _one_blas_thread():
        runs = {}
        for label, norm, options in RUNS:
            tick.describe(label)
            runs[label] = train(norm, options, data, seed, tick)
        tick.describe("rounding bounds")
        limits = {norm: bound(norm, data, seed, tick) for norm in EQUIVALENT}
    rows = []
    for label, norm, options in RUNS:
        run = runs[label]
        reference = runs[next(lbl for lbl, n, o in RUNS if n == norm and o is None)]
        row = {"run": label, "loss": run["losses"][-1],
               "accuracy": eval_accuracy(run["model"], x_test, y_test),
               "seconds": run["seconds"], "peak": peak(run, options, *data[-1])}
        if options is None:
            row.update(gap=None, ulp=None, verdict="the reference")
        else:
            abs_gap, ulp_gap, within = gaps(run, reference, limits[norm])
            row.update(gap=max(abs_gap), ulp=max(ulp_gap), abs_gaps=abs_gap,
                       verdict=("IS full-batch training (within the bound)" if within else
                                f"NOT full-batch training: "
                                f"{REASONS.get(label, 'the gap exceeds the rounding bound')}"))
        rows.append(row)
    print_table(rows, updates)
    path = figure(rows, runs, limits, args.out)
    print(f"figure: {path}")
    return 0


def trajectory_bound(norm, data, seed, progress):
    """Per update, the elementwise rounding bound on |theta_acc - theta_full| of the
    accumulation that IS full-batch training for this norm (``EQUIVALENT``), carried through
    the optimizer update by update (``minigrad.analysis.trajectory.trajectory_bounds``)."""
    options = dict(EQUIVALENT[norm])
    sizes = options.pop("sizes")
    replay = trajectory_bounds(lambda: make_model(norm, seed), make_optimizer,
                               nn.CrossEntropyLoss(), data, sizes, **options)
    bounds = []
    for _, _, limit in replay:
        bounds.append(limit)
        progress()
    return bounds


def print_table(rows, updates):
    """The table of runs after ``updates`` updates: loss, accuracy, gap, ulps, time, memory
    and verdict per run (``rows``: one measured row per run, in order)."""
    print(f"\nDigits, MLP [64, {HIDDEN}, 10], SGD(lr={LR}, momentum={MOMENTUM}), {updates} "
          f"updates of a global batch of {GLOBAL_BATCH},\naccumulated over micro-batches of "
          f"{SPLIT}.\nmax gap: the largest |theta - theta_full| over every parameter and "
          "update;\nulps: that gap in units in the last place of the largest parameter.\n")
    head = (f"{'run':<24} {'loss':>7} {'test acc':>8} {'max gap':>9} {'ulps':>9} "
            f"{'ms/update':>9} {'peak MiB':>8}  verdict")
    print(head)
    print("-" * len(head))
    for r in rows:
        gap = "-" if r["gap"] is None else f"{r['gap']:.1e}"
        ulp = "-" if r["ulp"] is None else f"{r['ulp']:.3g}"
        print(f"{r['run']:<24} {r['loss']:>7.4f} {r['accuracy']:>8.1%} {gap:>9} {ulp:>9} "
              f"{1e3 * r['seconds']:>9.2f} {r['peak'] / 2**20:>8.2f}  {r['verdict']}")
    print()


COLOURS = {None: "tab:blue", "batch": "tab:red", "group": "tab:green"}
NAMES = {None: "no norm", "batch": "BatchNorm", "group": "GroupNorm"}


def figure(rows, runs, limits, out):
    """Loss curves, and the parameter gap per update (log axis) beside each norm's rounding
    bound, to ``out``/demo.png. A norm's runs share a colour: full batch dotted, the
    accumulation that is full-batch training solid, the one that is not dash-dotted."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(15, 5))
    for r, (label, norm, options) in zip(rows, RUNS):
        style = ":" if options is None else "-" if options == EQUIVALENT[norm] else "-."
        steps = range(1, len(runs[label]["losses"]) + 1)
        left.plot(steps, runs[label]["losses"], style, color=COLOURS[norm], label=label)
        if options is not None:
            floor = 1e-18  # a gap of exactly 0 is drawn here (a log axis has no 0)
            right.plot(steps, [max(g, floor) for g in r["abs_gaps"]], style,
                       color=COLOURS[norm], label=label)
    for norm, bounds in limits.items():
        right.plot(range(1, len(bounds) + 1), [float(np.max(b)) for b in bounds], "--",
                   color=COLOURS[norm], alpha=0.5, linewidth=1,
                   label=f"{NAMES[norm]}: rounding bound (largest entry)")
    left.set(title="Training loss per update", xlabel="update", ylabel="mean cross-entropy")
    right.set(title="Largest parameter gap to the full-batch run", xlabel="update",
              ylabel="max |theta - theta_full| (log)", yscale="log")
    left.legend(fontsize=8, loc="lower left")
    right.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))  # beside the plot
    fig.suptitle("Gradient accumulation vs full-batch training on digits")
    fig.tight_layout()
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, "demo.png")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


class _Plain:
    """Progress as plain lines, for output that is not a terminal."""

    def describe(self, label):
        print(f"training: {label}", flush=True)

    def __call__(self):
        pass


class _Bar:
    def __init__(self, bar):
        self.bar = bar

    def describe(self, label):
        self.bar.set_description(f"{label:<24}")

    def __call__(self):
        self.bar.update(1)


def _one_blas_thread():
    """One BLAS thread (threadpoolctl, where installed): these small products gain nothing
    from threads, and a spinning thread pool slows every call on a busy machine."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        return contextlib.nullcontext()
    return threadpool_limits(limits=1, user_api="blas")


@contextlib.contextmanager
def _progress(total):
    """A tqdm bar on a terminal, plain lines otherwise."""
    if not sys.stdout.isatty():
        yield _Plain()
        return
    from tqdm import tqdm

    with tqdm(total=total, unit="update", leave=False) as bar:
        yield _Bar(bar)
