"""The analysis layer: metrics (ULPs, cosine, accuracy), equivalence reports (full batch vs
accumulated), the derived rounding bounds and the ``check`` built on them (``power``: could
the check have failed?), the exact Fraction mode, the HIPS-autograd reference, the BatchNorm
divergence measurements, and memory: the measured peak of an update and the micro-batch
planner (with ``recompute_choice``, which hidden layers to recompute). The notebooks'
experiments live here too: ``contrastive`` (GradCache's bound, retrieval, the towers'
gradient norms; ``contrastive_check`` is ``check`` for InfoNCE), ``pitfalls`` (the wrong
loops, one mistake at a time), ``libraries`` (one training on several array libraries),
``norm_training`` (normalisation layers trained both ways), ``costs`` (what an update
costs in time and memory), and ``claims`` with ``outcomes`` (the articles' claims as verdict
rows; the rule a verdict on training outcomes meets: seeds, lengths, mean and spread).

Each module is imported on first use (PEP 562), so ``import minigrad.analysis`` costs
nothing and HIPS autograd is imported only with ``reference``.
"""

import importlib

__all__ = ["batchnorm", "bounds", "check", "claims", "communication", "contrastive",
           "contrastive_check", "costs", "equivalence", "exact", "explorer_extras", "libraries",
           "memory", "memory_theory", "metrics", "norm_training", "outcomes", "pitfalls",
           "planner", "power", "recompute_choice", "reference", "trajectory"]


def __getattr__(name):
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return importlib.import_module(f"{__name__}.{name}")  # also binds it here


def __dir__():
    return sorted(set(globals()) | set(__all__))
