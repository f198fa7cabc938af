"""Normalisation layers: BatchNorm1d, GhostBatchNorm1d, GroupNorm, LayerNorm (PyTorch
semantics).

All of them normalise with the *biased* variance: x_hat = (x - mean) / sqrt(var + eps),
then y = weight * x_hat + bias. They differ in which axes the statistics are taken over:
BatchNorm1d over the batch (so samples are coupled, and micro-batching changes results),
GhostBatchNorm1d over consecutive virtual batches of the batch, GroupNorm and LayerNorm
within each sample (so micro-batching does not).
"""

from minigrad.engine import backend, validate
from minigrad.engine.tensor import Parameter, Tensor, no_grad
from minigrad.nn import functional as F
from minigrad.nn.module import Module


def _affine_params(module, shape, xp, dtype, device):
    dt = backend.as_dtype(xp, dtype)
    module.weight = Parameter(xp.ones(shape, dtype=dt, device=device))
    module.bias = Parameter(xp.zeros(shape, dtype=dt, device=device))


def standardize(x, axes, eps):
    """(x - mean) / sqrt(var + eps) over ``axes``, with the biased variance; also the stats."""
    mean = x.mean(axis=axes, keepdims=True)
    centered = x - mean
    var = (centered * centered).mean(axis=axes, keepdims=True)
    return centered / (var + eps).sqrt(), mean, var


def ghost_standardize(x, size, eps):
    """``standardize`` over the batch, separately within consecutive virtual batches of ``size``.

    With the one-hot membership M (N x G), M[i, j] = [i // size == j], and n_j values per
    channel in virtual batch j: mean = M^T x / n, var = M^T (x - M mean)^2 / n and
    x_hat = (x - M mean) / (M sqrt(var + eps)). Only matmul and elementwise primitives, so
    the gradient needs no code of its own; M costs O(N G) memory. Returns x_hat and the
    (G, C) means and biased variances.
    """
    xp, n = x.xp, x.shape[0]
    groups = -(-n // size)
    rows = xp.reshape(xp.arange(n, device=x.device) // size, (n, 1))
    cols = xp.reshape(xp.arange(groups, device=x.device), (1, groups))
    m = Tensor(xp.astype(rows == cols, x.dtype))
    counts = m.sum(axis=0).reshape(groups, 1) * (x.size // (n * x.shape[1]))

    def chunk_mean(t):  # (N, C, *) -> (G, C)
        return (m.T @ (t.sum(axis=2) if t.ndim == 3 else t)) / counts

    def spread(s):  # (G, C) -> (N, C, 1...): row i is its virtual batch's row
        out = m @ s
        return out.reshape(out.shape + (1,) * (x.ndim - 2))

    mean = chunk_mean(x)
    centered = x - spread(mean)
    var = chunk_mean(centered * centered)
    return centered / spread((var + eps).sqrt()), mean, var


class BatchNorm1d(Module):
    """Batch normalisation over an (N, C) or (N, C, L) input.

    Training: batch statistics; running_mean/var <- (1 - momentum) * running + momentum *
    batch stat, with the *unbiased* batch variance for running_var (``momentum=None``: a
    cumulative average). Eval: the running statistics.

    Two samples: mean (2, 4), biased variance (1, 4), so each feature normalises to -1 and 1;
    the running statistics move a tenth of the way, the variance with the unbiased (2, 8):

    >>> import numpy as np
    >>> from minigrad import Tensor
    >>> bn = BatchNorm1d(2)
    >>> np.round(bn(Tensor([[1.0, 2.0], [3.0, 6.0]])).numpy(), 4).tolist()
    [[-1.0, -1.0], [1.0, 1.0]]
    >>> np.round(bn.running_mean, 6).tolist(), np.round(bn.running_var, 6).tolist()
    ([0.2, 0.4], [1.1, 1.7])
    """

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True,
                 track_running_stats=True, *, dtype="float64", xp=None, device=None):
        super().__init__()
        num_features = validate.positive_int("num_features", num_features)
        eps = validate.real("eps", eps)
        momentum = validate.optional(validate.probability, "momentum", momentum)
        affine = validate.boolean("affine", affine)
        track_running_stats = validate.boolean("track_running_stats", track_running_stats)
        self.num_features, self.eps, self.momentum = num_features, eps, momentum
        self.affine, self.track_running_stats = affine, track_running_stats
        xp = backend.resolve_namespace(xp)
        dt = backend.as_dtype(xp, dtype)
        if affine:
            _affine_params(self, (num_features,), xp, dtype, device)
        if track_running_stats:
            self.register_buffer("running_mean", xp.zeros(num_features, dtype=dt, device=device))
            self.register_buffer("running_var", xp.ones(num_features, dtype=dt, device=device))
            self.register_buffer("num_batches_tracked", xp.asarray(0, dtype=xp.int64,
                                                                   device=device))

    def _check(self, x):
        if x.ndim not in (2, 3) or x.shape[1] != self.num_features:
            raise ValueError(f"{type(self).__name__}({self.num_features}) expects input of "
                             f"shape (N, {self.num_features}) or (N, {self.num_features}, L), "
                             f"got {x.shape}")

    def forward(self, x, statistics=None):
        """``statistics``: in training, an object whose ``standardize(x, axes)`` gives x_hat
        from whole-batch statistics instead of ``x``'s own (exact accumulation,
        ``minigrad.accumulate.exact_batchnorm``); the running statistics are then left alone."""
        x = F.as_input(x, f"{type(self).__name__}({self.num_features})",
                       self.weight if self.affine else None)
        self._check(x)
        axes = (0,) if x.ndim == 2 else (0, 2)
        shape = (1, self.num_features) + (1,) * (x.ndim - 2)
        use_batch = self.training or not self.track_running_stats
        if self.training and statistics is not None:
            x_hat = statistics.standardize(x, axes)
        elif use_batch:
            x_hat = self._batch_standardize(x, axes)
        else:
            xp = x.xp
            mean = xp.reshape(self.running_mean, shape)
            var = xp.reshape(self.running_var, shape)
            x_hat = (x - Tensor(mean)) / Tensor(xp.sqrt(var + self.eps))
        if self.affine:
            x_hat = x_hat * self.weight.reshape(shape) + self.bias.reshape(shape)
        return x_hat

    def _batch_standardize(self, x, axes):
        """x_hat from the batch's own statistics; in training, the running statistics move."""
        count = x.size // self.num_features
        if count < 2:  # as torch, also in eval mode without running statistics
            raise ValueError("BatchNorm1d with batch statistics needs more than 1 value "
                             f"per channel, got input of shape {x.shape}")
        x_hat, mean, var = standardize(x, axes, self.eps)
        if self.training and self.track_running_stats:
            self.update_running_stats(mean.data, var.data, count)
        return x_hat

    def update_running_stats(self, mean, var, count):
        """One running-statistics update from batch mean and biased variance of ``count``."""
        with no_grad():
            xp = backend.get_namespace(mean)
            self.num_batches_tracked = self.num_batches_tracked + 1
            m = self.momentum
            if m is None:
                m = 1.0 / int(self.num_batches_tracked)
            if count < 2:  # the unbiased variance divides by count - 1
                raise ValueError("BatchNorm1d with batch statistics needs more than 1 value "
                                 f"per channel, got {count}")
            unbiased = xp.reshape(var, (-1,)) * (count / (count - 1))
            self.running_mean = (1.0 - m) * self.running_mean + m * xp.reshape(mean, (-1,))
            self.running_var = (1.0 - m) * self.running_var + m * unbiased

    def extra_repr(self):
        return f"{self.num_features}, eps={self.eps}, momentum={self.momentum}"


class GhostBatchNorm1d(BatchNorm1d):
    """BatchNorm1d whose training normalises consecutive virtual batches of
    ``ghost_batch_size`` samples (the last may be smaller), each with its own statistics
    (``ghost_standardize``); the running statistics are updated once per virtual batch, in
    order. Full-batch training then does what accumulated training of ``BatchNorm1d`` over
    micro-batches of ``ghost_batch_size`` does. A batch of at most ``ghost_batch_size``
    samples is one virtual batch: plain BatchNorm1d, to the bit; eval mode is BatchNorm1d's.

    Four samples in virtual batches of two: each pair normalises to -1 and 1 on its own.

    >>> import numpy as np
    >>> from minigrad import Tensor
    >>> bn = GhostBatchNorm1d(1, ghost_batch_size=2)
    >>> np.round(bn(Tensor([[1.0], [3.0], [10.0], [30.0]])).numpy(), 4).ravel().tolist()
    [-1.0, 1.0, -1.0, 1.0]
    >>> int(bn.num_batches_tracked)
    2
    """

    def __init__(self, num_features, ghost_batch_size, eps=1e-5, momentum=0.1, affine=True,
                 track_running_stats=True, *, dtype="float64", xp=None, device=None):
        ghost_batch_size = validate.positive_int("ghost_batch_size", ghost_batch_size)
        super().__init__(num_features, eps, momentum, affine, track_running_stats, dtype=dtype,
                         xp=xp, device=device)
        self.ghost_batch_size = ghost_batch_size

    def _batch_standardize(self, x, axes):
        """Training with virtual batches; running statistics move once per virtual batch."""
        g, n = self.ghost_batch_size, x.shape[0]
        if not self.training or g >= n:  # one virtual batch: plain BatchNorm
            return super()._batch_standardize(x, axes)
        per = x.size // (n * self.num_features)  # values per channel in each sample
        counts = [min(g, n - start) * per for start in range(0, n, g)]
        if counts[-1] < 2:
            raise ValueError(f"GhostBatchNorm1d({self.num_features}, ghost_batch_size={g}) "
                             f"needs more than 1 value per channel in every virtual batch; "
                             f"input of shape {x.shape} leaves {counts[-1]} in the last one")
        x_hat, mean, var = ghost_standardize(x, g, self.eps)
        if self.track_running_stats:
            for j, count in enumerate(counts):
                self.update_running_stats(mean.data[j, ...], var.data[j, ...], count)
        return x_hat

    def extra_repr(self):
        return f"{super().extra_repr()}, ghost_batch_size={self.ghost_batch_size}"


class GroupNorm(Module):
    """Normalise each sample over groups of channels: input (N, C, *), C divisible by groups."""

    def __init__(self, num_groups, num_channels, eps=1e-5, affine=True, *, dtype="float64",
                 xp=None, device=None):
        super().__init__()
        num_groups = validate.positive_int("num_groups", num_groups)
        num_channels = validate.positive_int("num_channels", num_channels)
        if num_channels % num_groups:
            raise ValueError(f"num_groups must be a positive int dividing num_channels="
                             f"{num_channels}, got {num_groups!r}")
        eps, affine = validate.real("eps", eps), validate.boolean("affine", affine)
        self.num_groups, self.num_channels, self.eps, self.affine = (num_groups, num_channels,
                                                                    eps, affine)
        if affine:
            _affine_params(self, (num_channels,), backend.resolve_namespace(xp), dtype, device)

    def forward(self, x):
        x = F.as_input(x, f"GroupNorm({self.num_groups}, {self.num_channels})",
                       self.weight if self.affine else None)
        if x.ndim < 2 or x.shape[1] != self.num_channels:
            raise ValueError(f"GroupNorm({self.num_groups}, {self.num_channels}) expects input "
                             f"of shape (N, {self.num_channels}, ...), got {x.shape}")
        n = x.shape[0]
        per_group = x.size // max(n, 1) // self.num_groups  # not -1: N may be 0
        x_hat, _, _ = standardize(x.reshape(n, self.num_groups, per_group), (2,), self.eps)
        x_hat = x_hat.reshape(x.shape)
        if self.affine:
            shape = (1, self.num_channels) + (1,) * (x.ndim - 2)
            x_hat = x_hat * self.weight.reshape(shape) + self.bias.reshape(shape)
        return x_hat

    def extra_repr(self):
        return f"{self.num_groups}, {self.num_channels}, eps={self.eps}"


class LayerNorm(Module):
    """Normalise each sample over its last ``len(normalized_shape)`` axes."""

    def __init__(self, normalized_shape, eps=1e-5, elementwise_affine=True, *,
                 dtype="float64", xp=None, device=None):
        super().__init__()
        self.normalized_shape = validate.shape("normalized_shape", normalized_shape)
        self.eps = validate.real("eps", eps)
        self.elementwise_affine = validate.boolean("elementwise_affine", elementwise_affine)
        if elementwise_affine:
            xp = backend.resolve_namespace(xp)
            _affine_params(self, self.normalized_shape, xp, dtype, device)

    def forward(self, x):
        x = F.as_input(x, f"LayerNorm{self.normalized_shape}",
                       self.weight if self.elementwise_affine else None)
        k = len(self.normalized_shape)
        if x.shape[x.ndim - k:] != self.normalized_shape:
            raise ValueError(f"LayerNorm{self.normalized_shape} got an input of shape "
                             f"{x.shape}; its trailing dimensions must match")
        x_hat, _, _ = standardize(x, tuple(range(x.ndim - k, x.ndim)), self.eps)
        if self.elementwise_affine:
            x_hat = x_hat * self.weight + self.bias
        return x_hat

    def extra_repr(self):
        return f"{self.normalized_shape}, eps={self.eps}"
