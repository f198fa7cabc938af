"""Shared fixtures: the ``xp`` namespaces every engine test runs on, CuPy, hypothesis profiles.

``HYPOTHESIS_PROFILE=long`` (``make test-long``) runs every property with 500 examples;
the default ``fast`` profile runs 25, derandomized so that CI is reproducible.
"""

import os
import sys
from pathlib import Path

import pytest
import site_build
from hypothesis import Phase, settings

from minigrad import backend

# Test helpers (gradcheck.py) live beside this file; tests/ is not a package.
sys.path.insert(0, os.path.dirname(__file__))

settings.register_profile("fast", max_examples=25, deadline=None, derandomize=True)
settings.register_profile("long", max_examples=500, deadline=None)
# `make mutants` (scripts/mutants.py): the fast profile's examples, without shrinking. A
# mutant that fails a property is killed whatever the smallest failing example is, and
# shrinking one took up to a minute per mutant.
settings.register_profile("mutation", parent=settings.get_profile("fast"),
                          phases=[Phase.explicit, Phase.reuse, Phase.generate])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "fast"))

# numpy; array_api_strict (nothing NumPy-only is relied upon); torch: PyTorch CPU tensors
# through array-api-compat, the stand-in for CuPy that runs without a GPU (no
# __array_namespace__ attribute, refuses some mixes with NumPy). On a GPU machine add cupy:
# MINIGRAD_TEST_NAMESPACES=numpy,array_api_strict,torch,cupy make test
DEFAULT_NAMESPACES = "numpy,array_api_strict,torch"
NAMESPACES = tuple(
    name.strip()
    for name in os.environ.get("MINIGRAD_TEST_NAMESPACES", DEFAULT_NAMESPACES).split(",")
    if name.strip()
)


def _load(name):
    """The namespace ``name``; skips (with the reason) where CuPy has no GPU to run on."""
    if name == "cupy":
        cupy = pytest.importorskip("cupy", reason="CuPy is not installed")
        if not cupy.is_available():
            pytest.skip("CuPy is installed but no CUDA GPU is available")
    return backend.resolve_namespace(name)


@pytest.fixture(params=NAMESPACES, ids=NAMESPACES, scope="session")
def xp(request):
    """The array-API namespace under test (see NAMESPACES)."""
    return _load(request.param)


@pytest.fixture(scope="session")
def cupy_xp():
    """The CuPy namespace on a machine with CuPy and a CUDA GPU; skips with the reason elsewhere."""
    return _load("cupy")



# The site's build (mkdocs, which executes every notebook) takes minutes on one core. It starts
# in the background as soon as the tests are collected, when any test of tests/docs/ is among
# them, so it runs on the second core while the other tests run; the ``site`` fixture of
# tests/docs/conftest.py waits for it.
SITE_TESTS = Path(__file__).resolve().parent / "docs"


def pytest_collection_finish(session):
    if any(SITE_TESTS in item.path.parents for item in session.items):
        session.config.site_build = site_build.start()


def pytest_sessionfinish(session):
    build = getattr(session.config, "site_build", None)
    if build is not None:
        build.stop()
