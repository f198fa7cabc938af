"""The nn layers, written with ``autograd.numpy`` from their formulas (not from minigrad's
code): the references of the module gradient checks in tests/nn/test_layers.py and
tests/nn/test_mlp.py (test modules import these from here, never from each other)."""

import math

import autograd.numpy as anp
import numpy as np

EPS = 1e-5
GELU_C = math.sqrt(2.0 / math.pi)


# ----- autograd references, written from the formulas ----------------------------------------
ACT_REFS = {
    "relu": lambda h: anp.maximum(h, 0.0),
    "tanh": anp.tanh,
    "sigmoid": lambda h: 1.0 / (1.0 + anp.exp(-h)),
    "gelu": lambda h: 0.5 * h * (1.0 + anp.tanh(GELU_C * (h + 0.044715 * h**3))),
}


def _normalize_ref(x, axes):
    mean = anp.mean(x, axis=axes, keepdims=True)
    var = anp.mean((x - mean) ** 2, axis=axes, keepdims=True)  # biased
    return (x - mean) / anp.sqrt(var + EPS)


def _channel(v, ndim):
    """A per-channel vector shaped to broadcast over (N, C, *)."""
    return anp.reshape(v, (1, -1) + (1,) * (ndim - 2))


def batch_norm_ref(x, w, b):
    axes = (0,) if x.ndim == 2 else (0, 2)
    return _normalize_ref(x, axes) * _channel(w, x.ndim) + _channel(b, x.ndim)


def group_norm_ref(x, w, b, groups):
    h = anp.reshape(_normalize_ref(anp.reshape(x, (x.shape[0], groups, -1)), (2,)), x.shape)
    return h * _channel(w, x.ndim) + _channel(b, x.ndim)


def layer_norm_ref(x, w, b):
    return _normalize_ref(x, tuple(range(x.ndim - w.ndim, x.ndim))) * w + b


def cross_entropy_ref(logits, target):
    kept = target != -100
    log_probs = logits - anp.log(anp.sum(anp.exp(logits), axis=1, keepdims=True))
    picked = log_probs[np.arange(len(target)), np.where(kept, target, 0)]
    return -anp.sum(picked * kept) / np.sum(kept)


def mlp_ref(sizes, activation, norm, groups, masks=None):
    """The MLP as a function of (x, *parameters in named_parameters order, target)."""

    def ref(x, *rest):
        *params, target = rest
        params = iter(params)
        h = x
        for i in range(len(sizes) - 1):
            h = h @ next(params).T + next(params)
            if i == len(sizes) - 2:
                break
            if norm == "batch":
                h = batch_norm_ref(h, next(params), next(params))
            elif norm == "group":
                h = group_norm_ref(h, next(params), next(params), groups)
            elif norm == "layer":
                h = layer_norm_ref(h, next(params), next(params))
            h = ACT_REFS[activation](h)
            if masks is not None:
                h = h * masks[i]
        return cross_entropy_ref(h, target)

    return ref
