"""Array namespaces, devices, dtypes and seeded random numbers: the engine's door to the
array libraries, and the only part of it that imports NumPy.

Every other layer calls ``get_namespace(x)`` once at its boundary and then uses only
``xp.*`` functions, so the same code runs on NumPy, array-api-strict and CuPy. One module
per concept, each name read from here (``backend.get_namespace``):

- ``namespaces``: which library an array belongs to, its device and its size;
- ``dtypes``: what numbers it holds (floating, integer, exact ``Fraction``s);
- ``transfer``: moving arrays between namespaces, devices and the host, and reading there;
- ``conversion``: data and saved states as arrays (``as_array``, ``like``);
- ``random_numbers``: seeded draws from NumPy, and the counter-based ``counter_uniform``;
- ``fast_paths``: NumPy's own routes in the primitives.
"""

from minigrad.engine.backend.conversion import as_array, like
from minigrad.engine.backend.dtypes import (
    FLOAT_DTYPES,
    as_dtype,
    is_differentiable,
    is_exact,
    is_floating,
    is_integral,
    is_numeric,
    ones_like,
)
from minigrad.engine.backend.fast_paths import add_at, is_column_major, take_along_rows
from minigrad.engine.backend.namespaces import (
    device,
    get_namespace,
    is_array,
    namespace_name,
    resolve_namespace,
    size,
)
from minigrad.engine.backend.random_numbers import counter_uniform, normal, rng, uniform
from minigrad.engine.backend.transfer import (
    all_finite,
    finite_flag,
    int_range,
    move,
    on_host,
    to_numpy,
)

__all__ = [
    "FLOAT_DTYPES", "add_at", "all_finite", "as_array", "as_dtype", "counter_uniform", "device",
    "finite_flag", "get_namespace", "int_range", "is_array", "is_column_major",
    "is_differentiable", "is_exact", "is_floating", "is_integral", "is_numeric", "like",
    "move", "namespace_name", "normal", "on_host", "ones_like", "resolve_namespace", "rng",
    "size", "take_along_rows", "to_numpy", "uniform",
]
