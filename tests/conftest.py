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

NAMESPACES = ("numpy", "array_api_strict")


@pytest.fixture(params=NAMESPACES, ids=NAMESPACES, scope="session")
def xp(request):
    """The array-API namespace under test: NumPy (via array-api-compat), then the strict
    reference namespace, so nothing NumPy-only is relied upon."""
    return backend.get_namespace(request.param)


@pytest.fixture(scope="session")
def cupy_xp():
    """The CuPy namespace on a machine with CuPy and a CUDA GPU; skips with the reason elsewhere."""
    cupy = pytest.importorskip("cupy", reason="CuPy not installed")
    if not cupy.is_available():
        pytest.skip("CuPy is installed but no CUDA GPU is available")
    return backend.get_namespace("cupy")
