"""Adam with L2 weight decay, as ``torch.optim.Adam`` (single-tensor, non-fused code path).

For each parameter p with gradient g, at update t = 1, 2, ... (lr = gamma,
betas = (beta_1, beta_2), weight_decay = lambda; m_0 = v_0 = 0):

    g_t <- g_t + lambda * p_{t-1}                       (only if lambda != 0)
    m_t  = beta_1 * m_{t-1} + (1 - beta_1) * g_t
    v_t  = beta_2 * v_{t-1} + (1 - beta_2) * g_t * g_t
    s_t  = gamma / (1 - beta_1^t)                       (step size)
    d_t  = sqrt(v_t) / (1 - beta_2^t)^(1/2) + eps       (eps added after the square root)
    p_t  = p_{t-1} - s_t * m_t / d_t

This is p - gamma * m_hat / (sqrt(v_hat) + eps) with m_hat = m / (1 - beta_1^t) and
v_hat = v / (1 - beta_2^t), evaluated in torch's order. (torch >= 2.0 writes the update of m
as ``lerp(m, g, 1 - beta_1)``, the same value up to rounding.)

>>> import numpy as np
>>> params, grads = [np.array([1.0])], [np.array([2.0])]
>>> new, state = update(grads, init(params), params, lr=0.125, betas=(0.5, 0.75), eps=0.0)
>>> new[0], state.count
(array([0.875]), 1)
"""

import sys
from typing import NamedTuple

import numpy as np

from minigrad.engine import backend
from minigrad.optim import _checks


class AdamState(NamedTuple):
    """``count``: updates done t; ``mu``: first moments m; ``nu``: second moments v."""

    count: int
    mu: tuple
    nu: tuple


def init(params):
    """The state before the first update: t = 0, m = v = 0 in each parameter's dtype/device."""
    mu = tuple(backend.get_namespace(p).zeros_like(p) for p in params)
    nu = tuple(backend.get_namespace(p).zeros_like(p) for p in params)
    return AdamState(count=0, mu=mu, nu=nu)


def check_hyperparams(*, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0):
    """The hyperparameters as Python floats; ``ValueError`` naming any that is out of range."""
    return {
        "lr": _checks.real("lr", lr),
        "betas": _checks.betas(betas),
        "eps": _checks.real("eps", eps),
        "weight_decay": _checks.real("weight_decay", weight_decay),
    }


def update(grads, state, params, *, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0):
    """One Adam update: ``(new_params, new_state)``; the inputs are left unchanged."""
    h = check_hyperparams(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)
    check_arrays(grads, state, params)
    return apply(grads, state, params, **h)


def check_arrays(grads, state, params):
    """The gradients and both moments checked against the parameters (``check_like``)."""
    _checks.check_like(grads, params, "grads[{}]")
    _checks.check_like(state.mu, params, "state.mu[{}]")
    _checks.check_like(state.nu, params, "state.nu[{}]")


def apply(grads, state, params, *, lr, betas, eps, weight_decay):
    """``update`` without its checks, for a caller that made them (``Optimizer.step`` checks
    the gradients each step and holds hyperparameters checked when they were set)."""
    b1, b2 = betas
    t = state.count + 1
    step_size = lr / (1 - b1**t)
    bias_correction2_sqrt = (1 - b2**t) ** 0.5
    new_params, mu, nu = [], [], []
    for g, m, v, p in zip(grads, state.mu, state.nu, params):
        if weight_decay != 0:
            g = g + weight_decay * p
        lib = _in_place_library(g, m, v, p)
        p, m, v = _one(g, m, v, p, b1, b2, step_size, bias_correction2_sqrt, eps) \
            if lib is None else _one_fresh(lib, g, m, v, p, b1, b2, step_size,
                                           bias_correction2_sqrt, eps)
        new_params.append(p)
        mu.append(m)
        nu.append(v)
    return tuple(new_params), AdamState(t, tuple(mu), tuple(nu))


def _one(g, m, v, p, b1, b2, step_size, bias_correction2_sqrt, eps):
    """The rule for one parameter, in the module docstring's order: ``(p_t, m_t, v_t)``."""
    m = b1 * m + (1.0 - b1) * g
    v = b2 * v + (1.0 - b2) * g * g
    denom = backend.get_namespace(v).sqrt(v) / bias_correction2_sqrt + eps
    return p - step_size * m / denom, m, v


def _one_fresh(lib, g, m, v, p, b1, b2, step_size, bias_correction2_sqrt, eps):
    """The fast path of ``_one`` for NumPy or CuPy arrays (``lib`` is the library): the
    same operations on the same operands in the same order, one kernel each, so the same
    IEEE results (tests/optim check ``==``), written into three fresh arrays instead of
    eleven temporaries. The inputs are not written to."""
    m_new = lib.multiply(m, b1)                 # b1 * m
    tmp = lib.multiply(g, 1.0 - b1)             # (1 - b1) * g
    m_new += tmp                                # m_t
    v_new = lib.multiply(v, b2)                 # b2 * v
    lib.multiply(g, 1.0 - b2, out=tmp)          # (1 - b2) * g
    tmp *= g                                    #   ... * g
    v_new += tmp                                # v_t
    denom = lib.sqrt(v_new)
    denom /= bias_correction2_sqrt
    denom += eps                                # d_t
    lib.multiply(m_new, step_size, out=tmp)     # s_t * m_t
    tmp /= denom                                #   ... / d_t
    return lib.subtract(p, tmp, out=denom), m_new, v_new


def reserve(lib, state, p, **_):
    """Nothing to allocate before an in-place update: the moments exist from ``init``."""
    return state


def moments(state):
    """The arrays an in-place update writes besides the parameter: (m, v)."""
    return state.mu[0], state.nu[0]


def advanced(state):
    """The state record after an in-place update (its arrays were written): t + 1."""
    return state._replace(count=state.count + 1)


def write(lib, g, p, moments, tmp, den, *, count, first, lr, betas, eps, weight_decay):
    """One update of (a slice of) one parameter IN PLACE, for an optimizer's commit: ``p``
    and the moments ``(m, v)`` are overwritten with p_t, m_t and v_t at t = ``count + 1``.
    ``tmp`` and ``den`` are workspace arrays of ``p``'s shape, and ``g`` may be ``den``
    itself (it is read before ``den`` is written). The operations, operands and order are
    those of ``_one``, elementwise, so the same bits as ``update`` for the whole array or any
    slice of it; nothing is allocated (NumPy or CuPy, ``lib``)."""
    b1, b2 = betas
    m, v = moments
    t = count + 1
    step_size = lr / (1 - b1**t)
    bias_correction2_sqrt = (1 - b2**t) ** 0.5
    if weight_decay != 0:
        lib.multiply(p, weight_decay, out=tmp)  # lambda * p
        lib.add(g, tmp, out=den)                # g + lambda * p
        g = den
    lib.multiply(m, b1, out=m)                  # b1 * m
    lib.multiply(g, 1.0 - b1, out=tmp)          # (1 - b1) * g
    m += tmp                                    # m_t
    lib.multiply(v, b2, out=v)                  # b2 * v
    lib.multiply(g, 1.0 - b2, out=tmp)          # (1 - b2) * g
    tmp *= g                                    #   ... * g
    v += tmp                                    # v_t (g is not read after this)
    lib.sqrt(v, out=den)
    den /= bias_correction2_sqrt
    den += eps                                  # d_t
    lib.multiply(m, step_size, out=tmp)         # s_t * m_t
    tmp /= den                                  #   ... / d_t
    p -= tmp                                    # p_t


def _in_place_library(g, m, v, p):
    """``numpy`` or ``cupy`` when all four are that library's arrays with at least one axis
    (0-d arrays take the plain path: NumPy turns their results into scalars); else None."""
    kind = type(g)
    if not kind is type(m) is type(v) is type(p) or not (g.ndim and m.ndim and v.ndim
                                                         and p.ndim):
        return None
    if kind is np.ndarray:
        return np
    if kind.__module__.startswith("cupy") and kind.__name__ == "ndarray":
        return sys.modules["cupy"]  # imported already: its arrays exist
    return None
