"""The numbers behind the site's interactive explorers, computed ahead of time.

NumPy has no WebAssembly build, so minigrad cannot run in a reader's browser. The site's
explorers show instead what minigrad measured when the site was built: each ``*_explorer``
function runs one measurement for every combination of its controls' values and returns a
plain, JSON-ready dict,

    {"controls": [{"name", "label", "values", "labels"}, ...],
     "cases": {"i|j|...": {...}}}    i, j, ...: positions in each control's ``values``

so a page looks a case up instead of computing it. Each ``*_setup`` builds the model, loss
and data its explorer measures. The memory planner is the exception: its peak is a formula
(``memory.theoretical_peak``), so ``memory_explorer`` exports the formula's constants and
the page evaluates it for any layer sizes (``tests/studies/test_explorers.py`` holds the
export, and ``tests/docs/test_explorers.py`` the page, to ``theoretical_peak``).

Each chapter of ``minigrad.studies`` with an explorer holds its ``*_explorer`` in its own
``explorer`` module; ``EXPLORERS`` names them all, and ``load(name)`` imports one.

>>> sorted(EXPLORERS)[:3]
['batchnorm', 'contrastive', 'floating-point']
>>> load("split").__name__
'split_explorer'
"""

import importlib

from minigrad.engine import validate

EXPLORERS = {"split": "normalisation.explorer:split_explorer",
             "batchnorm": "batchnorm.explorer:batchnorm_explorer",
             "step-accounting": "step_accounting.explorer:step_accounting_explorer",
             "floating-point": "floating_point:floating_point_explorer",
             "memory": "memory.explorer:memory_explorer",
             "contrastive": "contrastive.explorer:contrastive_explorer",
             "precision": "precision.explorer:precision_explorer",
             "tokens": "tokens.explorer:tokens_explorer"}
"""Name -> where the function that computes that explorer's data lives (``chapter.module:
function`` under ``minigrad.studies``); the docs hook computes each through ``load``."""


def load(name):
    """The function that computes explorer ``name``'s data (its chapter imported now)."""
    name = validate.choice("name", name, tuple(EXPLORERS))
    module, function = EXPLORERS[name].split(":")
    return getattr(importlib.import_module(f"minigrad.studies.{module}"), function)

def control(name, label, values, labels=None):
    """One control of an explorer: its ``values`` and how the page labels them."""
    return {"name": name, "label": label, "values": list(values),
            "labels": [str(v) for v in values] if labels is None else list(labels)}


def key(*indices):
    """The key of the case at these positions in each control's values: ``"i|j|..."``."""
    return "|".join(str(i) for i in indices)


def positive_ints(name, values):
    """``values`` checked as positive ints (errors name ``name``)."""
    return [validate.positive_int(name, v) for v in values]
