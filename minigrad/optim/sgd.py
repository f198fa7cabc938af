"""SGD with momentum, dampening, Nesterov and L2 weight decay, as ``torch.optim.SGD``.

For each parameter p with gradient g, at update t = 1, 2, ... (lr = gamma,
weight_decay = lambda, momentum = mu, dampening = tau):

    g_t <- g_t + lambda * p_{t-1}                       (only if lambda != 0)
    b_t  = g_t                                          if t = 1 (torch copies g, no 1 - tau)
    b_t  = mu * b_{t-1} + (1 - tau) * g_t               otherwise
    g_t <- g_t + mu * b_t   if nesterov,   g_t <- b_t   otherwise     (only if mu != 0)
    p_t  = p_{t-1} - gamma * g_t

``init`` and ``update`` are pure: they work on sequences of arrays and return new arrays.

>>> import numpy as np
>>> params, grads = [np.array([1.0])], [np.array([4.0])]
>>> state = init(params)
>>> params, state = update(grads, state, params, lr=0.25, momentum=0.5)
>>> params[0], state.mu[0]
(array([0.]), array([4.]))
"""

from typing import NamedTuple

from minigrad.engine import backend
from minigrad.optim import _checks


class SGDState(NamedTuple):
    """``count``: updates done; ``mu``: momentum buffers b, or None before the first one."""

    count: int
    mu: tuple | None


def init(params):
    """The state before the first update: no momentum buffers yet (torch makes them lazily)."""
    return SGDState(count=0, mu=None)


def check_hyperparams(*, lr, momentum=0.0, dampening=0.0, nesterov=False, weight_decay=0.0):
    """The hyperparameters as Python floats; ``ValueError`` naming any that is out of range."""
    nesterov = _checks.boolean("nesterov", nesterov)
    checked = {
        "lr": _checks.real("lr", lr),
        "momentum": _checks.real("momentum", momentum),
        "dampening": _checks.real("dampening", dampening),
        "nesterov": nesterov,
        "weight_decay": _checks.real("weight_decay", weight_decay),
    }
    if nesterov and (checked["momentum"] == 0 or checked["dampening"] != 0):
        raise ValueError("nesterov=True requires momentum > 0 and dampening = 0, got "
                         f"momentum={checked['momentum']}, dampening={checked['dampening']}")
    return checked


def update(grads, state, params, *, lr, momentum=0.0, dampening=0.0, nesterov=False,
           weight_decay=0.0):
    """One SGD update: ``(new_params, new_state)``; the inputs are left unchanged."""
    h = check_hyperparams(lr=lr, momentum=momentum, dampening=dampening, nesterov=nesterov,
                          weight_decay=weight_decay)
    _checks.check_like(grads, params, "grads[{}]")
    if state.mu is not None:
        _checks.check_like(state.mu, params, "state.mu[{}]")
    return apply(grads, state, params, **h)


def apply(grads, state, params, *, lr, momentum, dampening, nesterov, weight_decay):
    """``update`` without its checks, for a caller that made them (``Optimizer.step``)."""
    new_params, new_mu = [], []
    for i, (g, p) in enumerate(zip(grads, params)):
        if weight_decay != 0:
            g = g + weight_decay * p
        if momentum != 0:
            if state.mu is None:
                # a copy, so that the state never aliases the caller's gradient array
                b = backend.get_namespace(g).asarray(g, copy=True)
            else:
                b = momentum * state.mu[i] + (1 - dampening) * g
            new_mu.append(b)
            g = g + momentum * b if nesterov else b
        new_params.append(p - lr * g)
    mu = tuple(new_mu) if momentum != 0 else state.mu
    return tuple(new_params), SGDState(count=state.count + 1, mu=mu)



def reserve(lib, state, p, *, momentum, **_):
    """What an in-place update of ``p`` needs allocated beforehand: ``state`` with a
    momentum buffer (an empty one before the first update, which ``write`` fills with g)."""
    if momentum == 0 or state.mu is not None:
        return state
    return state._replace(mu=(lib.empty_like(p),))


def moments(state):
    """The arrays an in-place update writes besides the parameter: the momentum buffer."""
    return () if state.mu is None else (state.mu[0],)


def advanced(state):
    """The state record after an in-place update (its arrays were written)."""
    return state._replace(count=state.count + 1)


def write(lib, g, p, moments, tmp, den, *, count, first, lr, momentum, dampening, nesterov,
          weight_decay):
    """One update of (a slice of) one parameter IN PLACE, for an optimizer's commit: ``p``
    and the momentum buffer ``(b,)`` of ``moments`` (from ``reserve``; ``first``: it holds
    nothing yet) are overwritten with p_t and b_t. ``tmp`` and ``den`` are workspace arrays
    of ``p``'s shape, ``g`` may be ``den`` itself. The operations and their order are those
    of ``apply``, elementwise, so the same bits for the whole array or any slice; nothing is
    allocated (NumPy or CuPy, ``lib``)."""
    if weight_decay != 0:
        lib.multiply(p, weight_decay, out=tmp)  # lambda * p
        lib.add(g, tmp, out=den)                # g + lambda * p
        g = den
    if momentum != 0:
        (b,) = moments
        if first:
            lib.copyto(b, g)                    # b_1 = g (torch copies g, no 1 - tau)
        else:
            lib.multiply(b, momentum, out=b)    # mu * b
            lib.multiply(g, 1 - dampening, out=tmp)
            b += tmp                            # b_t
        if nesterov:
            lib.multiply(b, momentum, out=tmp)  # mu * b_t
            lib.add(g, tmp, out=den)            # g + mu * b_t
            g = den
        else:
            g = b
    lib.multiply(g, lr, out=tmp)                # lr * g
    p -= tmp                                    # p_t
