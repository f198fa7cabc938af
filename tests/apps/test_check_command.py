"""``minigrad check``: a table per update and the verdict, or one JSON object; exit status 0
(equivalent), 1 (not, with the reasons), 2 (a bad value, in one line naming the flag) or 3
(no verdict, with the reasons).

Most tests parse and run in this process, through a parser built as ``minigrad``'s is;
the last ones run ``python -m minigrad check`` itself."""

import json
import os
import subprocess
import sys

import pytest
from helpers import minigrad_check

from minigrad.analysis.causes import EQUIVALENT, NOT_EQUIVALENT, REASONS
from minigrad.analysis.power import NO_VERDICT

SMALL = ["--sizes", "3,6,4", "--global-batch", "10", "--steps", "3"]


def test_an_equivalent_set_up_exits_0_with_a_row_per_update(capsys):
    assert minigrad_check([*SMALL, "--norm", "group", "--micro-batch", "4"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1] == ("global batch 10 as micro-batches 2 x 4 + 2 (normalize=items, "
                        "strategy=micro), seed 0")
    assert lines[2].split() == ["step", "max", "|gap|", "bound", "gap/bound", "idle/bound"]
    assert [line.split()[0] for line in lines[3:6]] == ["1", "2", "3"]
    assert all(float(line.split()[3]) <= 1 < float(line.split()[4]) for line in lines[3:6])
    assert lines[6:] == [EQUIVALENT]


def test_batchnorm_exits_1_with_the_reason(capsys):
    assert minigrad_check([*SMALL, "--norm", "batch", "--micro-batches", "2"]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[-2:] == [f"{NOT_EQUIVALENT}:", f"  - {REASONS['batchnorm']}"]
    assert all(float(line.split()[3]) > 1 for line in lines[3:6])  # gap / bound


def test_json_is_one_object(capsys):
    argv = [*SMALL, "--micro-batch", "4", "--normalize", "micro_batch_mean", "--json"]
    assert minigrad_check(argv) == 1
    result = json.loads(capsys.readouterr().out)
    assert result["sizes"] == [4, 4, 2] and len(result["updates"]) == 3
    assert result["reasons"] == [REASONS["uneven"]] and result["equivalent"] is False


def test_one_output_class_exits_3_with_the_reason(capsys):
    """Cross-entropy over one class is identically 0: nothing moves, nothing could fail."""
    argv = ["--sizes", "3,6,1", "--global-batch", "10", "--steps", "3", "--micro-batch", "4"]
    assert minigrad_check(argv) == 3
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[3:] for line in lines[3:6]] == [["0", "0"]] * 3  # gap, idle / bound
    assert lines[6:] == [
        f"{NO_VERDICT}:",
        "  - cross-entropy over one output class is identically 0 (the log-softmax of a single "
        "logit), so every gradient is 0: give the model at least 2 outputs",
        "  - the full-batch run never moved the parameters, so any accumulation rule, even a "
        "wrong one, gives the same gap of 0"]


M4 = ["--micro-batch", "4"]


@pytest.mark.parametrize("argv, message", [
    (["--sizes", "3,0,4", *M4], "argument --sizes: sizes[1] must be a positive int, got 0"),
    (["--sizes", "3;4", *M4], "argument --sizes: expected comma-separated integers"),
    (["--sizes", "3", *M4], "argument --sizes: expected at least 2 widths"),
    (["--micro-batch", "0"], "argument --micro-batch: must be a positive int, got 0"),
    (["--global-batch", "-4", *M4], "argument --global-batch: must be a positive int, got -4"),
    (["--micro-batch", "11"], "--micro-batch must be at most --global-batch 10, got 11"),
    (["--micro-batches", "12"], "--micro-batches must be at most --global-batch 10, got 12"),
    (["--micro-batch", "2", "--micro-batches", "5"],
     "argument --micro-batches: not allowed with argument --micro-batch"),
    ([], "one of the arguments --micro-batch --micro-batches is required"),
    (["--optimizer", "rmsprop", *M4], "argument --optimizer: invalid choice: 'rmsprop' "
                                      "(choose from 'sgd', 'momentum', 'adam', 'adamw')"),
    (["--norm", "instance", *M4], "argument --norm: invalid choice: 'instance'"),
    (["--loss", "nll", *M4], "argument --loss: invalid choice: 'nll'"),
    (["--activation", "elu", *M4], "argument --activation: invalid choice: 'elu'"),
    (["--lr", "nan", *M4], "argument --lr: must be a finite number with --lr >= 0, got nan"),
    (["--lr", "inf", *M4], "argument --lr: must be a finite number with --lr >= 0, got inf"),
    (["--lr", "-0.1", *M4], "argument --lr: must be a finite number with --lr >= 0, got -0.1"),
    (["--weight-decay", "-1", *M4], "argument --weight-decay: must be a finite number with "
                                    "--weight-decay >= 0, got -1.0"),
    (["--clip", "nan", *M4], "argument --clip: must be a finite number with --clip > 0, "
                             "got nan"),
    (["--dropout", "1.5", *M4], "argument --dropout: must be a finite number with "
                                "0 <= --dropout <= 1, got 1.5"),
    (["--ignore-fraction", "-0.1", *M4], "argument --ignore-fraction: must be a finite "
                                         "number with 0 <= --ignore-fraction <= 1, got -0.1"),
    (["--steps", "x", *M4], "argument --steps: expected an integer, got 'x'"),
    (["--loss", "mse", "--ignore-fraction", "0.2", *M4],
     "--ignore-fraction must be 0 with --loss mse (MSE has no ignored targets), got 0.2"),
    (["--strategy", "exact_batchnorm", "--normalize", "sum", *M4],
     "--strategy exact_batchnorm needs --normalize items, got --normalize sum"),
    (["--norm", "batch", "--micro-batch", "3"],
     "--norm batch with --strategy micro needs at least 2 samples in every micro-batch, but "
     "--micro-batch 3 splits --global-batch 10 into micro-batches as small as 1; choose "
     "another split or --strategy exact_batchnorm"),
    (["--lr", "1e300", *M4], "the full-batch run stopped at update 2: a micro-batch's loss "
                             "is not finite (the window's loss sum is nan), so there is "
                             "nothing to compare with: lower --lr"),
])
def test_a_bad_value_is_one_line_naming_the_flag_and_exit_2(capsys, argv, message):
    with pytest.raises(SystemExit) as info:
        minigrad_check(["--sizes", "3,6,4", "--global-batch", "10", *argv])
    out, err = capsys.readouterr()
    assert info.value.code == 2 and out == ""
    assert err.startswith(f"minigrad check: error: {message}")
    assert err.endswith(" (see minigrad check --help)\n") and err.count("\n") == 1


def test_help_shows_an_example(capsys):
    with pytest.raises(SystemExit) as info:
        minigrad_check(["--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    assert "  minigrad check --sizes 64,32,10 --norm batch --micro-batch 16" in out
    assert "3: no verdict" in " ".join(out.split())


def test_the_choices_are_the_registries_and_micro_batches_is_a_count(capsys, monkeypatch):
    from minigrad import optim
    from minigrad.accumulate import STRATEGIES, Micro, strategy

    class Plain(Micro):
        name, kind, label = "plain_too", "plain", "another plain strategy"

    monkeypatch.setitem(STRATEGIES, "plain_too", Plain)  # read when the parser is built
    assert strategy.names("plain") + strategy.names("contrastive") == (
        "micro", "exact_batchnorm", "plain_too", "naive", "gradcache", "bank")
    with pytest.raises(SystemExit):
        minigrad_check(["--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "--strategy {micro,exact_batchnorm,plain_too,naive,gradcache,bank}" in help_text
    assert f"--optimizer {{{','.join(optim.OPTIMIZERS)}}}" in help_text
    assert "--micro-batches MICRO_BATCHES" in help_text
    assert minigrad_check([*SMALL, "--micro-batches", "2", "--strategy", "plain_too",
                           "--json"]) == 0
    config = json.loads(capsys.readouterr().out)["config"]
    assert (config["strategy"], config["num_micro_batches"]) == ("plain_too", 2)


# ----- python -m minigrad check ------------------------------------------------------------

def run(*argv):
    env = dict(os.environ, PYTHONWARNINGS="error")  # no warning may reach the user
    return subprocess.run([sys.executable, "-m", "minigrad", "check", *argv],
                          capture_output=True, text=True, timeout=120, env=env)


@pytest.mark.parametrize("extra, status, reason", [
    (["--norm", "group"], 0, None),
    (["--norm", "layer", "--optimizer", "adam", "--lr", "0.001"], 0, None),
    (["--norm", "none", "--ignore-fraction", "0.3"], 0, None),
    (["--norm", "batch"], 1, "BatchNorm normalises each micro-batch"),
    (["--norm", "batch", "--strategy", "exact_batchnorm"], 0, None),
    (["--normalize", "micro_batch_mean"], 1, "divides uneven micro-batches by their count"),
    # an even split 5, 5, but 3 ignored targets: the halves keep different numbers of items
    (["--normalize", "micro_batch_mean", "--micro-batch", "5", "--ignore-fraction", "0.3"], 1,
     "kept targets"),
])
def test_the_command_exits_0_or_1(extra, status, reason):
    # --micro-batch 4 splits the global batch of 10 unevenly: 4, 4, 2
    done = run(*SMALL, "--micro-batch", "4", *extra, "--json")
    assert (done.returncode, done.stderr) == (status, "")
    report = json.loads(done.stdout)
    assert report["equivalent"] is (status == 0)
    assert reason is None or any(reason in r for r in report["reasons"])


@pytest.mark.parametrize("extra, cause", [
    (["--sizes", "3,6,1"], "cross-entropy over one output class is identically 0"),
    (["--sizes", "3,6,4", "--lr", "0"], "lr is 0, so no update moves the parameters"),
])
def test_the_command_exits_3_for_no_verdict(extra, cause):
    done = run("--global-batch", "10", "--steps", "3", "--micro-batch", "4", *extra, "--json")
    assert (done.returncode, done.stderr) == (3, "")
    report = json.loads(done.stdout)
    assert report["equivalent"] is None and report["reasons"][0].startswith(cause)
    assert report["verdict"].startswith(f"{NO_VERDICT}: {cause}")


def test_the_command_exits_2_in_one_line():
    done = run("--sizes", "3,4", "--micro-batch", "7", "--global-batch", "4")
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == ("minigrad check: error: --micro-batch must be at most "
                           "--global-batch 4, got 7 (see minigrad check --help)\n")


# ----- --model charlm ------------------------------------------------------------------------
LM = ["--model", "charlm", "--vocab-size", "7", "--context", "2", "--embedding-dim", "3",
      "--hidden", "8", "--max-length", "5", "--global-batch", "6", "--steps", "3"]


def test_the_language_model_exits_0_with_its_set_up_line(capsys):
    assert minigrad_check([*LM, "--micro-batch", "4"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == ("model=charlm: CharMLP(vocab_size=7, context=2, embedding_dim=3, "
                        "hidden=8), tanh, sequences of 1-5 tokens (padding ignored), "
                        "cross-entropy, sgd lr=0.01, float64")
    assert lines[1] == ("global batch 6 sequences as micro-batches 4 + 2 (normalize=items, "
                        "strategy=micro), seed 0")
    assert lines[2].split() == ["step", "max", "|gap|", "bound", "gap/bound", "idle/bound"]
    assert all(float(line.split()[3]) <= 1 < float(line.split()[4]) for line in lines[3:6])
    assert lines[6:] == [EQUIVALENT]


def test_the_language_models_textbook_rule_exits_1_and_lr_0_exits_3(capsys):
    assert minigrad_check([*LM, "--micro-batches", "2", "--normalize", "micro_batch_mean"]) == 1
    assert capsys.readouterr().out.splitlines()[-2:] == [f"{NOT_EQUIVALENT}:",
                                                         f"  - {REASONS['tokens']}"]
    assert minigrad_check([*LM, "--micro-batch", "4", "--lr", "0"]) == 3
    lines = capsys.readouterr().out.splitlines()
    assert lines[-3:] == [f"{NO_VERDICT}:", "  - lr is 0, so no update moves the parameters",
                          "  - the full-batch run never moved the parameters, so any "
                          "accumulation rule, even a wrong one, gives the same gap of 0"]


CHARLM = ["--model", "charlm", "--global-batch", "4", "--micro-batch", "2"]


@pytest.mark.parametrize("argv, message", [
    ([*CHARLM, "--sizes", "3,4"], "--sizes applies to --model mlp only; with --model charlm "
                                  "give --vocab-size, --context, --embedding-dim, --hidden and "
                                  "--max-length, got [3, 4]"),
    ([*CHARLM, "--activation", "relu"], "--activation must be 'tanh' with --model charlm "
                                        "(CharMLP's one nonlinearity is tanh), got 'relu'"),
    ([*CHARLM, "--norm", "batch"], "--norm must be 'none' with --model charlm (CharMLP has no "
                                   "normalisation), got 'batch'"),
    ([*CHARLM, "--dropout", "0.5"], "--dropout must be 0 with --model charlm (CharMLP has no "
                                    "Dropout), got 0.5"),
    ([*CHARLM, "--loss", "mse"], "--loss must be 'cross-entropy' with --model charlm (the next "
                                 "token is a class), got 'mse'"),
    ([*CHARLM, "--ignore-fraction", "0.2"], "--ignore-fraction must be 0 with --model charlm "
                                            "(the ignored targets are the padding of sequences "
                                            "of different lengths), got 0.2"),
    ([*CHARLM, "--loss", "contrastive"], "--loss must be one of 'cross-entropy', 'mse', got "
                                         "'contrastive'"),
    ([*CHARLM, "--vocab-size", "1"], "argument --vocab-size: must be an integer >= 2, got 1"),
    ([*CHARLM, "--context", "0"], "argument --context: must be a positive int, got 0"),
    ([*CHARLM, "--max-length", "x"], "argument --max-length: expected an integer, got 'x'"),
    (["--model", "gpt"], "argument --model: invalid choice: 'gpt' (choose from 'mlp', 'charlm')"),
    (["--sizes", "3,6,4", "--micro-batch", "2", "--vocab-size", "5"],
     "--vocab-size applies to --model charlm only, got 5"),
    (["--loss", "contrastive", "--hidden", "8"], "--hidden applies to --model charlm only, got 8"),
])
def test_the_language_models_bad_values_are_one_line_and_exit_2(capsys, argv, message):
    with pytest.raises(SystemExit) as info:
        minigrad_check(argv)
    out, err = capsys.readouterr()
    assert info.value.code == 2 and out == ""
    assert err == f"minigrad check: error: {message} (see minigrad check --help)\n"


def test_help_lists_the_language_models_options(capsys):
    with pytest.raises(SystemExit):
        minigrad_check(["--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "--model {mlp,charlm}" in help_text
    for flag in ("--vocab-size VOCAB_SIZE", "--context CONTEXT", "--embedding-dim EMBEDDING_DIM",
                 "--hidden HIDDEN", "--max-length MAX_LENGTH"):
        assert flag in help_text
    assert "minigrad check --model charlm --micro-batches 4 --normalize micro_batch_mean" in \
        help_text


def test_the_command_checks_the_language_model():
    done = run(*LM, "--micro-batches", "2", "--normalize", "micro_batch_mean", "--json")
    assert (done.returncode, done.stderr) == (1, "")
    report = json.loads(done.stdout)
    assert report["config"]["model"] == "charlm" and report["sizes"] == [3, 3]
    assert report["reasons"] == [REASONS["tokens"]]
