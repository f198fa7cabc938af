"""Gradient clipping by the global norm, as ``torch.nn.utils.clip_grad_norm_``.

For gradients g_1..g_n and norm type q (2 by default, or inf):

    total = || ( ||g_1||_q, ..., ||g_n||_q ) ||_q
    c     = max_norm / (total + 1e-6)
    g_i  <- c * g_i                 only if c < 1

With accumulation, clip once per optimizer update, on the accumulated gradient: clipping
each micro-batch's gradient is a different (and split-dependent) operation.

>>> import numpy as np
>>> clipped, total = clip_by_global_norm([np.array([3.0]), np.array([4.0])], max_norm=1.0)
>>> total
5.0
"""

import math

from minigrad.engine import backend
from minigrad.engine.tensor import Tensor
from minigrad.optim import _checks


def clip_by_global_norm(grads, max_norm, norm_type=2.0):
    """``(clipped_grads, total_norm)``: new arrays scaled by ``c`` if ``c < 1``; a float norm.

    All grads share one namespace. If ``total_norm`` is not finite (inf or nan) the grads
    are returned unchanged with that norm, so the caller can refuse the update (torch would
    scale them by a nan or zero factor instead).
    """
    max_norm = _checks.real("max_norm", max_norm)
    if norm_type != math.inf:
        norm_type = _checks.real("norm_type", norm_type, low=1.0)
    if backend.is_array(grads) or not hasattr(grads, "__iter__"):
        raise TypeError(f"grads must be a sequence of arrays (one per parameter), got "
                        f"{type(grads).__name__}")
    grads = tuple(grads)
    if not grads:
        return grads, 0.0
    for i, g in enumerate(grads):
        if not backend.is_array(g):
            raise TypeError(f"grads[{i}] must be an array, got {type(g).__name__}")
    xp = backend.get_namespace(*grads)
    total, coef = _total_and_coefficient(xp, grads, max_norm, norm_type)
    if not math.isfinite(float(total)) or float(coef) >= 1.0:
        return grads, float(total)
    return tuple(g * xp.astype(coef, g.dtype) for g in grads), float(total)


def clip_coefficient(grads, max_norm, scale=1, norm_type=2.0):
    """The factor ``clip_by_global_norm`` would scale every ``g / scale`` by, as a 0-d array
    of the total norm's dtype, computed on the device with nothing read: ``c`` where
    ``c < 1`` and the total norm is finite, else exactly 1 (multiplying by 1 changes no
    bit). An accumulator's update multiplies by it (cast to each gradient's dtype, as
    ``clip_by_global_norm`` casts it) in its commit.

    >>> import numpy as np
    >>> float(clip_coefficient([np.array([6.0]), np.array([8.0])], 1.0, 2))
    0.199999960000008
    """
    grads = tuple(grads)
    xp = backend.get_namespace(*grads)
    divided = (g / scale if scale != 1 else g for g in grads)  # one at a time: freed in turn
    total, coef = _total_and_coefficient(xp, divided, max_norm, norm_type)
    return xp.where(xp.isfinite(total) & (coef < 1.0), coef, xp.ones_like(coef))


def _total_and_coefficient(xp, grads, max_norm, norm_type):
    """The total norm of ``grads`` (any iterable, consumed once) and ``max_norm / (total +
    1e-6)``, both 0-d arrays on the device."""
    norms = xp.stack([xp.linalg.vector_norm(g, ord=norm_type) for g in grads])
    total = xp.linalg.vector_norm(norms, ord=norm_type)
    # An array over an array: PyTorch computes ``float / tensor`` as the float times the
    # tensor's reciprocal, two roundings; array / array is one correctly rounded division.
    return total, xp.asarray(max_norm, dtype=total.dtype, device=backend.device(total)) / (
        total + 1e-6)


def clip_grad_norm_(params, max_norm, norm_type=2.0):
    """Clip ``p.grad`` of ``params`` (Tensors; those with ``grad`` None are skipped).

    Sets ``p.grad`` to a new, scaled array (never writes into the old one) and returns the
    total norm before clipping as a Python float.

    >>> import numpy as np
    >>> from minigrad import Parameter
    >>> w = Parameter([0.0, 0.0])
    >>> w.grad = np.array([3.0, 4.0])
    >>> clip_grad_norm_([w], max_norm=1.0), np.allclose(w.grad, [0.6, 0.8], rtol=1e-6)
    (5.0, True)
    """
    if not isinstance(params, Tensor) and not hasattr(params, "__iter__"):
        raise TypeError(f"params must be a Tensor or an iterable of Tensors, got "
                        f"{type(params).__name__}")
    params = [params] if isinstance(params, Tensor) else list(params)
    for i, p in enumerate(params):
        if not isinstance(p, Tensor):
            raise TypeError(f"params[{i}] must be a Tensor, got {type(p).__name__}")
    params = [p for p in params if p.grad is not None]
    clipped, total = clip_by_global_norm([p.grad for p in params], max_norm, norm_type)
    for p, g in zip(params, clipped):
        p.grad = g
    return total
