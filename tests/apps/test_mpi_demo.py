"""``minigrad mpi-demo``: one real 2-rank launch (``mpi_demo.launch``) whose printed verdicts
and communication table are checked; the flags are checked without MPI."""

import re

import pytest
from helpers import require_mpi

from minigrad.apps import cli, mpi_demo


@pytest.fixture(scope="module")
def demo():
    require_mpi()
    status, out, err = mpi_demo.launch(2, ["-m", "minigrad", "mpi-demo", "--quick"],
                                       timeout=240)
    return status, out.splitlines(), err


def test_two_ranks_are_full_batch_training_and_the_mean_of_means_is_not(demo):
    status, lines, err = demo
    assert status == 0, err[-3000:]
    assert lines[1] == ("over 2 ranks of MPI: shards [51, 77], micro-batches [20, 20, 11] and "
                        "[20, 20, 20, 17].")
    rows = {line[:32].strip(): line[32:] for line in lines if line[:32].strip()}
    assert rows["2 ranks, accumulate.distributed"].endswith("IS full-batch training (within "
                                                          "the bound)")
    assert rows["mean of per-rank means"].endswith("NOT full-batch training (one-process "
                                                   "simulation)")
    gap_of_means = float(rows["mean of per-rank means"].split()[1])
    assert gap_of_means > 1e3 * float(rows["2 ranks, accumulate.distributed"].split()[1])


def test_one_allreduce_of_the_gradient_per_update_however_many_micro_batches(demo):
    status, lines, _ = demo
    start = next(i for i, line in enumerate(lines) if line.startswith("communication"))
    n_params = int(re.search(r"\((\d+) float64 parameters\)", lines[start])[1])
    table = [[int(v) for v in line.split()] for line in lines[start + 2:start + 6]]
    assert [row[0] for row in table] == [1, 2, 4, 8]
    assert all(row[1:3] == [1, 8 * n_params] for row in table)
    assert len({tuple(row[3:]) for row in table}) == 1  # the small allgathers do not grow


@pytest.mark.parametrize("argv, text", [
    (["--micro-batch", "0"], "argument --micro-batch: must be a positive int, got 0"),
    (["--optimizer", "lbfgs"], "invalid choice: 'lbfgs'"),
])
def test_a_bad_flag_exits_2_before_mpi_starts(capsys, argv, text):
    with pytest.raises(SystemExit) as info:
        cli.main(["mpi-demo", *argv])
    assert info.value.code == 2
    assert text in capsys.readouterr().err
