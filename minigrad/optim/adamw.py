"""AdamW: Adam with decoupled weight decay, as ``torch.optim.AdamW``.

For each parameter p with gradient g, at update t = 1, 2, ... (lr = gamma,
weight_decay = lambda):

    p'  = p_{t-1} * (1 - gamma * lambda)                (decay first, not through g)
    p_t = the Adam update of p' with gradient g_t and no L2 term (see ``adam``)

The state is Adam's: ``AdamState(count, mu, nu)``.

>>> import numpy as np
>>> params, grads = [np.array([2.0])], [np.array([0.0])]
>>> new, _ = update(grads, init(params), params, lr=0.5, weight_decay=0.25)
>>> new[0]
array([1.75])
"""

from minigrad.optim import adam

init = adam.init


def check_hyperparams(*, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2):
    """The hyperparameters as Python floats; ``ValueError`` naming any that is out of range."""
    return adam.check_hyperparams(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)


def update(grads, state, params, *, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2):
    """One AdamW update: ``(new_params, new_state)``; the inputs are left unchanged."""
    h = check_hyperparams(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)
    adam.check_arrays(grads, state, params)
    return apply(grads, state, params, **h)


def apply(grads, state, params, *, lr, betas, eps, weight_decay):
    """``update`` without its checks (see ``adam.apply``)."""
    if weight_decay != 0:
        params = [p * (1.0 - lr * weight_decay) for p in params]
    return adam.apply(grads, state, params, lr=lr, betas=betas, eps=eps, weight_decay=0.0)


reserve, moments, advanced = adam.reserve, adam.moments, adam.advanced


def write(lib, g, p, moments, tmp, den, *, count, first, lr, betas, eps, weight_decay):
    """``adam.write`` after the decoupled decay, in place: p <- p * (1 - lr * lambda)."""
    if weight_decay != 0:
        p *= 1.0 - lr * weight_decay
    adam.write(lib, g, p, moments, tmp, den, count=count, first=first, lr=lr, betas=betas,
               eps=eps, weight_decay=0.0)
