"""The derived rounding bounds the equivalence tests share, and the models, data and splits
they draw (test modules import these from here, never from each other).

The bounds themselves (``gamma``, ``per_item_gradients``, ``condition_number``,
``gradient_bound``, ``bound_ratio``, ``flat``) live in ``minigrad.analysis.bounds``, whose
docstring derives them (``minigrad check`` judges against them too); they are re-exported
here. What stays here is the tests' own: hypothesis strategies for models and splits, and
seeded data.
"""

import numpy as np
from hypothesis import strategies as st

from minigrad import nn
from minigrad.analysis.bounds import (
    bound_ratio,
    condition_number,
    flat,
    gamma,
    gradient_bound,
    per_item_gradients,
)

__all__ = ["bound_ratio", "condition_number", "factory", "flat", "gamma", "gradient_bound",
           "make_batches", "make_data", "mlp_configs", "partitions", "per_item_gradients"]


# ----- models, data and splits --------------------------------------------------------------------
@st.composite
def mlp_configs(draw, norms=(None, "group", "layer"), dropout=(0.0, 0.25)):
    """An MLP and its loss: input dim 1-5, 1-3 hidden layers of width 1-8, 1-4 outputs for MSE
    (2-4 classes for cross-entropy)."""
    loss = draw(st.sampled_from(["cross_entropy", "mse"]))
    classes = draw(st.integers(2 if loss == "cross_entropy" else 1, 4))
    widths = draw(st.lists(st.integers(1, 8), min_size=1, max_size=3))
    return {
        "sizes": [draw(st.integers(1, 5)), *widths, classes],
        "activation": draw(st.sampled_from(["relu", "tanh", "gelu"])),
        "norm": draw(st.sampled_from(norms)),
        "dropout": draw(st.sampled_from(dropout)),
        "loss": loss,
        "seed": draw(st.integers(0, 2**32 - 1)),
    }


@st.composite
def partitions(draw, n):
    """Any split of n samples into contiguous micro-batches: the cuts are any subset of 1..n-1
    (none: one micro-batch; all: micro-batches of 1)."""
    cuts = sorted(draw(st.sets(st.integers(1, n - 1)))) if n > 1 else []
    edges = [0, *cuts, n]
    return [b - a for a, b in zip(edges[:-1], edges[1:])]


def make_data(xp, config, n, data_seed, ignore=0.3):
    """x ~ N(0, 1) and the loss; cross-entropy targets are ignored with probability
    ``ignore`` (but at least one is kept), MSE targets ~ N(0, 1)."""
    rng = np.random.default_rng(data_seed)
    x = rng.normal(size=(n, config["sizes"][0]))
    classes = config["sizes"][-1]
    if config["loss"] == "mse":
        return xp.asarray(x), xp.asarray(rng.normal(size=(n, classes))), nn.MSELoss()
    y = rng.integers(0, classes, n)
    y[rng.random(n) < ignore] = -100
    y[rng.integers(n)] = rng.integers(classes)
    return xp.asarray(x), xp.asarray(y), nn.CrossEntropyLoss(ignore_index=-100)


def make_batches(xp, config, steps, n, data_seed):
    """K batches of n samples, and the loss."""
    data = [make_data(xp, config, n, data_seed + k) for k in range(steps)]
    return [(x, y) for x, y, _ in data], data[0][2]


def factory(xp, config):
    """Builds the same model (same seed) every call."""
    return lambda: nn.MLP(config["sizes"], activation=config["activation"],
                          norm=config["norm"], dropout=config["dropout"], seed=config["seed"],
                          xp=xp)

