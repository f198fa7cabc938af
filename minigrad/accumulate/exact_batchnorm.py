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

Cost with L BatchNorm layers: L partial forward passes, L forward+backward passes and one
ordinary forward+backward: roughly (2L + 1) times the forward work and (L + 1) times the
backward work of plain accumulation. Running statistics are updated once per step with
the global mean and unbiased variance, as full-batch training does.
"""

from minigrad import nn
from minigrad.accumulate.accumulator import run_window
from minigrad.accumulate.split import micro_batches
from minigrad.engine import Tensor, backend, no_grad, primitive


class GlobalStatistics:
    """What one BatchNorm layer knows about the whole batch; set as ``bn.global_stats``."""

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

        return primitive(x_hat, (x,), backward)

    def finish_stats(self):
        """Merge the micro-batch moments (Chan et al.): global mean and biased variance."""
        self.count = sum(n for n, _, _ in self.parts)
        self.mean = sum(n * m for n, m, _ in self.parts) / self.count
        m2 = sum(s + n * (m - self.mean) ** 2 for n, m, s in self.parts)
        self.var = m2 / self.count
        self.parts, self.mode = [], "fixed"


def _batchnorms(model):
    if not isinstance(model, nn.Sequential):
        raise TypeError("exact BatchNorm accumulation needs a Sequential model (such as MLP)")
    layers = list(model)
    nested = [name for name, m in model.named_modules() if isinstance(m, nn.BatchNorm1d)
              and m not in layers]
    if nested:
        raise TypeError(f"exact BatchNorm accumulation needs BatchNorm1d layers directly in "
                        f"the Sequential; found nested ones at {nested}")
    return layers, [i for i, m in enumerate(layers) if isinstance(m, nn.BatchNorm1d)
                    and m.training]


def run_exact_window(acc, x, y, sizes):
    """Fill ``acc`` with the full-batch BatchNorm gradient of ``(x, y)`` split by ``sizes``,
    then update. Returns the mean loss, or ``None`` if the update was skipped.

    Called by ``accumulate.step(..., batchnorm="exact")``, which restores everything if
    this raises.
    """
    model = acc.model
    layers, bn_at = _batchnorms(model)
    controls = [GlobalStatistics(layers[i]) for i in bn_at]
    step_index = acc.optimizer.step_count

    def run(xj, start, upto=None):
        index = backend.get_namespace(xj).arange(start, start + xj.shape[0],
                                             device=backend.device(xj))
        with nn.dropout_keys(step_index, index):
            out = xj
            for layer in layers[:upto]:
                out = layer(out)
        return out

    for i, control in zip(bn_at, controls):
        layers[i].global_stats = control
    try:
        for i, control in zip(bn_at, controls):
            with no_grad():
                for start, xj, _ in micro_batches(x, y, sizes):
                    run(xj, start, upto=i + 1)
            control.finish_stats()
        for control in reversed(controls):
            control.collect = True
            for start, xj, yj in micro_batches(x, y, sizes):
                acc.loss(run(xj, start), yj, reduction="sum").backward()
            control.collect = False
        acc.discard()  # the passes above left gradients of their own
        mean_loss = run_window(acc, x, y, sizes)
    finally:
        for i in bn_at:
            layers[i].global_stats = None
    if mean_loss is not None:
        for i, control in zip(bn_at, controls):
            layers[i].update_running_stats(control.mean, control.var, control.count)
    return mean_loss
