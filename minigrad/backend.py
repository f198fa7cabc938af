"""Array namespaces, devices, dtypes and seeded random numbers.

Every other layer calls ``namespace(x)`` once at its boundary and then uses only
``xp.*`` functions, so the same code runs on NumPy, array-api-strict and CuPy.
This is the only engine module that imports NumPy: random numbers are drawn with a
seeded NumPy ``Generator`` (the array API has no random API) and moved to the
target namespace with ``xp.asarray(..., device=...)``.
"""

import array_api_compat
import numpy as np

FLOAT_DTYPES = ("float32", "float64")


def _name(xp):
    return getattr(xp, "__name__", repr(xp))


def namespace(*arrays):
    """The array-API namespace shared by ``arrays``; ``TypeError`` naming both if they differ."""
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


def get_namespace(xp=None):
    """Resolve ``xp`` (a module such as ``numpy``, a name like ``"array_api_strict"``, or
    ``None`` for NumPy) to its array-API-compatible namespace."""
    if xp is None:
        xp = "numpy"
    if isinstance(xp, str):
        import importlib

        xp = importlib.import_module(xp)
    if xp is np:
        return array_api_compat.array_namespace(np.empty(0))
    if array_api_compat.is_array_api_obj(xp.asarray(0.0)):
        return array_api_compat.array_namespace(xp.asarray(0.0))
    raise TypeError(f"xp must be an array-API namespace, got {_name(xp)}")


def device(x):
    """The device that array ``x`` lives on."""
    return array_api_compat.device(x)


def as_dtype(xp, name):
    """The dtype object for ``name`` (``"float32"`` / ``"float64"`` or a dtype) in ``xp``."""
    if isinstance(name, str):
        if name not in FLOAT_DTYPES:
            raise ValueError(f"dtype must be one of {FLOAT_DTYPES}, got {name!r}")
        return getattr(xp, name)
    return name


def is_floating(xp, x):
    """Whether ``x`` has a real floating-point dtype."""
    return xp.isdtype(x.dtype, "real floating")


def to_numpy(x):
    """A NumPy copy (or view) of array ``x`` from any namespace."""
    if isinstance(x, np.ndarray):
        return x
    if array_api_compat.is_cupy_array(x):
        return x.get()
    try:
        return np.from_dlpack(x)
    except (TypeError, RuntimeError, BufferError, AttributeError):
        return np.asarray(x)


def move(x, xp, device=None):
    """Array ``x`` as an array of namespace ``xp`` (on ``device``); a no-op when already there."""
    xp = get_namespace(xp) if not hasattr(xp, "asarray") else xp
    if array_api_compat.is_array_api_obj(x) and namespace(x) is xp:
        return x if device is None else xp.asarray(x, device=device)
    return xp.asarray(to_numpy(x), device=device)


def rng(seed):
    """A seeded NumPy ``Generator`` (pass a ``Generator`` through unchanged)."""
    if isinstance(seed, np.random.Generator):
        return seed
    return np.random.default_rng(seed)


def uniform(generator, low, high, shape, *, xp, dtype="float64", device=None):
    """Uniform(low, high) draws from a NumPy ``generator``, as an ``xp`` array.

    Draws are made in float64 and then cast, so float32 and float64 models built
    from the same seed hold the same numbers up to rounding.
    """
    draws = generator.uniform(low, high, size=shape)
    return xp.asarray(draws, dtype=as_dtype(xp, dtype), device=device)


def normal(generator, shape, *, xp, dtype="float64", device=None, scale=1.0):
    """Normal(0, scale^2) draws from a NumPy ``generator``, as an ``xp`` array."""
    draws = generator.normal(0.0, scale, size=shape)
    return xp.asarray(draws, dtype=as_dtype(xp, dtype), device=device)
