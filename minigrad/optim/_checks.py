"""Argument checks shared by the optimizers, gradient clipping and the schedules: the
general ones (``real``, ``integer``) from ``minigrad.engine.validate``, and those only
optimizers need.

Every error names the argument and says what is allowed, e.g.
``ValueError: lr must be a finite number with lr >= 0, got -0.1``.
"""

import numpy as np

from minigrad.engine import backend
from minigrad.engine.validate import boolean, integer, real

__all__ = ["betas", "boolean", "check_like", "integer", "real"]


def betas(value):
    """``(beta1, beta2)`` as Python floats, each with ``0 <= beta < 1``."""
    if backend.is_array(value) and value.shape == (2,):
        value = [float(v) for v in backend.to_numpy(value)]
    if not isinstance(value, (tuple, list)) or len(value) != 2:
        raise ValueError(f"betas must be a pair (beta1, beta2), got {value!r}")
    return tuple(real(f"betas[{i}]", b, high=1.0, strict_high=True) for i, b in enumerate(value))


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
        if type(a) is type(p) is np.ndarray and a.dtype == p.dtype and a.shape == p.shape:
            continue  # the usual case, settled without the namespace look-ups below
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
