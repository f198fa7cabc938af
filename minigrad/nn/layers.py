"""Linear, Embedding, activations and Sequential."""

import math

from minigrad.engine import backend, validate
from minigrad.engine.primitives.indexing import embedding
from minigrad.engine.primitives.linalg import linear
from minigrad.engine.tensor import Parameter
from minigrad.nn import functional as F
from minigrad.nn.module import Module
from minigrad.nn.recomputation import recompute


class Linear(Module):
    """y = x @ W.T + b, with W of shape (out_features, in_features) as in PyTorch.

    W and b start uniform(-1/sqrt(in), 1/sqrt(in)), drawn from the NumPy ``generator``
    (a seed or a ``numpy.random.Generator``; the weight is drawn before the bias).

    >>> import numpy as np
    >>> from minigrad import Tensor
    >>> layer = Linear(3, 2, generator=0)
    >>> layer.weight.shape, layer(Tensor(np.ones((4, 3)))).shape
    ((2, 3), (4, 2))
    """

    def __init__(self, in_features, out_features, bias=True, *, generator=0,
                 dtype="float64", xp=None, device=None):
        super().__init__()
        in_features = validate.positive_int("in_features", in_features)
        out_features = validate.positive_int("out_features", out_features)
        bias = validate.boolean("bias", bias)
        self.in_features, self.out_features = in_features, out_features
        xp = backend.resolve_namespace(xp)
        gen = backend.rng(generator)
        bound = 1.0 / math.sqrt(in_features)
        draw = dict(xp=xp, dtype=dtype, device=device)
        self.weight = Parameter(backend.uniform(gen, -bound, bound, (out_features, in_features),
                                                **draw))
        self.bias = Parameter(backend.uniform(gen, -bound, bound, (out_features,), **draw)) \
            if bias else None

    def forward(self, x):
        x = F.as_input(x, f"Linear({self.in_features}, {self.out_features})", self.weight)
        if x.ndim == 0 or x.shape[-1] != self.in_features:
            raise ValueError(f"Linear(in_features={self.in_features}) got an input of shape "
                             f"{x.shape}; its last dimension must be {self.in_features}")
        return linear(x, self.weight, self.bias)

    def extra_repr(self):
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}")


class Embedding(Module):
    """A lookup table, as ``torch.nn.Embedding``: index i stands for row i of ``weight``, of
    shape (num_embeddings, embedding_dim).

    ``forward(indices)`` takes integers in [0, num_embeddings) in an array (or a Tensor) of
    any shape and returns their rows, shape indices.shape + (embedding_dim,). The weight
    starts N(0, 1), drawn from the NumPy generator ``seed`` (a seed or a
    ``numpy.random.Generator``); the row ``padding_idx`` (negative counts from the end)
    starts at zero and never gets a gradient. An index picked k times adds the k gradients
    of its copies (``minigrad.engine.primitives.indexing.embedding``).

    >>> import numpy as np
    >>> table = Embedding(10, 3, padding_idx=0, seed=0)
    >>> table(np.array([[1, 2], [0, 1]])).shape
    (2, 2, 3)
    >>> table
    Embedding(10, 3, padding_idx=0)
    """

    def __init__(self, num_embeddings, embedding_dim, padding_idx=None, *, seed=0,
                 dtype="float64", xp=None, device=None):
        super().__init__()
        num_embeddings = validate.positive_int("num_embeddings", num_embeddings)
        embedding_dim = validate.positive_int("embedding_dim", embedding_dim)
        padding_idx = validate.optional(validate.integer, "padding_idx", padding_idx,
                                        low=-num_embeddings, high=num_embeddings - 1)
        if padding_idx is not None and padding_idx < 0:
            padding_idx += num_embeddings
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        self.padding_idx = padding_idx
        xp = backend.resolve_namespace(xp)
        weight = backend.normal(backend.rng(seed), (num_embeddings, embedding_dim), xp=xp,
                                dtype=dtype, device=device)
        if padding_idx is not None:
            rows = xp.arange(num_embeddings, device=backend.device(weight))
            keep = xp.reshape(rows != padding_idx, (-1, 1))
            weight = xp.where(keep, weight, xp.zeros_like(weight))
        self.weight = Parameter(weight)

    def forward(self, indices):
        return embedding(indices, self.weight, self.padding_idx)

    def extra_repr(self):
        shown = f"{self.num_embeddings}, {self.embedding_dim}"
        return shown if self.padding_idx is None else f"{shown}, padding_idx={self.padding_idx}"


class ReLU(Module):
    """max(x, 0) elementwise, with relu'(0) = 0 (``F.relu``).

    >>> from minigrad import Tensor
    >>> ReLU()(Tensor([-1.0, 0.0, 2.0])).numpy().tolist()
    [0.0, 0.0, 2.0]
    """

    def forward(self, x):
        return F.relu(x)


class Tanh(Module):
    """tanh(x) elementwise (``F.tanh``)."""

    def forward(self, x):
        return F.tanh(x)


class Sigmoid(Module):
    """1 / (1 + exp(-x)) elementwise, accurate at both ends (``F.sigmoid``)."""

    def forward(self, x):
        return F.sigmoid(x)


class GELU(Module):
    """GELU with the tanh approximation, i.e. ``torch.nn.GELU(approximate="tanh")``."""

    def forward(self, x):
        return F.gelu(x)


class Identity(Module):
    """Returns its input unchanged: a placeholder layer, as in ``torch.nn.Identity``."""

    def forward(self, x):
        return x


class Sequential(Module):
    """Modules applied in order; children are named ``"0"``, ``"1"``, ... like PyTorch.

    ``recompute_segments`` (set by ``set_recompute``) lists runs of layers whose forward
    is recomputed in the backward (``nn.Recompute``), as ``torch.utils.checkpoint``'s
    ``checkpoint_sequential``: the children, their names and the update stay the same.
    """

    def __init__(self, *modules):
        super().__init__()
        for i, module in enumerate(modules):
            if not isinstance(module, Module):
                raise TypeError(f"Sequential takes Modules, argument {i} is "
                                f"{type(module).__name__}")
            setattr(self, str(i), module)
        self.recompute_segments = ()

    def __getitem__(self, i):
        modules = list(self._modules.values())
        if isinstance(i, int) and not -len(modules) <= i < len(modules):
            raise IndexError(f"index {i} is out of range for a Sequential of {len(modules)} "
                             "modules")
        return modules[i]

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules.values())

    def set_recompute(self, segments):
        """Recompute each ``(start, stop)`` run of layers ``self[start:stop]`` in the backward
        instead of keeping its activations; ``()`` recomputes nothing. Runs are sorted and
        do not overlap. Returns ``self``.

        >>> model = Sequential(Identity(), ReLU(), Identity()).set_recompute([(0, 2)])
        >>> model.recompute_segments
        ((0, 2),)
        """
        if isinstance(segments, (str, bytes)) or not hasattr(segments, "__iter__"):
            raise TypeError(f"segments must be (start, stop) pairs, got {segments!r}")
        segments, checked, end = list(segments), [], 0
        for pair in segments:
            if not isinstance(pair, (tuple, list)) or len(pair) != 2:
                raise TypeError(f"segments must be (start, stop) pairs, got {pair!r} in "
                                f"{segments!r}")
            start = validate.integer("segment start", pair[0], low=0)
            stop = validate.integer("segment stop", pair[1], low=0)
            if not end <= start < stop <= len(self):
                raise ValueError(f"segments must be sorted, non-overlapping runs with 0 <= "
                                 f"start < stop <= {len(self)} (the layers), got {pair!r} in "
                                 f"{list(segments)!r}")
            checked.append((start, stop))
            end = stop
        self.recompute_segments = tuple(checked)
        return self

    def forward(self, x):
        if not self.recompute_segments:
            for module in self._modules.values():
                x = module(x)
            return x
        return run_layers(list(self._modules.values()), x, self.recompute_segments)


def run_layers(layers, x, segments=(), call=None):
    """``x`` through ``layers`` in order, each ``(start, stop)`` run of ``segments``
    recomputed in the backward (``nn.recompute``); runs are cut at the last layer.
    ``call(i, layer, x)`` applies layer ``i`` (default ``layer(x)``): the accumulation
    strategies that walk a Sequential's layers themselves (exact BatchNorm passes each its
    statistics; mixed precision rounds each output) keep its recomputed runs so.
    """
    call = call or _apply
    done = 0
    for start, stop in segments:
        stop = min(stop, len(layers))
        if start >= stop:
            continue
        for i in range(done, start):
            x = call(i, layers[i], x)
        x = recompute(_Run(layers, start, stop, call), x)
        done = stop
    for i in range(done, len(layers)):
        x = call(i, layers[i], x)
    return x


def _apply(i, layer, x):
    return layer(x)


class _Run(Module):
    """Layers ``start .. stop - 1`` as one module, each applied by ``call``: what
    ``run_layers`` recomputes (the layers are its children, so their state is put back)."""

    def __init__(self, layers, start, stop, call):
        super().__init__()
        for i in range(start, stop):
            self._modules[str(i)] = layers[i]
        self.start, self.call = start, call

    def forward(self, x):
        for k, layer in enumerate(self._modules.values()):
            x = self.call(self.start + k, layer, x)
        return x
