"""The package's face: ``import minigrad`` loads the training core (engine, nn, optim,
accumulate); ``analysis``, ``studies`` and ``apps``, and the names taken from them, load on
first use; every module of a lazy package is one of its public names.

What a fresh interpreter has imported is checked in a subprocess: this test process has
imported most of minigrad (and autograd, matplotlib) already."""

import importlib
import json
import pathlib
import subprocess
import sys

import pytest

import minigrad

ROOT = pathlib.Path(__file__).resolve().parents[1]
HEAVY = ("autograd", "matplotlib", "minigrad.analysis", "minigrad.studies", "minigrad.apps")


def _loaded_after(code):
    """The modules among HEAVY and the training core that a fresh ``code`` leaves loaded."""
    watch = HEAVY + ("minigrad.engine", "minigrad.nn", "minigrad.optim", "minigrad.accumulate")
    report = f"import json, sys\nprint(json.dumps([m for m in {watch!r} if m in sys.modules]))"
    script = f"{code}\n{report}"
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    return set(json.loads(out.stdout.splitlines()[-1]))


def test_import_minigrad_loads_the_training_core_only():
    assert _loaded_after("import minigrad") == {
        "minigrad.engine", "minigrad.nn", "minigrad.optim", "minigrad.accumulate"}


def test_analysis_loads_autograd_only_with_reference():
    assert "autograd" not in _loaded_after("import minigrad.analysis")
    assert "autograd" not in _loaded_after("import minigrad; minigrad.exact, minigrad.equivalence")
    assert "autograd" in _loaded_after("import minigrad; minigrad.reference.forward_fn")


def test_the_command_line_loads_no_figures_and_no_autograd():
    code = ("import sys; sys.argv = ['minigrad', '--help']\n"
            "from minigrad.apps.cli import main\n"
            "try:\n    main()\nexcept SystemExit as stop:\n    assert stop.code == 0")
    loaded = _loaded_after(code)
    assert "minigrad.apps" in loaded
    assert not {"autograd", "matplotlib"} & loaded


@pytest.mark.parametrize("name, module", [
    ("analysis", "minigrad.analysis"), ("apps", "minigrad.apps"), ("studies", "minigrad.studies"),
    ("equivalence", "minigrad.analysis.equivalence"), ("exact", "minigrad.analysis.exact"),
    ("reference", "minigrad.analysis.reference"), ("data", "minigrad.studies.data")])
def test_a_lazy_name_is_its_module(name, module):
    assert getattr(minigrad, name) is sys.modules[module]
    assert name in dir(minigrad) and name in minigrad.__all__


def test_every_public_name_resolves():
    for package in (minigrad, minigrad.analysis, minigrad.studies, minigrad.apps):
        for name in package.__all__:
            assert getattr(package, name) is not None, f"{package.__name__}.{name}"
        assert set(package.__all__) <= set(dir(package))
    assert "distributed" not in minigrad.__all__  # reached as minigrad.accumulate.distributed


@pytest.mark.parametrize("package", ["minigrad.analysis", "minigrad.studies", "minigrad.apps"])
def test_every_module_of_a_lazy_package_is_a_public_name(package):
    """A module that ``__all__`` leaves out would raise AttributeError until something
    imported it (``minigrad.analysis.precision`` once did)."""
    folder = ROOT / package.replace(".", "/")
    modules = {p.stem for p in folder.glob("*.py") if p.stem != "__init__"}
    modules |= {p.parent.name for p in folder.glob("*/__init__.py")}
    assert modules == set(importlib.import_module(package).__all__)


def test_a_chapter_is_loaded_on_first_use_and_its_figures_only_with_a_figure():
    assert "minigrad.studies" not in _loaded_after("import minigrad.analysis")
    code = ("import minigrad, sys\n"
            "assert 'minigrad.studies.batchnorm' not in sys.modules\n"
            "minigrad.studies.batchnorm\n"
            "from minigrad.studies.batchnorm import divergence, figures\n"
            "assert 'minigrad.studies.batchnorm' in sys.modules")
    assert "matplotlib" not in _loaded_after(code)


@pytest.mark.parametrize("package", ["minigrad", "minigrad.analysis", "minigrad.studies",
                                     "minigrad.apps"])
def test_an_unknown_name_is_an_attribute_error(package):
    module = importlib.import_module(package)
    with pytest.raises(AttributeError, match=rf"^module '{package}' has no attribute 'x'$"):
        module.x  # noqa: B018
