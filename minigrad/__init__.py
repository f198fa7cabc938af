"""minigrad: an honest reference for gradient accumulation on any array-API library.

The package's folders are the layers of DESIGN.md, each importing only those below it:
``engine`` (backend, Tensor, graph), ``nn``, ``optim``, ``accumulate``, ``analysis`` (the
checks and plans a user imports), ``studies`` (the course) and ``apps`` (the command line).
``import minigrad`` loads the training core; ``analysis``, ``studies`` and ``apps`` (and the
names taken from them) load on first use, so training never imports HIPS autograd or the
data sets.
"""

import importlib
from typing import TYPE_CHECKING

from minigrad import accumulate, engine, nn, optim
from minigrad.accumulate import checkpoint
from minigrad.engine import (
    Parameter,
    Tensor,
    backend,
    is_grad_enabled,
    lift,
    maximum,
    no_grad,
    primitive,
    take_along_axis,
)

__version__ = "0.1.0"

if TYPE_CHECKING:  # never run: static readers (griffe for the API pages, type checkers) see these
    from minigrad import analysis, apps
    from minigrad.analysis import equivalence, exact, reference
    from minigrad.studies import data

# Loaded by __getattr__ (PEP 562) the first time they are used: name -> module.
_LAZY = {
    "analysis": "minigrad.analysis",
    "apps": "minigrad.apps",
    "data": "minigrad.studies.data",
    "equivalence": "minigrad.analysis.equivalence",
    "exact": "minigrad.analysis.exact",
    "reference": "minigrad.analysis.reference",
    "studies": "minigrad.studies",
}

__all__ = [
    "Parameter", "Tensor", "accumulate", "analysis", "apps", "backend", "checkpoint", "data",
    "engine", "equivalence", "exact", "is_grad_enabled", "lift", "maximum", "nn", "no_grad",
    "optim", "primitive", "reference", "studies", "take_along_axis",
]


def __getattr__(name):
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module = importlib.import_module(_LAZY[name])
    globals()[name] = module  # later look-ups find it without calling __getattr__
    return module


def __dir__():
    return sorted(set(globals()) | set(_LAZY))
