"""The ``minigrad`` command line: ``cli`` (the entry point and ``plan``), ``demo``,
``check_command``, ``precision_command``, ``mpi_demo``, and ``args`` (their argument types).

Each module is imported on first use (PEP 562): the command line loads only what the
command it runs needs.
"""

from minigrad.lazy import submodules

__all__ = ["args", "check_command", "cli", "demo", "mpi_demo", "precision_command"]

__getattr__, __dir__ = submodules(__name__, __all__, globals())
