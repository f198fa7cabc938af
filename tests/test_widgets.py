"""The panels of notebooks 03 and 04 (`make lab`) call ordinary functions of the notebooks,
``try_split`` and ``try_micro_batch``; each must hand back the engine's numbers for whatever
the controls say, and a message, not a traceback, for input the engine cannot run.

A function is taken from its notebook as the reader gets it: the notebook's setup cell runs,
then the cell that defines the function, up to its first call (the defaults, the asserts and
the panel come after). Every number is checked against the engine called here directly.
"""

import ast
import pathlib
import sys

import numpy as np
import pytest

from minigrad import accumulate, nn, optim
from minigrad.analysis.bounds import flat
from minigrad.analysis.metrics import compare_arrays, vector_gap
from minigrad.studies import data
from minigrad.studies.batchnorm import divergence as batchnorm

nbformat = pytest.importorskip("nbformat", reason="the `notebooks` extra is not installed")
matplotlib = pytest.importorskip("matplotlib", reason="the `notebooks` extra is not installed")
matplotlib.use("Agg")

NOTEBOOKS = pathlib.Path(__file__).resolve().parents[1] / "notebooks"
X, Y, _, _ = data.digits(seed=0)
LOSS = nn.CrossEntropyLoss()


def cell_defining(notebook, function):
    """The notebook's code cells and the source of the one that defines ``function``."""
    code = [cell.source for cell in nbformat.read(NOTEBOOKS / notebook, as_version=4).cells
            if cell.cell_type == "code"]
    return code, next(source for source in code if f"def {function}(" in source)


def up_to_first_call(source, function):
    """``source`` without its first statement that calls ``function`` and all after it."""
    body = ast.parse(source).body
    first = next(i for i, statement in enumerate(body)
                 if any(isinstance(node, ast.Call) and getattr(node.func, "id", None) == function
                        for node in ast.walk(statement)))
    return ast.unparse(ast.Module(body=body[:first], type_ignores=[]))


def notebook_function(notebook, function):
    """``function`` as the notebook defines it, in a namespace with the notebook's setup."""
    code, cell = cell_defining(notebook, function)
    namespace = {}
    exec(code[0], namespace)                                   # the setup cell
    exec(up_to_first_call(cell, function), namespace)
    return namespace[function]


@pytest.fixture(autouse=True)
def close_figures():
    yield
    matplotlib.pyplot.close("all")                            # try_split draws one a call


@pytest.fixture(scope="module")
def try_split():
    return notebook_function("03_loss_normalisation.ipynb", "try_split")


@pytest.fixture(scope="module")
def try_micro_batch():
    return notebook_function("04_batchnorm_divergence.ipynb", "try_micro_batch")


# --- notebook 03: try your own split ---------------------------------------------------------

SPLITS = [dict(global_batch=64, sizes="40, 16, 8", ignored=0.25, seed=0),
          dict(global_batch=96, sizes="20,70, 6", ignored=0.5, seed=7)]


def loss_gradient(x, targets, **split):
    model = nn.MLP([64, 32, 10], seed=0)                       # the notebook's make_model
    return flat(accumulate.accumulated_gradients(model, LOSS, x, targets, **split).values())


@pytest.mark.parametrize("controls", SPLITS, ids=["defaults", "moved"])
def test_try_split_returns_the_engines_numbers(try_split, controls):
    out = try_split(**controls)
    n, sizes = controls["global_batch"], [int(s) for s in controls["sizes"].split(",")]
    targets = out["targets"]
    ignored = targets == LOSS.ignore_index
    assert out["sizes"] == sizes
    assert int(ignored.sum()) == round(controls["ignored"] * n)          # the share asked for
    assert np.array_equal(targets[~ignored], Y[:n][~ignored])            # the rest untouched
    starts = np.cumsum([0, *sizes])
    items = [int(np.sum(~ignored[a:b])) for a, b in zip(starts, starts[1:])]
    assert out["items"] == items
    assert out["weights"]["the item-weighted rule"] == [i / sum(items) for i in items]
    assert out["weights"]["the textbook loop"] == [1 / len(sizes) if i else 0.0 for i in items]
    full = loss_gradient(X[:n], targets)
    rules = {"the textbook loop": "micro_batch_mean", "the item-weighted rule": "items"}
    for label, rule in rules.items():
        g = loss_gradient(X[:n], targets, sizes=sizes, normalize=rule)
        assert out["rel_error"][label] == np.abs(g - full).max() / np.abs(full).max(), label
    assert out["within_bound"] == {"the textbook loop": False, "the item-weighted rule": True}


def test_try_split_moves_with_its_controls(try_split):
    first, second = (try_split(**controls) for controls in SPLITS)
    assert first["rel_error"] != second["rel_error"]
    assert first["weights"] != second["weights"]


@pytest.mark.parametrize("controls, message", [
    (dict(sizes="48, 8"), "the micro-batch sizes [48, 8] must be positive and add up to the "
                          "global batch of 64; they add up to 56"),
    (dict(sizes="-16, 80"), "the micro-batch sizes [-16, 80] must be positive"),
    (dict(sizes=""), "the micro-batch sizes [] must be positive"),
    (dict(sizes="48, x"), "write the micro-batch sizes as whole numbers separated by commas"),
    (dict(global_batch=72), "the micro-batch sizes [40, 16, 8] must be positive and add up to "
                            "the global batch of 72; they add up to 64"),  # only the batch moved
    (dict(ignored=1.0), "the share of ignored targets must be at least 0 and below 1"),
    (dict(global_batch=8, sizes="4, 4", ignored=0.95), "all 8 targets are ignored"),
])
def test_try_split_says_why_it_refuses(try_split, capsys, controls, message):
    out = try_split(**controls)
    assert isinstance(out, str) and out.startswith(message)
    assert capsys.readouterr().out == out + "\n"                      # printed, once


def test_without_ipywidgets_the_cell_says_so_and_shows_the_defaults(capsys, monkeypatch):
    code, cell = cell_defining("03_loss_normalisation.ipynb", "try_split")
    namespace = {}
    exec(code[0], namespace)
    capsys.readouterr()
    monkeypatch.setitem(sys.modules, "ipywidgets", None)              # import raises
    exec(cell, namespace)
    lines = capsys.readouterr().out.splitlines()
    assert namespace["widgets"] is None
    assert lines[0] == ("ipywidgets is not installed: run `make lab` to move the controls; "
                        "below, the defaults")
    assert lines[1].startswith("global batch 64, 16 targets ignored (seed 0)")
    assert not any("interactive(" in line for line in lines)         # no panel


# --- notebook 04: try your own micro-batch size ----------------------------------------------

RUNS = {"BatchNorm": ("batch", "micro"), "exact BatchNorm": ("batch", "exact_batchnorm"),
        "GroupNorm": ("group", "micro"), "LayerNorm": ("layer", "micro")}


def norm_model(norm, momentum=0.1):
    model = nn.MLP([64, 64, 64, 10], norm=norm, seed=0)          # the notebook's factory
    for layer in model:
        if isinstance(layer, nn.BatchNorm1d):
            layer.momentum = momentum
    return model


def worst_running_gap(model, reference):
    ours, ref = model.state_dict(), reference.state_dict()
    return {stat: max(compare_arrays(ours[name], ref[name])["max_rel"]
                      for name in ref if name.endswith(stat))
            for stat in ("running_mean", "running_var")}


@pytest.mark.parametrize("m, momentum, n", [(8, 0.1, 64), (10, 0.5, 96)],
                         ids=["defaults", "moved"])
def test_try_micro_batch_returns_the_engines_numbers(try_micro_batch, m, momentum, n):
    out = try_micro_batch(micro_batch_size=m, momentum=momentum, global_batch=n)
    x, y = X[:n], Y[:n]
    sizes = [m] * (n // m) + ([n % m] if n % m else [])
    assert out["sizes"] == sizes
    for label, (norm, strategy) in RUNS.items():
        full_model, model = norm_model(norm, momentum), norm_model(norm, momentum)
        full = accumulate.accumulated_gradients(full_model, LOSS, x, y)
        g = accumulate.accumulated_gradients(model, LOSS, x, y, micro_batch_size=m,
                                             strategy=strategy)
        assert out["gaps"][label] == vector_gap(flat(g.values()), flat(full.values())), label
        within = out["gaps"][label]["rel_error"] <= out["limits"][label]["rel_error"]
        assert within == (label != "BatchNorm"), label
        if norm == "batch":
            assert out["running"][label] == worst_running_gap(model, full_model), label
    batches = [(X[i * n:(i + 1) * n], Y[i * n:(i + 1) * n]) for i in range(5)]
    drift = batchnorm.running_stat_drift(lambda: norm_model("batch", momentum),
                                         lambda ps: optim.SGD(ps, lr=0.1, momentum=0.9),
                                         LOSS, batches, m)
    assert out["drift"] == drift
    assert out["farther"] == (1 - (1 - momentum) ** len(sizes)) / momentum


def test_try_micro_batch_moves_with_momentum(try_micro_batch):
    slow, fast = (try_micro_batch(momentum=momentum) for momentum in (0.1, 0.5))
    assert slow["gaps"] == fast["gaps"]                      # the gradient does not see it
    assert slow["running"]["BatchNorm"] != fast["running"]["BatchNorm"]


@pytest.mark.parametrize("controls, message", [
    (dict(micro_batch_size=1), "BatchNorm needs at least 2 samples in every micro-batch, "
                               "got m = 1"),
    (dict(micro_batch_size=3), "BatchNorm needs at least 2 samples in every micro-batch: "
                               "micro-batches of 3 leave 1 in the last one"),
    (dict(micro_batch_size=100), "micro-batches of 100 do not fit in a global batch of 64"),
    (dict(momentum=0.0), "BatchNorm's momentum must lie in (0, 1], got 0.0"),
    (dict(momentum=1.5), "BatchNorm's momentum must lie in (0, 1], got 1.5"),
    (dict(global_batch=1000), "the global batch must lie between 2 and 269"),
])
def test_try_micro_batch_says_why_it_refuses(try_micro_batch, capsys, controls, message):
    out = try_micro_batch(**controls)
    assert isinstance(out, str) and out.startswith(message)
    assert capsys.readouterr().out == out + "\n"
