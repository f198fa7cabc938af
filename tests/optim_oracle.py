"""torch's Adam formula written out in NumPy, the oracle of the optimizer tests under
tests/optim/, and the small array helpers they share (test modules import these from here,
never from each other).

Exactness of the oracle comparisons: the NumPy references (``torch_adam`` here, ``torch_sgd``
in tests/optim/test_rules.py) perform torch's operations in torch's order. Every float
operation used (+, -, *, /, sqrt) is correctly rounded in IEEE 754, so the same operations
in the same order give the same bits: the derived tolerance is 0 ulps, and any difference
means that a formula differs.

One exception, measured: PyTorch's CPU ``sqrt`` is not always correctly rounded (float64
sqrt(432.33) came out 1 ulp above NumPy's). So the Adam reference takes the square root of
the namespace under test (``sqrt=``) as a given primitive; everything else stays the
reference's own IEEE arithmetic, and the comparison stays exact.
"""

import numpy as np

from minigrad import backend

U64 = np.finfo(np.float64).eps / 2  # unit roundoff: one rounding has relative error <= U64


def arr(xp, values, dtype="float64"):
    return xp.asarray(values, dtype=getattr(xp, dtype))


def np_(x):
    """A NumPy copy of ``x``: the optimizers update parameters and state in place."""
    return None if x is None else np.array(backend.to_numpy(x), copy=True)


def torch_adam(p, grads, *, lr, betas, eps, weight_decay=0.0, decoupled=False, sqrt=np.sqrt):
    beta1, beta2 = betas
    exp_avg, exp_avg_sq = np.zeros_like(p), np.zeros_like(p)
    for step, grad in enumerate(grads, start=1):
        if weight_decay != 0 and decoupled:
            p = p * (1 - lr * weight_decay)
        elif weight_decay != 0:
            grad = grad + weight_decay * p
        exp_avg = exp_avg * beta1 + (1 - beta1) * grad
        exp_avg_sq = exp_avg_sq * beta2 + (1 - beta2) * grad * grad
        step_size = lr / (1 - beta1**step)
        denom = sqrt(exp_avg_sq) / (1 - beta2**step) ** 0.5 + eps
        p = p + (-step_size) * exp_avg / denom
    return p, exp_avg, exp_avg_sq


def sqrt_of(xp):
    """The square root of namespace ``xp``, as a function of NumPy arrays."""
    return lambda a: np_(xp.sqrt(xp.asarray(a))).astype(a.dtype)
