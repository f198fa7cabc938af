"""Mutation testing of the accumulation rule, the optimizers, the losses and the embedding.

`make mutants` runs this script. For each group below it makes a work folder
(build/mutants/<group>/) holding a copy of the package, the tests and a pyproject.toml whose
[tool.mutmut] section names the group's modules and the group's own tests, and runs mutmut there
on one worker (`--max-children 1`; mutmut 3 reads its configuration only from the working
folder's pyproject.toml, hence one folder per group). Then it reads every mutant's status and
diff and writes

- mutation/results.json: per group and module, every mutant (name, status, diff) and the time;
- docs/mutation.md: the page, per module generated / killed / survived / justified equivalent.

The justified equivalent mutants are listed in mutation/equivalent.toml, each with one line
saying why it changes no behaviour. A mutant is named there by its function and the lines its
diff removes and adds, not by mutmut's number, which shifts when a function changes;
tests/test_mutation.py fails when an entry names a mutant that no longer exists.

    python scripts/mutants.py                  # every group, then the page
    python scripts/mutants.py --group optimizers
    python scripts/mutants.py --page-only      # the page from mutation/results.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from mutation.listing import (  # noqa: E402  (the repository root is on the path now)
    GROUPS,
    Group,
    changed_lines,
    equivalent_entries,
    generate,
    match_equivalents,
    mutmut_section,
)
from mutation.page import KILLED, write_page  # noqa: E402

RESULTS = ROOT / "mutation" / "results.json"
PAGE = ROOT / "docs" / "mutation.md"
WORK = ROOT / "build" / "mutants"


def prepare(group: Group) -> Path:
    """The group's work folder, afresh: the package, the tests, the pyproject.toml."""
    work = WORK / group.slug
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".hypothesis")
    shutil.copytree(ROOT / "minigrad", work / "minigrad", ignore=ignore)
    shutil.copytree(ROOT / "tests", work / "tests", ignore=ignore)
    text = (ROOT / "pyproject.toml").read_text()
    (work / "pyproject.toml").write_text(text + mutmut_section(group))
    return work


READ_BACK = r"""
import json, sys
from mutmut.stats import status_by_exit_code
from mutmut.mutation.data import SourceFileMutationData
from mutmut.mutation.diff_apply import get_diff_for_mutant
from mutmut.utils.file_utils import walk_mutatable_files
out = {}
for path in walk_mutatable_files():
    m = SourceFileMutationData(path=path)
    m.load()
    for name, code in m.exit_code_by_key.items():
        out[name] = {"path": str(path), "status": status_by_exit_code[code],
                     "diff": get_diff_for_mutant(name, path=path)}
json.dump(out, sys.stdout)
"""


def run_group(group: Group, workers: int, earlier: dict | None = None) -> dict:
    """Run mutmut on ``group``; with ``earlier`` (its last record), only the mutants that
    were not killed run again, against today's tests: a killed mutant stays killed as long
    as the tests that killed it are there (tests are only ever added this way)."""
    work = prepare(group)
    # the examples of `make test` (derandomized), not shrunk (tests/conftest.py); and one
    # thread per library: mutmut forks each mutant's test run from a process that has loaded
    # NumPy and torch, and a fork after OpenBLAS's or OpenMP's threads have started can hang
    # in the child at its next parallel kernel. mutmut then reports a timeout, which counts
    # as killed: with threads, 127 mutants of the losses and the embedding "timed out", of
    # which 64 survived and one was an endless loop when run on one thread.
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", HYPOTHESIS_PROFILE="mutation",
               OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
    if earlier is None:
        names = [p for p in group.functions if p != "*"]
    else:
        now = {m["name"]: changed_lines(m["diff"])
               for path in group.modules for m in generate(path)}
        if now != {m["name"]: changed_lines(m["diff"]) for m in earlier["mutants"]}:
            sys.exit(f"--again: the modules of {group.slug} changed since its last run; "
                     "run it in full")
        names = [m["name"] for m in earlier["mutants"] if m["status"] not in KILLED]
        if not names:
            return earlier
    started = time.perf_counter()
    log = work / "mutmut.log"
    with open(log, "w") as out:
        done = subprocess.run([sys.executable, "-m", "mutmut", "run", "--max-children",
                               str(workers), *names], cwd=work, env=env, stdout=out,
                              stderr=subprocess.STDOUT)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        sys.exit(f"mutmut failed for {group.name} (exit {done.returncode}); see {log}")
    raw = subprocess.run([sys.executable, "-c", READ_BACK], cwd=work, env=env, check=True,
                         capture_output=True, text=True).stdout
    mutants = []
    rerun = set(names) if earlier is not None else None
    for name, info in sorted(json.loads(raw).items()):
        if not group.counts(name) or (rerun is not None and name not in rerun):
            continue
        mutants.append({"name": name, "module": info["path"],
                        "status": info["status"],
                        "diff": info["diff"]})
    if earlier is None:
        return {"name": group.name, "seconds": round(seconds, 1), "workers": workers,
                "mutants": mutants}
    again = {m["name"]: m for m in mutants}
    merged = [again.get(m["name"], m) for m in earlier["mutants"]]
    return {**earlier, "again_seconds": round(seconds, 1), "mutants": merged}


def machine() -> dict:
    cpu = platform.processor()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    from importlib.metadata import version

    return {"cpu": cpu, "cores": os.cpu_count(), "python": platform.python_version(),
            "mutmut": version("mutmut")}


def commit() -> str:
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                          capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "--", "minigrad", "tests"], cwd=ROOT,
                           capture_output=True, text=True).stdout.strip()
    return head + (" with uncommitted changes" if dirty else "")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--group", action="append", choices=[g.slug for g in GROUPS],
                        help="run only these groups (the others keep their recorded results)")
    parser.add_argument("--workers", type=int, default=1,
                        help="mutmut's --max-children (default 1: the recorded run time)")
    parser.add_argument("--again", action="store_true",
                        help="rerun only the last run's survivors, against today's tests")
    parser.add_argument("--page-only", action="store_true",
                        help="write the page from mutation/results.json without running")
    args = parser.parse_args(argv)

    record = json.loads(RESULTS.read_text()) if RESULTS.exists() else {"groups": {}}
    if not args.page_only:
        chosen = [g for g in GROUPS if not args.group or g.slug in args.group]
        for group in chosen:
            print(f"mutants: {group.name} ...", flush=True)
            earlier = record["groups"].get(group.slug) if args.again else None
            if args.again and earlier is None:
                sys.exit(f"--again: {group.slug} has no earlier record in {RESULTS}")
            result = {**run_group(group, args.workers, earlier), "commit": commit()}
            # read again: another group's run may have written its record meanwhile
            record = json.loads(RESULTS.read_text()) if RESULTS.exists() else {"groups": {}}
            record["groups"][group.slug] = result
            record["machine"] = machine()
            RESULTS.parent.mkdir(exist_ok=True)
            RESULTS.write_text(json.dumps(record, indent=1) + "\n")
            print(f"mutants: {group.name} done in {result['seconds']} s", flush=True)

    write_page(record, equivalent_entries(), PAGE)
    unmatched = [
        m for g in record["groups"].values() for m in g["mutants"]
        if m["status"] not in KILLED and not match_equivalents(m)
    ]
    print(f"mutants: page {PAGE.relative_to(ROOT)}; {len(unmatched)} survivors not on the list")
    for m in unmatched:
        print(f"  {m['name']} ({m['status']})")


if __name__ == "__main__":
    main()
