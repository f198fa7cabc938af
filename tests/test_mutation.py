"""The record of mutation testing (docs/mutation.md) is of the code as it is.

``make mutants`` (scripts/mutants.py) takes about an hour, too long for ``make test``; these
tests check in seconds what it recorded, without running a mutant:

- the mutants recorded in mutation/results.json are exactly the ones mutmut makes of the
  current source (same names, same diffs): a change to a mutated module needs a new run;
- every entry of mutation/equivalent.toml names a mutant that exists now, and one that
  survived in the record (an entry whose mutant is gone or killed must leave the list);
- every survivor of the record is on the list, and every group meets its target;
- docs/mutation.md is what the record and the list give.
"""

import json
from collections import Counter
from pathlib import Path

import pytest

pytest.importorskip("mutmut", reason="the `mutation` extra (mutmut) is not installed")

from mutation import listing, page  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
RECORD = json.loads((ROOT / "mutation" / "results.json").read_text())
ENTRIES = listing.equivalent_entries()


RUN = [g for g in listing.GROUPS if g.slug in RECORD["groups"]]  # the groups recorded


@pytest.fixture(scope="module")
def generated():
    """path -> {mutant name: diff} of the current source, as mutmut makes them."""
    paths = sorted({m for g in RUN for m in g.modules})
    return {path: {m["name"]: m["diff"] for m in listing.generate(path)} for path in paths}


def recorded():
    return [m for g in RECORD["groups"].values() for m in g["mutants"]]


def test_the_record_holds_groups_of_make_mutants():
    assert RUN and set(RECORD["groups"]) <= {g.slug for g in listing.GROUPS}


def test_the_record_is_of_the_current_source(generated):
    now = {name: diff for mutants in generated.values() for name, diff in mutants.items()}
    then = {m["name"]: m["diff"] for m in recorded()}
    gone, new = sorted(then.keys() - now.keys()), sorted(now.keys() - then.keys())
    changed = sorted(n for n in now.keys() & then.keys()
                     if listing.changed_lines(now[n]) != listing.changed_lines(then[n]))
    assert not (gone or new or changed), (
        "the mutated modules changed since `make mutants` ran: rerun it (`--group` for one "
        f"group); gone {gone[:5]}, new {new[:5]}, changed {changed[:5]}")


def test_every_listed_mutant_exists_now(generated):
    missing = []
    for entry in ENTRIES:
        path = listing.module_path(entry["function"])
        candidates = [{"name": n, "diff": d} for n, d in generated.get(path, {}).items()]
        if not any(listing.matches(entry, m) for m in candidates):
            missing.append(entry)
    assert not missing, f"equivalent.toml names mutants that no longer exist: {missing}"


def test_the_list_is_well_formed():
    keys = Counter((e["function"], tuple(e["removed"]), tuple(e["added"])) for e in ENTRIES)
    assert [k for k, n in keys.items() if n > 1] == []
    for entry in ENTRIES:
        assert entry["why"].strip() and entry["removed"] and entry["added"], entry


def test_every_listed_mutant_survived_and_every_survivor_is_listed():
    killed = set(page.KILLED)
    listed_but_killed = [m["name"] for m in recorded()
                         if m["status"] in killed and listing.match_equivalents(m, ENTRIES)]
    unexcused = [m["name"] for m in recorded()
                 if m["status"] not in killed and not listing.match_equivalents(m, ENTRIES)]
    assert listed_but_killed == [], "killed mutants cannot be equivalent; drop their entries"
    assert unexcused == [], "survivors that are neither killed nor justified"
    matched = {id(e) for m in recorded() for e in listing.match_equivalents(m, ENTRIES)}
    assert [e for e in ENTRIES if id(e) not in matched] == []


@pytest.mark.parametrize("group", RUN, ids=lambda g: g.slug)
def test_each_group_meets_its_target(group):
    t = page.tally(RECORD["groups"][group.slug]["mutants"], ENTRIES)
    assert page.score(t) >= group.target, t


def test_the_page_is_what_the_record_gives():
    assert (ROOT / "docs" / "mutation.md").read_text() == page.render(RECORD, ENTRIES)


def test_each_group_names_test_files_that_exist():
    for group in listing.GROUPS:
        for arg in group.tests:
            path = arg.split("=", 1)[-1].split("::")[0]
            assert (ROOT / path).exists(), (group.slug, arg)
        for module in group.modules:
            assert (ROOT / module).is_file(), module
