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
