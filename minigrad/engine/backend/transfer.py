"""Moving arrays between namespaces, devices and the host, and the few reads minigrad makes
there: each a transfer the code asks for by name, at most one per question.

Nothing is routed through NumPy implicitly: a device array reaches the host only through
``to_numpy`` (or ``move`` to NumPy), and a decision on the device (``finite_flag``) is
read once (``all_finite``).
"""

import array_api_compat
import numpy as np

from minigrad.engine.backend.dtypes import is_exact
from minigrad.engine.backend.namespaces import get_namespace, is_array, resolve_namespace


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
    xp = resolve_namespace(xp) if not hasattr(xp, "asarray") else xp
    if is_array(x) and get_namespace(x) is xp:
        return x if device is None else xp.asarray(x, device=device)
    return xp.asarray(to_numpy(x), device=device)


def on_host(x):
    """Whether reading ``x`` costs no transfer: a NumPy array (or NumPy scalar)."""
    return isinstance(x, (np.ndarray, np.generic))


def finite_flag(arrays):
    """Whether every element of every array (one namespace) is finite, as a 0-d boolean
    array on their device: nothing is read."""
    xp = get_namespace(*arrays)
    flags = [xp.all(xp.isfinite(a)) for a in arrays]
    return flags[0] if len(flags) == 1 else xp.all(xp.stack(flags))


def all_finite(arrays):
    """Whether every element of every array is finite (exact Fractions always are), read
    from the device at most once (``finite_flag``); NumPy's arrays are checked one by one,
    stopping at the first that is not."""
    arrays = [a for a in arrays if not is_exact(a)]
    if all(on_host(a) for a in arrays):
        return all(bool(np.isfinite(a).all()) for a in arrays)
    return bool(finite_flag(arrays))


def int_range(xp, x):
    """``(min, max)`` of a non-empty integer array, as Python ints."""
    if type(x) is np.ndarray:  # the ufuncs' own reductions, without np.min's wrapper
        return int(np.minimum.reduce(x, axis=None)), int(np.maximum.reduce(x, axis=None))
    low_high = to_numpy(xp.stack([xp.min(x), xp.max(x)]))  # one transfer from a GPU
    return int(low_high[0]), int(low_high[1])
