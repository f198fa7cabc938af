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
    the other norms, so one factory can build every variant. ``recompute``: the hidden
    layers whose forward is recomputed in the backward (``blocks``, ``set_recompute``).

    >>> model = MLP([2, 8, 3], seed=0)
    >>> [name for name, _ in model.named_parameters()]
    ['0.weight', '0.bias', '2.weight', '2.bias']
    """

    def __init__(self, sizes, activation="relu", norm=None, dropout=0.0, seed=0,
                 dtype="float64", xp=None, device=None, num_groups=None, recompute=None):
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
        layers, blocks = [], []
        for i, (n_in, n_out) in enumerate(zip(sizes[:-1], sizes[1:])):
            start = len(layers)
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
            blocks.append((start, len(layers)))
        super().__init__(*layers)
        self.sizes, self.block_layers = tuple(sizes), tuple(blocks)
        self.set_recompute(self._blocks(recompute, "recompute"))

    def blocks(self, which="all"):
        """The ``(start, stop)`` layer runs of hidden layers ``which``: ``"all"`` (each hidden
        layer its own run), ``None`` or ``"none"`` (no run), or a list whose items are
        hidden-layer indices (0 is the first hidden layer; each its own run) or
        ``(first, last)`` pairs (one run through hidden layers first..last, as
        ``analysis.planner.plan`` returns them). A hidden layer's run is its Linear, norm,
        activation and dropout; pass the result to ``set_recompute``.

        >>> MLP([2, 8, 8, 3], norm="layer", dropout=0.1).blocks([1])
        ((4, 8),)
        >>> MLP([2, 8, 8, 8, 3]).blocks([(0, 1), 2])  # a run of two, then one alone
        ((0, 4), (4, 6))
        """
        return self._blocks(which, "which")

    def _blocks(self, which, name):
        """``blocks(which)``, its errors naming the argument ``name`` (the constructor's
        is ``recompute``)."""
        if which is None or isinstance(which, (str, bytes)):
            validate.choice(name, which, (None, "none", "all"))
            return self.block_layers if which == "all" else ()
        if not hasattr(which, "__iter__"):
            raise TypeError(f"{name} must be 'all', 'none', None, or hidden-layer indices and "
                            f"(first, last) pairs, got {which!r}")
        count = len(self.block_layers)
        if count == 0:
            if list(which):
                raise ValueError(f"MLP{list(self.sizes)} has no hidden layer to recompute")
            return ()

        def layer(i):
            return validate.integer(f"hidden layer in {name}", i, low=0, high=count - 1)

        runs = []
        for item in which:
            if isinstance(item, (tuple, list)):
                if len(item) != 2:
                    raise TypeError(f"a run in {name} is a (first, last) pair of hidden "
                                    f"layers, got {item!r}")
                first, last = layer(item[0]), layer(item[1])
                if first > last:
                    raise ValueError(f"a run in {name} must have first <= last, got {item!r}")
            else:
                first = last = layer(item)
            runs.append((first, last))
        runs = sorted(set(runs))
        for (_, last), (first, _) in zip(runs, runs[1:]):
            if first <= last:
                raise ValueError(f"the runs in {name} overlap: {runs}")
        return tuple((self.block_layers[a][0], self.block_layers[b][1]) for a, b in runs)
