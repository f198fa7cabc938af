"""Side-by-side training and the BatchNorm yardsticks (minigrad.studies.batchnorm.training):
Ghost BatchNorm is what accumulated BatchNorm computes, within the rounding bound; the
rounding limits separate BatchNorm's divergence from GroupNorm's rounding; paired training
finds GroupNorm and exact BatchNorm within the trajectory bound and plain BatchNorm beyond it."""

import numpy as np
import pytest

from minigrad import nn, optim
from minigrad.accumulate import accumulated_gradients
from minigrad.engine import backend
from minigrad.studies.batchnorm.divergence import gradient_divergence
from minigrad.studies.batchnorm.training import (
    eval_loss,
    ghost_batchnorm,
    ghost_control,
    gradient_limits,
    paired_training,
)

N = 16
SIZES = [5, 8, 8, 3]


def _factory(norm, xp=None):
    return lambda: nn.MLP(SIZES, norm=norm, seed=0, xp=xp)


def _data(xp=np, n=N, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(0.5, 1.5, size=(n, SIZES[0]))
    return xp.asarray(x), xp.asarray(rng.integers(0, SIZES[-1], size=n))


def _sgd(params):
    return optim.SGD(params, lr=0.1, momentum=0.9)


# ----- Ghost BatchNorm ----------------------------------------------------------------------
def _batchnorms(model):
    return [m for _, m in model.named_modules() if isinstance(m, nn.BatchNorm1d)]


def test_ghost_batchnorm_swaps_the_layers_in_and_out():
    model = _factory("batch")()
    model[1].eval()
    keys = list(model.state_dict())
    before = _batchnorms(model)
    arrays = [dict(m.named_parameters()) | dict(m.named_buffers()) for m in before]
    ghosts = _batchnorms(ghost_batchnorm(model, 4))
    assert list(model.state_dict()) == keys
    assert [type(m) for m in ghosts] == [nn.GhostBatchNorm1d] * 2
    assert all(m.ghost_batch_size == 4 for m in ghosts)
    assert [m.training for m in ghosts] == [False, True]
    for old, new, kept in zip(before, ghosts, arrays):  # the same objects: nothing copied
        assert all(value is kept[name] for name, value in
                   [*new.named_parameters(), *new.named_buffers()])
        assert repr(new) == "Ghost" + repr(old)[:-1] + ", ghost_batch_size=4)"
    plain = _batchnorms(ghost_batchnorm(model, None))
    assert [type(m) for m in plain] == [nn.BatchNorm1d] * 2
    assert [repr(m) for m in plain] == [repr(m) for m in before]
    assert list(model.state_dict()) == keys


@pytest.mark.parametrize("size, error", [(0, ValueError), (True, TypeError), (2.0, TypeError)])
def test_ghost_batchnorm_refuses_bad_sizes(size, error):
    with pytest.raises(error, match="size"):
        ghost_batchnorm(_factory("batch")(), size)


def test_ghost_batchnorm_needs_batchnorm_layers():
    with pytest.raises(ValueError, match="without any"):
        ghost_batchnorm(_factory("group")(), 4)


def test_one_ghost_batch_is_plain_batchnorm():
    """ghost_batch_size >= N takes plain BatchNorm's code path: the same bits."""
    x, y = _data()
    plain = accumulated_gradients(_factory("batch")(), nn.CrossEntropyLoss(), x, y)
    ghost = accumulated_gradients(ghost_batchnorm(_factory("batch")(), N),
                                  nn.CrossEntropyLoss(), x, y)
    assert all(np.array_equal(plain[k], ghost[k]) for k in plain)


def test_ghost_control_matches_within_the_bound(xp):
    x, y = _data(xp)
    report = ghost_control(_factory("batch", xp), nn.CrossEntropyLoss(), x, y, [2, 4, 8])
    assert list(report) == [2, 4, 8]
    for m, row in report.items():
        assert set(row) == {"ratio", "max_abs", "rel_error_to_full"}
        assert row["ratio"] <= 1.0, m  # accumulated BatchNorm IS full-batch Ghost BatchNorm
        assert row["rel_error_to_full"] > 1e-3, m  # and is not full-batch BatchNorm


def test_ghost_control_sees_a_wrong_ghost_size():
    """The control can fail: ghost batches of 4 against micro-batches of 2 differ."""
    x, y = _data()
    loss = nn.CrossEntropyLoss()
    ghost = accumulated_gradients(ghost_batchnorm(_factory("batch")(), 4), loss, x, y)
    acc = accumulated_gradients(_factory("batch")(), loss, x, y, micro_batch_size=2)
    control = ghost_control(_factory("batch"), loss, x, y, [2])[2]
    gap = max(float(np.max(np.abs(ghost[k] - acc[k]))) for k in acc)
    assert gap > 1e3 * control["max_abs"] + 1e-10


# ----- the rounding limits -----------------------------------------------------------------
def test_gradient_limits_separate_batchnorm_from_groupnorm():
    x, y = _data()
    loss = nn.CrossEntropyLoss()
    micro = [2, 4, 8]
    for norm in ("group", "layer", "batch"):
        limit = gradient_limits(_factory(norm), loss, x, y)
        assert set(limit) == {"rel_error", "cosine"}
        assert 0 < limit["rel_error"] < 1e-6 and 1 - 1e-9 < limit["cosine"] < 1
        report = gradient_divergence(_factory(norm), loss, x, y, micro)
        for m in micro:
            row = report[m]["all"]
            if norm == "batch":  # a different computation: beyond what rounding does
                assert row["rel_error"] > limit["rel_error"] and row["cosine"] < limit["cosine"]
            else:
                assert row["rel_error"] <= limit["rel_error"]
                assert row["cosine"] >= limit["cosine"]


# ----- paired training ---------------------------------------------------------------------
def _batches(xp=np, k=3):
    return [_data(xp, seed=s) for s in range(k)]


def test_paired_training_groupnorm_is_full_batch_training(xp):
    batches = _batches(xp)
    run = paired_training(_factory("group", xp), _sgd, nn.CrossEntropyLoss(), batches,
                          [4, 4, 8], _data(xp, n=20, seed=9))
    assert run["within"] and run["predictions_equal"]
    assert len(run["gap"]) == len(run["ratio"]) == len(run["bound"]) == 3
    assert all(0 <= g <= 1e-12 for g in run["gap"])
    assert run["running_gap"] == [0.0] * 3  # no running statistics
    for key in ("full", "accumulated"):
        assert set(run[key]) == {"train_loss", "loss", "accuracy"}
        assert all(len(v) == 3 for v in run[key].values())


def test_paired_training_batchnorm_plain_beyond_exact_within():
    batches, held_out = _batches(), _data(n=20, seed=9)
    loss = nn.CrossEntropyLoss()
    plain = paired_training(_factory("batch"), _sgd, loss, batches, [4] * 4, held_out)
    exact = paired_training(_factory("batch"), _sgd, loss, batches, [4] * 4, held_out,
                            strategy="exact_batchnorm", bound_updates=2)
    assert not plain["within"] and all(r > 1 for r in plain["ratio"])
    assert min(plain["running_gap"]) > 1e-3
    assert exact["within"] and len(exact["ratio"]) == 2 and len(exact["gap"]) == 3
    assert max(exact["running_gap"]) < 1e-12
    # both runs of the exact pair see the same data in the same order: same losses
    np.testing.assert_allclose(exact["accumulated"]["train_loss"], exact["full"]["train_loss"],
                               rtol=1e-12)


def test_eval_loss_leaves_the_model_training():
    model = _factory("batch")()
    x, y = _data()
    before = backend.to_numpy(model[1].running_mean).copy()
    value = eval_loss(model, nn.CrossEntropyLoss(), x, y)
    assert isinstance(value, float) and value > 0
    assert model.training and model[1].training
    assert np.array_equal(backend.to_numpy(model[1].running_mean), before)  # eval: untouched


def test_gradient_limits_per_sample_agree_with_the_whole_batch_ones():
    """The same a_i up to rounding: the limits agree to far better than their own size."""
    x, y = _data()
    loss = nn.CrossEntropyLoss()
    for norm in (None, "group", "layer"):
        whole = gradient_limits(_factory(norm), loss, x, y)
        alone = gradient_limits(_factory(norm), loss, x, y, per_sample=True)
        assert alone["rel_error"] == pytest.approx(whole["rel_error"], rel=1e-9)
        assert alone["cosine"] == pytest.approx(whole["cosine"], abs=1e-15)


@pytest.mark.parametrize("make", [_factory("batch"),
                                  lambda: nn.MLP(SIZES, dropout=0.5, seed=0)])
def test_gradient_limits_per_sample_refuse_coupled_samples(make):
    x, y = _data()
    with pytest.raises(ValueError, match="per_sample=True needs samples that do not interact"):
        gradient_limits(make, nn.CrossEntropyLoss(), x, y, per_sample=True)
