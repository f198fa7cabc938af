"""MLP: the model every notebook, test and command trains."""

from minigrad.engine import backend, validate
from minigrad.nn.dropout import Dropout
from minigrad.nn.layers import GELU, Linear, ReLU, Sequential, Sigmoid, Tanh
from minigrad.nn.norm import BatchNorm1d, GroupNorm, LayerNorm

ACTIVATIONS = {"relu": ReLU, "tanh": Tanh, "sigmoid": Sigmoid, "gelu": GELU}
NORMS = (None, "batch", "group", "layer")


def default_groups(width):
    """The largest of 4, 2, 1 that divides ``width``: the GroupNorm groups an MLP uses."""
    return next(g for g in (4, 2, 1) if width % g == 0)


class MLP(Sequential):
    """Linear -> [norm] -> activation -> [dropout] per hidden layer, then a last Linear.

    Children are numbered like a ``torch.nn.Sequential`` built the same way, so parameter
    names ("0.weight", "0.bias", "1.weight", ...) line up with torch's. ``num_groups`` is
    the GroupNorm's group count (default: ``default_groups`` of the width) and is unused by
    the other norms, so one factory can build every variant.

    >>> model = MLP([2, 8, 3], seed=0)
    >>> [name for name, _ in model.named_parameters()]
    ['0.weight', '0.bias', '2.weight', '2.bias']
    """

    def __init__(self, sizes, activation="relu", norm=None, dropout=0.0, seed=0,
                 dtype="float64", xp=None, device=None, num_groups=None):
        if isinstance(sizes, (str, bytes)) or not hasattr(sizes, "__iter__"):
            raise TypeError(f"sizes must list at least 2 positive ints, got {sizes!r}")
        sizes = [validate.positive_int(f"sizes[{i}]", s) for i, s in enumerate(sizes)]
        if len(sizes) < 2:
            raise ValueError(f"sizes must list at least 2 positive ints, got {sizes!r}")
        validate.choice("activation", activation, tuple(ACTIVATIONS))
        validate.choice("norm", norm, NORMS)
        dropout = validate.probability("dropout", dropout)
        num_groups = validate.optional(validate.positive_int, "num_groups", num_groups)
        generator = backend.rng(seed)
        dropout_seed = int(generator.integers(2**62))
        make = dict(dtype=dtype, xp=xp, device=device)
        layers = []
        for i, (n_in, n_out) in enumerate(zip(sizes[:-1], sizes[1:])):
            layers.append(Linear(n_in, n_out, generator=generator, **make))
            if i == len(sizes) - 2:
                break
            if norm == "batch":
                layers.append(BatchNorm1d(n_out, **make))
            elif norm == "group":
                layers.append(GroupNorm(num_groups or default_groups(n_out), n_out, **make))
            elif norm == "layer":
                layers.append(LayerNorm(n_out, **make))
            layers.append(ACTIVATIONS[activation]())
            if dropout > 0.0:
                layers.append(Dropout(dropout, seed=dropout_seed + i))
        super().__init__(*layers)
        self.sizes = tuple(sizes)
