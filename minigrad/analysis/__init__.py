"""The analysis layer: metrics (ULPs, cosine, accuracy), equivalence reports (full batch vs
accumulated), the derived rounding bounds and the ``check`` built on them, the exact
Fraction mode, the HIPS-autograd reference, the BatchNorm divergence measurements, and
memory: the measured peak of an update and the micro-batch planner."""

from minigrad.analysis import (
    batchnorm,
    bounds,
    check,
    equivalence,
    exact,
    memory,
    metrics,
    planner,
    reference,
)

__all__ = ["batchnorm", "bounds", "check", "equivalence", "exact", "memory", "metrics",
           "planner", "reference"]
