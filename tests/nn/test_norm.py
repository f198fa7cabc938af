"""Normalisation layers: torch's semantics of BatchNorm1d written out as exact tiny cases
(biased and unbiased variance, momentum, eval mode, no running statistics, bad arguments);
GroupNorm and LayerNorm use per-sample statistics. Their gradients are checked in
test_layers.py."""

import math

import numpy as np
import pytest
from helpers import as_numpy as _np
from helpers import constant as _tensor
from layer_refs import EPS

from minigrad import backend, nn


# ----- BatchNorm1d: torch semantics, by hand ----------------------------------------------------
def test_batchnorm_tiny_case_by_hand(xp):
    bn = nn.BatchNorm1d(1, xp=xp)
    out = bn(_tensor(xp, [[1.0], [2.0], [3.0]]))
    # batch mean 2, biased variance (1 + 0 + 1) / 3 = 2/3: normalised with the biased one
    s = 1.0 / math.sqrt(2.0 / 3.0 + EPS)
    assert _np(out)[:, 0] == pytest.approx([-s, 0.0, s], rel=1e-15, abs=0)
    # running stats with momentum 0.1 and the UNBIASED variance 2 / 2 = 1:
    # running_mean = 0.9 * 0 + 0.1 * 2 = 0.2, running_var = 0.9 * 1 + 0.1 * 1 = 1.0
    assert _np(bn.running_mean).tolist() == [0.2]
    assert _np(bn.running_var).tolist() == [1.0]
    assert int(bn.num_batches_tracked) == 1
    # second batch [[0], [4]]: mean 2, unbiased variance 8
    bn(_tensor(xp, [[0.0], [4.0]]))
    assert _np(bn.running_mean)[0] == pytest.approx(0.9 * 0.2 + 0.1 * 2.0, rel=1e-15)  # 0.38
    assert _np(bn.running_var)[0] == pytest.approx(0.9 * 1.0 + 0.1 * 8.0, rel=1e-15)  # 1.7
    assert int(bn.num_batches_tracked) == 2
    assert bn.num_batches_tracked.dtype == xp.int64
    assert backend.get_namespace(bn.running_var) is xp


def test_batchnorm_3d_input_by_hand(xp):
    bn = nn.BatchNorm1d(2, momentum=1.0, xp=xp)  # momentum 1: running = the last batch's stats
    x = np.array([[[1.0, 3.0], [0.0, 0.0]], [[5.0, 7.0], [2.0, 6.0]]])  # (N=2, C=2, L=2)
    out = _np(bn(_tensor(xp, x)))
    # channel 0 holds 1, 3, 5, 7: mean 4, biased var 5, unbiased 20/3
    # channel 1 holds 0, 0, 2, 6: mean 2, biased var 6, unbiased 8
    expected = (x - np.array([4.0, 2.0])[:, None]) / np.sqrt(np.array([5.0, 6.0]) + EPS)[:, None]
    np.testing.assert_allclose(out, expected, rtol=1e-15, atol=0)
    assert _np(bn.running_mean).tolist() == [4.0, 2.0]
    assert _np(bn.running_var) == pytest.approx([20.0 / 3.0, 8.0], rel=1e-15)


def test_batchnorm_momentum_none_is_a_cumulative_average(xp):
    bn = nn.BatchNorm1d(1, momentum=None, xp=xp)
    batches = [([1.0, 3.0], 2.0, 2.0), ([5.0, 9.0], 7.0, 8.0), ([0.0, 0.0, 3.0], 1.0, 3.0)]
    means, variances = [], []
    for values, mean, unbiased in batches:
        bn(_tensor(xp, np.array(values)[:, None]))
        means.append(mean)
        variances.append(unbiased)
        # the average of the batch statistics so far; the initial 0 and 1 are not included
        assert _np(bn.running_mean)[0] == pytest.approx(np.mean(means), rel=1e-15)
        assert _np(bn.running_var)[0] == pytest.approx(np.mean(variances), rel=1e-15)
    assert int(bn.num_batches_tracked) == 3


def test_batchnorm_eval_uses_running_stats(xp):
    bn = nn.BatchNorm1d(2, xp=xp)
    bn.weight.data = xp.asarray([2.0, 0.5], dtype=xp.float64)
    bn.bias.data = xp.asarray([1.0, -1.0], dtype=xp.float64)
    bn.running_mean = xp.asarray([1.0, -2.0], dtype=xp.float64)
    # so that sqrt(var + eps) is 2, 0.5
    bn.running_var = xp.asarray([4.0 - EPS, 0.25 - EPS], dtype=xp.float64)
    bn.eval()
    out = bn(_tensor(xp, [[3.0, -1.0], [1.0, -2.5]]))
    assert _np(out) == pytest.approx(np.array([[3.0, 0.0], [1.0, -1.5]]), rel=1e-14, abs=1e-14)
    assert _np(bn.running_mean).tolist() == [1.0, -2.0]  # eval does not update
    assert int(bn.num_batches_tracked) == 0
    one = bn(_tensor(xp, [[3.0, -1.0]]))  # a single sample is fine in eval mode
    assert np.array_equal(_np(one), _np(out)[:1])


def test_batchnorm_single_sample_in_training_raises(xp):
    bn = nn.BatchNorm1d(3, xp=xp)
    with pytest.raises(ValueError, match=r"more than 1 value per channel.*\(1, 3\)"):
        bn(_tensor(xp, np.ones((1, 3))))
    assert int(bn.num_batches_tracked) == 0
    bn(_tensor(xp, np.arange(6.0).reshape(1, 3, 2)))  # 1 sample but 2 values per channel
    assert int(bn.num_batches_tracked) == 1


def test_batchnorm_without_running_stats_uses_batch_stats_in_eval(xp):
    bn = nn.BatchNorm1d(2, track_running_stats=False, xp=xp)
    assert list(bn.state_dict()) == ["weight", "bias"]
    x = _tensor(xp, [[1.0, 0.0], [3.0, 4.0], [8.0, -2.0]])
    train_out = _np(bn(x))
    eval_out = _np(bn.eval()(x))
    assert np.array_equal(eval_out, train_out)
    assert np.array_equal(np.round(eval_out.mean(axis=0), 12), [0.0, 0.0])
    with pytest.raises(ValueError, match="more than 1 value per channel"):  # as torch
        bn(_tensor(xp, [[1.0, 2.0]]))


def test_batchnorm_couples_the_samples_of_a_batch(xp):
    bn = nn.BatchNorm1d(2, xp=xp)
    x = np.array([[1.0, 0.0], [3.0, 4.0], [8.0, -2.0], [0.5, 0.5]])
    whole = _np(bn(_tensor(xp, x)))
    half = _np(bn(_tensor(xp, x[:2])))
    assert not np.allclose(whole[:2], half)  # why accumulation with BatchNorm is not exact


def test_batchnorm_bad_arguments(xp):
    with pytest.raises(ValueError, match="num_features must be a positive int"):
        nn.BatchNorm1d(0, xp=xp)
    with pytest.raises(ValueError, match="momentum"):
        nn.BatchNorm1d(2, momentum=1.5, xp=xp)
    with pytest.raises(ValueError, match=r"BatchNorm1d\(2\).*\(4, 3\)"):
        nn.BatchNorm1d(2, xp=xp)(_tensor(xp, np.ones((4, 3))))


# ----- GroupNorm / LayerNorm: per-sample statistics ------------------------------------------
@pytest.mark.parametrize("make", [
    lambda xp: (nn.GroupNorm(2, 4, xp=xp), (5, 4)),
    lambda xp: (nn.GroupNorm(2, 4, xp=xp), (5, 4, 3)),
    lambda xp: (nn.GroupNorm(1, 4, xp=xp), (5, 4)),
    lambda xp: (nn.LayerNorm(4, xp=xp), (5, 4)),
    lambda xp: (nn.LayerNorm((4, 3), xp=xp), (5, 4, 3)),
], ids=["group_2d", "group_3d", "group_1", "layer", "layer_2d_shape"])
def test_per_sample_norms_do_not_look_at_other_samples(xp, make):
    layer, shape = make(xp)
    x = np.random.default_rng(0).normal(size=shape) * 3.0 + 1.0
    whole = _np(layer(_tensor(xp, x)))
    for i in range(shape[0]):
        assert np.array_equal(_np(layer(_tensor(xp, x[i:i + 1]))), whole[i:i + 1])
    if isinstance(layer, nn.LayerNorm) or layer.num_groups == 1:  # one group: each row normed
        rows, x_rows = whole.reshape(shape[0], -1), x.reshape(shape[0], -1)
        np.testing.assert_allclose(rows.mean(axis=1), 0.0, atol=1e-14)
        v = x_rows.var(axis=1)
        np.testing.assert_allclose(rows.var(axis=1), v / (v + EPS), rtol=1e-13)


def test_groupnorm_and_layernorm_bad_arguments(xp):
    with pytest.raises(ValueError, match=r"num_groups.*num_channels=4"):
        nn.GroupNorm(3, 4, xp=xp)
    with pytest.raises(ValueError, match="num_groups must be a positive int, got 0"):
        nn.GroupNorm(0, 4, xp=xp)
    with pytest.raises(TypeError, match="num_groups must be a positive int, got float 2.0"):
        nn.GroupNorm(2.0, 4, xp=xp)
    with pytest.raises(ValueError, match=r"GroupNorm\(2, 4\).*\(3, 6\)"):
        nn.GroupNorm(2, 4, xp=xp)(_tensor(xp, np.ones((3, 6))))
    with pytest.raises(ValueError, match=r"LayerNorm\(4,\).*\(3, 5\)"):
        nn.LayerNorm(4, xp=xp)(_tensor(xp, np.ones((3, 5))))
