"""check(): accumulated training judged against the floating-point bound, update by update,
with the verdict and its reasons in words, or no verdict where the comparison could not have
failed. Small set-ups (an MLP 3-6-4, batches of 10, 3 updates): each check takes a few
hundredths of a second."""

import json

import numpy as np
import pytest

from minigrad import Parameter, nn, optim
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
    assert list(config) == ["sizes", "activation", "norm", "dropout", "loss",
                            "ignore_fraction", "optimizer", "lr", "weight_decay", "clip",
                            "global_batch", "micro_batch", "num_micro_batches", "normalize",
                            "strategy", "steps", "dtype", "seed"]
    assert config["num_micro_batches"] is None and config["clip"] == 0.5
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
