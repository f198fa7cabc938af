"""What ``check`` is asked to run: its arguments checked (``configuration``, the JSON-able
``config`` of its result), the seeded data of every update (``batches``) and the model,
optimizer and loss that a configuration names (``factories``). ``check``'s docstring
describes the data and the verdict.
"""

import numpy as np

from minigrad import nn, optim
from minigrad.accumulate import NORMALIZE, split_sizes
from minigrad.accumulate import strategy as strategies
from minigrad.analysis import charlm
from minigrad.analysis.causes import IGNORE_INDEX
from minigrad.engine import validate
from minigrad.nn.mlp import ACTIVATIONS

MODELS = ("mlp", "charlm")
NORMS = ("none", "batch", "group", "layer")
LOSSES = ("cross-entropy", "mse")
DTYPES = ("float64", "float32")


def configuration(sizes=None, *, model="mlp", vocab_size=None, context=None, embedding_dim=None,
                  hidden=None, max_length=None, activation=None, norm="none", dropout=0.0,
                  loss="cross-entropy", ignore_fraction=0.0, optimizer="sgd", lr=0.01,
                  weight_decay=0.0, clip=None, global_batch=64, micro_batch=None,
                  num_micro_batches=None, normalize="items", strategy="micro", steps=20,
                  dtype="float64", seed=0):
    """``check``'s arguments, checked, as the JSON-able ``config`` of its result.

    Errors name the argument, the value and what is allowed; arguments that depend on each
    other are named as ``name=value``. ``activation=None`` is the model's own: relu for the
    MLP, tanh for the language model.
    """
    model = validate.choice("model", model, MODELS)
    language = charlm.options(model, {"vocab_size": vocab_size, "context": context,
                                      "embedding_dim": embedding_dim, "hidden": hidden,
                                      "max_length": max_length})
    sizes = _sizes(sizes) if model == "mlp" else sizes
    config = {
        "model": model,
        "sizes": sizes,
        **language,
        "activation": validate.choice(
            "activation", activation if activation is not None else
            ("relu" if model == "mlp" else "tanh"),
            tuple(ACTIVATIONS)),
        "norm": validate.choice("norm", "none" if norm is None else norm, NORMS),
        "dropout": validate.probability("dropout", dropout),
        "loss": validate.choice("loss", loss, LOSSES),
        "ignore_fraction": validate.probability("ignore_fraction", ignore_fraction),
        "optimizer": validate.choice("optimizer", optimizer, optim.OPTIMIZERS),
        "lr": validate.real("lr", lr),
        "weight_decay": validate.real("weight_decay", weight_decay),
        "clip": validate.optional(validate.real, "clip", clip, strict_low=True),
        "global_batch": validate.positive_int("global_batch", global_batch),
        "micro_batch": validate.optional(validate.positive_int, "micro_batch", micro_batch),
        "num_micro_batches": validate.optional(validate.positive_int, "num_micro_batches",
                                               num_micro_batches),
        "normalize": validate.choice("normalize", normalize, NORMALIZE),
        "strategy": validate.choice("strategy", strategy, strategies.names("plain")),
        "steps": validate.positive_int("steps", steps),
        "dtype": validate.choice("dtype", dtype, DTYPES),
        "seed": validate.integer("seed", seed, low=0),
    }
    if model == "charlm":
        charlm.refuse_mlp_options(config, sizes)
    _check_together(config)
    return config


def _sizes(sizes):
    """The MLP's widths, checked."""
    if isinstance(sizes, (str, bytes)) or not hasattr(sizes, "__iter__"):
        raise TypeError(f"sizes must list at least 2 positive ints, got {sizes!r}")
    sizes = [validate.positive_int(f"sizes[{i}]", s) for i, s in enumerate(sizes)]
    if len(sizes) < 2:
        raise ValueError(f"sizes must list at least 2 positive ints, got {sizes!r}")
    return sizes


def _check_together(config):
    """What one argument allows of another."""
    n, m, k = config["global_batch"], config["micro_batch"], config["num_micro_batches"]
    if (m is None) == (k is None):
        raise ValueError(f"give exactly one of micro_batch and num_micro_batches, got "
                         f"micro_batch={m} and num_micro_batches={k}")
    for name, value in (("micro_batch", m), ("num_micro_batches", k)):
        if value is not None and value > n:
            raise ValueError(f"{name} must be at most global_batch={n}, got {value}")
    if config["loss"] == "mse" and config["ignore_fraction"] != 0:
        raise ValueError(f"ignore_fraction must be 0 with loss='mse' (MSE has no ignored "
                         f"targets), got {config['ignore_fraction']}")
    if config["strategy"] == "exact_batchnorm" and config["normalize"] != "items":
        raise ValueError(f"strategy='exact_batchnorm' needs normalize='items', got "
                         f"normalize='{config['normalize']}'")
    if config["norm"] == "batch" and n < 2:
        raise ValueError(f"norm='batch' needs global_batch >= 2 (BatchNorm's batch statistics "
                         f"need 2 samples), got {n}")
    split = split_sizes(n, m, k)
    if config["norm"] == "batch" and config["strategy"] == "micro" and min(split) < 2:
        given = f"micro_batch={m}" if m is not None else f"num_micro_batches={k}"
        raise ValueError(f"norm='batch' with strategy='micro' needs at least 2 samples in "
                         f"every micro-batch, but {given} splits global_batch={n} into "
                         f"micro-batches as small as {min(split)}; choose another split or "
                         f"strategy='exact_batchnorm'")


def batches(config):
    """The seeded ``(x, y)`` of every update (see the module docstring)."""
    if config["model"] == "charlm":
        return charlm.batches(config)
    rng = np.random.default_rng([config["seed"], 1])
    n, d, c = config["global_batch"], config["sizes"][0], config["sizes"][-1]
    data = []
    for _ in range(config["steps"]):
        x = rng.normal(size=(n, d)).astype(config["dtype"])
        if config["loss"] == "mse":
            data.append((x, rng.normal(size=(n, c)).astype(config["dtype"])))
            continue
        y = rng.integers(0, c, size=n)
        ignored = min(round(config["ignore_fraction"] * n), n - 1)
        y[rng.choice(n, size=ignored, replace=False)] = IGNORE_INDEX
        data.append((x, y))
    return data


def factories(config):
    """The model, the optimizer (from parameters) and the loss that ``config`` names."""
    def make():
        if config["model"] == "charlm":
            return charlm.make(config)
        return nn.MLP(config["sizes"], activation=config["activation"],
                      norm=None if config["norm"] == "none" else config["norm"],
                      dropout=config["dropout"], seed=config["seed"], dtype=config["dtype"])

    def make_optimizer(params):
        return optim.make(config["optimizer"], params, config["lr"], config["weight_decay"])

    if config["loss"] == "mse":
        return make, make_optimizer, nn.MSELoss()
    return make, make_optimizer, nn.CrossEntropyLoss(ignore_index=IGNORE_INDEX)
