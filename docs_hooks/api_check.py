"""MkDocs hook: the build fails on a public name that the API reference does not document.

The public names are each package's ``__all__`` (``minigrad``, ``minigrad.engine``, ``.nn``,
``.optim``, ``.accumulate``, ``.analysis``, ``.studies``, ``.apps``) and, for a module listed
there, the public functions and classes it defines (its own ``__all__`` where it has one). After
the build every such name must

* have a docstring, as griffe reads it (what mkdocstrings renders), and
* be on an API page: some heading of ``api/`` names it, under any of its import paths
  (``minigrad.Tensor`` is documented as ``minigrad.engine.Tensor``).
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
import sys
from pathlib import Path
from types import ModuleType

import griffe
from mkdocs.exceptions import PluginError

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("minigrad", "minigrad.engine", "minigrad.nn", "minigrad.optim",
            "minigrad.accumulate", "minigrad.analysis", "minigrad.studies", "minigrad.apps")
ANCHOR = re.compile(r'id="(minigrad(?:\.\w+)+)"')


def module_members(module: ModuleType) -> list[str]:
    """A module's public names: its ``__all__``, else the functions and classes it defines."""
    if hasattr(module, "__all__"):
        return list(module.__all__)
    return [name for name, value in vars(module).items()
            if not name.startswith("_") and (inspect.isfunction(value) or inspect.isclass(value))
            and value.__module__ == module.__name__]


def public_names() -> dict[str, object]:
    """Dotted path -> object, for every public name (see the module docstring)."""
    names = {}
    for package in PACKAGES:
        module = importlib.import_module(package)
        for name in module.__all__:
            value = getattr(module, name)
            names[f"{package}.{name}"] = value
            if isinstance(value, ModuleType) and value.__name__.startswith("minigrad."):
                for member in module_members(value):
                    names[f"{package}.{name}.{member}"] = getattr(value, member)
                for part in _chapters(package, value):
                    names[f"{package}.{name}.{part.__name__.rsplit('.', 1)[1]}"] = part
                    for member in module_members(part):
                        names[f"{part.__name__}.{member}"] = getattr(part, member)
    return names


def _chapters(package: str, module: ModuleType) -> list[ModuleType]:
    """The modules of a chapter of ``minigrad.studies`` that is a package (none otherwise:
    the other packages name their public modules in ``__all__``)."""
    if package != "minigrad.studies" or not hasattr(module, "__path__"):
        return []
    return [importlib.import_module(f"{module.__name__}.{info.name}")
            for info in pkgutil.iter_modules(module.__path__)]


def undocumented(names) -> list[str]:
    """The paths among ``names`` whose docstring griffe finds empty or missing."""
    package = griffe.load("minigrad", search_paths=[str(ROOT)], resolve_aliases=True)
    missing = []
    for path in names:
        obj = package[path.removeprefix("minigrad.")]
        docstring = obj.docstring
        if docstring is None or not docstring.value.strip():
            missing.append(path)
    return missing


def _resolve(path: str):
    """The object at a dotted path, or None."""
    parts = path.split(".")
    for cut in range(len(parts), 0, -1):
        module = sys.modules.get(".".join(parts[:cut]))
        if module is None:
            continue
        value = module
        try:
            for attribute in parts[cut:]:
                value = getattr(value, attribute)
        except AttributeError:
            return None
        return value
    return None


def absent(names, site: Path) -> list[str]:
    """The paths among ``names`` whose object no heading of the built ``api/`` pages names."""
    anchors = set()
    for page in (site / "api").rglob("*.html"):
        anchors.update(ANCHOR.findall(page.read_text(encoding="utf-8")))
    shown = {id(value) for value in map(_resolve, anchors) if value is not None}
    return [path for path, value in names.items() if id(value) not in shown]


def on_post_build(config, **kwargs):
    names = public_names()
    problems = []
    missing = undocumented(names)
    if missing:
        problems.append("without a docstring: " + ", ".join(missing))
    hidden = absent(names, Path(config["site_dir"]))
    if hidden:
        problems.append("not on any API page (docs/api/*.md): " + ", ".join(hidden))
    if problems:
        raise PluginError("the API reference is incomplete; public names " +
                          "; ".join(problems))
