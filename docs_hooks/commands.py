"""MkDocs hook: real output of the ``minigrad`` command, run at build time.

Each entry of ``COMMANDS`` runs as a subprocess (``python -m minigrad ...`` in a scratch
folder) before the build; a page shows it where it writes ``<!-- minigrad: NAME -->``: the
command line, its output and its exit status, in one text block. The demo's figure is served
as ``assets/generated/demo.png`` (the figure of the home page).

An exit status other than the one listed fails the build: the pages' prose says which
set-ups are accumulation-safe, and the command is what decides it. Outputs are kept in
``build/docs/commands/`` under a key of the package's source and the command, so a build
after the tests reruns nothing while the code is unchanged.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import runpy
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parent.parent
_package_digest = runpy.run_path(str(ROOT / "scripts" / "notebooks.py"))["package_digest"]
CACHE = ROOT / "build" / "docs" / "commands"
FIGURE = "assets/generated/demo.png"

# name: (arguments of `minigrad`, the exit status it must have)
COMMANDS = {
    "demo": (["demo", "--quick", "--out", "build"], 0),
    "check-batchnorm": (["check", "--sizes", "64,32,10", "--norm", "batch",
                         "--micro-batch", "16", "--steps", "6"], 1),
    "check-exact": (["check", "--sizes", "64,32,10", "--norm", "batch",
                     "--strategy", "exact_batchnorm", "--micro-batch", "16", "--steps", "6"],
                    0),
    "check-textbook": (["check", "--sizes", "64,32,10", "--norm", "group",
                        "--micro-batch", "7", "--ignore-fraction", "0.3",
                        "--normalize", "micro_batch_mean", "--steps", "6"], 1),
    "check-group": (["check", "--sizes", "64,32,10", "--norm", "group", "--micro-batch", "7",
                     "--ignore-fraction", "0.3", "--optimizer", "adam", "--lr", "0.001",
                     "--steps", "6"], 0),
    "check-one-class": (["check", "--sizes", "64,32,1", "--micro-batch", "16", "--steps",
                         "3"], 3),
    "check-contrastive-naive": (["check", "--loss", "contrastive", "--strategy", "naive",
                                 "--steps", "4"], 1),
    "check-contrastive-gradcache": (["check", "--loss", "contrastive", "--strategy",
                                     "gradcache", "--steps", "4"], 0),
    "check-charlm-textbook": (["check", "--model", "charlm", "--global-batch", "16",
                               "--micro-batches", "4", "--normalize", "micro_batch_mean",
                               "--steps", "6"], 1),
    "check-charlm-items": (["check", "--model", "charlm", "--global-batch", "16",
                            "--micro-batches", "4", "--steps", "6"], 0),
    "plan": (["plan", "--sizes", "784,256,256,10", "--global-batch", "2048",
              "--memory", "24MB"], 0),
    "plan-recompute": (["plan", "--sizes", "16,1024,64,1024,64,10", "--global-batch", "512",
                        "--memory", "12MB", "--recompute", "auto"], 0),
}
MARKER = re.compile(r"<!-- minigrad: ([\w-]+) -->")

log = logging.getLogger(f"mkdocs.hooks.{__name__}")


def _source_key() -> str:
    """SHA-256 of the package's source: what the commands' outputs depend on (``package_digest`` of
    scripts/notebooks.py, the one definition)."""
    return _package_digest().hexdigest()


_source = {"key": ""}  # taken once per build, so that one build reads what it ran


def _folder(name: str) -> Path:
    args = json.dumps(COMMANDS[name][0]).encode()
    return CACHE / f"{name}-{hashlib.sha256(_source['key'].encode() + args).hexdigest()[:20]}"


def _run_all() -> None:
    """Start every command whose output is not cached, then collect them (they overlap)."""
    running = {}
    for name, (args, _) in COMMANDS.items():
        if (_folder(name) / "result.json").exists():
            continue
        scratch = Path(tempfile.mkdtemp(prefix=f"minigrad-{name}-"))
        process = subprocess.Popen([sys.executable, "-m", "minigrad", *args], cwd=scratch,
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        running[name] = (process, scratch)
    for name, (process, scratch) in running.items():
        output, _ = process.communicate(timeout=600)
        folder = _folder(name)
        folder.mkdir(parents=True, exist_ok=True)
        if (scratch / "build" / "demo.png").exists():
            shutil.copy(scratch / "build" / "demo.png", folder / "demo.png")
        shutil.rmtree(scratch, ignore_errors=True)
        (folder / "result.json").write_text(json.dumps({"output": output,
                                                        "status": process.returncode}))
        log.info("ran minigrad %s (exit status %d)", " ".join(COMMANDS[name][0]),
                 process.returncode)


def result(name: str) -> dict:
    """``{"output": str, "status": int}`` of command ``name``, checked against COMMANDS."""
    args, expected = COMMANDS[name]
    found = json.loads((_folder(name) / "result.json").read_text())
    if found["status"] != expected:
        raise PluginError(f"`minigrad {' '.join(args)}` exited with {found['status']}, the "
                          f"docs say {expected}; its output:\n{found['output']}")
    return found


def on_pre_build(config, **kwargs):
    CACHE.mkdir(parents=True, exist_ok=True)
    _source["key"] = _source_key()
    _run_all()
    for name in COMMANDS:
        result(name)
    current = {_folder(name) for name in COMMANDS}
    for old in CACHE.iterdir():  # outputs of older source
        if old not in current:
            shutil.rmtree(old, ignore_errors=True)


def on_files(files, config, **kwargs):
    files.append(File.generated(config, FIGURE, abs_src_path=str(_folder("demo") / "demo.png")))
    return files


def _block(match: re.Match) -> str:
    name = match.group(1)
    if name not in COMMANDS:
        raise PluginError(f"<!-- minigrad: {name} -->: no such command; have {list(COMMANDS)}")
    found = result(name)
    text = f"$ minigrad {' '.join(COMMANDS[name][0])}\n{found['output'].rstrip()}\n" \
           f"$ echo $?\n{found['status']}"
    return f"```text\n{text}\n```"


def on_page_markdown(markdown, page, config, files, **kwargs):
    return MARKER.sub(_block, markdown)
