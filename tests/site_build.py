"""The site's ``mkdocs build --strict``, started in the background and waited for.

``tests/conftest.py`` starts it once the tests are collected (when any test of tests/docs/ is
among them), so that it runs beside the other tests; the ``site`` fixture of
tests/docs/conftest.py waits for it. Without a started build (a run of one test file outside
tests/docs, say) ``wait`` builds in the foreground.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


class Build:
    """One ``mkdocs build --strict`` into a fresh folder, its output kept in a file."""

    def __init__(self):
        self.folder = Path(tempfile.mkdtemp(prefix="minigrad-site-"))
        self.site = self.folder / "site"
        self.log = open(self.folder / "build.log", "w+")  # noqa: SIM115 (closed in stop)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(self.site)],
            cwd=ROOT, stdout=self.log, stderr=subprocess.STDOUT,
            env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})

    def wait(self) -> Path:
        """The built site's folder; AssertionError with the build's log when it failed."""
        code = self.process.wait()
        self.log.seek(0)
        assert code == 0, f"mkdocs build --strict failed:\n{self.log.read()[-6000:]}"
        return self.site

    def stop(self):
        """End the build if it still runs, and remove its folder."""
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait()
        self.log.close()
        shutil.rmtree(self.folder, ignore_errors=True)


def start() -> Build:
    return Build()
