"""``minigrad precision``: the error table (dtype x buffer x order x scale x K), printed and
written as JSON; exit status 2 with one line on a bad value."""

import json
import subprocess
import sys

import pytest

from minigrad.apps import cli
from minigrad.studies.precision import sums as precision


def test_the_table_and_its_json_are_the_analysis_rows(tmp_path, capsys):
    path = tmp_path / "table.json"
    assert cli.main(["precision", "--dtypes", "float16", "--k", "4,64", "--json",
                     str(path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    saved = json.loads(path.read_text())
    rows = precision.table(("float16",), (4, 64), precision.SCALES)
    assert saved["rows"] == json.loads(json.dumps(rows))
    assert len(lines) == 1 + len(rows) == 1 + 3 * 2 * 2 * 2
    assert lines[0].split()[:5] == ["dtype", "buffer", "order", "scale", "K"]
    first = lines[1].split()
    assert first[:5] == ["float16", "param", "sum_then_divide", "1", "4"]
    assert float(first[5]) == pytest.approx(rows[0]["relative_error"], rel=0.01)


def test_the_default_table_is_the_analysis_default_table(tmp_path, capsys):
    # What notebook 10 shows (it calls precision.table() and checks the same file).
    path = tmp_path / "all.json"
    assert cli.main(["precision", "--json", str(path)]) == 0
    assert json.loads(path.read_text())["rows"] == json.loads(json.dumps(precision.table()))
    assert len(capsys.readouterr().out.splitlines()) == 1 + 3 * 3 * 2 * 2 * 6


def test_an_overflow_is_written_as_null_and_printed_as_overflow(tmp_path, capsys):
    path = tmp_path / "t.json"
    assert cli.main(["precision", "--dtypes", "float16", "--k", "1024", "--json",
                     str(path)]) == 0
    out = capsys.readouterr().out
    rows = json.loads(path.read_text())["rows"]
    over = [r for r in rows if r["relative_error"] is None]
    assert over and all(r["scale"] == 256.0 and r["order"] == "sum_then_divide" for r in over)
    assert "overflow" in out


@pytest.mark.parametrize("argv, text", [
    (["--dtypes", "float8"], "'float8' is not one of ['float16', 'bfloat16', 'float32']"),
    (["--dtypes", "float16,"], "expected comma-separated dtypes"),
    (["--k", "0"], "must be an integer in [1, 16384], got 0"),
    (["--k", "4,x"], "expected an integer, got 'x'"),
    (["--json", "/no/such/folder/t.json", "--k", "1"], "cannot write"),
])
def test_bad_values_exit_2_with_one_line(argv, text, capsys):
    with pytest.raises(SystemExit) as exit:
        cli.main(["precision", *argv])
    err = capsys.readouterr().err
    assert exit.value.code == 2 and len(err.splitlines()) == 1 and text in err


def test_the_installed_command_runs():
    done = subprocess.run([sys.executable, "-c", "from minigrad.apps.cli import main; "
                           "raise SystemExit(main())", "precision", "--k", "1,4"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert len(done.stdout.splitlines()) == 1 + 3 * 3 * 2 * 2 * 2
