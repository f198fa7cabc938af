"""The numbers behind the contrastive explorer: the gradient gap of each contrastive
strategy against the full batch, and the negatives a query meets."""


import numpy as np

from minigrad import nn
from minigrad.accumulate import Bank, accumulated_gradients, split_sizes
from minigrad.accumulate.strategy import STRATEGIES, names
from minigrad.analysis import bounds, metrics
from minigrad.analysis.contrastive_bound import gradcache_bound
from minigrad.engine import backend, validate
from minigrad.studies.explorers import control, key, positive_ints

CONTRASTIVE_STRATEGIES = {name: STRATEGIES[name].label for name in names("contrastive")}
"""The contrastive explorer's strategies: name -> label (``accumulate.strategy``'s)."""
TEMPERATURE = 0.5


# ----- contrastive: the gap of each strategy, and the negatives a query meets --------------
def contrastive_setup(n, width=8, seed=0):
    """The contrastive explorer's dual encoder factory (two ``nn.MLP([width, 16, 8])``
    towers, seeds 0 and 1), symmetric InfoNCE (temperature 0.5), and two seeded batches of
    ``n`` pairs (N, 2, width): each passage its query plus noise, targets ``arange(n)``. The
    gradient is measured on ``x``; ``warm`` fills a memory bank first."""
    n = validate.integer("n", n, low=2)
    generator = backend.rng(seed + n)

    def pairs():
        q = generator.normal(size=(n, width))
        return np.stack([q, q + 0.3 * generator.normal(size=(n, width))], axis=1)

    warm, x = pairs(), pairs()
    return {"make": lambda: nn.DualEncoder(nn.MLP([width, 16, 8], seed=0),
                                           nn.MLP([width, 16, 8], seed=1)),
            "loss": nn.InfoNCELoss(temperature=TEMPERATURE, symmetric=True),
            "x": x, "warm": warm, "y": np.arange(n)}


def contrastive_explorer(strategies=tuple(CONTRASTIVE_STRATEGIES),
                         micro_batch_sizes=(1, 2, 4, 8, 16, 32), batch_sizes=(16, 32, 64), seed=0):
    """Per strategy, micro-batch size m (at most N) and global batch N on
    ``contrastive_setup``: the negatives a query of a full micro-batch meets (naive m - 1,
    GradCache N - 1, a ``Bank(size=N)`` filled by one window on ``warm``: m + N - 1), the
    gradient's ``rel_error`` and ``cosine`` against full batch (``metrics.vector_gap``) and
    the largest elementwise gap over ``contrastive.gradcache_bound`` (None if infinite)."""
    strategies = [validate.choice("strategies", s, tuple(CONTRASTIVE_STRATEGIES))
                  for s in strategies]
    controls = [control("strategy", "strategy", strategies,
                         [CONTRASTIVE_STRATEGIES[s] for s in strategies]),
                control("micro", "micro-batch size m",
                         positive_ints("micro_batch_sizes", micro_batch_sizes)),
                control("batch", "global batch N", positive_ints("batch_sizes", batch_sizes))]
    cases = {}
    for k, n in enumerate(batch_sizes):
        setup = contrastive_setup(n, seed=seed)
        make, loss, x, y = (setup[name] for name in ("make", "loss", "x", "y"))
        model = make()
        full = accumulated_gradients(model, loss, x, y)
        bound, _ = gradcache_bound(model, loss, x, y)
        for j, m in enumerate(micro_batch_sizes):
            sizes = split_sizes(n, micro_batch_size=min(m, n))
            for i, strategy in enumerate(strategies):
                negatives = {"naive": sizes[0] - 1, "gradcache": n - 1}.get(strategy)
                if strategy == "bank":
                    strategy = Bank(size=n)
                    accumulated_gradients(model, loss, setup["warm"], y, sizes=sizes,
                                          strategy=strategy)
                    negatives = sizes[0] + strategy.passages.shape[0] - 1
                acc = accumulated_gradients(model, loss, x, y, sizes=sizes, strategy=strategy)
                ratio = max(bounds.bound_ratio(np.abs(acc[p] - full[p]), bound[p])
                            for p in full)
                cases[key(i, j, k)] = {
                    "sizes": sizes, "negatives": negatives,
                    **metrics.vector_gap(bounds.flat(acc.values()), bounds.flat(full.values())),
                    "bound_ratio": ratio if np.isfinite(ratio) else None}
    return {"controls": controls, "cases": cases}
