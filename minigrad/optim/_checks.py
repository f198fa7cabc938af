"""Argument checks shared by the optimizers, gradient clipping and the schedules.

Every error names the argument and says what is allowed, e.g.
``ValueError: lr must be a finite number with lr >= 0, got -0.1``.
"""

import math
import numbers
from fractions import Fraction

from minigrad.engine import backend


def real(name, value, *, low=0.0, below=None):
    """``value`` as a Python float (a ``Fraction`` kept as is), checked to be finite,
    ``>= low`` and (if given) ``< below``.

    Hyperparameters enter array expressions as Python floats: array-api-strict refuses
    NumPy scalars, and a Python float takes the array's dtype (no float32 -> float64 promotion).
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__}")
    number = float(value)
    allowed = f"{low:g} <= {name} < {below:g}" if below is not None else f"{name} >= {low:g}"
    if not math.isfinite(number) or number < low or (below is not None and number >= below):
        raise ValueError(f"{name} must be a finite number with {allowed}, got {value!r}")
    # A Fraction stays a Fraction: exact mode (minigrad.exact) updates object arrays.
    return value if isinstance(value, Fraction) else number


def integer(name, value, *, low=0):
    """``value`` as a Python int, checked to be ``>= low``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an integer, got {type(value).__name__}")
    if value < low:
        raise ValueError(f"{name} must be an integer >= {low}, got {value}")
    return int(value)


def betas(value):
    """``(beta1, beta2)`` as Python floats, each with ``0 <= beta < 1``."""
    if not isinstance(value, (tuple, list)) or len(value) != 2:
        raise ValueError(f"betas must be a pair (beta1, beta2), got {value!r}")
    return (real("betas[0]", value[0], below=1.0), real("betas[1]", value[1], below=1.0))


def check_like(arrays, params, label, indices=None):
    """Check that ``arrays[k]`` matches ``params[k]`` in namespace, device, dtype and shape.

    ``label.format(i)`` names the k-th array in messages, with ``i = indices[k]`` (default
    ``k``), e.g. ``"grads[{}]"`` or ``"params[{}].grad"``. Raises ``TypeError`` for a wrong
    namespace or dtype and ``ValueError`` for a wrong count, device or shape.
    """
    if len(arrays) != len(params):
        raise ValueError(f"expected one array per parameter for {label.format('i')}: "
                         f"{len(params)} parameters, got {len(arrays)} arrays")
    indices = range(len(arrays)) if indices is None else indices
    for i, a, p in zip(indices, arrays, params):
        name = label.format(i)
        try:
            backend.get_namespace(a, p)
        except TypeError as err:
            raise TypeError(f"{name} is not an array of its parameter's namespace: {err}") from None
        if backend.device(a) != backend.device(p):
            raise ValueError(f"{name} is on device {backend.device(a)}, "
                             f"its parameter on {backend.device(p)}")
        if a.dtype != p.dtype:
            raise TypeError(f"{name} has dtype {a.dtype}, its parameter has dtype {p.dtype}")
        if tuple(a.shape) != tuple(p.shape):
            raise ValueError(f"{name} has shape {tuple(a.shape)}, "
                             f"its parameter has shape {tuple(p.shape)}")
