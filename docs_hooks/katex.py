"""MkDocs hook: KaTeX served by the site itself, never from a CDN.

The first build downloads KaTeX's npm tarball (one pinned version, checked against the
registry's SHA-512 integrity), unpacks its ``dist/`` folder and its licence into
``build/katex/<version>/`` (git-ignored) and reuses it afterwards. Each build then adds those
files to the site under ``assets/katex/``; ``mkdocs.yml`` loads ``katex.min.css``,
``katex.min.js`` and ``contrib/auto-render.min.js`` from there and
``docs/javascripts/katex-init.js`` typesets what ``pymdownx.arithmatex`` marked.
"""

from __future__ import annotations

import base64
import hashlib
import io
import logging
import shutil
import tarfile
import urllib.request
from pathlib import Path

from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File

VERSION = "0.19.1"
URL = f"https://registry.npmjs.org/katex/-/katex-{VERSION}.tgz"
# `dist.integrity` of https://registry.npmjs.org/katex/0.19.1
INTEGRITY = ("sha512-jG8uKntjSEcm2EpQOh0XturpPuuC9r3Sq5HLHdsFdWZT27E672SF19QEi+of0/YeOy15lDgRh"
             "Kvr5614uRrEfA==")
ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / "build" / "katex" / VERSION
# what the site needs from the tarball: the minified script, stylesheet, fonts, auto-render
WANTED = ("package/LICENSE", "package/dist/katex.min.js", "package/dist/katex.min.css",
          "package/dist/contrib/auto-render.min.js", "package/dist/fonts/")

log = logging.getLogger(f"mkdocs.hooks.{__name__}")


def _download() -> bytes:
    try:
        with urllib.request.urlopen(URL, timeout=60) as response:
            data = response.read()
    except OSError as err:
        raise PluginError(f"KaTeX {VERSION} is not in {CACHE} and {URL} could not be "
                          f"fetched ({err}); the site serves math only from itself") from err
    algorithm, expected = INTEGRITY.split("-", 1)
    actual = base64.b64encode(hashlib.new(algorithm, data).digest()).decode()
    if actual != expected:
        raise PluginError(f"{URL}: {algorithm} {actual} is not the pinned {expected}")
    return data


def _unpack(data: bytes) -> None:
    partial = CACHE.with_name(CACHE.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)  # left by an interrupted build
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        for member in tar.getmembers():
            if not member.isfile() or not member.name.startswith(WANTED):
                continue
            name = member.name.removeprefix("package/").removeprefix("dist/")
            target = partial / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(tar.extractfile(member).read())
    partial.rename(CACHE)  # a complete folder or none: an interrupted fetch leaves no half


def on_pre_build(config, **kwargs):
    if not (CACHE / "katex.min.js").exists():
        log.info("fetching KaTeX %s from the npm registry", VERSION)
        _unpack(_download())


def on_files(files, config, **kwargs):
    for path in sorted(CACHE.rglob("*")):
        if path.is_file():
            uri = f"assets/katex/{path.relative_to(CACHE).as_posix()}"
            files.append(File.generated(config, uri, abs_src_path=str(path)))
    return files
