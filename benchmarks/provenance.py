"""Which code a saved record measured: the commit a run starts from, and whether a record
predates issue 34's update (validate, then commit in place), so that a page renders an
earlier update's numbers as such instead of judging them against targets set for the new one.
"""

import datetime
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Issue 34: from this commit on, the optimizer validates, then writes parameters and state in
# place (minigrad/optim/in_place.py). A record dated earlier measured the out-of-place update.
IN_PLACE_UPDATE = {"commit": "c3f61fd", "date": "2026-11-28T07:26:25+00:00"}
OUTPUTS = ("benchmarks/results", "benchmarks/memory", "benchmarks/torch-check",
           "docs/benchmarks", "docs/assets/benchmarks")


def commit():
    """``{"commit": short hash, "uncommitted_changes": bool}`` of the checkout the benchmark
    runs in; ``{}`` where git or the repository is missing (a copied tree)."""
    def git(*args):
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True,
                              timeout=30)

    try:
        head = git("rev-parse", "--short", "HEAD")
        status = git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.TimeoutExpired):
        return {}
    if head.returncode != 0 or status.returncode != 0:
        return {}
    # The benchmarks' own records and pages (written by an earlier run of `make bench`) are
    # not code: a change to them alone does not make the measured code differ from HEAD.
    changed = [line[3:] for line in status.stdout.splitlines() if line.strip()]
    code = [path for path in changed if not path.startswith(OUTPUTS)]
    return {"commit": head.stdout.strip(), "uncommitted_changes": bool(code)}


def code_line(env):
    """The commit of a record, in words; "" where it did not record one."""
    if not env.get("commit"):
        return ""
    dirty = " with uncommitted changes" if env.get("uncommitted_changes") else ""
    return f"commit {env['commit']}{dirty}"


def earlier_update(env):
    """True when a record's ``environment`` dates it before the in-place update."""
    measured = datetime.datetime.fromisoformat(env["date"])
    return measured < datetime.datetime.fromisoformat(IN_PLACE_UPDATE["date"])


def earlier_update_note(env, command):
    """The paragraph a page puts above an earlier update's numbers (``command``: the make
    target that measures the new update)."""
    code = code_line(env)
    at = f" ({code})" if code else ""
    return (f"**Measured with the earlier update.** These numbers are from "
            f"{env['date'][:10]}{at}, before commit {IN_PLACE_UPDATE['commit']} "
            f"({IN_PLACE_UPDATE['date'][:10]}, issue 34) made the optimizer update validate, "
            "then commit in place: they are the earlier, out-of-place update's, shown beside "
            "today's targets (issue 34's among them) but not judged against them. For the new "
            f"update those targets are unmeasured here until `{command}` runs.")
