"""The apps layer's commands: ``minigrad demo`` and ``minigrad plan`` (``check`` has its own
module), bad values on the command line, and the README's examples (so that what the README
shows is what the code does)."""

import doctest
import json
import math
import os
import pathlib
import re
import subprocess
import sys

import pytest

from minigrad.apps import cli

README = pathlib.Path(__file__).resolve().parents[2] / "README.md"


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


def test_sizes_too_large_for_memory_exit_2_with_one_line(capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["plan", "--sizes", "100000000,10", "--global-batch", "100000000",
                  "--memory", "1GB"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not enough memory" in err[0]


# ----- minigrad demo ----------------------------------------------------------------------------
def _run(*argv, cwd=None):
    """``python -m minigrad ARGV`` in a subprocess, as a user runs it."""
    return subprocess.run([sys.executable, "-m", "minigrad", *argv], capture_output=True,
                          text=True, cwd=cwd, timeout=120)


def _demo_rows(text):
    """The demo table's rows by run: the machine-independent columns (loss, test accuracy,
    verdict); gaps, times and memory depend on the BLAS kernel and the machine."""
    rows = {}
    for line in text.splitlines():
        fields = line[24:].split()
        if len(fields) > 6 and re.fullmatch(r"\d+\.\d{4}", fields[0]):
            rows[line[:24].strip()] = {"loss": fields[0], "accuracy": fields[1],
                                       "verdict": " ".join(fields[6:])}
    return rows


def test_the_readme_shows_what_the_demo_prints_and_the_demo_draws_its_figure(tmp_path):
    """One run of the demo (the README's, 30 s): the README block is what it prints, and its
    verdicts and figure are what ``demo`` promises."""
    block = README.read_text().split("<!-- demo:start -->")[1].split("<!-- demo:end -->")[0]
    done = _run("demo", "--out", str(tmp_path / "figures"), cwd=README.parent)
    assert done.returncode == 0, done.stderr
    rows = _demo_rows(done.stdout)
    assert _demo_rows(block) == rows  # `make readme` regenerates it
    assert len(rows) == 8
    for run in ("no norm, item-weighted", "BatchNorm, exact mode", "GroupNorm, accumulated"):
        assert rows[run]["verdict"] == "IS full-batch training (within the bound)"
    assert rows["no norm, textbook mean"]["verdict"] == \
        "NOT full-batch training: the textbook rule divides uneven micro-batches by their count"
    assert rows["BatchNorm, accumulated"]["verdict"] == \
        "NOT full-batch training: BatchNorm normalises each micro-batch with its own statistics"
    assert "training: GroupNorm, accumulated" in done.stdout  # plain progress lines: no tty
    png = tmp_path / "figures" / "demo.png"
    assert f"figure: {png}" in done.stdout
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 20_000


@pytest.mark.parametrize("argv, flag", [
    (["demo", "--seed", "-1"], "--seed"),
    (["demo", "--seed", "1.5"], "--seed"),
    (["demo", "--out", "README.md"], "--out"),
    (["demo", "--fast"], "--fast"),
    (["fly"], "fly"),
])
def test_demo_bad_values_are_one_line_with_exit_status_2(argv, flag):
    done = _run(*argv, cwd=README.parent)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and flag in lines[0] and "Traceback" not in done.stderr


def test_python_m_minigrad_and_the_script_behave_identically():
    script = pathlib.Path(sys.executable).parent / "minigrad"  # installed by pip install -e
    for argv in (["--help"], ["demo", "--help"], ["demo", "--seed", "-1"]):
        module = _run(*argv)
        command = subprocess.run([str(script), *argv], capture_output=True, text=True,
                                 timeout=60)
        assert (module.returncode, module.stdout, module.stderr) == \
            (command.returncode, command.stdout, command.stderr)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a pseudo-terminal via pty")
def test_demo_shows_a_progress_bar_on_a_terminal():
    import fcntl
    import pty
    import struct
    import termios

    pid, fd = pty.fork()
    if pid == 0:  # the child: a 120-column terminal (tqdm draws nothing at width 0)
        fcntl.ioctl(0, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
        os.chdir(README.parent)
        os.execv(sys.executable, [sys.executable, "-m", "minigrad", "demo", "--quick",
                                  "--out", "build"])
    out = b""
    while True:
        try:
            chunk = os.read(fd, 4096)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        out += chunk
    _, status = os.waitpid(pid, 0)
    text = out.decode(errors="replace")
    assert os.waitstatus_to_exitcode(status) == 0, text[-2000:]
    bars = [part for part in text.split("\r") if "%|" in part and "update/s" in part]
    assert len(bars) > 3 and "rounding bounds" in bars[-1]
    assert "\ntraining: " not in text  # plain lines only when the output is not a terminal


def test_plan_runs_as_a_command_with_an_example_in_its_help():
    done = _run(*PLAN, "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["micro_batch_size"] >= 1
    assert "example: minigrad plan --sizes" in _run("plan", "--help").stdout


# ----- minigrad plan --recompute ------------------------------------------------------------------
DEEP = ["plan", "--sizes", "16,256,32,256,10", "--global-batch", "128", "--memory", "1MB"]


def test_plan_recompute_auto_lists_the_choices_it_measured_and_marks_its_pick(capsys):
    assert cli.main([*DEEP, "--recompute", "auto"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[2].startswith("recompute:") and "(--recompute auto;" in lines[2]
    choices = [line for line in lines if line.startswith("  recompute ")]
    assert choices and sum(line.endswith("<- chosen") for line in choices) == 1
    chosen = next(line for line in choices if line.endswith("<- chosen"))
    assert f"micro-batch {lines[1].split()[2]:>6}" in chosen


def test_plan_recompute_json_has_the_choice_and_its_measured_times(capsys):
    assert cli.main([*DEEP, "--recompute", "all", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["recompute"] == [[0, 0], [1, 1], [2, 2]]
    assert result["segments"] == [[0, 2], [2, 4], [4, 6]]
    assert result["measured_peak"] <= result["budget"] == 1_000_000
    assert result["seconds_per_update"] > 0 and result["seconds_without_recompute"] > 0
    assert [c["recompute"] for c in result["candidates"]] == [result["recompute"]]


@pytest.mark.parametrize("argv, words", [
    (["--recompute", "some"], "--recompute"),
    (["--sizes", "8,4", "--recompute", "all"], "has none; give --recompute none"),
])
def test_plan_recompute_bad_values_exit_2_with_one_line(capsys, argv, words):
    with pytest.raises(SystemExit) as exit_info:
        cli.main([*PLAN, *argv])
    assert exit_info.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and words in lines[0] and lines[0].startswith("minigrad plan: error:")
