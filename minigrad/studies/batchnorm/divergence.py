"""BatchNorm under gradient accumulation, measured.

A global batch of N samples split into micro-batches of m: BatchNorm in training mode then
normalises with each micro-batch's statistics and moves its running statistics once per
micro-batch, so accumulated training is not full-batch training. Each function here measures
one consequence for a list of micro-batch sizes and returns plain dicts of floats, keyed by
m and then by layer name, ready for a table or a plot. With m = N (one micro-batch) every gap
is exactly 0; GroupNorm, LayerNorm and BatchNorm in eval mode stay at rounding level for
every m.

>>> import numpy as np
>>> from minigrad import nn
>>> x, y = np.random.default_rng(0).normal(size=(8, 3)), np.arange(8) % 2
>>> gaps = forward_gap(lambda: nn.MLP([3, 4, 2], norm="batch"), x, [4, 8])
>>> gaps[4]["1"]["max_abs"] > 0.0, gaps[8]["1"]["max_abs"]
(True, 0.0)
"""

import numpy as np

from minigrad import nn
from minigrad.accumulate import accumulated_gradients, micro_batches, split_sizes
from minigrad.analysis.equivalence import trajectory_report
from minigrad.analysis.metrics import vector_gap
from minigrad.engine import backend
from minigrad.engine.tensor import Tensor, no_grad
from minigrad.nn.norm import standardize


def gradient_divergence(model_factory, loss_fn, x, y, micro_batch_sizes):
    """Per micro-batch size m, per parameter: the accumulated gradient g_m against the
    full-batch gradient g, as ``vector_gap`` (``"all"``: every parameter as one vector).

    ``model_factory()`` must build the same model each call; it is used as built (so
    BatchNorm trains with batch statistics unless the factory calls ``.eval()``).
    Returns ``{m: {name: {"rel_error": float, "cosine": float}}}``.
    """
    full = accumulated_gradients(model_factory(), loss_fn, x, y)
    flat_full = np.concatenate([np.ravel(backend.to_numpy(g)) for g in full.values()])
    report = {}
    for m in micro_batch_sizes:
        acc = accumulated_gradients(model_factory(), loss_fn, x, y, micro_batch_size=m)
        rows = {name: vector_gap(acc[name], full[name]) for name in full}
        flat = np.concatenate([np.ravel(backend.to_numpy(acc[name])) for name in full])
        rows["all"] = vector_gap(flat, flat_full)
        report[m] = rows
    return report


def _batch_norms(model):
    return [name for name, module in model.named_modules() if isinstance(module, nn.BatchNorm1d)]


def _forward_recording(module, h, name, inputs):
    """``module(h)``, walking Sequentials child by child; the input of every BatchNorm1d
    reached is appended to ``inputs[dotted name]``."""
    if isinstance(module, nn.Sequential):
        for child_name, child in module._modules.items():
            h = _forward_recording(child, h, f"{name}.{child_name}" if name else child_name,
                                   inputs)
        return h
    if isinstance(module, nn.BatchNorm1d):
        inputs.setdefault(name, []).append(h)
    return module(h)


def _normalized_inputs(model, x, sizes):
    """Name -> x_hat of every BatchNorm1d, each micro-batch normalised by its own statistics
    (biased variance, the layer's eps), stacked back to the whole batch."""
    inputs = {}
    with no_grad():
        for _, xj, _ in micro_batches(x, x, sizes):
            _forward_recording(model, Tensor(xj), "", inputs)
    names = _batch_norms(model)
    if sorted(inputs) != sorted(names):
        raise ValueError(f"forward_gap walks Sequentials: BatchNorm1d layers "
                         f"{sorted(set(names) - set(inputs))} sit inside other modules")
    modules = dict(model.named_modules())
    x_hat = {}
    for name in names:
        eps = modules[name].eps
        parts = []
        for h in inputs[name]:
            axes = (0,) if h.ndim == 2 else (0, 2)
            parts.append(backend.to_numpy(standardize(h, axes, eps)[0].data))
        x_hat[name] = np.concatenate(parts, axis=0)
    return x_hat


def forward_gap(model_factory, x, micro_batch_sizes):
    """Per micro-batch size m, per BatchNorm1d layer: max and mean of |x_hat_m - x_hat| over
    the batch, where x_hat = (h - mean) / sqrt(var + eps) is the normalised input.

    x_hat uses the statistics of the whole batch, x_hat_m those of each micro-batch; both
    forwards run in training mode with the same parameters, so from the second BatchNorm
    on, h itself carries the gaps of the layers before it (as in accumulated training).
    Returns ``{m: {name: {"max_abs": float, "mean_abs": float}}}``.
    """
    n = x.shape[0]
    reference = _normalized_inputs(model_factory().train(), x, [n])
    report = {}
    for m in micro_batch_sizes:
        micro = _normalized_inputs(model_factory().train(), x, split_sizes(n, m))
        report[m] = {}
        for name, ref in reference.items():
            diff = np.abs(micro[name] - ref)
            report[m][name] = {"max_abs": float(np.max(diff)), "mean_abs": float(np.mean(diff))}
    return report


def running_stat_drift(model_factory, optimizer_factory, loss_fn, batches, micro_batch_size):
    """Running statistics after each of K updates (one per ``(x, y)`` in ``batches``):
    accumulated (k updates per step, micro-batch statistics) against full batch (one per
    step), per BatchNorm1d layer that tracks them.

    Returns ``{name: {"running_mean" | "running_var": {"max_abs": [K floats],
    "max_rel": [K floats]}}}`` (``max_rel`` as in ``equivalence.compare_arrays``).
    """
    report = trajectory_report(model_factory, optimizer_factory, loss_fn, batches,
                               micro_batch_size=micro_batch_size)
    drift = {}
    for name in _batch_norms(model_factory()):
        prefix = f"{name}." if name else ""
        if f"{prefix}running_mean" not in report["steps"][0]:
            continue  # track_running_stats=False
        drift[name] = {
            stat: {metric: [s[prefix + stat][metric] for s in report["steps"]]
                   for metric in ("max_abs", "max_rel")}
            for stat in ("running_mean", "running_var")
        }
    return drift
