"""Modules of a package loaded on first use (PEP 562).

``analysis``, ``studies`` and ``apps`` import their modules only when one is first used, so
``import minigrad`` never pays for them: each sets ``__getattr__, __dir__ =
submodules(__name__, __all__, globals())``.
"""

import importlib


def submodules(package, names, namespace):
    """The ``__getattr__`` and ``__dir__`` of ``package`` whose modules ``names`` load on first
    use (``namespace``: the package's globals)."""
    def __getattr__(name):
        if name not in names:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return importlib.import_module(f"{package}.{name}")  # also binds it in the package

    def __dir__():
        return sorted(set(namespace) | set(names))

    return __getattr__, __dir__
