"""Which array library an array belongs to, and the questions each library answers in its
own way: the array's device, its number of elements.

Every other layer calls ``get_namespace(x)`` once at its boundary and then uses only
``xp.*`` functions, so the same code runs on NumPy, array-api-strict and CuPy.
"""

import array_api_compat
import numpy as np


def _name(xp):
    return getattr(xp, "__name__", repr(xp))


def get_namespace(*arrays):
    """The array-API namespace shared by ``arrays``; ``TypeError`` naming both if they differ.

    NumPy arrays (not subclasses, which may be other libraries' arrays) take a fast path: the
    answer array-api-compat gives for them, without its checks (about 10 us a call).
    """
    if all(type(a) is np.ndarray for a in arrays) and arrays:
        return _NUMPY
    try:
        return array_api_compat.array_namespace(*arrays)
    except TypeError as err:
        found = []
        for a in arrays:
            try:
                name = _name(array_api_compat.array_namespace(a))
            except TypeError:
                name = type(a).__name__
            if name not in found:
                found.append(name)
        raise TypeError(
            f"cannot mix arrays from different namespaces: {' and '.join(found)}; "
            "move one of them first (minigrad.backend.move)"
        ) from err


_NUMPY = array_api_compat.array_namespace(np.empty(0))


def resolve_namespace(xp=None):
    """Resolve ``xp`` (a module such as ``numpy``, a name like ``"array_api_strict"``, or
    ``None`` for NumPy) to its array-API-compatible namespace."""
    if xp is None:
        xp = "numpy"
    if isinstance(xp, str):
        import importlib

        try:
            xp = importlib.import_module(xp)
        except ImportError as err:
            raise ValueError(f"xp must name an installed array library (numpy, "
                             f"array_api_strict, torch, cupy, ...), got {xp!r}: {err}") from None
    if xp is np:
        return array_api_compat.array_namespace(np.empty(0))
    try:
        probe = xp.asarray(0.0)
    except MemoryError:
        raise  # says nothing about xp: blaming the argument would send the user astray
    except Exception:  # any object that is not an array library
        probe = None
    if probe is not None and array_api_compat.is_array_api_obj(probe):
        return array_api_compat.array_namespace(probe)
    raise TypeError(f"xp must be an array-API namespace (a module such as numpy, or its "
                    f"name), got {_name(xp)}")


def namespace_name(xp):
    """The short name of namespace ``xp``: ``"numpy"``, ``"array_api_strict"``, ``"torch"``,
    ``"cupy"``, ... (array-api-compat's wrappers are named after the library they wrap)."""
    return _name(xp).removeprefix("array_api_compat.")


def is_array(x):
    """Whether ``x`` is an array of any array-API library, recognised as array-api-compat
    does it. Not by ``__array_namespace__``: CuPy arrays and PyTorch tensors lack it."""
    return array_api_compat.is_array_api_obj(x)


def device(x):
    """The device that array ``x`` lives on."""
    if type(x) is np.ndarray:  # array-api-compat's answer for NumPy, without its checks
        return "cpu"
    return array_api_compat.device(x)


def size(x):
    """The number of elements of array ``x`` (``x.size`` is a method on PyTorch tensors)."""
    n = array_api_compat.size(x)
    if n is None:
        raise ValueError(f"array of shape {tuple(x.shape)} has a dimension of unknown size")
    return n
