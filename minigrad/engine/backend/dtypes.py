"""What numbers an array holds: the two float dtypes by name, floating, integer, numeric,
and exact (NumPy object arrays of ``fractions.Fraction``, where ``==`` is the proof)."""

from fractions import Fraction

import numpy as np

from minigrad.engine.backend.namespaces import namespace_name

FLOAT_DTYPES = ("float32", "float64")
"""The dtypes a name may give: ``as_dtype(xp, "float32")`` is ``xp.float32``."""


def as_dtype(xp, name, floating=True):
    """The dtype object for ``name`` (``"float32"`` / ``"float64"`` or a dtype) in ``xp``.

    With ``floating=False`` any numeric or bool dtype of ``xp`` is accepted (a Tensor may
    hold integers); the names are still only the two float ones.
    """
    if isinstance(name, str):
        if name not in FLOAT_DTYPES:
            raise ValueError(f"dtype must be one of {FLOAT_DTYPES}, got {name!r}")
        return getattr(xp, name)
    if not floating and isinstance(name, np.dtype) and name == np.dtype(object):
        return name  # exact mode: NumPy object arrays of Fractions
    kinds = "real floating" if floating else ("bool", "numeric")
    try:
        allowed = xp.isdtype(name, kinds)
    except (TypeError, ValueError, AttributeError):
        allowed = False
    if not allowed:
        what = "a floating dtype" if floating else "a numeric dtype"
        raise TypeError(f"dtype must be {what} of {namespace_name(xp)} or one of "
                        f"{FLOAT_DTYPES}, got {name!r}")
    return name


def is_floating(xp, x):
    """Whether ``x`` has a real floating-point dtype."""
    if type(x) is np.ndarray:  # the same answer as numpy.isdtype, without its ~2 us
        return x.dtype.kind == "f"
    return xp.isdtype(x.dtype, "real floating")


def is_integral(xp, x):
    """Whether ``x`` has a (signed or unsigned) integer dtype; bool is not one."""
    if type(x) is np.ndarray:
        return x.dtype.kind in "iu"
    return xp.isdtype(x.dtype, "integral")


def is_exact(x):
    """Whether ``x`` is a NumPy object array (of ``fractions.Fraction``: exact mode)."""
    return isinstance(x, np.ndarray) and x.dtype == object


def is_numeric(xp, x):
    """Whether ``x`` holds numbers: a bool, integer, floating or complex dtype, or an exact
    (object) array whose every element is a ``Fraction`` or an int."""
    if is_exact(x):
        return all(isinstance(v, (Fraction, int)) for v in x.flat)
    try:
        return xp.isdtype(x.dtype, ("bool", "numeric"))
    except (TypeError, ValueError):  # a dtype the namespace does not know (strings, ...)
        return False


def is_differentiable(xp, x):
    """Real floating point, or exact: the arrays a gradient can be taken for."""
    return is_exact(x) or is_floating(xp, x)


def ones_like(xp, x):
    """Ones shaped like ``x``; exact ``Fraction(1)`` for object arrays, so 1/n stays exact."""
    if is_exact(x):
        return np.full(x.shape, Fraction(1), dtype=object)
    return xp.ones_like(x)
