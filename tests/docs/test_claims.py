"""The claims page (docs/claims.md) and the verdict rows behind it
(``minigrad.studies.claims.verdicts``, filled by notebook 08).

The page's markdown-exec blocks run here as the site build runs them: the first executes
notebook 08 through ``scripts/notebooks.py`` (reusing an executed copy whose key matches)
and reads the rows the notebook recorded. Then every claim must appear with a verdict,
every article must be covered, the page must agree with the BatchNorm page, the notebook
must compute every experiment's verdict rather than type it, and every verdict that rests on
training outcomes must meet the rule of outcome verdicts (three seeds or more, two training
lengths or more, the longest at least four times the shortest).
"""

import ast
import json
import re
from pathlib import Path

import numpy as np
import pytest
from helpers import FENCE, exec_page, typed_numbers

from minigrad.studies.claims import outcomes
from minigrad.studies.claims import verdicts as claims

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "claims.md"
NOTEBOOK = ROOT / "notebooks" / "08_the_articles_tested.ipynb"
_RUN = {}


def run_page():
    """(outputs of the exec blocks, the names their session defined), run once."""
    if not _RUN:
        pytest.importorskip("nbclient", reason="the `notebooks` extra is not installed")
        assert all('session="claims"' in m["options"] for m in FENCE.finditer(
            PAGE.read_text())), "every block shares one session"
        outputs, sessions = exec_page(PAGE)
        _RUN.update(outputs=outputs, scope=sessions["claims"])
    return _RUN["outputs"], _RUN["scope"]


def table_rows(output):
    """The data rows of the Markdown tables in ``output``, as lists of cells (escaped pipes
    kept inside their cell)."""
    rows = []
    for line in output.splitlines():
        if line.startswith("|") and not line.startswith(("| Claim", "|---")):
            cells = re.split(r"(?<!\\)\|", line.strip().strip("|"))
            rows.append([cell.strip() for cell in cells])
    return rows


# ----- the page ----------------------------------------------------------------------------------
def test_the_page_is_in_the_navigation():
    nav = (ROOT / "mkdocs.yml").read_text()
    assert re.search(r"^\s*- [^\n]*: claims\.md$", nav, re.MULTILINE)


def test_the_blocks_run_and_print():
    outputs, _ = run_page()
    assert len(outputs) == 1 + len(claims.ARTICLES)
    assert all(out.strip() for out in outputs)


def test_every_claim_appears_once_with_a_verdict():
    outputs, scope = run_page()
    shown = [row for out in outputs[1:] for row in table_rows(out)]
    numbers = sorted(int(row[0]) for row in shown)
    assert numbers == list(range(1, len(scope["rows"]) + 1)) and len(numbers) >= 20
    for row in shown:
        verdict = re.match(r"\*\*(.+?)\*\*", row[-1])
        assert verdict and verdict[1] in claims.VERDICTS, row
        if verdict[1] in ("holds only if", "cannot be tested here"):
            assert len(row[-1]) > len(verdict[0]) + 5, f"claim {row[0]} lacks its condition"
    summary = outputs[0]
    assert f"{len(numbers)} claims" in summary
    assert sum(int(n) for n in re.findall(r"(\d+) \*\*", summary)) == len(numbers)


def test_every_article_is_covered_under_its_heading():
    outputs, scope = run_page()
    headings = re.findall(r"^## (.+)$", PAGE.read_text(), re.MULTILINE)
    for (key, _), out in zip(claims.ARTICLES.items(), outputs[1:]):
        assert table_rows(out), f"no claim of {key} on the page"
        assert all(row["article"] == key for row in scope["rows"]
                   if str(row["number"]) in {r[0] for r in table_rows(out)})
    for title in ("HyperAI", "OpenGenus", "Stack Exchange", "Giselle"):
        assert any(title in h for h in headings), title


def test_the_page_types_no_measured_number():
    """Decimals and powers of ten are measurements: they come from the notebook's run."""
    assert not typed_numbers(PAGE.read_text())


def test_the_batchnorm_claim_agrees_with_the_batchnorm_page():
    """docs/concepts/batchnorm.md: BatchNorm's statistics CAN be accumulated exactly, at
    extra passes. The claim that they cannot holds only for plain accumulation."""
    _, scope = run_page()
    (row,) = [r for r in scope["rows"] if "BatchNorm's statistics cannot" in r["claim"]]
    assert row["verdict"] == "holds only if" and "exact_batchnorm" in row["condition"]
    assert "exact" in (ROOT / "docs" / "concepts" / "batchnorm.md").read_text()


def test_mixed_precision_and_contrastive_claims_are_experiments_now():
    """minigrad has mixed precision (Claim 21) and contrastive losses (Claims 20, 22): those
    claims are decided by experiments, and none of them says minigrad lacks the feature."""
    _, scope = run_page()
    by_number = {r["number"]: r for r in scope["rows"]}
    for number in (20, 21, 22):
        row = by_number[number]
        assert row["how"] == "experiment" and row["verdict"] != "cannot be tested here", number
        assert "minigrad has no" not in row["evidence"] + row["condition"], number
        assert "notebook 09" in row["evidence"] or "notebook 10" in row["evidence"], number


def test_the_named_claims_of_the_brief_are_all_there():
    _, scope = run_page()
    text = " ".join(r["claim"] for r in scope["rows"])
    for phrase in ("more accumulation steps cost more memory", "every loss function",
                   "mixed-precision", "introduced in 2017", "by default"):
        assert phrase in text, phrase


# ----- the notebook computes its verdicts ---------------------------------------------------------
def _notebook_tree():
    cells = json.loads(NOTEBOOK.read_text())["cells"]
    return ast.parse("\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code"))


def _claim_calls():
    for node in ast.walk(_notebook_tree()):
        if isinstance(node, ast.Call) and ast.unparse(node.func) in ("claims.claim",
                                                                     "claims.untestable"):
            yield node


def _computed_verdicts():
    """The names the notebook binds to a claims.verdict(...) call."""
    return {target.id for node in ast.walk(_notebook_tree()) if isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Call)
            and ast.unparse(node.value.func) == "claims.verdict"
            for target in node.targets if isinstance(target, ast.Name)}


def test_every_experiment_verdict_is_computed_not_typed():
    calls, computed = list(_claim_calls()), _computed_verdicts()
    assert len(calls) >= 20
    for call in calls:
        keywords = {k.arg: k.value for k in call.keywords}
        how = keywords.get("how")
        if ast.unparse(call.func) == "claims.untestable" or (
                how is not None and ast.literal_eval(how) == "citation"):
            continue
        verdict = keywords["verdict"]
        inline = isinstance(verdict, ast.Call) and ast.unparse(verdict.func) == "claims.verdict"
        named = isinstance(verdict, ast.Name) and verdict.id in computed
        assert inline or named, \
            f"claim {ast.unparse(call.args[0])}: an experiment's verdict is computed"


OUTCOME_CLAIMS = {8, 9, 20, 21, 22}
"""The claims whose verdicts rest on training outcomes (accuracy, loss, norms along training)."""
OUTCOME_WORDS = re.compile(r"accuracy|retrieval|training-set loss|loss after|along .*training|"
                           r"gradient norm", re.IGNORECASE)


def test_every_outcome_verdict_rests_on_seeds_and_lengths():
    """Rule 1 of issue 33: an outcome verdict over >= 3 seeds at >= 2 lengths, the longest
    >= 4 x the shortest, with every seed's value kept; a verdict that changes with the length
    is "holds only if" and names both lengths. Any experiment whose evidence speaks of an
    outcome carries the record, so a new one cannot slip past the list above."""
    _, scope = run_page()
    for row in scope["rows"]:
        if row["how"] != "experiment":
            continue
        record = row["outcome"]
        speaks = bool(OUTCOME_WORDS.search(row["evidence"]))
        if row["number"] in OUTCOME_CLAIMS or speaks:
            assert record is not None, f"claim {row['number']} rests on training outcomes"
        if record is None:
            continue
        lengths = record["lengths"]
        assert len(set(record["seeds"])) >= 3, row["number"]
        assert len(set(lengths)) >= 2 and lengths[-1] >= 4 * lengths[0], row["number"]
        assert all(len(values) == len(lengths) and all(len(v) == len(record["seeds"])
                                                       for v in values)
                   for values in record["values"].values()), row["number"]
        if len(set(record["held"])) > 1:
            assert row["verdict"] == "holds only if", row["number"]
            assert all(str(n) in row["condition"] for n in lengths), row["number"]


def test_claim_22_is_decided_as_a_published_result():
    """CONTACCUM's result is the paper's: the row says what the paper reports and how this
    setup differs, and an experiment here can only fail to reproduce it."""
    _, scope = run_page()
    (row,) = [r for r in scope["rows"] if r["number"] == 22]
    assert row["published"] and "2406.12356" in row["published"]["source"]
    assert row["verdict"] != "does not hold"
    assert "published:" in claims.table(scope["rows"], "giselle")


def test_claim_8_names_the_clock_it_judges_and_reports_the_other():
    _, scope = run_page()
    (row,) = [r for r in scope["rows"] if r["number"] == 8]
    assert "judged per sample processed" in row["evidence"]
    assert "reported on this machine's wall clock" in row["evidence"]
    assert any("wall-clock" in arm for arm in row["outcome"]["values"])


# ----- minigrad.studies.claims: verdicts and outcomes -------------------------------------
def _row(number=1, **kwargs):
    options = {"evidence": "measured", "verdict": "holds"} | kwargs
    return claims.claim(number, "giselle", "a claim", **options)


def test_verdict_from_two_facts_and_only_bools():
    assert claims.verdict(True) == "holds"
    assert claims.verdict(True, True) == "holds only if"
    assert claims.verdict(False, True) == "does not hold"
    assert claims.verdict(False, published=True) == "not reproduced here"
    assert claims.verdict(True, True, published=True) == "holds only if"
    with pytest.raises(TypeError, match="must be a bool"):
        claims.verdict([0])


def _record(seeds=(0, 1, 2), lengths=(100, 400), held=(True, True), **kwargs):
    values = kwargs.pop("values", {"a": [[0.1] * len(seeds) for _ in lengths]})
    return outcomes.record("test accuracy", seeds=seeds, lengths=lengths, values=values,
                          held=held, **kwargs)


@pytest.mark.parametrize("kwargs, message", [
    ({"seeds": (0,), "values": {"a": [[0.1], [0.2]]}}, "at least 3 seeds"),
    ({"seeds": (0, 0, 1)}, "at least 3 seeds"),
    ({"lengths": (100,), "held": (True,)}, "two training lengths"),
    ({"lengths": (400, 100)}, "shortest first"),
    ({"lengths": (100, 300)}, "at least 4 times the shortest"),
    ({"held": (True,)}, "for each of the 2 lengths"),
    ({"values": {"a": [[0.1, 0.2, 0.3]]}}, "one row per length"),
    ({"values": {"a": [[0.1, 0.2], [0.1, 0.2]]}}, "one value per seed"),
])
def test_an_outcome_verdict_on_one_seed_or_one_length_is_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        _record(**kwargs)


def test_an_outcome_record_takes_whole_seeds_and_lengths_and_bool_verdicts():
    with pytest.raises(TypeError, match="a seed must be an int"):
        _record(seeds=(0.0, 1, 2))
    with pytest.raises(TypeError, match="held must hold bools"):
        _record(held=(1, 1))


def test_an_outcome_record_is_refused_in_a_row_too():
    """A record edited after outcome() (or read back from a notebook) is checked again."""
    record = _record()
    record["seeds"] = [0]
    with pytest.raises(ValueError, match="at least 3 seeds"):
        _row(outcome=record)
    with pytest.raises(ValueError, match="goes with an experiment"):
        claims.claim(1, "giselle", "cited", how="citation", source="a page", evidence="x",
                     verdict="holds", outcome=_record())


def test_a_verdict_that_changes_with_the_length_says_so_with_both_numbers():
    flips = _record(held=(False, True))
    with pytest.raises(ValueError, match="'holds only if' and its condition names every"):
        _row(verdict="holds", outcome=flips)
    with pytest.raises(ValueError, match="names every length"):
        _row(verdict="holds only if", condition="trained long enough", outcome=flips)
    with pytest.raises(ValueError, match="names every length"):  # 1000 is not 100
        _row(verdict="holds only if", condition="after 400 updates, not after 1000",
             outcome=flips)
    words = outcomes.lengths_held([100, 400], [False, True])
    assert words == "after 400 updates, not after 100"
    row = _row(verdict="holds only if", condition=f"trained long enough: {words}",
               outcome=flips)
    assert row["outcome"]["held"] == [False, True]
    assert outcomes.lengths_held([100, 400], [True, True]) == "at 100 and 400 updates"
    assert outcomes.lengths_held([100, 400], [False, False], "epochs") == \
        "at neither 100 nor 400 epochs"


def test_not_reproduced_here_says_what_the_paper_reports_and_how_this_setup_differs():
    paper = claims.published("A et al., arXiv:0000.00000", "that X beats Y",
                             "a smaller model on other data")
    with pytest.raises(ValueError, match="it is 'not reproduced here'"):
        _row(verdict="does not hold", published=paper)
    with pytest.raises(ValueError, match="says what the paper reports"):
        _row(verdict="not reproduced here")
    with pytest.raises(ValueError, match="names its source, what it reports"):
        claims.published("A et al.", "", "a smaller model")
    row = _row(verdict=claims.verdict(False, published=True), published=paper)
    line = claims.table([row]).splitlines()[2]
    assert line.endswith("| **not reproduced here** |")
    assert "published: A et al., arXiv:0000.00000 reports that X beats Y; this setup " \
           "differs: a smaller model on other data" in line


def test_the_table_reports_seeds_lengths_mean_and_spread():
    record = _record(values={"dual": [[0.1, 0.2, 0.3], [0.5, 0.5, 0.8]]})
    line = claims.table([_row(outcome=record)]).splitlines()[2]
    assert "test accuracy over seeds 0, 1, 2 after 100 and 400 updates" in line
    assert "dual 0.2 ± 0.1, 0.6 ± 0.17" in line
    assert outcomes.spread([1.0, 2.0, 3.0]) == "2 ± 1"


@pytest.mark.parametrize("kwargs, message", [
    ({"verdict": "maybe"}, "verdict must be one of"),
    ({"verdict": "holds only if"}, "a condition"),
    ({"condition": "when it rains"}, "a condition"),
    ({"how": "citation"}, "names its source"),
    ({"how": "not testable"}, "goes with 'cannot be tested here'"),
])
def test_an_incomplete_row_is_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        _row(**kwargs)


def test_rows_are_numbered_in_order():
    with pytest.raises(ValueError, match="numbered 1, 2"):
        claims.check_rows([_row(1), _row(3)])


def test_the_table_escapes_pipes_and_shows_conditions():
    rows = [_row(1, evidence="lr max|a_i|"), _row(2, verdict="holds only if", condition="if so"),
            claims.untestable(3, "giselle", "untested", reason="yet: no such thing")]
    lines = claims.table(rows).splitlines()
    assert len(lines) == 5 and "max\\|a_i\\|" in lines[2]
    assert lines[3].endswith("| **holds only if** if so |")
    assert lines[4].endswith("| **cannot be tested here** yet: no such thing |")
    assert claims.table(rows, "hyperai").count("\n") == 1  # the header only


def test_the_rows_travel_through_an_executed_notebook(tmp_path):
    record = outcomes.record("test accuracy", seeds=np.arange(3), lengths=[np.int64(10), 40],
                            values={"a": np.zeros((2, 3))}, held=[np.bool_(True), True])
    rows = [_row(1), _row(2, verdict="does not hold", outcome=record)]
    bundle = claims.bundle(rows)
    cells = [{"cell_type": "markdown", "source": "x"},
             {"cell_type": "code", "outputs": [{"output_type": "display_data", "data": bundle}]}]
    path = tmp_path / "nb.ipynb"
    path.write_text(json.dumps({"cells": cells}))  # plain JSON: NumPy values were converted
    assert claims.from_notebook(path) == rows
    path.write_text(json.dumps({"cells": cells[:1]}))
    with pytest.raises(ValueError, match="was it executed"):
        claims.from_notebook(path)
