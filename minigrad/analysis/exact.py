"""Exact arithmetic: the same engine on NumPy object arrays of ``fractions.Fraction``.

Floating point can only show that accumulated and full-batch training are *close*. With
rational numbers there is no rounding, so for a piecewise-linear MLP (Linear + ReLU) with
MSE loss and SGD (momentum, dampening, Nesterov, weight decay; Fraction hyperparameters)
the accumulated gradient and every parameter of a K-step trajectory are EQUAL (``==``) to
the full-batch ones, for every split. Nothing here re-implements the engine: ``Tensor``,
``MLP``, ``mse_loss``, ``accumulate.step`` and ``optim.SGD`` run unchanged, on arrays
whose elements are ``Fraction``.

>>> from minigrad import nn
>>> model = to_exact(nn.MLP([2, 3, 1], seed=0))
>>> type(model[0].weight.data[0, 0]).__name__
'Fraction'
"""

from fractions import Fraction

import numpy as np

from minigrad import nn, optim
from minigrad.accumulate import accumulated_gradients, step
from minigrad.engine import backend

EXACT_LAYERS = (nn.Linear, nn.ReLU, nn.Identity, nn.Sequential)

_to_fraction = np.vectorize(Fraction, otypes=[object])


def to_fractions(a):
    """Array ``a`` (any namespace, or nested lists) as a NumPy object array of ``Fraction``.

    Every float converts exactly: ``Fraction(0.1)`` is the binary value 0.1 rounds to.
    """
    a = np.asarray(backend.to_numpy(a) if backend.is_array(a) else a)
    return _to_fraction(a) if a.size else a.astype(object)


def to_exact(model):
    """Convert ``model``'s parameters to Fraction arrays in place; returns the model.

    Only piecewise-linear layers are allowed: anything else (tanh, norms, dropout) needs
    irrational numbers or random draws, and raises ``TypeError``.
    """
    for name, module in model.named_modules():
        if not isinstance(module, EXACT_LAYERS):
            raise TypeError(f"exact mode supports Linear and ReLU layers only; "
                            f"{name or 'the model'} is {type(module).__name__}")
    for p in model.parameters():
        p.data, p.grad = to_fractions(p.data), None
    return model


def gradients_equal(model_factory, x, y, sizes, normalize="items"):
    """Whether the exact accumulated gradient over ``sizes`` ``==`` the full-batch one.

    With ``normalize="micro_batches"`` (the textbook loop) it is equal exactly when all
    micro-batches have the same size.

    Returns ``(equal, accumulated, full)`` with the two ``name -> array`` dicts.
    """
    x, y = to_fractions(x), to_fractions(y)
    full = accumulated_gradients(to_exact(model_factory()), nn.MSELoss(), x, y)
    acc = accumulated_gradients(to_exact(model_factory()), nn.MSELoss(), x, y, sizes=sizes,
                                normalize=normalize)
    equal = all(np.array_equal(acc[name], full[name]) for name in full)
    return equal, acc, full


def trajectories_equal(model_factory, batches, sizes, *, lr, momentum=0, dampening=0,
                       nesterov=False, weight_decay=0):
    """Train two exact copies for one SGD update per ``(x, y)`` in ``batches``: one in full
    batches, one accumulated over ``sizes``. Hyperparameters are turned into Fractions.

    Returns ``(equal, accumulated_params, full_params)``; ``equal`` is ``==`` at EVERY step.
    """
    hyper = dict(lr=Fraction(lr), momentum=Fraction(momentum), dampening=Fraction(dampening),
                 nesterov=nesterov, weight_decay=Fraction(weight_decay))
    models = [to_exact(model_factory()) for _ in range(2)]
    optimizers = [optim.SGD(m.parameters(), **hyper) for m in models]
    equal = True
    for x, y in batches:
        x, y = to_fractions(x), to_fractions(y)
        step(models[0], nn.MSELoss(), optimizers[0], x, y)
        step(models[1], nn.MSELoss(), optimizers[1], x, y, sizes=sizes)
        states = [m.state_dict() for m in models]
        equal = equal and all(np.array_equal(states[1][k], states[0][k]) for k in states[0])
    return equal, models[1].state_dict(), models[0].state_dict()
