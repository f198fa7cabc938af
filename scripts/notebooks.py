"""Execute the teaching notebooks headless: ``python scripts/notebooks.py [NAME ...]``.

The sources in ``notebooks/`` are stored without outputs (reviewable diffs); this script runs
each one top to bottom with nbclient and writes the executed copy to ``build/notebooks/``. A
failing cell raises, so ``make test`` (tests/test_notebooks.py) and the site build fail with it.

An executed copy records a key: the SHA-256 of the notebook and of every file of the
``minigrad`` package. A later call with the same key reuses the copy instead of running the
notebook again (the site build after the tests, for instance); any change to the notebook or
to the package runs it again, so every number a reader sees was computed by the code beside it.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "notebooks"
BUILD = ROOT / "build" / "notebooks"
# A hang guard per cell, not a speed target: each notebook is meant to run in under 45 s.
CELL_TIMEOUT = 300


def notebooks() -> list[Path]:
    """The numbered notebooks, in order: ``notebooks/NN_title.ipynb``."""
    return sorted(SOURCE.glob("[0-9][0-9]_*.ipynb"))


def package_digest(digest=None):
    """``digest`` (a new SHA-256 when None) fed every source file of the package, path and
    bytes: what computed outputs depend on. The notebooks' keys, and the site hooks' caches
    of the explorers' data and the commands' outputs, all take it from here."""
    digest = hashlib.sha256() if digest is None else digest
    for source in sorted((ROOT / "minigrad").rglob("*.py")):
        digest.update(str(source.relative_to(ROOT)).encode())
        digest.update(source.read_bytes())
    return digest


def key(path: Path) -> str:
    """SHA-256 of the notebook and of the package's source: what its outputs depend on."""
    return package_digest(hashlib.sha256(path.read_bytes())).hexdigest()


def execute(path: Path, out_dir: Path = BUILD, reuse: bool = True) -> tuple[Path, float]:
    """Run ``path`` top to bottom; return the executed copy and the seconds it took.

    Raises nbclient's ``CellExecutionError`` (naming the cell) when a cell fails.
    """
    import nbformat
    from nbclient import NotebookClient

    out = out_dir / path.name
    wanted = key(path)
    if reuse and out.exists():
        done = nbformat.read(out, as_version=4)
        meta = done.metadata.get("minigrad", {})
        if meta.get("key") == wanted:
            return out, float(meta.get("seconds", 0.0))
    nb = nbformat.read(path, as_version=4)
    # The kernel inherits this: the notebooks' matrix products are small, and on a loaded
    # 2-core machine OpenBLAS's spinning threads made them several times slower.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    client = NotebookClient(
        nb, timeout=CELL_TIMEOUT, kernel_name="python3", allow_errors=False,
        resources={"metadata": {"path": str(path.parent)}},
    )
    start = time.perf_counter()
    client.execute()
    seconds = time.perf_counter() - start
    nb.metadata["minigrad"] = {"key": wanted, "seconds": round(seconds, 2)}
    out_dir.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(f".{out.name}.{os.getpid()}")  # whole or absent to another reader
    nbformat.write(nb, partial)
    os.replace(partial, out)
    return out, seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="notebook file names or prefixes (default: all)")
    parser.add_argument("--force", action="store_true", help="run even where a copy is current")
    args = parser.parse_args(argv)
    chosen = [p for p in notebooks()
              if not args.names or any(p.name.startswith(n) for n in args.names)]
    if not chosen:
        parser.error(f"no notebook matches {args.names}; have {[p.name for p in notebooks()]}")
    for path in chosen:
        out, seconds = execute(path, reuse=not args.force)
        print(f"{path.name}: {seconds:.1f} s -> {out.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
