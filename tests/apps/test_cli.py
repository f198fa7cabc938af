"""The apps layer: the ``minigrad demo`` and ``minigrad plan`` commands, the synthetic data sets,
and the README's examples (so that what the README shows is what the code does)."""

import doctest
import json
import math
import pathlib
import re

import numpy as np
import pytest

from minigrad.apps import cli, data

README = pathlib.Path(__file__).resolve().parents[2] / "README.md"


def _table(text):
    """The (epoch, loss, accuracy) rows of the demo's table."""
    rows = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[0].isdigit() and parts[2].endswith("%"):
            rows.append((int(parts[0]), float(parts[1]), float(parts[2][:-1]) / 100))
    return rows


def test_demo_prints_a_table_whose_loss_decreases(capsys):
    assert cli.main(["demo", "--epochs", "60", "--every", "20", "--samples", "100"]) == 0
    out = capsys.readouterr().out
    assert "epoch" in out.splitlines()[1]
    rows = _table(out)
    assert [epoch for epoch, _, _ in rows] == [0, 20, 40, 60]
    losses = [loss for _, loss, _ in rows]
    assert losses[-1] < 0.9 * losses[0]
    assert out.strip().splitlines()[-1].startswith("final training accuracy:")


def test_demo_prints_the_last_epoch_even_off_the_grid(capsys):
    cli.main(["demo", "--epochs", "5", "--every", "3", "--samples", "20", "--hidden", "4"])
    assert [epoch for epoch, _, _ in _table(capsys.readouterr().out)] == [0, 3, 5]


@pytest.mark.parametrize("argv", [
    [],
    ["fly"],
    ["demo", "--epochs", "0"],
    ["demo", "--epochs", "ten"],
    ["demo", "--lr", "-1"],
    ["demo", "--classes", "1"],
    ["demo", "--noise", "-0.1"],
    ["demo", "--samples", "2", "--classes", "3"],
])
def test_bad_arguments_exit_with_status_2_and_a_message(argv, capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(argv)
    assert exit_info.value.code == 2
    assert "error:" in capsys.readouterr().err


@pytest.mark.parametrize("n_samples, n_classes", [(2, 2), (7, 3), (400, 2), (101, 5)])
def test_spirals_shapes_dtypes_and_balance(n_samples, n_classes):
    x, y = data.spirals(n_samples, n_classes)
    assert x.shape == (n_samples, 2) and x.dtype == np.float64
    assert y.shape == (n_samples,) and y.dtype == np.int64
    counts = np.bincount(y, minlength=n_classes)
    assert len(counts) == n_classes
    assert counts.max() - counts.min() <= 1


def test_spirals_are_determined_by_the_seed():
    x0, y0 = data.spirals(50, 3, seed=7)
    x1, y1 = data.spirals(50, 3, seed=7)
    x2, _ = data.spirals(50, 3, seed=8)
    assert np.array_equal(x0, x1) and np.array_equal(y0, y1)
    assert not np.array_equal(x0, x2)


def test_noiseless_spiral_points_lie_on_their_arm():
    # Sample j of class k: radius (j + 1) / n_k, angle 2 pi (k / C + turns * r).
    x, y = data.spirals(12, 3, noise=0.0, turns=0.25)
    r = np.hypot(x[:, 0], x[:, 1])
    for k in range(3):
        assert np.allclose(np.sort(r[y == k]), [0.25, 0.5, 0.75, 1.0])
    expected = np.exp(2j * np.pi * (y / 3 + 0.25 * r))
    assert np.allclose((x[:, 0] + 1j * x[:, 1]) / r, expected)


def test_blobs_shapes_and_determinism():
    x, y = data.blobs(30, n_classes=3, n_features=4, seed=1)
    assert x.shape == (30, 4) and x.dtype == np.float64 and y.dtype == np.int64
    assert np.bincount(y).tolist() == [10, 10, 10]
    assert np.array_equal(x, data.blobs(30, n_classes=3, n_features=4, seed=1)[0])


@pytest.mark.parametrize("bad", [dict(n_classes=1), dict(n_samples=1), dict(noise=-1.0)])
def test_spirals_reject_bad_arguments(bad):
    with pytest.raises(ValueError):
        data.spirals(**{"n_samples": 10, **bad})


def test_to_namespace_moves_and_casts(xp):
    x, y = data.to_namespace(*data.spirals(10), xp, dtype="float32")
    assert x.dtype == xp.float32 and y.dtype == xp.int64
    assert tuple(x.shape) == (10, 2) and tuple(y.shape) == (10,)


def test_readme_examples_run_as_shown():
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    assert blocks, "the README should hold python examples"
    parser = doctest.DocTestParser()
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    globs = {}
    for i, block in enumerate(blocks):
        test = parser.get_doctest(block, globs, f"README block {i}", str(README), 0)
        runner.run(test, clear_globs=False)
        globs = test.globs  # a DocTest works on a copy; later blocks build on earlier ones
    assert runner.summarize(verbose=False).failed == 0


@pytest.mark.parametrize("argv, flag", [
    (["--lr", "nan"], "--lr"),
    (["--lr", "inf"], "--lr"),
    (["--lr", "-1"], "--lr"),
    (["--noise", "nan"], "--noise"),
    (["--seed", "-1"], "--seed"),
    (["--epochs", "0"], "--epochs"),
    (["--epochs", "1.5"], "--epochs"),
    (["--classes", "1"], "--classes"),
    (["--samples", "2", "--classes", "3"], "--samples"),
    (["--hidden", "many"], "--hidden"),
])
def test_a_bad_value_is_one_line_naming_the_flag_with_exit_status_2(capsys, argv, flag):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["demo", *argv])
    assert exit_info.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and flag in lines[0] and "Traceback" not in captured.err
    assert lines[0].startswith("minigrad demo: error:")


# ----- minigrad plan ------------------------------------------------------------------------------
PLAN = ["plan", "--sizes", "8,512,4", "--global-batch", "64", "--memory", "500KB"]


def test_plan_prints_the_micro_batch_size_and_the_peaks(capsys):
    assert cli.main(PLAN) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "MLP [8, 512, 4] (float64, sgd), global batch 64, budget 488.3 KiB"
    m = int(lines[1].split()[2])
    assert 1 <= m < 64
    assert lines[1].endswith(f"({math.ceil(64 / m)} micro-batches, one update)")
    assert lines[2].startswith("predicted peak:") and lines[3].startswith("measured peak:")
    assert lines[4] == "budget:            488.3 KiB"


def test_plan_json_is_one_object_with_the_same_numbers(capsys):
    assert cli.main([*PLAN, "--optimizer", "adam", "--dtype", "float32", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["sizes"] == [8, 512, 4] and result["global_batch"] == 64
    assert (result["optimizer"], result["dtype"]) == ("adam", "float32")
    m = result["micro_batch_size"]
    assert result["num_micro_batches"] == math.ceil(64 / m)
    assert result["measured_peak"] <= result["budget"] == 500_000
    assert result["predicted_peak"] == round(result["a"] + result["b"] * m)


def test_plan_when_nothing_fits_exits_1_with_one_line(capsys):
    assert cli.main([*PLAN[:-1], "1KB"]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("minigrad plan: error: no micro-batch")
    smallest = int(lines[0].split("--memory ")[-1].split()[0])
    assert smallest > 1000


@pytest.mark.parametrize("argv, flag", [
    (["--memory", "0"], "--memory"),
    (["--memory", "abc"], "--memory"),
    (["--memory", "-5MB"], "--memory"),
    (["--sizes", "3"], "--sizes"),
    (["--sizes", "3,0,2"], "--sizes"),
    (["--sizes", "3,x,2"], "--sizes"),
    (["--global-batch", "0"], "--global-batch"),
    (["--global-batch", "1.5"], "--global-batch"),
    (["--optimizer", "lbfgs"], "--optimizer"),
    (["--dtype", "float16"], "--dtype"),
    (["--seed", "-1"], "--seed"),
])
def test_plan_bad_value_is_one_line_naming_the_flag_with_exit_status_2(capsys, argv, flag):
    with pytest.raises(SystemExit) as exit_info:
        cli.main([*PLAN, *argv])
    assert exit_info.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and flag in lines[0] and "Traceback" not in captured.err
    assert lines[0].startswith("minigrad plan: error:")


def test_a_diverging_demo_exits_1_with_one_line(capsys):
    status = cli.main(["demo", "--epochs", "3", "--lr", "1e300", "--every", "1",
                       "--samples", "20", "--hidden", "4"])
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 1
    assert len(err) == 1 and "the loss became" in err[0] and "--lr 1e+300" in err[0]


def test_sizes_too_large_for_memory_exit_2_with_one_line(capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["demo", "--samples", "1000000000000"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not enough memory" in err[0]
