"""What a user imports to check and plan accumulation: ``metrics`` (ULPs, cosine, accuracy),
``equivalence`` reports (full batch against accumulated), ``exact`` (Fraction) mode,
``reference`` (the same models in HIPS autograd), the derived rounding ``bounds`` and the
``trajectory`` bound replayed beside two runs (``update_bound``: through one optimizer
update), the ``check`` built on them (``check_setup``: what it runs; ``causes``: why not,
in words; ``charlm``: its character-level language model and token data) and
``contrastive_check`` for losses with in-batch negatives (``contrastive_bound``: GradCache's
bound; ``power``: could a check have failed?), and memory: the measured peak of an update
(``memory``), its theory (``memory_theory``) and the micro-batch ``planner`` (with
``recompute_choice``: which hidden layers to recompute). The course built on them is
``minigrad.studies``.

Each module is imported on first use (PEP 562), so ``import minigrad.analysis`` costs
nothing and HIPS autograd is imported only with ``reference``.
"""

from minigrad.lazy import submodules

__all__ = ["bounds", "causes", "charlm", "check", "check_setup", "contrastive_bound",
           "contrastive_check", "equivalence", "exact", "memory", "memory_theory", "metrics",
           "planner", "power", "recompute_choice", "reference", "trajectory", "update_bound"]

__getattr__, __dir__ = submodules(__name__, __all__, globals())
