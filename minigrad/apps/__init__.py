"""The ``minigrad`` command line: ``cli`` (the entry point and ``plan``), ``demo``,
``check_command``, ``precision_command``, ``mpi_demo``, and ``args`` (their argument types).

Each module is imported on first use (PEP 562): the command line loads only what the
command it runs needs.
"""

import importlib

__all__ = ["args", "check_command", "cli", "demo", "mpi_demo", "precision_command"]


def __getattr__(name):
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return importlib.import_module(f"{__name__}.{name}")  # also binds it here


def __dir__():
    return sorted(set(globals()) | set(__all__))
