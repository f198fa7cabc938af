"""The analysis layer: metrics (ULPs, cosine, accuracy), equivalence reports (full batch vs
accumulated), the derived rounding bounds and the ``check`` built on them, the exact
Fraction mode, the HIPS-autograd reference, the BatchNorm divergence measurements, and
memory: the measured peak of an update and the micro-batch planner. The notebooks'
experiments live here too: ``pitfalls`` (the wrong loops, one mistake at a time),
``libraries`` (one training on several array libraries), ``norm_training`` (normalisation
layers trained both ways) and ``costs`` (what an update costs in time and memory)."""

from minigrad.analysis import (
    batchnorm,
    bounds,
    check,
    costs,
    equivalence,
    exact,
    libraries,
    memory,
    metrics,
    norm_training,
    pitfalls,
    planner,
    reference,
)

__all__ = ["batchnorm", "bounds", "check", "costs", "equivalence", "exact", "libraries",
           "memory", "metrics", "norm_training", "pitfalls", "planner", "reference"]
