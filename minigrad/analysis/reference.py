"""The same models written for HIPS autograd: an independent engine and gradient oracle.

``loss_fn(model, loss)`` reads a minigrad ``Sequential``/``MLP`` layer by layer and returns
``f(params, x, y)``: the same loss written in ``autograd.numpy``, with ``params`` the list
of parameter arrays in ``model.named_parameters()`` order. ``autograd.grad(f)`` then gives
gradients that share no code with minigrad's engine. ``accumulated_gradients`` applies the
item-weighted accumulation rule inside autograd too, so the equivalence is shown in a
second engine as well.
"""

import autograd
import autograd.numpy as anp
import numpy as np

from minigrad import nn
from minigrad.accumulate import as_loss, micro_batches
from minigrad.accumulate.split import sizes_for
from minigrad.engine import backend


def _standardize(x, axes, eps):
    mean = anp.mean(x, axis=axes, keepdims=True)
    var = anp.mean((x - mean) ** 2, axis=axes, keepdims=True)
    return (x - mean) / anp.sqrt(var + eps)


def _layer(module, take, x, sample_index, step):
    """Apply one minigrad layer in autograd.numpy; ``take(k)`` pops its k parameters."""
    if isinstance(module, nn.Linear):
        w, b = take(2) if module.bias is not None else (take(1)[0], 0.0)
        return anp.dot(x, w.T) + b
    if isinstance(module, nn.ReLU):
        return anp.where(x > 0, x, 0.0)
    if isinstance(module, nn.Tanh):
        return anp.tanh(x)
    if isinstance(module, nn.Sigmoid):
        return 0.5 * (anp.tanh(0.5 * x) + 1.0)
    if isinstance(module, nn.GELU):
        return 0.5 * x * (1.0 + anp.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x**3)))
    if isinstance(module, nn.LayerNorm):
        k = len(module.normalized_shape)
        y = _standardize(x, tuple(range(x.ndim - k, x.ndim)), module.eps)
        if module.elementwise_affine:
            w, b = take(2)
            y = y * w + b
        return y
    if isinstance(module, nn.GroupNorm):
        n = x.shape[0]
        y = anp.reshape(_standardize(anp.reshape(x, (n, module.num_groups, -1)), (2,),
                                   module.eps), x.shape)
        if module.affine:
            w, b = take(2)
            y = y * w + b
        return y
    if isinstance(module, nn.BatchNorm1d):
        if module.training or not module.track_running_stats:
            y = _standardize(x, (0,), module.eps)
        else:
            rm = backend.to_numpy(module.running_mean)
            rv = backend.to_numpy(module.running_var)
            y = (x - rm) / np.sqrt(rv + module.eps)
        if module.affine:
            w, b = take(2)
            y = y * w + b
        return y
    if isinstance(module, nn.Dropout):
        if not module.training or module.p == 0.0:
            return x
        if module.p == 1.0:  # as functional.dropout: no 0 / 0
            return x * 0.0
        xp = backend.resolve_namespace(np)
        u = backend.counter_uniform(xp, module.seed, step, sample_index, x.shape[1])
        return x * ((u >= module.p) / (1.0 - module.p))
    raise TypeError(f"no autograd reference for layer {type(module).__name__}")


def forward_fn(model):
    """``g(params, x, sample_index=None, step=0)``: the model's forward in autograd.numpy."""
    layers = list(model) if isinstance(model, nn.Sequential) else [model]

    def forward(params, x, sample_index=None, step=0):
        params = list(params)
        if sample_index is None:
            sample_index = np.arange(x.shape[0])

        def take(k):
            taken = params[:k]
            del params[:k]
            return taken

        for module in layers:
            x = _layer(module, take, x, sample_index, step)
        return x

    return forward


def loss_sum_fn(model, loss_fn):
    """``f(params, x, y, sample_index=None, step=0)``: the per-item loss SUM in autograd."""
    loss = as_loss(loss_fn)
    forward = forward_fn(model)

    def f(params, x, y, sample_index=None, step=0):
        out = forward(params, x, sample_index, step)
        if isinstance(loss, nn.MSELoss):
            return anp.sum((out - y) ** 2)
        shifted = out - anp.max(out, axis=1, keepdims=True)
        log_p = shifted - anp.log(anp.sum(anp.exp(shifted), axis=1, keepdims=True))
        kept = y != loss.ignore_index
        # A one-hot product, since autograd has no gradient for take_along_axis.
        onehot = (np.where(kept, y, 0)[:, None] == np.arange(out.shape[1])) & kept[:, None]
        return -anp.sum(log_p * onehot)

    return f


def parameters(model):
    """The model's parameters as float64 NumPy arrays, in ``named_parameters`` order."""
    return [np.asarray(backend.to_numpy(p.data), dtype=np.float64) for p in model.parameters()]


def accumulated_gradients(model, loss_fn, x, y, *, micro_batch_size=None,
                          num_micro_batches=None, sizes=None, step=0):
    """Name -> gradient from autograd, with per-item sums over micro-batches divided once."""
    x, y = backend.to_numpy(x), backend.to_numpy(y)
    sizes = sizes_for(x.shape[0], micro_batch_size=micro_batch_size,
                      num_micro_batches=num_micro_batches, sizes=sizes)
    f = loss_sum_fn(model, loss_fn)
    grad_f = autograd.grad(f)
    params = parameters(model)
    total = [np.zeros_like(p) for p in params]
    for start, xj, yj in micro_batches(x, y, sizes):
        index = np.arange(start, start + xj.shape[0])
        total = [t + g for t, g in zip(total, grad_f(params, xj, yj, index, step))]
    items = as_loss(loss_fn).num_items(y)
    names = [name for name, _ in model.named_parameters()]
    return {name: g / items for name, g in zip(names, total)}
