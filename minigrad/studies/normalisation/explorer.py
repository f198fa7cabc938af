"""The numbers behind the split explorer (the accumulation page): for each global batch,
micro-batch size and share of ignored targets, each micro-batch's item count, its share of the
accumulated gradient under both rules, and each rule's measured gradient error.

>>> shares = split_weights([4, 0, 2])
>>> [str(s) for s in shares["textbook"]], [str(s) for s in shares["items"]]
(['1/3', '0', '1/3'], ['2/3', '0', '1/3'])
"""

from fractions import Fraction

from minigrad import nn
from minigrad.accumulate import micro_batches, split_sizes
from minigrad.analysis import equivalence
from minigrad.engine import backend, validate
from minigrad.studies.explorers import control, key, positive_ints

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
                    for rule in ("items", "micro_batch_mean")}
                cases[key(i, j, k)] = {
                    "sizes": sizes, "items": items, "max_rel": errors,
                    "shares": {rule: [_share(s) for s in shares[rule]] for rule in shares}}
    return {"controls": controls, "cases": cases}
