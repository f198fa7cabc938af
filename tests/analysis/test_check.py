"""check(): accumulated training judged against the floating-point bound, update by update,
with the verdict and its reasons in words, or no verdict where the comparison could not have
failed. Small set-ups (an MLP 3-6-4, batches of 10, 3 updates): each check takes a few
hundredths of a second."""

import json
import re

import numpy as np
import pytest

from minigrad import Parameter, nn, optim
from minigrad.accumulate import split_sizes
from minigrad.analysis import charlm
from minigrad.analysis import check as checking
from minigrad.analysis.causes import EQUIVALENT, NOT_EQUIVALENT, REASONS, relu_flips
from minigrad.analysis.check import check
from minigrad.analysis.power import IDLE, NO_VERDICT, idle_step
from minigrad.analysis.trajectory import Diverged

SMALL = dict(global_batch=10, steps=3)


def within(result):
    return all(row["ratio"] is not None and row["ratio"] <= 1 for row in result["updates"])


@pytest.mark.parametrize("norm", ["none", "group", "layer"])
@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_the_item_rule_is_full_batch_training_on_an_uneven_split_with_ignored_targets(
        norm, optimizer):
    result = check([3, 6, 4], norm=norm, optimizer=optimizer, ignore_fraction=0.3,
                   micro_batch=4, **SMALL)
    assert result["sizes"] == [4, 4, 2]
    assert result["equivalent"] is True and within(result)
    assert result["reasons"] == [] and result["notes"] == []
    assert result["verdict"] == EQUIVALENT
    assert [row["step"] for row in result["updates"]] == [1, 2, 3]
    # it could have failed: a run that accumulates nothing is far beyond the bound
    assert max(row["idle_ratio"] for row in result["updates"]) > 1e6


@pytest.mark.parametrize("options, reason", [
    (dict(norm="batch", micro_batch=5), "batchnorm"),
    (dict(normalize="micro_batch_mean", micro_batch=4), "uneven"),
    (dict(normalize="micro_batch_mean", num_micro_batches=2, ignore_fraction=0.3), "kept"),
    (dict(normalize="sum", num_micro_batches=2, optimizer="adam", lr=1e-3), "sum"),
])
def test_what_breaks_equivalence_is_named_and_measured(options, reason):
    """A wrong rule on a set-up that moves (the idle run beyond the bound) is NOT, never no
    verdict."""
    result = check([3, 6, 4], **options, **SMALL)
    assert result["equivalent"] is False and not within(result)
    assert max(row["idle_ratio"] for row in result["updates"]) > 1
    assert result["reasons"] == [REASONS[reason]]
    assert result["verdict"] == f"{NOT_EQUIVALENT}: {REASONS[reason]}"
    assert max(row["ratio"] for row in result["updates"]) > 1e3  # far beyond rounding


def test_exact_batchnorm_is_full_batch_training():
    result = check([3, 6, 6, 4], norm="batch", strategy="exact_batchnorm", micro_batch=4, **SMALL)
    assert result["equivalent"] and result["reasons"] == []


def test_batchnorm_over_one_micro_batch_is_full_batch_training():
    """Nothing is predicted (one micro-batch sees the whole batch's statistics)."""
    result = check([3, 6, 4], norm="batch", micro_batch=10, **SMALL)
    assert result["sizes"] == [10] and result["equivalent"] and result["notes"] == []


def test_the_textbook_rule_on_even_micro_batches_differs_by_rounding_only():
    result = check([3, 6, 4], normalize="micro_batch_mean", num_micro_batches=2, **SMALL)
    assert result["equivalent"] and result["reasons"] == []


def test_a_predicted_difference_that_does_not_show_is_said():
    """Micro-batches of 2 and 1 samples, one of 3 targets ignored: where the ignored one
    falls in the first micro-batch both hold 1 kept target, and the textbook rule is exact."""
    options = dict(sizes=[2, 3, 2], global_batch=3, micro_batch=2, ignore_fraction=1 / 3,
                   normalize="micro_batch_mean", steps=2)
    seed = next(s for s in range(100) if all(
        np.sum(y[:2] == -100) == 1
        for _, y in checking.batches(checking.configuration(**options, seed=s))))
    result = check(**options, seed=seed)
    assert result["equivalent"] and result["reasons"] == []
    assert result["notes"] == [
        f"the set-up predicts a difference ({REASONS['uneven']}), but the measured gap stayed "
        f"within the bound at every update: the micro-batches always held equal numbers of "
        f"items, so the textbook rule was exact here"]


def test_an_accumulated_run_that_diverges_is_a_reason():
    """normalize='sum' multiplies the gradient by 32 items (16 samples x 2 outputs)."""
    result = check([2, 8, 2], loss="mse", normalize="sum", global_batch=16, num_micro_batches=2,
                   lr=0.5, steps=10)
    assert result["equivalent"] is False
    assert result["reasons"][0] == REASONS["sum"]
    assert result["reasons"][1].startswith("the accumulated run stopped at update ")
    assert len(result["updates"]) < 10


def test_a_full_batch_run_that_diverges_cannot_be_judged():
    with pytest.raises(Diverged, match="the full-batch run stopped at update") as info:
        check([3, 6, 4], lr=1e300, micro_batch=4, **SMALL)
    assert info.value.run == "full-batch"


@pytest.mark.parametrize("options", [
    dict(dtype="float32", activation="gelu", norm="layer", optimizer="adamw",
         weight_decay=0.01, clip=1.0),
    dict(loss="mse", optimizer="momentum", dropout=0.3, activation="tanh", norm="group"),
])
def test_more_set_ups_within_the_bound(options):
    assert check([3, 6, 4], micro_batch=3, **options, **SMALL)["equivalent"] is True


def test_the_result_is_json_with_the_documented_schema():
    result = check([3, 6, 4], norm="batch", micro_batch=5, clip=0.5, **SMALL)
    assert json.loads(json.dumps(result, allow_nan=False)) == result
    assert list(result) == ["config", "sizes", "updates", "equivalent", "reasons", "notes",
                            "verdict"]
    config = result["config"]
    assert list(config) == ["model", "sizes", "vocab_size", "context", "embedding_dim",
                            "hidden", "max_length", "activation", "norm", "dropout", "loss",
                            "ignore_fraction", "optimizer", "lr", "weight_decay", "clip",
                            "global_batch", "micro_batch", "num_micro_batches", "normalize",
                            "strategy", "steps", "dtype", "seed"]
    assert config["num_micro_batches"] is None and config["clip"] == 0.5
    assert config["model"] == "mlp" and config["vocab_size"] is None
    for row in result["updates"]:
        assert list(row) == ["step", "max_abs", "max_rel", "max_ulp", "bound", "ratio",
                             "idle_ratio"]
        assert type(row["step"]) is int
        assert all(type(row[key]) is float for key in list(row)[1:])
    assert type(result["equivalent"]) is bool and type(result["verdict"]) is str


ONE_CLASS = "cross-entropy over one output class is identically 0"
NEVER_MOVED = ("the full-batch run never moved the parameters, so any accumulation rule, even "
               "a wrong one, gives the same gap of 0")


@pytest.mark.parametrize("normalize", ["items", "micro_batch_mean", "sum"])
def test_one_output_class_gives_no_verdict_whatever_the_rule(normalize):
    """Cross-entropy over one class is identically 0, so every gradient is 0: the right rule
    and the wrong ones (the textbook rule on an uneven split, the sum) all pass alike."""
    result = check([3, 6, 1], normalize=normalize, micro_batch=4, **SMALL)
    assert result["equivalent"] is None
    assert all(row["ratio"] == 0 and row["idle_ratio"] == 0 for row in result["updates"])
    assert result["reasons"][0].startswith(ONE_CLASS) and result["reasons"][1:] == [NEVER_MOVED]
    assert result["verdict"] == f"{NO_VERDICT}: {'; '.join(result['reasons'])}"
    assert json.loads(json.dumps(result, allow_nan=False)) == result


def test_one_output_class_with_weight_decay_moves_only_as_the_idle_run():
    result = check([3, 6, 1], weight_decay=0.1, micro_batch=4, **SMALL)
    assert result["equivalent"] is None
    assert result["reasons"][0].startswith(ONE_CLASS)
    assert result["reasons"][1] == (f"the full-batch run moved exactly as {IDLE}, so any "
                                    f"accumulation rule, even a wrong one, gives the same gap")


def test_one_output_is_judged_where_its_loss_trains():
    """The rule reads the runs, not the sizes: MSE over one output has a gradient."""
    result = check([3, 6, 1], loss="mse", micro_batch=4, **SMALL)
    assert result["equivalent"] is True
    assert max(row["idle_ratio"] for row in result["updates"]) > 1e6


@pytest.mark.parametrize("optimizer", ["sgd", "adamw"])
def test_a_learning_rate_of_0_gives_no_verdict(optimizer):
    result = check([3, 6, 4], lr=0, optimizer=optimizer, weight_decay=0.1, micro_batch=4,
                   **SMALL)
    assert result["equivalent"] is None
    assert result["reasons"] == ["lr is 0, so no update moves the parameters", NEVER_MOVED]


def test_a_gradient_within_rounding_gives_no_verdict():
    """lr 1e-17 moves the parameters by a fraction of the bound: the textbook rule on an
    uneven split would pass too."""
    result = check([3, 6, 4], lr=1e-17, micro_batch=4, **SMALL)
    idle = max(row["idle_ratio"] for row in result["updates"])
    assert result["equivalent"] is None and 0 < idle <= 1
    assert result["reasons"] == [
        f"{IDLE} stays within the floating-point bound of the full-batch run at every update "
        f"(gap / bound at most {idle:.3g}): the gradient moved the parameters by less than "
        f"rounding may, so a wrong accumulation rule would pass too; a larger lr moves them "
        f"further"]
    assert check([3, 6, 4], lr=1e-17, micro_batch=4, normalize="micro_batch_mean",
                 **SMALL)["equivalent"] is None


def test_a_failure_is_not_swallowed_where_the_idle_run_stays_within_the_bound():
    """At lr 1e-17 the idle run is within the bound, but the sum rule multiplies the gradient
    by the 40 items of an update: its gap is measured beyond the bound, and that is NOT."""
    result = check([3, 6, 4], lr=1e-17, num_micro_batches=2, normalize="sum", **SMALL)
    assert all(row["idle_ratio"] <= 1 for row in result["updates"])
    assert result["equivalent"] is False and result["reasons"] == [REASONS["sum"]]


def test_the_idle_step_gives_the_optimizer_a_gradient_of_0():
    """SGD lr 0.5 with L2 decay 0.5: w = 2 - 0.5 * (0 + 0.5 * 2) = 1.5, decay alone."""
    w = Parameter(np.array([2.0]))
    idle_step(optim.SGD([w], 0.5, weight_decay=0.5))
    assert w.data.tolist() == [1.5] and w.grad.tolist() == [0.0]


@pytest.mark.parametrize("options, error, message", [
    (dict(micro_batch=11), ValueError, "micro_batch must be at most global_batch=10, got 11"),
    (dict(num_micro_batches=11), ValueError, "num_micro_batches must be at most global_batch=10"),
    (dict(), ValueError, "give exactly one of micro_batch and num_micro_batches"),
    (dict(micro_batch=2, num_micro_batches=5), ValueError, "give exactly one of"),
    (dict(micro_batch=0), ValueError, "micro_batch must be a positive int, got 0"),
    (dict(micro_batch=True), TypeError, "micro_batch must be a positive int, got bool True"),
    (dict(micro_batch=2, optimizer="rmsprop"), ValueError, "optimizer must be one of 'sgd'"),
    (dict(micro_batch=2, norm="instance"), ValueError, "norm must be one of 'none', 'batch'"),
    (dict(micro_batch=2, lr=float("nan")), ValueError, "lr must be a finite number"),
    (dict(micro_batch=2, dropout=1.5), ValueError, "dropout must be a finite number with 0"),
    (dict(micro_batch=2, loss="mse", ignore_fraction=0.2), ValueError,
     "ignore_fraction must be 0 with loss='mse'"),
    (dict(micro_batch=2, strategy="exact_batchnorm", normalize="sum"), ValueError,
     "strategy='exact_batchnorm' needs normalize='items', got normalize='sum'"),
    (dict(micro_batch=3, norm="batch"), ValueError,
     "micro_batch=3 splits global_batch=10 into micro-batches as small as 1"),
])
def test_bad_arguments_are_refused_by_name(options, error, message):
    with pytest.raises(error, match=message.replace("(", r"\(").replace(")", r"\)")):
        check([3, 6, 4], global_batch=10, steps=1, **options)


@pytest.mark.parametrize("sizes", [[3], [3, 0, 2], "3,4", 3])
def test_bad_sizes_are_refused(sizes):
    with pytest.raises((TypeError, ValueError), match="sizes"):
        check(sizes, micro_batch=1, global_batch=2, steps=1)


class BatchShift(nn.Module):
    """Adds 1e-9 when it sees more than 4 rows: a stand-in for a BLAS kernel, picked by the
    shape, that rounds a product differently in a big batch than in a small one."""

    def forward(self, h):
        return h + (1e-9 if h.shape[0] > 4 else 0.0)


def test_relu_flips_counts_inputs_that_change_sign_between_the_passes():
    x = np.array([[0.0, 1.0], [2.0, -3.0], [0.0, 0.0], [-1.0, 5.0], [0.0, 4.0], [1.0, 1.0]])
    model = nn.Sequential(BatchShift(), nn.ReLU())
    # Full batch (6 rows): every 0 becomes 1e-9 > 0; micro-batches of 3: they stay at 0.
    assert relu_flips(model, x, [3, 3], 0) == 4
    assert relu_flips(model, x, [6], 0) == 0
    assert relu_flips(nn.MLP([2, 3, 2], norm="batch"), x, [3, 3], 0) is None


# ----- the character-level language model (model="charlm") ----------------------------------
LM = dict(model="charlm", vocab_size=7, context=2, embedding_dim=3, hidden=8, max_length=5,
          global_batch=6, steps=3)


def token_counts(options):
    """The real tokens of each micro-batch at each update of a charlm set-up."""
    config = checking.configuration(**options)
    positions = config["max_length"] + 1
    edges = np.cumsum([0, *split_sizes(config["global_batch"], config["micro_batch"],
                                       config["num_micro_batches"])]) * positions
    return [[int(np.sum(y[a:b] != -100)) for a, b in zip(edges, edges[1:])]
            for _, y in checking.batches(config)]


def test_the_language_models_data_are_padded_windows_of_seeded_sequences():
    """Sequences of 1..max_length tokens in 1..V-1 and the boundary 0, one position per row,
    padded to max_length + 1 positions with ignored targets; the same seed, the same data."""
    config = checking.configuration(**LM, micro_batch=4)
    data = checking.batches(config)
    assert len(data) == 3
    for x, y in data:
        assert (x.shape, y.shape, x.dtype, y.dtype) == ((36, 2), (36,), np.int64, np.int64)
        for row, contexts in zip(y.reshape(6, 6), x.reshape(6, 6, 2)):
            n = int(np.sum(row != -100))
            assert 2 <= n <= 6 and np.all(row[n:] == -100) and row[n - 1] == 0
            assert np.all((row[:n - 1] >= 1) & (row[:n - 1] <= 6))
            assert contexts[0].tolist() == [0, 0] and contexts[1].tolist() == [0, row[0]]
    again = checking.batches(config)
    assert all(np.array_equal(a, b) for (a, _), (b, _) in zip(data, again))


@pytest.mark.parametrize("seed, split", [
    (0, dict(micro_batch=4)), (1, dict(num_micro_batches=3)), (2, dict(micro_batch=1)),
    (3, dict(num_micro_batches=2, optimizer="adam", lr=1e-3)),
])
def test_the_item_rule_is_full_batch_training_for_the_language_model(seed, split):
    """Micro-batches hold different numbers of real tokens; dividing once by the update's
    tokens is full-batch training, and a run that accumulates nothing would have failed."""
    assert any(len(set(row)) > 1 for row in token_counts({**LM, **split, "seed": seed}))
    result = check(**LM, **split, seed=seed)
    assert result["equivalent"] is True and within(result)
    assert result["reasons"] == [] and result["notes"] == [] and result["verdict"] == EQUIVALENT
    assert max(row["idle_ratio"] for row in result["updates"]) > 1e6
    assert result["config"]["activation"] == "tanh" and result["config"]["sizes"] is None


@pytest.mark.parametrize("split, sizes", [(dict(num_micro_batches=2), [3, 3]),
                                          (dict(micro_batch=4), [4, 2])])
def test_the_textbook_rule_is_not_for_the_language_model_even_on_an_even_split(split, sizes):
    result = check(**LM, **split, normalize="micro_batch_mean")
    assert result["sizes"] == sizes
    assert result["equivalent"] is False and not within(result)
    assert result["reasons"] == [REASONS["tokens"]]
    assert result["verdict"] == f"{NOT_EQUIVALENT}: {REASONS['tokens']}"
    assert max(row["ratio"] for row in result["updates"]) > 1e3


def test_the_language_model_in_float32():
    result = check(**LM, micro_batch=4, dtype="float32")
    assert result["equivalent"] is True and result["config"]["dtype"] == "float32"


def test_the_language_model_at_lr_0_gives_no_verdict():
    result = check(**LM, micro_batch=4, lr=0)
    assert result["equivalent"] is None
    assert result["reasons"] == ["lr is 0, so no update moves the parameters", NEVER_MOVED]


def test_the_language_models_result_is_json_with_its_options():
    result = check(**LM, micro_batch=4)
    assert json.loads(json.dumps(result, allow_nan=False)) == result
    config = result["config"]
    assert {key: config[key] for key in list(config)[:7]} == {
        "model": "charlm", "sizes": None, "vocab_size": 7, "context": 2, "embedding_dim": 3,
        "hidden": 8, "max_length": 5}
    defaults = checking.configuration(model="charlm", micro_batch=2)
    assert [defaults[k] for k in charlm.DEFAULTS] == [27, 3, 4, 16, 8]


@pytest.mark.parametrize("options, error, message", [
    (dict(sizes=[3, 4]), ValueError, "sizes applies to model='mlp' only; with model='charlm' "
                                     "give vocab_size, context, embedding_dim, hidden and "
                                     "max_length, got [3, 4]"),
    (dict(activation="relu"), ValueError, "activation must be 'tanh' with model='charlm' "
                                          "(CharMLP's one nonlinearity is tanh), got 'relu'"),
    (dict(norm="group"), ValueError, "norm must be 'none' with model='charlm' (CharMLP has no "
                                     "normalisation), got 'group'"),
    (dict(dropout=0.2), ValueError, "dropout must be 0 with model='charlm' (CharMLP has no "
                                    "Dropout), got 0.2"),
    (dict(loss="mse"), ValueError, "loss must be 'cross-entropy' with model='charlm'"),
    (dict(ignore_fraction=0.1), ValueError, "ignore_fraction must be 0 with model='charlm' "
                                            "(the ignored targets are the padding"),
    (dict(vocab_size=1), ValueError, "vocab_size must be an integer >= 2, got 1"),
    (dict(context=0), ValueError, "context must be a positive int, got 0"),
    (dict(hidden=True), TypeError, "hidden must be a positive int, got bool True"),
    (dict(model="gpt"), ValueError, "model must be one of 'mlp', 'charlm', got 'gpt'"),
    (dict(model="mlp", sizes=[3, 4], vocab_size=5), ValueError,
     "vocab_size applies to model='charlm' only, got 5"),
])
def test_options_that_do_not_apply_to_the_language_model_are_refused(options, error, message):
    options = {"model": "charlm", **options}
    with pytest.raises(error, match="^" + re.escape(message)):
        check(**options, global_batch=4, micro_batch=2, steps=1)
