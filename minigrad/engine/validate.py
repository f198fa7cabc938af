"""Argument checks, one per kind of value, used by every layer and the command line.

The same input is judged the same everywhere: ``micro_batch_size=True`` is refused by
``split_sizes``, ``BatchNorm1d`` and ``--micro-batch`` alike, and ``numpy.int64(4)`` is an
integer everywhere. Each check returns the value in the form the caller computes with (a
Python int or float; a ``Fraction`` stays a ``Fraction`` for exact mode) and raises
``TypeError`` for a value of the wrong kind, ``ValueError`` for one out of range, with a
message that names the argument, the value and what is allowed:

>>> integer("micro_batch_size", True, low=1)
Traceback (most recent call last):
...
TypeError: micro_batch_size must be an integer, got bool True
>>> real("lr", float("nan"))
Traceback (most recent call last):
...
ValueError: lr must be a finite number with lr >= 0, got nan
"""

import math
import numbers
import operator
from fractions import Fraction


def _shown(value):
    return f"{type(value).__name__} {value!r}"


def integer(name, value, *, low=None, high=None, noun="an integer"):
    """``value`` as a Python int with ``low <= value <= high`` (either bound optional).

    Booleans are refused (``True`` is not a size); NumPy integers are accepted.
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        try:  # NumPy 0-d integer arrays, and anything else that is an index
            if isinstance(value, bool) or not hasattr(value, "__index__"):
                raise TypeError
            value = operator.index(value)
        except TypeError:
            raise TypeError(f"{name} must be {noun}, got {_shown(value)}") from None
    value = int(value)
    if (low is not None and value < low) or (high is not None and value > high):
        if noun == "an integer":
            noun += (f" >= {low}" if high is None else f" <= {high}" if low is None
                     else f" in [{low}, {high}]")
        raise ValueError(f"{name} must be {noun}, got {value}")
    return value


def positive_int(name, value):
    """``value`` as a Python int >= 1 (a size or a count)."""
    return integer(name, value, low=1, noun="a positive int")


def real(name, value, *, low=0.0, high=None, strict_low=False, strict_high=False):
    """``value`` as a finite Python float (a ``Fraction`` kept as is) in the given range.

    ``low`` defaults to 0 (most hyperparameters are non-negative); pass ``low=None`` for no
    lower bound. ``strict_*`` excludes the bound itself. Hyperparameters enter array
    expressions as Python floats: array-api-strict refuses NumPy scalars, and a Python float
    takes the array's dtype (no float32 -> float64 promotion).
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {_shown(value)}")
    number = float(value)
    below = low is not None and (number <= low if strict_low else number < low)
    above = high is not None and (number >= high if strict_high else number > high)
    if not math.isfinite(number) or below or above:
        allowed = _range(name, low, high, strict_low, strict_high)
        raise ValueError(f"{name} must be a finite number with {allowed}, got {value!r}")
    # A Fraction stays a Fraction: exact mode (minigrad.analysis.exact) updates object arrays.
    return value if isinstance(value, Fraction) else number


def probability(name, value):
    """``value`` as a float in [0, 1]."""
    return real(name, value, low=0.0, high=1.0)


def boolean(name, value):
    """``value`` as a Python bool; only ``True``/``False`` (and NumPy's) are accepted."""
    numpy_bool = type(value).__module__ == "numpy" and type(value).__name__ in ("bool", "bool_")
    if not (isinstance(value, bool) or numpy_bool):
        raise TypeError(f"{name} must be True or False, got {_shown(value)}")
    return bool(value)


def choice(name, value, allowed):
    """``value`` itself, checked to be one of ``allowed`` (compared with ``==``)."""
    if not any(value is a or (type(value) is type(a) and value == a) for a in allowed):
        listed = ", ".join(repr(a) for a in allowed)
        raise ValueError(f"{name} must be one of {listed}, got {value!r}")
    return value


def optional(check, name, value, *args, **kwargs):
    """``None``, or ``check(name, value, ...)``."""
    return None if value is None else check(name, value, *args, **kwargs)


def shape(name, value):
    """A shape: one positive int, or a non-empty tuple/list of them, as a tuple."""
    items = value if isinstance(value, (tuple, list)) else (value,)
    if not items:
        raise ValueError(f"{name} must be a positive int or a non-empty tuple of them, got "
                         f"{value!r}")
    return tuple(positive_int(f"{name}[{i}]" if items is value else name, v)
                 for i, v in enumerate(items))


def _range(name, low, high, strict_low=False, strict_high=False):
    """``"0 <= p <= 1"``, ``"lr >= 0"``, ``"n <= 5"`` or ``"any value"``."""
    if low is None and high is None:
        return "any value"
    if high is None:
        return f"{name} {'>' if strict_low else '>='} {low:g}"
    lo = f"{low:g} {'<' if strict_low else '<='} " if low is not None else ""
    return f"{lo}{name} {'<' if strict_high else '<='} {high:g}"
