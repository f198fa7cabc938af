"""Dyadic models and data for the gradient-accumulation tests under tests/accumulate/
(test modules import these from here, never from each other).

Exactness. Most tests use a *dyadic* MLP(3, 6, 2): parameters rounded to multiples of 1/8
(|W1|, |b1| <= 5/8, |W2|, |b2| <= 3/8), integer inputs and targets in [-4, 4], MSE over
8 samples x 2 outputs = 16 items (a power of 2). Then, in one forward and backward pass:
hidden values are multiples of 1/8 below 2^5 (after dropout's x2), outputs and errors
multiples of 2^-6 below 2^6, and every gradient a multiple of 2^-12 below 2^15 (sums over
items) or a sum of such: at most 27 of float64's 53 bits. So every sum is exact in any
order, dividing by 16 is exact, and accumulated and full-batch gradients are compared with
``==``. Dropout with p = 1/2 scales by 2, which keeps values dyadic. After an update the
parameters are finer (multiples of 2^-13): tests that compare a split run with a full-batch
run over several updates round them back to multiples of 1/8 in between (``coarsen``).
Tests that take several updates without that use the same split on both sides, hence the
same operations, which are equal whatever the rounding.
"""

import numpy as np
from helpers import to_np

from minigrad import nn

N = 8  # samples per global batch


def params_of(model):
    return to_np({n: p.data for n, p in model.named_parameters()})


def coarsen(model):
    """Round every parameter to the nearest multiple of 1/8 (see the module docstring)."""
    for p in model.parameters():
        p.data = p.xp.round(p.data * 8.0) / 8.0
    return model


def dyadic_mlp(xp, sizes=(3, 6, 2), **kwargs):
    """An MLP whose parameters are multiples of 1/8 (see the module docstring)."""
    return coarsen(nn.MLP(list(sizes), seed=0, xp=xp, **kwargs))


def regression(xp, n=N, seed=0):
    """Integer inputs (n, 3) and targets (n, 2) in [-4, 4], as float64."""
    rng = np.random.default_rng(seed)
    x = rng.integers(-4, 5, size=(n, 3)).astype(np.float64)
    y = rng.integers(-4, 5, size=(n, 2)).astype(np.float64)
    return xp.asarray(x), xp.asarray(y)
