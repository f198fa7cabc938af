"""The applications: the ``minigrad`` command line, the data sets it trains on, and the
notebooks' figures (``plotting``; matplotlib is imported only when a figure is made).

Each module is imported on first use (PEP 562): ``minigrad.data`` loads the data sets
without the command line, and the command line loads no figures.
"""

import importlib

__all__ = ["cli", "data", "plotting"]


def __getattr__(name):
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return importlib.import_module(f"{__name__}.{name}")  # also binds it here


def __dir__():
    return sorted(set(globals()) | set(__all__))
