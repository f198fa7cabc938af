"""MkDocs hook: the interactive explorers of the Concepts pages, computed at build time.

minigrad cannot run in a browser (NumPy has no WebAssembly build), so the explorers show
what minigrad computed while the site was built. A page asks for one by writing
``<!-- explorer: NAME -->``, NAME a key of ``minigrad.studies.explorers.EXPLORERS``:

* before the build, a subprocess (this file run as a script) writes each explorer's data,
  the function's result, to ``build/docs/explorers/<key>/NAME.json``; the key is the SHA-256
  of the package's source, so a later build reuses the data until the code changes. It runs
  beside the notebooks (the next hook) and is collected when the files are listed;
* the site serves the data as ``assets/explorers/NAME.json`` and Plotly's own plotly.js,
  taken from the ``plotly`` package of the docs extra (its wheel bundles it), as
  ``assets/plotly/plotly.min.js`` beside its licence: nothing is fetched from a CDN, and
  nothing vendored is committed;
* the marker becomes a ``<div class="minigrad-explorer">`` that names both files; the site's
  ``javascripts/explorers.js`` builds the controls, the figure and the tables in it.
"""

from __future__ import annotations

import html
import importlib.metadata
import importlib.util
import json
import logging
import os
import re
import runpy
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File
from mkdocs.utils import get_relative_url

from minigrad.studies.explorers import EXPLORERS, load

ROOT = Path(__file__).resolve().parent.parent
_package_digest = runpy.run_path(str(ROOT / "scripts" / "notebooks.py"))["package_digest"]
CACHE = ROOT / "build" / "docs" / "explorers"
MARKER = re.compile(r"<!-- explorer: ([\w-]+) -->")
PLOTLY = "assets/plotly"

log = logging.getLogger(f"mkdocs.hooks.{__name__}")
_run: dict = {}  # this build's data folder and, while it computes, the subprocess


def _source_key() -> str:
    """SHA-256 of the package's source: what the explorers' data depend on (``package_digest`` of
    scripts/notebooks.py, the one definition)."""
    return _package_digest().hexdigest()


def _plotly_files() -> dict[str, Path]:
    """Site path -> file: plotly.js and its licence, from the installed ``plotly`` package."""
    spec = importlib.util.find_spec("plotly")
    if spec is None or spec.origin is None:
        raise PluginError("the explorers draw with plotly.js from the `plotly` package: "
                          "install the docs extra (pip install -e '.[docs]')")
    script = Path(spec.origin).parent / "package_data" / "plotly.min.js"
    licences = [f for f in importlib.metadata.distribution("plotly").files or []
                if f.name.upper().startswith("LICENSE")]
    if not script.exists() or not licences:
        raise PluginError(f"the `plotly` package has no {script} or no licence file")
    return {f"{PLOTLY}/plotly.min.js": script,
            f"{PLOTLY}/LICENSE.txt": Path(licences[0].locate())}


def on_pre_build(config, **kwargs):
    _plotly_files()
    folder = CACHE / _source_key()[:20]
    _run.clear()
    _run["folder"] = folder
    if all((folder / f"{name}.json").exists() for name in EXPLORERS):
        return
    CACHE.mkdir(parents=True, exist_ok=True)
    # A folder of this build's own: another build may be computing the same key beside it.
    partial = Path(tempfile.mkdtemp(prefix=f"{folder.name}.partial-", dir=CACHE))
    # One BLAS thread: the matrices are small, and the notebooks run beside it.
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    _run["process"] = subprocess.Popen([sys.executable, __file__, str(partial)], cwd=ROOT,
                                       env=env, stdout=subprocess.PIPE,
                                       stderr=subprocess.STDOUT, text=True)
    _run["partial"] = partial


def _collect() -> Path:
    """The folder of this build's data, waiting for the subprocess if it is still running."""
    process = _run.pop("process", None)
    folder = _run["folder"]
    if process is not None:
        output, _ = process.communicate(timeout=600)
        if process.returncode != 0:
            raise PluginError(f"computing the explorers' data failed:\n{output[-6000:]}")
        partial = _run.pop("partial")
        try:
            partial.rename(folder)  # whole or not at all
        except OSError:  # a build beside this one was first: its data is the same
            shutil.rmtree(partial, ignore_errors=True)
        log.info("explorers' data computed beside the notebooks: %s", output.strip())
    for old in CACHE.iterdir():  # data (or an interrupted computation) of older source
        if not old.name.startswith(folder.name):
            shutil.rmtree(old, ignore_errors=True)
    return folder


def on_files(files, config, **kwargs):
    folder = _collect()
    for name in EXPLORERS:
        files.append(File.generated(config, f"assets/explorers/{name}.json",
                                    abs_src_path=str(folder / f"{name}.json")))
    for uri, path in _plotly_files().items():
        files.append(File.generated(config, uri, abs_src_path=str(path)))
    return files


def on_page_content(content, page, config, files, **kwargs):
    def explorer(match: re.Match) -> str:
        name = match.group(1)
        if name not in EXPLORERS:
            raise PluginError(f"{page.file.src_uri}: <!-- explorer: {name} -->: no such "
                              f"explorer; have {list(EXPLORERS)}")
        data = get_relative_url(f"assets/explorers/{name}.json", page.file.url)
        script = get_relative_url(f"{PLOTLY}/plotly.min.js", page.file.url)
        return (f'<div class="minigrad-explorer" id="explorer-{name}" '
                f'data-explorer="{name}" data-src="{html.escape(data)}" '
                f'data-plotly="{html.escape(script)}"><p class="explorer-note">This explorer '
                f'needs JavaScript: its controls, figure and tables are drawn in the browser '
                f'from numbers minigrad computed when the site was built.</p></div>')

    return MARKER.sub(explorer, content)


def _write(out: Path) -> None:
    """Each explorer's data as ``out/NAME.json`` (run in a subprocess by ``on_pre_build``)."""
    took = []
    for name in EXPLORERS:
        start = time.perf_counter()
        data = load(name)()
        (out / f"{name}.json").write_text(json.dumps(data, allow_nan=False,
                                                     separators=(",", ":")))
        took.append((name, time.perf_counter() - start))
    print(", ".join(f"{name} {seconds:.1f} s" for name, seconds in took)
          + f" ({sum(seconds for _, seconds in took):.1f} s in all)")


if __name__ == "__main__":
    _write(Path(sys.argv[1]))
