"""Shared fixtures: the ``xp`` namespaces every engine test runs on, CuPy, hypothesis profiles.

``HYPOTHESIS_PROFILE=long`` (``make test-long``) runs every property with 500 examples;
the default ``fast`` profile runs 25, derandomized so that CI is reproducible.
"""

import os
import sys

import pytest
from hypothesis import settings

from minigrad import backend

# Test helpers (gradcheck.py) live beside this file; tests/ is not a package.
sys.path.insert(0, os.path.dirname(__file__))

settings.register_profile("fast", max_examples=25, deadline=None, derandomize=True)
settings.register_profile("long", max_examples=500, deadline=None)
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


# `make test` runs two workers (pytest-xdist, --dist loadgroup): the site's build, its browser
# tests and the notebooks share build/ (an executed notebook is reused by the next reader), so
# they stay together on one worker while the other runs everything else.
SITE = "site"


def pytest_collection_modifyitems(config, items):
    if not config.pluginmanager.hasplugin("xdist"):
        return
    for item in items:
        if item.path.parent.name == "docs" or item.path.name == "test_notebooks.py":
            item.add_marker(pytest.mark.xdist_group(SITE))
