"""Exact BatchNorm under accumulation: global statistics at micro-batch memory.

BatchNorm in training couples the samples of a batch twice. The forward normalises with
the batch mean mu and biased variance var; the backward, for an upstream gradient
g_i = dL/dx_hat_i, is

    dL/dx_i = (g_i - A / N - x_hat_i * B / N) / sqrt(var + eps),
    A = sum_j g_j,   B = sum_j g_j * x_hat_j          (sums over the WHOLE batch)

So a micro-batch can reproduce its part of the full-batch gradient exactly once it knows
mu, var, A and B of every BatchNorm layer. This module gets them by extra passes over the
micro-batches, one micro-batch in memory at a time:

1. statistics, input to output: for BN layer l, a forward pass over every micro-batch up
   to layer l (earlier BN layers already use their global statistics) gives counts, means
   and sums of squared deviations, merged with Chan's parallel formula;
2. gradient sums, output to input: for BN layer l, a forward and backward pass over every
   micro-batch (later BN layers already apply their correction) sums A and B; the pass
   stops at layer l;
3. the real pass: every BN layer normalises with global statistics and corrects its
   backward with its A and B; the gradients accumulate as usual.

Over several processes (``distributed.step(..., strategy="exact_batchnorm")``) the same
passes run on each process's shard, and the reduction gathers every layer's moments and
sums A, B from all of them before the next pass: sync BatchNorm, with the same code.

The statistics reach the layers as an argument (``bn(x, statistics=...)``), never as an
attribute set on them, so nothing is left attached to the model if a pass is interrupted.

Cost with L BatchNorm layers: L partial forward passes, L forward+backward passes and one
ordinary forward+backward: roughly (2L + 1) times the forward work and (L + 1) times the
backward work of plain accumulation. Running statistics are updated once per step with
the global mean and unbiased variance, as full-batch training does.
"""

from functools import reduce
from operator import add

from minigrad import nn
from minigrad.accumulate.micro import add_loss, keys
from minigrad.engine import Tensor, no_grad, primitive
from minigrad.nn.layers import run_layers


class GlobalStatistics:
    """What one BatchNorm layer knows about the whole batch: given to it as ``statistics``."""

    def __init__(self, bn):
        self.bn = bn
        self.mode = "stats"  # "stats": record micro-batch moments; "fixed": use global ones
        self.collect = False  # in "fixed" mode: sum A and B instead of correcting
        self.parts = []
        self.mean = self.var = self.A = self.B = None
        self.count = 0

    def standardize(self, x, axes):
        """x_hat of a micro-batch: records moments ("stats") or uses global ones ("fixed")."""
        xp = x.xp
        if self.mode == "stats":
            mean = xp.mean(x.data, axis=axes, keepdims=True)
            m2 = xp.sum((x.data - mean) ** 2, axis=axes, keepdims=True)
            self.parts.append((x.size // self.bn.num_features, mean, m2))
            return Tensor(xp.zeros_like(x.data))
        scale = 1.0 / xp.sqrt(self.var + self.bn.eps)
        x_hat = (x.data - self.mean) * scale

        def backward(g):
            if self.collect:
                a = xp.sum(g, axis=axes, keepdims=True)
                b = xp.sum(g * x_hat, axis=axes, keepdims=True)
                self.A = a if self.A is None else self.A + a
                self.B = b if self.B is None else self.B + b
                return None  # this pass only needs A and B: stop here
            return (g - self.A / self.count - x_hat * (self.B / self.count)) * scale

        return primitive(x_hat, (x,), backward, name="standardize")

    def finish_stats(self, parts):
        """Merge every micro-batch's ``(count, mean, m2)`` (Chan et al.): the global mean
        and biased variance."""
        self.count = sum(n for n, _, _ in parts)
        self.mean = sum(n * m for n, m, _ in parts) / self.count
        m2 = sum(s + n * (m - self.mean) ** 2 for n, m, s in parts)
        self.var = m2 / self.count
        self.parts, self.mode = [], "fixed"


def batchnorm_layers(model):
    """The Sequential's layers and the positions of its BatchNorm1d layers in training mode
    (one alone in an ``nn.Recompute`` counts: the statistics pass through it); ``TypeError``
    for a model the passes cannot walk layer by layer.

    The passes call the layers one by one (``nn.layers.run_layers``), the Sequential's
    ``recompute_segments`` recomputed as in its own forward."""
    if not isinstance(model, nn.Sequential):
        raise TypeError("exact BatchNorm accumulation needs a Sequential model (such as MLP), "
                        f"got {type(model).__name__}")
    layers = list(model)
    direct = [_unwrapped(m) for m in layers]
    nested = [name for name, m in model.named_modules() if isinstance(m, nn.BatchNorm1d)
              and m not in direct]
    if nested:
        raise TypeError(f"exact BatchNorm accumulation needs BatchNorm1d layers directly in "
                        f"the Sequential (or each alone in an nn.Recompute); found nested ones "
                        f"at {nested}")
    return layers, [i for i, m in enumerate(direct) if isinstance(m, nn.BatchNorm1d)
                    and m.training]


def _unwrapped(layer):
    """The module an ``nn.Recompute`` wraps; any other layer itself."""
    return layer.module if isinstance(layer, nn.Recompute) else layer


class ExactBatchNorm:
    """The full-batch BatchNorm gradient at micro-batch memory, by the passes above."""

    name, kind, label = "exact_batchnorm", "plain", "exact BatchNorm"

    def check(self, acc):
        if acc.normalize != "items":
            raise ValueError(f"strategy='exact_batchnorm' needs normalize='items', got "
                             f"{acc.normalize!r}")
        batchnorm_layers(acc.model)

    def run(self, acc, micro_batches, reduction):
        layers, bn_at = batchnorm_layers(acc.model)
        controls = {i: GlobalStatistics(_unwrapped(layers[i])) for i in bn_at}

        def apply(i, layer, out):
            return layer(out, statistics=controls[i]) if i in controls else layer(out)

        def forward(mb, upto=None):
            with keys(acc, mb):
                return run_layers(layers[:upto], mb.x, acc.model.recompute_segments, apply)

        for i, control in controls.items():
            with no_grad():
                for mb in micro_batches:
                    forward(mb, upto=i + 1)
            gathered = reduction.gather(f"gathering the statistics of BatchNorm layer {i}",
                                        control.parts)
            control.finish_stats([part for parts in gathered for part in parts])
        for i, control in reversed(controls.items()):
            control.collect = True
            for mb in micro_batches:
                acc.loss(forward(mb), mb.y, reduction="sum").backward()
            control.collect = False
            gathered = reduction.gather(f"gathering the gradient sums of BatchNorm layer {i}",
                                        (control.A, control.B))
            # in process order, so every process holds the same bits; one process: as is
            control.A, control.B = (reduce(add, sums) for sums in zip(*gathered))
        acc.discard()  # the passes above left gradients of their own
        for control in controls.values():  # once per update, as full-batch training
            control.bn.update_running_stats(control.mean, control.var, control.count)
        for mb in micro_batches:
            add_loss(acc, mb, forward(mb))
        return reduction.update(acc)
