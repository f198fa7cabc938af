"""``check``'s character-level language model (``model="charlm"``): its options, its seeded
token sequences, its model.

The model is ``nn.CharMLP(vocab_size, context, embedding_dim, hidden, seed=seed)`` (Bengio et
al. 2003): the embeddings of the ``context`` previous tokens, concatenated, one tanh layer of
``hidden`` units, the logits of the next token; the loss is the mean cross-entropy over the
real tokens (``nn.CrossEntropyLoss(ignore_index=-100)``).

The data. Each update draws ``global_batch`` sequences from
``numpy.random.default_rng([seed, 1])``: a length n uniform in 1..``max_length``, n tokens
uniform in 1..vocab_size - 1, then the boundary token 0 (which also pads the context at the
start), so n + 1 positions, each one item: its context and its next token. The sequences are
padded to L = max_length + 1 positions (``nn.windows.padded``: a padding position's target
is -100, ignored) and flattened, one position per row: ``x`` (global_batch L, context) token
ids and ``y`` (global_batch L,), int64. A micro-batch of m sequences is their m L rows, so
micro-batches of equal numbers of sequences hold different numbers of real tokens: the
textbook rule (``normalize="micro_batch_mean"``) is wrong on every split, the item rule
right. One position per row, because the rounding bound (``minigrad.analysis.bounds``) is
written over the rows' gradients: here each is one token's.

The MLP's options that do not apply, refused unless left at the value that holds for this
model: ``sizes`` (None: the widths are the options below), ``activation`` ('tanh'), ``norm``
('none'), ``dropout`` (0), ``loss`` ('cross-entropy') and ``ignore_fraction`` (0: the
padding is what is ignored). The options below, in turn, are refused with the MLP.
"""

import numpy as np

from minigrad import nn
from minigrad.engine import validate

DEFAULTS = {"vocab_size": 27, "context": 3, "embedding_dim": 4, "hidden": 16, "max_length": 8}
"""The options of ``model="charlm"`` and their values when not given (27: the letters and
the boundary, as in the names corpus of ``minigrad.studies.text``)."""
FIXED = {"activation": ("tanh", "CharMLP's one nonlinearity is tanh"),
         "norm": ("none", "CharMLP has no normalisation"),
         "dropout": (0.0, "CharMLP has no Dropout"),
         "loss": ("cross-entropy", "the next token is a class"),
         "ignore_fraction": (0.0, "the ignored targets are the padding of sequences of "
                                  "different lengths")}
"""The MLP's options that hold one value for ``model="charlm"``: the value, and why."""


def options(model, given):
    """``given`` (name -> value or None, the keys of ``DEFAULTS``) for ``model``: with the
    MLP, every one None (refused if given); with ``"charlm"``, checked, the defaults filled
    in."""
    if model != "charlm":
        for name, value in given.items():
            if value is not None:
                raise ValueError(f"{name} applies to model='charlm' only, got {value!r}")
        return dict(given)
    values = {name: DEFAULTS[name] if given[name] is None else given[name] for name in DEFAULTS}
    checked = {"vocab_size": validate.integer("vocab_size", values["vocab_size"], low=2)}
    for name in ("context", "embedding_dim", "hidden", "max_length"):
        checked[name] = validate.positive_int(name, values[name])
    return checked


def refuse_mlp_options(config, sizes):
    """Raise for an option of the MLP (``config``, checked, and ``sizes`` as given) whose
    value does not hold for this model."""
    if sizes is not None:
        raise ValueError(f"sizes applies to model='mlp' only; with model='charlm' give "
                         f"vocab_size, context, embedding_dim, hidden and max_length, got "
                         f"{sizes!r}")
    for name, (value, why) in FIXED.items():
        if config[name] != value:
            shown = f"{value:g}" if isinstance(value, float) else repr(value)
            raise ValueError(f"{name} must be {shown} with model='charlm' ({why}), got "
                             f"{config[name]!r}")


def positions(config):
    """L: the rows of one sequence (its positions, padded)."""
    return config["max_length"] + 1


def batches(config):
    """The seeded ``(x, y)`` of every update (see the module docstring)."""
    rng = np.random.default_rng([config["seed"], 1])
    data = []
    for _ in range(config["steps"]):
        lengths = rng.integers(1, config["max_length"] + 1, size=config["global_batch"])
        sequences = [[*rng.integers(1, config["vocab_size"], size=n).tolist(), 0]
                     for n in lengths]
        w = nn.windows.padded(sequences, config["context"], length=positions(config))
        flat = w.flatten()
        data.append((flat.x, flat.y))
    return data


def make(config):
    """The model that ``config`` names."""
    return nn.CharMLP(config["vocab_size"], config["context"], config["embedding_dim"],
                      config["hidden"], seed=config["seed"], dtype=config["dtype"])
