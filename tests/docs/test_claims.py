"""The claims page (docs/claims.md) and the verdict rows behind it
(``minigrad.analysis.claims``, filled by notebook 08).

The page's markdown-exec blocks run here as the site build runs them: the first executes
notebook 08 through ``scripts/notebooks.py`` (reusing an executed copy whose key matches)
and reads the rows the notebook recorded. Then every claim must appear with a verdict,
every article must be covered, the page must agree with the BatchNorm page, and the
notebook must compute every experiment's verdict rather than type it.
"""

import ast
import json
import re
from pathlib import Path

import pytest
from helpers import FENCE, exec_page

from minigrad.analysis import claims

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
    text = re.sub(r"^```.*?^```", "", PAGE.read_text(), flags=re.MULTILINE | re.DOTALL)
    text = re.sub(r"\$\$.*?\$\$|\$[^$]+\$|`[^`]*`", "", text, flags=re.DOTALL)
    assert not re.findall(r"\d+\.\d+|\d[eE][-+]?\d+", text)


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
def _claim_calls():
    cells = json.loads(NOTEBOOK.read_text())["cells"]
    source = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and ast.unparse(node.func) in ("claims.claim",
                                                                     "claims.untestable"):
            yield node


def test_every_experiment_verdict_is_computed_not_typed():
    calls = list(_claim_calls())
    assert len(calls) >= 20
    for call in calls:
        keywords = {k.arg: k.value for k in call.keywords}
        how = keywords.get("how")
        if ast.unparse(call.func) == "claims.untestable" or (
                how is not None and ast.literal_eval(how) == "citation"):
            continue
        verdict = keywords["verdict"]
        assert isinstance(verdict, ast.Call) and ast.unparse(verdict.func) == "claims.verdict", \
            f"claim {ast.unparse(call.args[0])}: an experiment's verdict is computed"


# ----- minigrad.analysis.claims ------------------------------------------------------------------
def _row(number=1, **kwargs):
    options = {"evidence": "measured", "verdict": "holds"} | kwargs
    return claims.claim(number, "giselle", "a claim", **options)


def test_verdict_from_two_facts_and_only_bools():
    assert claims.verdict(True) == "holds"
    assert claims.verdict(True, True) == "holds only if"
    assert claims.verdict(False, True) == "does not hold"
    with pytest.raises(TypeError, match="must be a bool"):
        claims.verdict([0])


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
    rows = [_row(1), _row(2, verdict="does not hold")]
    bundle = claims.bundle(rows)
    cells = [{"cell_type": "markdown", "source": "x"},
             {"cell_type": "code", "outputs": [{"output_type": "display_data", "data": bundle}]}]
    path = tmp_path / "nb.ipynb"
    path.write_text(json.dumps({"cells": cells}))
    assert claims.from_notebook(path) == rows
    path.write_text(json.dumps({"cells": cells[:1]}))
    with pytest.raises(ValueError, match="was it executed"):
        claims.from_notebook(path)
