"""Array namespaces, devices, dtypes and seeded random numbers.

Every other layer calls ``get_namespace(x)`` once at its boundary and then uses only
``xp.*`` functions, so the same code runs on NumPy, array-api-strict and CuPy.
This is the only engine module that imports NumPy: random numbers are drawn with a
seeded NumPy ``Generator`` (the array API has no random API) and moved to the
target namespace with ``xp.asarray(..., device=...)``.
"""

from fractions import Fraction

import array_api_compat
import numpy as np

from minigrad.engine import validate

FLOAT_DTYPES = ("float32", "float64")


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


def is_column_major(x):
    """True for a 2-D NumPy array laid out column by column only (a transposed matrix)."""
    return (type(x) is np.ndarray and x.ndim == 2 and x.flags.f_contiguous
            and not x.flags.c_contiguous)


def size(x):
    """The number of elements of array ``x`` (``x.size`` is a method on PyTorch tensors)."""
    n = array_api_compat.size(x)
    if n is None:
        raise ValueError(f"array of shape {tuple(x.shape)} has a dimension of unknown size")
    return n


def take_along_rows(xp, x, index):
    """``xp.take_along_axis(x, index, axis=1)`` for a 2-D ``x`` and an (rows, 1) integer
    ``index``: x[r, index[r, 0]] of each row r, shape (rows, 1). A gather copies values, so
    NumPy's fancy indexing (its fast path, ~2x quicker at batch size) gives the same array."""
    if type(x) is np.ndarray and type(index) is np.ndarray:
        return x[np.arange(x.shape[0]), index[:, 0]][:, None]
    return xp.take_along_axis(x, index, axis=1)


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


def device(x):
    """The device that array ``x`` lives on."""
    if type(x) is np.ndarray:  # array-api-compat's answer for NumPy, without its checks
        return "cpu"
    return array_api_compat.device(x)


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


def as_array(data, *, xp=None, dtype=None, device=None):
    """``data`` (an array, a number or nested lists) as an array of numbers: moved to ``xp``
    and ``device`` when given (lists go to ``xp`` or NumPy), cast to ``dtype`` when given.

    ``TypeError`` for anything that is not numbers: strings, ragged lists, ``None``, object
    arrays other than exact ``Fraction`` ones; ``ValueError`` for a device ``xp`` lacks.
    """
    given, was_array = type(data).__name__, is_array(data)
    if xp is not None or not was_array:
        namespace = resolve_namespace(xp)
        try:
            data = move(data, namespace, device=device)
        except (TypeError, ValueError) as err:  # ragged lists, objects without a value
            if device is not None and "device" in str(err).lower():
                raise ValueError(f"device {device!r} is not a device of "
                                 f"{namespace_name(namespace)}: {err}") from None
            raise TypeError(f"Tensor data must be numbers or an array of them, got {given}: "
                            f"{err}") from None
    namespace = get_namespace(data)
    if is_exact(data) and not was_array and not any(isinstance(v, Fraction)
                                                    for v in data.flat):
        # Python ints beyond 64 bits become object arrays: not numbers an array can hold
        raise TypeError(f"Tensor data must be numbers an array can hold, got {given} with "
                        f"values beyond 64-bit integers")
    if not is_numeric(namespace, data):
        raise TypeError(f"Tensor data must be numbers (bool, int, float, or Fractions in "
                        f"exact mode), got {given} of dtype {data.dtype}")
    if dtype is not None:
        data = namespace.astype(data, as_dtype(namespace, dtype, floating=False))
    return data


def like(value, target, name):
    """``value`` as an array like the array ``target``: moved to its namespace and device,
    cast to its dtype (a copy) and of its shape; errors name ``value`` as ``name``. How a
    saved state is loaded into a model, an optimizer or an accumulator, wherever it was saved.

    >>> import numpy as np
    >>> like([1, 2], np.zeros(2, dtype=np.float32), "state").dtype
    dtype('float32')
    """
    xp = get_namespace(target)
    try:
        value = as_array(value, xp=xp, device=device(target))
    except TypeError as err:
        raise TypeError(f"{name}: {err}") from None
    if tuple(value.shape) != tuple(target.shape):
        raise ValueError(f"{name} has shape {tuple(value.shape)}, expected "
                         f"{tuple(target.shape)}")
    return xp.astype(value, target.dtype, copy=True)


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


def rng(seed):
    """A seeded NumPy ``Generator`` (pass a ``Generator`` through unchanged)."""
    if isinstance(seed, np.random.Generator):
        return seed
    return np.random.default_rng(validate.integer("seed", seed, low=0))


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


def _int64(c):
    """The int64 with the same 64 bits as the unsigned constant ``c``."""
    return c - 2**64 if c >= 2**63 else c


_GOLDEN = _int64(0x9E3779B97F4A7C15)
_MIX1 = _int64(0xBF58476D1CE4E5B9)
_MIX2 = _int64(0x94D049BB133111EB)


def _shift_right(h, k):
    """Logical right shift of int64 bits: the arithmetic shift, sign copies masked off."""
    return (h >> k) & ((1 << (64 - k)) - 1)


def _mix64(h):
    """SplitMix64's finaliser: a bijection of 64-bit words that scrambles every input bit."""
    h = (h ^ _shift_right(h, 30)) * _MIX1
    h = (h ^ _shift_right(h, 27)) * _MIX2
    return h ^ _shift_right(h, 31)


def counter_uniform(xp, seed, step, sample_index, width, *, device=None):
    """Uniform [0, 1) numbers keyed by ``(seed, step, sample, feature)``, shape ``(N, width)``.

    A counter-based generator: the number for one sample depends only on its key, never on
    which other samples share the call, so a batch split into micro-batches draws exactly
    the numbers the whole batch would. SplitMix64 on 64-bit words held in int64 arrays:
    wrapping multiply, xor and shifts give the same bits as unsigned arithmetic, and every
    namespace has them (PyTorch has no uint64 multiply).
    """
    i64 = xp.int64

    def word(value):  # (1, 1) arrays, not 0-d ones: NumPy warns about wrap-around for scalars
        return xp.asarray([[_int64(int(value) % 2**64)]], dtype=i64, device=device)

    key = _mix64(word(seed) + _GOLDEN)
    key = _mix64(key ^ word(step))
    samples = xp.astype(xp.reshape(sample_index, (-1, 1)), i64)
    features = xp.reshape(xp.arange(width, dtype=i64, device=device), (1, -1))
    h = _mix64(key ^ _mix64(samples * _GOLDEN + features))
    # The top 53 bits as a float64 in [0, 1), as NumPy's Generator does it.
    return xp.astype(_shift_right(h, 11), xp.float64) * (1.0 / 2**53)
