"""The teaching notebooks run top to bottom (a failing cell or assert fails the build) and are
stored without outputs, so that their diffs stay reviewable and every figure a reader sees is
computed by the code of the same commit (``scripts/notebooks.py`` writes the executed copies
to build/notebooks/, where the site build picks them up).
"""

import importlib.util
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("notebooks_runner",
                                              ROOT / "scripts" / "notebooks.py")
runner = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(runner)

NOTEBOOKS = runner.notebooks()
nbformat = pytest.importorskip("nbformat", reason="the `notebooks` extra is not installed")


def test_there_are_notebooks():
    assert NOTEBOOKS, "notebooks/ holds no NN_title.ipynb"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_the_notebook_is_stored_without_outputs(path):
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "code":
            assert not cell.outputs, f"cell {i} of {path.name} is stored with outputs"
            assert cell.execution_count is None, f"cell {i} of {path.name} has a count"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_the_notebook_runs_top_to_bottom(path):
    pytest.importorskip("nbclient", reason="the `notebooks` extra is not installed")
    out, seconds = runner.execute(path)
    executed = nbformat.read(out, as_version=4)
    errors = [o for c in executed.cells if c.cell_type == "code" for o in c.outputs
              if o.output_type == "error"]
    assert not errors
    print(f"{path.name}: {seconds:.1f} s")


# Notebooks 01-07 and 13 link the concept pages they demonstrate and use the site's one name
# for each accumulation rule. The site renders a notebook at /notebooks/NN_name/, so a concept
# page is ../../concepts/NAME/ from there.
RULE_NOTEBOOKS = [p for p in NOTEBOOKS if p.name[:2] in ("01", "02", "03", "04", "05", "06",
                                                          "07", "13")]
RETIRED_NAMES = ("the loop most people write", "minigrad's mean", "mean / N)")


def _text(path, kind):
    nb = nbformat.read(path, as_version=4)
    return "\n".join(cell.source for cell in nb.cells if cell.cell_type == kind)


@pytest.mark.parametrize("path", RULE_NOTEBOOKS, ids=[p.stem for p in RULE_NOTEBOOKS])
def test_the_notebook_links_the_concept_pages_it_demonstrates(path):
    import re

    pages = re.findall(r"\]\(\.\./\.\./concepts/([a-z-]+)/\)", _text(path, "markdown"))
    assert pages, f"{path.name} links no concept page (../../concepts/NAME/)"
    for page in pages:
        assert (ROOT / "docs" / "concepts" / f"{page}.md").is_file(), f"{path.name}: {page}"


@pytest.mark.parametrize("path", RULE_NOTEBOOKS, ids=[p.stem for p in RULE_NOTEBOOKS])
def test_the_notebook_names_each_accumulation_rule_one_way(path):
    text = _text(path, "markdown") + _text(path, "code")
    for retired in RETIRED_NAMES:
        assert retired not in text, f"{path.name} still says {retired!r}"
    if path.name.startswith(("02", "03")):
        for name in ("the item-weighted rule", "the textbook loop", "the undivided sum"):
            assert name in text, f"{path.name} never names {name!r}"
