"""Layers: the gradients of Linear, BatchNorm1d (train and eval), GroupNorm and LayerNorm
against finite differences and HIPS autograd (via check_op, with the module's parameters as
the checked inputs; the references are in ``layer_refs.py``); Linear's forward, init and bad
input; the activation modules and Sequential."""

import math

import numpy as np
import pytest
from gradcheck import check_op
from gradcheck import module_spec as _module_spec
from helpers import as_numpy as _np
from helpers import constant as _tensor
from helpers import other_namespace as _other
from layer_refs import EPS
from layer_refs import batch_norm_ref as _batch_norm_ref
from layer_refs import group_norm_ref as _group_norm_ref
from layer_refs import layer_norm_ref as _layer_norm_ref

from minigrad import Tensor, backend, nn
from minigrad.nn import functional as F


# ----- check_op over a module's parameters ----------------------------------------------------
def _bn_eval(xp):
    bn = nn.BatchNorm1d(3, xp=xp).eval()
    mean, var = np.array([0.5, -1.0, 0.25]), np.array([0.5, 2.0, 1.5])
    bn.running_mean, bn.running_var = xp.asarray(mean), xp.asarray(var)
    ref = lambda x, w, b: (x - mean) / np.sqrt(var + EPS) * w + b  # noqa: E731
    return _module_spec("batchnorm_eval", bn, ref, (5, 3))


LAYER_SPECS = {
    "linear": lambda xp: _module_spec(
        "linear", nn.Linear(4, 3, xp=xp), lambda x, w, b: x @ w.T + b, (5, 4)),
    "linear_no_bias": lambda xp: _module_spec(
        "linear_no_bias", nn.Linear(4, 3, bias=False, xp=xp), lambda x, w: x @ w.T, (5, 4)),
    "linear_3d_input": lambda xp: _module_spec(
        "linear_3d_input", nn.Linear(4, 3, xp=xp), lambda x, w, b: x @ w.T + b, (2, 5, 4)),
    "batchnorm_train_2d": lambda xp: _module_spec(
        "batchnorm_train_2d", nn.BatchNorm1d(3, xp=xp), _batch_norm_ref, (6, 3)),
    "batchnorm_train_3d": lambda xp: _module_spec(
        "batchnorm_train_3d", nn.BatchNorm1d(3, xp=xp), _batch_norm_ref, (4, 3, 2)),
    "batchnorm_eval": _bn_eval,
    "groupnorm_2d": lambda xp: _module_spec(
        "groupnorm_2d", nn.GroupNorm(2, 8, xp=xp),
        lambda x, w, b: _group_norm_ref(x, w, b, 2), (3, 8)),
    "groupnorm_3d": lambda xp: _module_spec(
        "groupnorm_3d", nn.GroupNorm(2, 4, xp=xp),
        lambda x, w, b: _group_norm_ref(x, w, b, 2), (3, 4, 3)),
    "layernorm": lambda xp: _module_spec(
        "layernorm", nn.LayerNorm(5, xp=xp), _layer_norm_ref, (4, 5)),
    "layernorm_2d_shape": lambda xp: _module_spec(
        "layernorm_2d_shape", nn.LayerNorm((3, 4), xp=xp), _layer_norm_ref, (2, 3, 4)),
}


@pytest.mark.parametrize("make", LAYER_SPECS.values(), ids=list(LAYER_SPECS))
def test_layer_gradients(xp, make):
    check_op(make(xp), xp)


# ----- Linear ---------------------------------------------------------------------------------
def test_linear_forward_is_x_at_w_transpose_plus_b(xp):
    layer = nn.Linear(3, 2, xp=xp)
    w = np.array([[0.5, -1.0, 2.0], [0.25, 0.0, -0.75]])
    b = np.array([1.0, -2.0])
    layer.weight.data, layer.bias.data = xp.asarray(w), xp.asarray(b)
    x = np.array([[1.0, 2.0, 3.0], [-1.0, 0.5, 4.0]])
    out = layer(_tensor(xp, x))
    # dyadic values with few bits: every product and sum is exact, in any order
    assert np.array_equal(_np(out), x @ w.T + b)
    assert np.array_equal(_np(out), [[5.5, -4.0], [8.0, -5.25]])
    assert out.shape == (2, 2)
    assert backend.get_namespace(out.data) is xp


def test_linear_init(xp):
    layer = nn.Linear(16, 32, generator=4, xp=xp)
    bound = 1.0 / math.sqrt(16)
    for p in (layer.weight, layer.bias):
        values = _np(p)
        assert np.all(np.abs(values) <= bound)
        # 512 (32) uniform draws: all within 0.6 bound has probability 0.6^32 < 1e-7
        assert np.max(np.abs(values)) > 0.6 * bound
    assert layer.weight.shape == (32, 16)
    assert layer.bias.shape == (32,)
    assert layer.weight.dtype == xp.float64
    same = nn.Linear(16, 32, generator=4, xp=xp)
    assert np.array_equal(_np(same.weight), _np(layer.weight))
    assert np.array_equal(_np(same.bias), _np(layer.bias))
    other = nn.Linear(16, 32, generator=5, xp=xp)
    assert not np.array_equal(_np(other.weight), _np(layer.weight))
    # float32 from the same seed: the float64 draws rounded once to float32
    single = nn.Linear(16, 32, generator=4, dtype="float32", xp=xp)
    assert single.weight.dtype == xp.float32
    assert np.array_equal(_np(single.weight), _np(layer.weight).astype(np.float32))
    assert np.array_equal(_np(single.bias), _np(layer.bias).astype(np.float32))
    assert np.all(np.abs(_np(single.weight) - _np(layer.weight))
                  <= 2.0**-24 * np.abs(_np(layer.weight)))
    # the same numbers in every namespace
    assert np.array_equal(_np(nn.Linear(16, 32, generator=4, xp=_other(xp)).weight),
                          _np(layer.weight))


def test_linear_bad_input(xp):
    layer = nn.Linear(3, 2, xp=xp)
    with pytest.raises(ValueError, match=r"in_features=3.*\(4, 5\).*must be 3"):
        layer(_tensor(xp, np.ones((4, 5))))
    with pytest.raises(ValueError, match="in_features"):
        layer(_tensor(xp, 1.0))
    with pytest.raises(ValueError, match="in_features must be a positive int"):
        nn.Linear(0, 2, xp=xp)
    with pytest.raises(TypeError, match="out_features must be a positive int, got float 2.0"):
        nn.Linear(3, 2.0, xp=xp)
    with pytest.raises(TypeError, match="cannot mix"):
        layer(_tensor(_other(xp), np.ones((4, 3))))


def test_sizes_reject_booleans():
    with pytest.raises(TypeError, match="in_features must be a positive int, got bool True"):
        nn.Linear(True, 3)
    with pytest.raises(TypeError, match=r"sizes\[1\] must be a positive int, got bool True"):
        nn.MLP([2, True, 3])
    with pytest.raises(TypeError, match="num_features must be a positive int, got bool True"):
        nn.BatchNorm1d(True)


# ----- small modules -----------------------------------------------------------------------------
def test_activation_modules_and_sequential(xp):
    x = _tensor(xp, [[-1.5, 0.0, 2.0]])
    for module, fn in ((nn.ReLU(), F.relu), (nn.Tanh(), F.tanh), (nn.Sigmoid(), F.sigmoid),
                       (nn.GELU(), F.gelu)):
        assert np.array_equal(_np(module(x)), _np(fn(x)))
    assert nn.Identity()(x) is x
    seq = nn.Sequential(nn.Linear(3, 2, xp=xp), nn.Tanh())
    assert len(seq) == 2
    assert isinstance(seq[0], nn.Linear)
    assert np.array_equal(_np(seq(x)), _np(seq[1](seq[0](x))))
    with pytest.raises(TypeError, match="argument 1 is function"):
        nn.Sequential(nn.ReLU(), F.relu)


# ----- inputs PyTorch refuses --------------------------------------------------------------------
@pytest.mark.parametrize("module", [nn.Linear(3, 2), nn.BatchNorm1d(3), nn.GroupNorm(1, 3),
                                    nn.LayerNorm(3)], ids=lambda m: type(m).__name__)
def test_layers_refuse_integer_and_mixed_precision_input(module):
    with pytest.raises(TypeError, match="needs floating-point input, got dtype int64"):
        module(Tensor(np.ones((4, 3), dtype=np.int64)))
    with pytest.raises(TypeError, match="has float64 parameters but got float32 input"):
        module(Tensor(np.ones((4, 3), dtype=np.float32)))


def test_module_arguments_and_state_are_checked():
    model = nn.Sequential(nn.Linear(3, 2), nn.BatchNorm1d(2))
    with pytest.raises(IndexError, match="index 5 is out of range for a Sequential of 2"):
        model[5]
    with pytest.raises(TypeError, match="mode must be True or False, got str 'no'"):
        model.train("no")
    with pytest.raises(TypeError, match="dtype must be a floating dtype"):
        model.to(dtype=np.int32)
    with pytest.raises(TypeError, match="state_dict must be a dict"):
        model.load_state_dict(None)
    bad = {k: np.full(v.shape, "a") for k, v in model.state_dict().items()}
    with pytest.raises(TypeError, match="Tensor data must be numbers"):
        model.load_state_dict(bad)
    assert model.training is True
    assert model[0].weight.dtype == np.float64


def test_a_failed_forward_puts_back_the_running_statistics():
    model = nn.Sequential(nn.BatchNorm1d(3), nn.Linear(4, 2))  # the Linear refuses 3 inputs
    before = {k: np.array(v, copy=True) for k, v in model.state_dict().items()}
    with pytest.raises(ValueError, match="last dimension must be 4"):
        model(Tensor(np.random.default_rng(0).normal(size=(8, 3))))
    after = model.state_dict()
    assert all(np.array_equal(after[k], v) for k, v in before.items())


def test_empty_batches_and_zero_d_dropout_work_as_in_pytorch():
    assert nn.GroupNorm(2, 4)(Tensor(np.ones((0, 4)))).shape == (0, 4)
    assert F.dropout(Tensor(3.0), 0.5, seed=1).shape == ()
    with pytest.raises(TypeError, match="sample_index must be an integer array"):
        F.dropout(Tensor(np.ones((2, 3))), 0.5, sample_index=np.array([0.5, 1.5]))
    with pytest.raises(TypeError, match="sample_index must be an integer array"):
        F.dropout(Tensor(np.ones((2, 3))), 0.5, sample_index=[0, 1])
    loss = nn.CrossEntropyLoss()
    with pytest.raises(ValueError, match="reduction must be one of"):
        loss(Tensor(np.ones((2, 3))), np.array([0, 1]), reduction="")
    with pytest.raises(TypeError, match="ignore_index must be an integer"):
        nn.CrossEntropyLoss(ignore_index=1.5)
    with pytest.raises(TypeError, match="cross_entropy needs floating-point input"):
        F.cross_entropy(Tensor(np.ones((2, 3), dtype=np.int64)), np.array([0, 1]))
    with pytest.raises(ValueError, match="no class"):
        F.cross_entropy(Tensor(np.ones((4, 0))), np.full(4, -100))
