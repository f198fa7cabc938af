"""The course: one chapter per topic, each the experiment behind a notebook, the numbers of its
site explorer and its figures, side by side.

A chapter with more than one part is a package (``batchnorm``: ``divergence``, ``training``,
``explorer``, ``figures``); a chapter of one part is a module (``communication``,
``floating_point``, ``graphs``). Beside the chapters: ``data`` (the data sets the course
trains on), ``text`` (the names corpus and its token windows), ``figures`` (the style of
every figure, and the training figures every chapter draws), ``interactive`` (a figure as
data, redrawn by the site) and ``explorers`` (the shape of an explorer's data, and the
registry of every explorer).

A study builds on ``minigrad.analysis`` (the checks, bounds and memory a user imports) and
the training core; nothing below imports it. Each chapter is imported on first use (PEP 562),
so ``import minigrad.studies`` costs nothing and matplotlib is imported only when a figure is
made.
"""

from minigrad.lazy import submodules

__all__ = ["batchnorm", "claims", "communication", "contrastive", "data", "explorers",
           "figures", "floating_point", "graphs", "interactive", "libraries", "memory",
           "normalisation", "precision", "step_accounting", "text", "tokens"]

__getattr__, __dir__ = submodules(__name__, __all__, globals())
