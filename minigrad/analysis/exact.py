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

import math
import numbers
from fractions import Fraction

import numpy as np

from minigrad import nn, optim
from minigrad.accumulate import NORMALIZE, accumulated_gradients, step
from minigrad.accumulate.guard import as_batch
from minigrad.accumulate.split import check_sizes
from minigrad.engine import backend, validate

EXACT_LAYERS = (nn.Linear, nn.ReLU, nn.Identity, nn.Sequential, nn.DualEncoder)

_to_fraction = np.vectorize(Fraction, otypes=[object])


def to_fractions(a, name="a"):
    """Array ``a`` (any namespace, or nested lists) as a NumPy object array of ``Fraction``.

    Every float converts exactly: ``Fraction(0.1)`` is the binary value 0.1 rounds to. NaN and
    inf have no exact value (``ValueError``); strings, ragged lists and other objects are not
    numbers (``TypeError``). ``name`` is the argument named in those errors.
    """
    given = type(a).__name__
    try:
        a = np.asarray(backend.to_numpy(a) if backend.is_array(a) else a)
    except (TypeError, ValueError) as err:  # ragged lists
        raise TypeError(f"{name} must be numbers or an array of them, got {given}: "
                        f"{err}") from None
    if a.dtype == object:  # Fractions, ints, floats (mixed lists)
        bad = [v for v in a.flat if not isinstance(v, numbers.Real)]
        if bad:
            raise TypeError(f"{name} must hold real numbers, got {type(bad[0]).__name__} "
                            f"{bad[0]!r} in {given}")
        finite = all(isinstance(v, numbers.Rational) or math.isfinite(v) for v in a.flat)
    elif a.dtype.kind in "biuf":
        finite = bool(np.all(np.isfinite(a)))
    else:
        raise TypeError(f"{name} must hold real numbers, got {given} of dtype {a.dtype}")
    if not finite:
        raise ValueError(f"{name} holds NaN or inf, which have no exact Fraction value")
    return _to_fraction(a) if a.size else a.astype(object)


def to_exact(model):
    """Convert ``model``'s parameters to Fraction arrays in place; returns the model.

    Only piecewise-linear layers are allowed (and a ``DualEncoder`` of them): anything else
    (tanh, norms, dropout) needs irrational numbers or random draws, and raises ``TypeError``.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be an nn.Module, got {type(model).__name__}")
    for name, module in model.named_modules():
        if not isinstance(module, EXACT_LAYERS):
            raise TypeError(f"exact mode supports Linear and ReLU layers only; "
                            f"{name or 'the model'} is {type(module).__name__}")
    for p in model.parameters():
        p.data, p.grad = to_fractions(p.data), None
    return model


def _check_factory(model_factory):
    """A model factory, not a model: each run needs its own copy."""
    if isinstance(model_factory, nn.Module) or not callable(model_factory):
        raise TypeError(f"model_factory must be a function returning a new model (e.g. "
                        f"lambda: nn.MLP(...)), got {type(model_factory).__name__}")


def _exact_batch(x, y, sizes, name=""):
    """``(x, y, sizes)`` as Fraction arrays of one batch, and its split checked."""
    x, y = as_batch(to_fractions(x, f"{name}x"), to_fractions(y, f"{name}y"))
    return x, y, check_sizes(sizes, x.shape[0])


def gradients_equal(model_factory, x, y, sizes, normalize="items"):
    """Whether the exact accumulated gradient over ``sizes`` ``==`` the full-batch one.

    With ``normalize="micro_batch_mean"`` (the textbook loop) it is equal exactly when all
    micro-batches have the same size.

    Returns ``(equal, accumulated, full)`` with the two ``name -> array`` dicts.
    """
    _check_factory(model_factory)
    normalize = validate.choice("normalize", normalize, NORMALIZE)
    x, y, sizes = _exact_batch(x, y, sizes)
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
    _check_factory(model_factory)
    hyper = {name: Fraction(validate.real(name, value)) for name, value in
             (("lr", lr), ("momentum", momentum), ("dampening", dampening),
              ("weight_decay", weight_decay))}
    hyper["nesterov"] = validate.boolean("nesterov", nesterov)
    if isinstance(batches, (str, bytes)) or not hasattr(batches, "__iter__"):
        raise TypeError(f"batches must be a sequence of (x, y) pairs, "
                        f"got {type(batches).__name__}")
    checked = []
    for i, batch in enumerate(batches):
        if not isinstance(batch, (tuple, list)) or len(batch) != 2:
            raise TypeError(f"batches[{i}] must be an (x, y) pair, got {type(batch).__name__}")
        checked.append(_exact_batch(*batch, sizes, name=f"batches[{i}] "))
    models = [to_exact(model_factory()) for _ in range(2)]
    optimizers = [optim.SGD(m.parameters(), **hyper) for m in models]
    equal = True
    for x, y, sizes in checked:
        step(models[0], nn.MSELoss(), optimizers[0], x, y)
        step(models[1], nn.MSELoss(), optimizers[1], x, y, sizes=sizes)
        states = [m.state_dict() for m in models]
        equal = equal and all(np.array_equal(states[1][k], states[0][k]) for k in states[0])
    return equal, models[1].state_dict(), models[0].state_dict()
