"""MkDocs hook: the Concepts pages and the MPI page join the navigation as they are written.

``mkdocs.yml`` names every page of the Concepts and Internals sections (``concepts/*.md`` and
``distributed.md``). Such a page that does not exist yet is left out of the navigation, with
a line in the build log naming it; any other missing page stays an error
of the strict build. tests/docs/test_site.py checks that the finished site has them all.
"""

from __future__ import annotations

import logging
from pathlib import Path

log = logging.getLogger(f"mkdocs.hooks.{__name__}")

LATER = ("concepts/", "distributed.md")


def _prune(items, docs: Path, missing: list[str]):
    kept = []
    for item in items:
        if isinstance(item, dict):
            (title, value), = item.items()
            if isinstance(value, list):
                value = _prune(value, docs, missing)
                if not value:
                    continue
            elif value.startswith(LATER) and not (docs / value).exists():
                missing.append(value)
                continue
            kept.append({title: value})
        elif isinstance(item, str) and item.startswith(LATER) and not (docs / item).exists():
            missing.append(item)
        else:
            kept.append(item)
    return kept


def on_config(config, **kwargs):
    missing: list[str] = []
    config["nav"] = _prune(config["nav"], Path(config["docs_dir"]), missing)
    if missing:
        log.info("not written yet, left out of the navigation: %s", ", ".join(missing))
    return config
