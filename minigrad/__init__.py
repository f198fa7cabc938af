"""minigrad: an honest reference for gradient accumulation on any array-API library.

The package's folders are the layers of DESIGN.md, each importing only those below it:
``engine`` (backend, Tensor, graph), ``nn``, ``optim``, ``accumulate``, ``analysis``, ``apps``.
"""

from minigrad import accumulate, analysis, apps, distributed, engine, nn, optim
from minigrad.accumulate import checkpoint
from minigrad.analysis import equivalence, exact, reference
from minigrad.apps import data
from minigrad.engine import (
    Parameter,
    Tensor,
    backend,
    is_grad_enabled,
    maximum,
    no_grad,
    primitive,
    take_along_axis,
)

__version__ = "0.1.0"

__all__ = [
    "Parameter", "Tensor", "accumulate", "analysis", "apps", "backend", "checkpoint", "data",
    "distributed", "engine", "equivalence", "exact", "is_grad_enabled", "maximum", "nn",
    "no_grad", "optim", "primitive", "reference", "take_along_axis",
]
