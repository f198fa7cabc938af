"""The numbers behind the site's interactive explorers, computed ahead of time.

NumPy has no WebAssembly build, so minigrad cannot run in a reader's browser. The site's
explorers show instead what minigrad measured when the site was built: each ``*_explorer``
function runs one measurement for every combination of its controls' values and returns a
plain, JSON-ready dict,

    {"controls": [{"name", "label", "values", "labels"}, ...],
     "cases": {"i|j|...": {...}}}    i, j, ...: positions in each control's ``values``

so a page looks a case up instead of computing it. Each ``*_setup`` builds the model, loss
and data its explorer measures. The memory planner is the exception: its peak is a formula
(``memory.theoretical_peak``), so ``memory_explorer`` exports the formula's constants and
the page evaluates it for any layer sizes (``tests/analysis/test_explorers.py`` holds the
export, and ``tests/docs/test_explorers.py`` the page, to ``theoretical_peak``).

>>> shares = split_weights([4, 0, 2])
>>> [str(s) for s in shares["textbook"]], [str(s) for s in shares["items"]]
(['1/3', '0', '1/3'], ['2/3', '0', '1/3'])
"""

from fractions import Fraction

from minigrad import nn, optim
from minigrad.accumulate import accumulated_gradients, micro_batches, split_sizes, step
from minigrad.analysis import batchnorm, bounds, equivalence, metrics, pitfalls
from minigrad.analysis.explorer_controls import control, key, positive_ints
from minigrad.analysis.explorer_extras import contrastive_explorer, precision_explorer
from minigrad.analysis.explorer_numbers import (
    MEMORY_LOSSES,
    MEMORY_OPTIMIZERS,
    floating_point_explorer,
    floating_point_setup,
    memory_explorer,
)
from minigrad.engine import backend, validate

__all__ = ["EXPLORERS", "MEMORY_LOSSES", "MEMORY_OPTIMIZERS", "MISTAKE_LABELS", "STEP_OPTIMIZERS",
           "batchnorm_explorer", "batchnorm_setup", "floating_point_explorer",
           "floating_point_setup", "memory_explorer", "running_stat_gap", "split_explorer",
           "split_setup", "split_weights", "step_accounting_explorer", "step_accounting_setup"]

IGNORE = -100  # nn.CrossEntropyLoss's default ignore_index


# ----- the split: the shares of the two rules, and their measured error --------------------
def split_weights(items):
    """Each micro-batch's share of the accumulated gradient, from its item counts n_j.

    The item-weighted rule gives micro-batch j the share n_j / n (n = sum of n_j), the
    textbook rule (each micro-batch's mean over k) 1 / k, and 0 to a micro-batch without
    items (its mean is taken as zero). Returns ``{"items": [...], "textbook": [...]}`` of
    Fractions: the accumulated gradient is sum_j share_j * (mean gradient of micro-batch j).
    """
    if isinstance(items, (str, bytes)) or not hasattr(items, "__iter__"):
        raise TypeError(f"items must be a sequence of item counts, got {type(items).__name__}")
    items = [validate.integer(f"items[{j}]", n, low=0) for j, n in enumerate(items)]
    total, k = sum(items), len(items)
    if total == 0:
        raise ValueError(f"items must hold at least one item in all, got {items}")
    return {"items": [Fraction(n, total) for n in items],
            "textbook": [Fraction(1 if n else 0, k) for n in items]}


def split_setup(n, ignored, seed=0):
    """The split explorer's MLP [3, 8, 4] (tanh) factory, cross-entropy and a batch of ``n``
    samples whose first floor(ignored n) targets, in a seeded order, are ``ignore_index``."""
    n = validate.positive_int("n", n)
    ignored = validate.real("ignored", ignored, high=1.0, strict_high=True)
    generator = backend.rng(seed + n)
    x, y = generator.normal(size=(n, 3)), generator.integers(0, 4, size=n)
    y[generator.permutation(n)[:int(ignored * n)]] = IGNORE
    return {"make": lambda: nn.MLP([3, 8, 4], activation="tanh", seed=1),
            "loss": nn.CrossEntropyLoss(ignore_index=IGNORE), "x": x, "y": y}


def _share(share):
    return {"value": float(share), "text": str(share)}


def split_explorer(batch_sizes=(8, 12, 16, 24, 32), micro_batch_sizes=(1, 2, 3, 4, 5, 6, 7, 8),
                   ignored=(0.0, 0.125, 0.25, 0.5), seed=0):
    """Per global batch N, micro-batch size m (``split_sizes``: the last micro-batch may be
    shorter; m >= N is one micro-batch) and share of ignored targets (``split_setup``): the
    sizes, item counts and shares of both rules (``split_weights``), and the measured
    ``max_rel`` of each rule's gradient against full batch (``equivalence.gradient_report``).
    """
    controls = [control("batch", "global batch N", positive_ints("batch_sizes", batch_sizes)),
                control("micro", "micro-batch size m",
                         positive_ints("micro_batch_sizes", micro_batch_sizes)),
                control("ignored", "ignored targets", ignored,
                         [f"{100 * s:g}%" for s in ignored])]
    cases = {}
    for i, n in enumerate(batch_sizes):
        for k, share in enumerate(ignored):
            setup = split_setup(n, share, seed)
            loss, y = setup["loss"], setup["y"]
            for j, m in enumerate(micro_batch_sizes):
                sizes = split_sizes(n, micro_batch_size=min(m, n))
                items = [loss.num_items(yj) for _, _, yj in micro_batches(setup["x"], y, sizes)]
                shares = split_weights(items)
                errors = {rule: equivalence.gradient_report(
                    setup["make"], loss, setup["x"], y, sizes=sizes,
                    normalize=rule)["params"]["all"]["max_rel"]
                    for rule in ("items", "micro_batches")}
                cases[key(i, j, k)] = {
                    "sizes": sizes, "items": items, "max_rel": errors,
                    "shares": {rule: [_share(s) for s in shares[rule]] for rule in shares}}
    return {"controls": controls, "cases": cases}


# ----- BatchNorm: gradient and running statistics against micro-batch size -----------------
def batchnorm_setup(n, updates=3, seed=0):
    """The BatchNorm explorer's ``factory(norm, momentum)`` of MLPs [8, 32, 32, 4] (the
    BatchNorm momentum set on every BatchNorm1d), cross-entropy, and ``updates`` batches of
    ``n`` samples (the gradient is measured on the first)."""
    n = validate.positive_int("n", n)
    generator = backend.rng(seed + n)
    batches = [(generator.normal(size=(n, 8)), generator.integers(0, 4, size=n))
               for _ in range(validate.positive_int("updates", updates))]

    def factory(norm, momentum=0.1):
        def make():
            model = nn.MLP([8, 32, 32, 4], norm=norm, seed=0)
            for _, module in model.named_modules():
                if isinstance(module, nn.BatchNorm1d):
                    module.momentum = momentum
            return model
        return make

    return {"factory": factory, "loss": nn.CrossEntropyLoss(), "batches": batches}


def _sgd(params):
    return optim.SGD(params, lr=0.1, momentum=0.9)


def running_stat_gap(model_factory, loss_fn, batches, micro_batch_size, strategy="micro"):
    """max_rel of each running statistic (``"running_mean"``, ``"running_var"``), worst
    layer, after one SGD update (lr 0.1, momentum 0.9) per ``(x, y)`` of ``batches``: over
    micro-batches run by ``strategy`` against full batch. With ``strategy="micro"`` it is
    ``batchnorm.running_stat_drift`` at its last update; this one also runs the exact mode."""
    states = []
    for split in ({}, {"micro_batch_size": micro_batch_size, "strategy": strategy}):
        model = model_factory()
        optimizer = _sgd(model.parameters())
        for x, y in batches:
            step(model, loss_fn, optimizer, x, y, **split)
        states.append(model.state_dict())
    full, acc = states
    return {stat: max(metrics.compare_arrays(acc[name], full[name])["max_rel"]
                      for name in full if name.endswith(stat))
            for stat in ("running_mean", "running_var")}


def batchnorm_explorer(batch_sizes=(32, 64, 128), micro_batch_sizes=(2, 4, 8, 16, 32),
                       momenta=(0.01, 0.1, 0.3, 0.9), updates=3, seed=0):
    """Per global batch N, micro-batch size m (at most N) and BatchNorm momentum
    (``batchnorm_setup``): the gradient's ``rel_error`` and ``cosine`` against full batch
    (``batchnorm.gradient_divergence``) with BatchNorm, BatchNorm in the exact mode
    (``strategy="exact_batchnorm"``), GroupNorm and LayerNorm; for both BatchNorm runs the
    running statistics' max_rel after ``updates`` SGD updates (``batchnorm.running_stat_drift``;
    ``running_stat_gap`` for the exact mode, which it does not run)."""
    micro_batch_sizes = positive_ints("micro_batch_sizes", micro_batch_sizes)
    if min(micro_batch_sizes) < 2:
        raise ValueError(f"micro_batch_sizes must be >= 2 (the unbiased variance of one "
                         f"sample is 0 / 0), got {micro_batch_sizes}")
    momenta = [validate.real("momenta", v, high=1.0, strict_low=True) for v in momenta]
    controls = [control("batch", "global batch N", positive_ints("batch_sizes", batch_sizes)),
                control("micro", "micro-batch size m", micro_batch_sizes),
                control("momentum", "BatchNorm momentum", momenta)]
    cases = {}
    for i, n in enumerate(batch_sizes):
        setup = batchnorm_setup(n, updates, seed)
        factory, loss, batches = setup["factory"], setup["loss"], setup["batches"]
        x, y = batches[0]
        sizes = [min(m, n) for m in micro_batch_sizes]
        grads = {norm: batchnorm.gradient_divergence(factory(norm), loss, x, y, sizes)
                 for norm in ("batch", "group", "layer")}
        full = bounds.flat(accumulated_gradients(factory("batch")(), loss, x, y).values())
        for j, m in enumerate(sizes):
            exact = accumulated_gradients(factory("batch")(), loss, x, y, micro_batch_size=m,
                                          strategy="exact_batchnorm")
            rows = {norm: grads[norm][m]["all"] for norm in grads}
            rows["exact"] = metrics.vector_gap(bounds.flat(exact.values()), full)
            for k, momentum in enumerate(momenta):
                case = {norm: dict(row) for norm, row in rows.items()}
                drift = batchnorm.running_stat_drift(factory("batch", momentum), _sgd, loss,
                                                     batches, m)
                for stat in ("running_mean", "running_var"):
                    case["batch"][stat] = max(d[stat]["max_rel"][-1] for d in drift.values())
                case["exact"].update(running_stat_gap(factory("batch", momentum), loss,
                                                      batches, m, strategy="exact_batchnorm"))
                cases[key(i, j, k)] = {"sizes": split_sizes(n, micro_batch_size=m),
                                        "rows": case}
    return {"controls": controls, "updates": updates, "cases": cases}


# ----- step accounting: one thing of the update done per micro-batch ------------------------
STEP_OPTIMIZERS = {
    "sgd": ("SGD, momentum", lambda ps: optim.SGD(ps, lr=0.1, momentum=0.9, weight_decay=0.01)),
    "adam": ("Adam", lambda ps: optim.Adam(ps, lr=0.01, weight_decay=0.01)),
    "adamw": ("AdamW", lambda ps: optim.AdamW(ps, lr=0.01, weight_decay=0.1)),
}
"""The step-accounting explorer's optimizers: name -> (label, factory from parameters), each
with weight decay, so that applying it per micro-batch changes something."""
MISTAKE_LABELS = {"adam_count": "Adam's step count", "schedule": "the learning-rate schedule",
                  "weight_decay": "weight decay", "clipping": "gradient clipping",
                  "zero_grad": "zeroing the gradients", "step_each": "the optimizer's step"}
"""What each of ``pitfalls.MISTAKES`` does per micro-batch, in words."""


def step_accounting_setup(batch_size=32, updates=8, seed=0):
    """The step-accounting explorer's MLP [6, 16, 3] factory, cross-entropy, ``updates``
    batches of ``batch_size`` samples, and ``schedule(optimizer)``: a ``Scheduler`` halving
    the rate every 2 updates (``optim.step_decay``)."""
    batch_size = validate.positive_int("batch_size", batch_size)
    generator = backend.rng(seed)
    batches = [(generator.normal(size=(batch_size, 6)),
                generator.integers(0, 3, size=batch_size))
               for _ in range(validate.positive_int("updates", updates))]
    return {"make": lambda: nn.MLP([6, 16, 3], seed=0), "loss": nn.CrossEntropyLoss(),
            "batches": batches,
            "schedule": lambda opt: optim.Scheduler(opt, optim.step_decay(opt.lr, 2, 0.5))}


def step_accounting_explorer(optimizers=tuple(STEP_OPTIMIZERS), mistakes=pitfalls.MISTAKES[1:],
                             num_micro_batches=(2, 4, 8, 16), batch_size=32, updates=8,
                             max_grad_norm=0.05, seed=0):
    """Per optimizer (``STEP_OPTIMIZERS``), mistake (``pitfalls.MISTAKES``) and number of
    micro-batches k: ``pitfalls.compare`` on ``step_accounting_setup``, clipping at
    ``max_grad_norm``. Per update: the rounding bound and, for the library's accumulation and
    for the mistake, the largest parameter gap to full batch and gap / bound. A mistake the
    optimizer cannot make (Adam's count with SGD) carries the library's refusal instead."""
    optimizers = [validate.choice("optimizers", o, tuple(STEP_OPTIMIZERS)) for o in optimizers]
    mistakes = [validate.choice("mistakes", m, pitfalls.MISTAKES[1:]) for m in mistakes]
    num_micro_batches = [validate.integer("num_micro_batches", k, low=1, high=batch_size)
                         for k in num_micro_batches]
    controls = [control("optimizer", "optimizer", optimizers,
                         [STEP_OPTIMIZERS[o][0] for o in optimizers]),
                control("mistake", "done per micro-batch", mistakes,
                         [MISTAKE_LABELS[m] for m in mistakes]),
                control("micro", "micro-batches k", num_micro_batches)]
    setup = step_accounting_setup(batch_size, updates, seed)
    make, loss, batches, schedule = (setup[k] for k in ("make", "loss", "batches", "schedule"))
    cases = {}
    for i, name in enumerate(optimizers):
        make_optimizer = STEP_OPTIMIZERS[name][1]
        refused = {}
        for mistake in mistakes:
            model = make()
            opt = make_optimizer(model.parameters())
            try:  # pitfalls.update checks everything before it changes anything
                pitfalls.update(model, loss, opt, *batches[0], [batch_size], mistake=mistake,
                                max_grad_norm=max_grad_norm, scheduler=schedule(opt))
            except ValueError as err:
                refused[mistake] = str(err)
        made = [m for m in mistakes if m not in refused]
        for j, k in enumerate(num_micro_batches):
            result = pitfalls.compare(make, make_optimizer, loss, batches,
                                      split_sizes(batch_size, num_micro_batches=k),
                                      mistakes=made, max_grad_norm=max_grad_norm,
                                      make_scheduler=schedule)
            for m, mistake in enumerate(mistakes):
                case = {"bound": result["bound"], "accumulated": result["gap"]["accumulated"],
                        "accumulated_ratio": result["ratio"]["accumulated"]}
                if mistake in refused:
                    case["refused"] = refused[mistake]
                else:
                    case["mistake"] = result["gap"][mistake]
                    case["mistake_ratio"] = result["ratio"][mistake]
                cases[key(i, m, j)] = case
    return {"controls": controls, "cases": cases}


EXPLORERS = {"split": split_explorer, "batchnorm": batchnorm_explorer,
             "step-accounting": step_accounting_explorer,
             "floating-point": floating_point_explorer, "memory": memory_explorer,
             "contrastive": contrastive_explorer, "precision": precision_explorer}
"""Name -> the function that computes that explorer's data (the docs hook calls each)."""
