"""Data as arrays of numbers: what a Tensor is built from (``as_array``) and what a saved
state is loaded as (``like``), in a chosen namespace, device and dtype, with an error that
names what was given when it is not numbers."""

from fractions import Fraction

from minigrad.engine.backend.dtypes import as_dtype, is_exact, is_numeric
from minigrad.engine.backend.namespaces import (
    device,
    get_namespace,
    is_array,
    namespace_name,
    resolve_namespace,
)
from minigrad.engine.backend.transfer import move


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
