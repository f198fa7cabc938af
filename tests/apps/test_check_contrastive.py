"""``minigrad check --loss contrastive``: GradCache exits 0, naive and bank exit 1 with their
reasons, a bad value exits 2 in one line naming the flag, no verdict exits 3. Every flag but
``--loss`` has a default (towers 32,16,8 on the paired digits, an uneven split of 64 pairs)."""

import json
import os
import subprocess
import sys

import pytest
from helpers import minigrad_check

from minigrad.analysis import contrastive_check
from minigrad.analysis.contrastive_check import EQUIVALENT, NOT_EQUIVALENT, REASONS
from minigrad.analysis.power import NO_VERDICT

pytest.importorskip("sklearn", reason="the paired digits need scikit-learn")

SHORT = ["--loss", "contrastive", "--steps", "3", "--global-batch", "24"]


def test_gradcache_exits_0_with_a_row_per_update(capsys):
    assert minigrad_check([*SHORT, "--strategy", "gradcache", "--dropout", "0.2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1] == "global batch 24 as micro-batches 2 x 9 + 6 (strategy=gradcache), seed 0"
    assert lines[2].split() == ["step", "max", "|gap|", "bound", "gap/bound", "idle/bound",
                                "(gradients)"]
    assert [line.split()[0] for line in lines[3:6]] == ["1", "2", "3"]
    assert all(float(line.split()[3]) <= 1 < float(line.split()[4]) for line in lines[3:6])
    assert lines[6:] == [EQUIVALENT]


@pytest.mark.parametrize("strategy, reasons", [
    ("naive", [REASONS["negatives"]]),
    ("bank", [REASONS["negatives"], REASONS["bank"]]),
])
def test_naive_and_bank_exit_1_with_their_reasons(capsys, strategy, reasons):
    assert minigrad_check([*SHORT, "--strategy", strategy]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[-1 - len(reasons):] == [f"{NOT_EQUIVALENT}:", *(f"  - {r}" for r in reasons)]
    assert all(float(line.split()[3]) > 1e6 for line in lines[3:6])  # gap / bound


def test_one_micro_batch_makes_naive_exact_and_the_bank_differs_from_its_second_update(capsys):
    assert minigrad_check([*SHORT, "--strategy", "naive", "--micro-batches", "1"]) == 0
    capsys.readouterr()
    assert minigrad_check([*SHORT, "--strategy", "bank", "--micro-batches", "1", "--json"]) == 1
    result = json.loads(capsys.readouterr().out)
    assert result["updates"][0]["ratio"] == 0 and result["updates"][1]["ratio"] > 1e6
    assert result["reasons"] == [REASONS["bank"]]


def test_a_gradient_within_its_bound_of_0_exits_3(capsys, monkeypatch):
    """A bound 1e30 times the derived one holds the whole full-batch gradient: a strategy
    that accumulates nothing would pass too, so there is no verdict."""
    def loose(*args, **kwargs):
        bound, rest = derived(*args, **kwargs)
        return {key: 1e30 * value for key, value in bound.items()}, rest

    derived = contrastive_check.gradcache_bound
    monkeypatch.setattr(contrastive_check, "gradcache_bound", loose)
    assert minigrad_check([*SHORT, "--strategy", "gradcache"]) == 3
    lines = capsys.readouterr().out.splitlines()
    assert lines[-2] == f"{NO_VERDICT}:"
    assert lines[-1].startswith("  - the full-batch gradient was within the floating-point "
                                "bound of 0 (|gradient| / bound at most ")
    assert all(float(line.split()[4]) <= 1 for line in lines[3:6])  # idle / bound


@pytest.mark.parametrize("argv, message", [
    (["--strategy", "micro"], "--strategy must be one of 'naive', 'gradcache', 'bank', got "
                              "'micro'"),
    (["--sizes", "30,4"], "--sizes must list at least 2 widths, the first the pairs' width 32, "
                          "got [30, 4]"),
    (["--micro-batch", "70"], "--micro-batch must be an integer in [1, --global-batch 64], "
                              "got 70"),
    (["--global-batch", "1"], "--global-batch must be an integer in [2, 1348], got 1"),
    (["--normalize", "sum"], "--normalize must be items with --loss contrastive, got sum"),
    (["--ignore-fraction", "0.2"], "--ignore-fraction must be 0.0 with --loss contrastive, "
                                   "got 0.2"),
    (["--norm", "batch"], "--norm must be one of 'none', 'group', 'layer', got 'batch'"),
    (["--lr", "1e300", "--steps", "2"], "update refused: loss of the global batch is nan"),
])
def test_a_bad_value_is_one_line_naming_the_flag_and_exit_2(capsys, argv, message):
    with pytest.raises(SystemExit) as info:
        minigrad_check(["--loss", "contrastive", *argv])
    out, err = capsys.readouterr()
    assert info.value.code == 2 and out == ""
    assert err.startswith(f"minigrad check: error: {message}")
    assert err.endswith(" (see minigrad check --help)\n") and err.count("\n") == 1


@pytest.mark.parametrize("argv, message", [
    (["--strategy", "gradcache", "--sizes", "3,4", "--micro-batch", "2"],
     "--strategy gradcache is for --loss contrastive, got --loss cross-entropy"),
    (["--micro-batch", "2"], "the following arguments are required: --sizes"),
])
def test_the_other_losses_still_need_their_flags(capsys, argv, message):
    with pytest.raises(SystemExit) as info:
        minigrad_check(argv)
    assert info.value.code == 2
    assert capsys.readouterr().err.startswith(f"minigrad check: error: {message}")


def test_the_command_with_its_defaults():
    env = dict(os.environ, PYTHONWARNINGS="error")  # no warning may reach the user
    done = subprocess.run([sys.executable, "-m", "minigrad", "check", "--loss", "contrastive",
                           "--steps", "2", "--json"], capture_output=True, text=True,
                          timeout=120, env=env)
    assert (done.returncode, done.stderr) == (0, "")
    result = json.loads(done.stdout)
    assert result["config"]["strategy"] == "gradcache" and result["sizes"] == [23, 23, 18]
    assert result["config"]["sizes"] == [32, 16, 8]
