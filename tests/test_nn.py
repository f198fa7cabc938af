"""Layers, norms, losses and the MLP: gradients against finite differences and HIPS autograd
(via check_op, with the module's parameters as the checked inputs); Module registration,
names, modes and state; torch semantics of BatchNorm1d written out as exact tiny cases."""

import math
from contextlib import contextmanager

import autograd.numpy as anp
import numpy as np
import pytest
from gradcheck import OpSpec, check_op
from helpers import as_numpy as _np
from helpers import other_namespace as _other

from minigrad import backend, nn
from minigrad.engine.tensor import Parameter, Tensor
from minigrad.nn import functional as F

EPS = 1e-5
GELU_C = math.sqrt(2.0 / math.pi)
ACTIVATIONS = ("relu", "tanh", "sigmoid", "gelu")
NORMS = (None, "batch", "group", "layer")


def _tensor(xp, values, requires_grad=False, dtype="float64"):
    return Tensor(xp.asarray(values, dtype=getattr(xp, dtype)), requires_grad=requires_grad)


def _snapshot(model):
    """A NumPy copy of every parameter and buffer, by dotted name."""
    return {k: np.array(backend.to_numpy(v), copy=True) for k, v in model.state_dict().items()}


def _assert_same_state(model, snapshot):
    state = model.state_dict()
    assert list(state) == list(snapshot)
    for k, v in state.items():
        assert np.array_equal(backend.to_numpy(v), snapshot[k]), k


# ----- autograd references, written from the formulas ----------------------------------------
ACT_REFS = {
    "relu": lambda h: anp.maximum(h, 0.0),
    "tanh": anp.tanh,
    "sigmoid": lambda h: 1.0 / (1.0 + anp.exp(-h)),
    "gelu": lambda h: 0.5 * h * (1.0 + anp.tanh(GELU_C * (h + 0.044715 * h**3))),
}


def _normalize_ref(x, axes):
    mean = anp.mean(x, axis=axes, keepdims=True)
    var = anp.mean((x - mean) ** 2, axis=axes, keepdims=True)  # biased
    return (x - mean) / anp.sqrt(var + EPS)


def _channel(v, ndim):
    """A per-channel vector shaped to broadcast over (N, C, *)."""
    return anp.reshape(v, (1, -1) + (1,) * (ndim - 2))


def _batch_norm_ref(x, w, b):
    axes = (0,) if x.ndim == 2 else (0, 2)
    return _normalize_ref(x, axes) * _channel(w, x.ndim) + _channel(b, x.ndim)


def _group_norm_ref(x, w, b, groups):
    h = anp.reshape(_normalize_ref(anp.reshape(x, (x.shape[0], groups, -1)), (2,)), x.shape)
    return h * _channel(w, x.ndim) + _channel(b, x.ndim)


def _layer_norm_ref(x, w, b):
    return _normalize_ref(x, tuple(range(x.ndim - w.ndim, x.ndim))) * w + b


def _cross_entropy_ref(logits, target):
    kept = target != -100
    log_probs = logits - anp.log(anp.sum(anp.exp(logits), axis=1, keepdims=True))
    picked = log_probs[np.arange(len(target)), np.where(kept, target, 0)]
    return -anp.sum(picked * kept) / np.sum(kept)


def _mlp_ref(sizes, activation, norm, groups, masks=None):
    """The MLP as a function of (x, *parameters in named_parameters order, target)."""

    def ref(x, *rest):
        *params, target = rest
        params = iter(params)
        h = x
        for i in range(len(sizes) - 1):
            h = h @ next(params).T + next(params)
            if i == len(sizes) - 2:
                break
            if norm == "batch":
                h = _batch_norm_ref(h, next(params), next(params))
            elif norm == "group":
                h = _group_norm_ref(h, next(params), next(params), groups)
            elif norm == "layer":
                h = _layer_norm_ref(h, next(params), next(params))
            h = ACT_REFS[activation](h)
            if masks is not None:
                h = h * masks[i]
        return _cross_entropy_ref(h, target)

    return ref


# ----- check_op over a module's parameters ----------------------------------------------------
@contextmanager
def _swapped(module, names, tensors):
    """Within the block ``module``'s parameters ``names`` are ``tensors`` (check_op's leaves),
    as ``torch.func.functional_call`` does: the gradients then land on check_op's inputs."""
    owners = dict(module.named_modules())
    saved = []
    for name, t in zip(names, tensors):
        prefix, _, attr = name.rpartition(".")
        table = owners[prefix]._parameters
        saved.append((table, attr, table[attr]))
        table[attr] = t
    try:
        yield
    finally:
        for table, attr, p in saved:
            table[attr] = p


def _module_spec(name, module, ref, x_shape, extra=(), call=None):
    """An OpSpec over ``(x, *module.parameters(), *extra)``; ``call(module, x, *extra)``."""
    names = [n for n, _ in module.named_parameters()]
    shapes = [x_shape] + [p.shape for p in module.parameters()]
    call = call or (lambda m, x: m(x))

    def fn(x, *rest):
        params, more = rest[:len(names)], rest[len(names):]
        with _swapped(module, names, params):
            return call(module, x, *more)

    return OpSpec(name, fn, ref, shapes, extra=extra)


def _bn_eval(xp):
    bn = nn.BatchNorm1d(3, xp=xp).eval()
    mean, var = np.array([0.5, -1.0, 0.25]), np.array([0.5, 2.0, 1.5])
    bn.running_mean, bn.running_var = xp.asarray(mean), xp.asarray(var)
    ref = lambda x, w, b: (x - mean) / np.sqrt(var + EPS) * w + b  # noqa: E731
    return _module_spec("batchnorm_eval", bn, ref, (5, 3))


TARGET = np.array([0, 2, 1, -100, 2, 0])

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


@pytest.mark.parametrize("norm", NORMS)
@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_mlp_with_cross_entropy_gradients(xp, activation, norm):
    sizes = [3, 8, 3]  # GroupNorm with 2 groups of 4: a group of 2 can have a tiny variance
    model = nn.MLP(sizes, activation, norm, seed=1, xp=xp, num_groups=2)
    spec = _module_spec(f"mlp_{activation}_{norm}", model, _mlp_ref(sizes, activation, norm, 2),
                        (6, 3), extra=(TARGET,),
                        call=lambda m, x, t: F.cross_entropy(m(x), t))
    check_op(spec, xp)


def test_mlp_with_dropout_gradients(xp):
    # dropout_keys fixes the masks, so every finite-difference evaluation sees the same ones
    sizes = [3, 8, 3]
    model = nn.MLP(sizes, "tanh", "layer", dropout=0.3, seed=2, xp=xp)
    masks = [F.dropout(Tensor(np.ones((6, 8))), 0.3, True, seed=model[3].seed, step=5).numpy()]
    assert 0 < np.count_nonzero(masks[0]) < masks[0].size

    def call(m, x, t):
        with nn.dropout_keys(5, xp.arange(6)):
            return F.cross_entropy(m(x), t)

    spec = _module_spec("mlp_dropout", model, _mlp_ref(sizes, "tanh", "layer", None, masks),
                        (6, 3), extra=(TARGET,), call=call)
    check_op(spec, xp)


# ----- Module -----------------------------------------------------------------------------------
class Inner(nn.Module):
    def __init__(self, xp):
        super().__init__()
        self.scale = Parameter(xp.asarray([2.0, 3.0]))
        self.register_buffer("count", xp.asarray(0))

    def forward(self, x):
        return x * self.scale


class Outer(nn.Module):
    def __init__(self, xp):
        super().__init__()
        self.first = nn.Linear(2, 2, xp=xp)
        self.shift = Parameter(xp.asarray([0.5, -0.5]))
        self.inner = Inner(xp)
        self.note = "not registered"

    def forward(self, x):
        return self.inner(self.first(x)) + self.shift


def test_module_registers_parameters_buffers_and_children(xp):
    model = Outer(xp)
    # a module's own parameters come first, then its children's, depth first (as torch)
    assert [n for n, _ in model.named_parameters()] == [
        "shift", "first.weight", "first.bias", "inner.scale"]
    assert [n for n, _ in model.named_buffers()] == ["inner.count"]
    assert [n for n, _ in model.named_modules()] == ["", "first", "inner"]
    assert list(model.children()) == [model.first, model.inner]
    assert list(model.state_dict()) == [
        "shift", "first.weight", "first.bias", "inner.scale", "inner.count"]
    assert all(isinstance(p, Parameter) for p in model.parameters())
    assert model.note == "not registered"
    assert "note" not in model.state_dict()


def test_module_assignment_rules(xp):
    model = Outer(xp)
    with pytest.raises(AttributeError, match="'Outer' object has no attribute 'missing'"):
        model.missing  # noqa: B018
    with pytest.raises(TypeError, match="parameter 'shift'"):
        model.shift = xp.asarray([1.0, 1.0])
    model.shift = None  # a parameter slot set to None is skipped, as in torch
    assert [n for n, _ in model.named_parameters()] == ["first.weight", "first.bias",
                                                        "inner.scale"]
    model.inner.count = xp.asarray(5)  # a plain array assigned to a buffer name stays a buffer
    assert int(model.state_dict()["inner.count"]) == 5
    # replacing an entry keeps its place in the order, as in torch
    model.first.weight = Parameter(xp.zeros((2, 2)))
    assert [n for n, _ in model.first.named_parameters()] == ["weight", "bias"]
    model.first = Inner(xp)  # a name holds one thing: the old Linear is gone
    assert [n for n, _ in model.named_parameters()] == ["first.scale", "inner.scale"]
    model.inner = Parameter(xp.asarray([1.0]))  # a module name taken over by a parameter
    assert [n for n, _ in model.named_modules()] == ["", "first"]
    assert [n for n, _ in model.named_parameters()] == ["inner", "first.scale"]

    class NoInit(nn.Module):
        def __init__(self):
            self.weight = Parameter(xp.asarray([1.0]))

    with pytest.raises(AttributeError, match=r"super\(\).__init__\(\)"):
        NoInit()


def test_mlp_parameter_and_buffer_names_match_torch_sequential(xp):
    plain = nn.MLP([2, 8, 8, 3], xp=xp)
    assert [n for n, _ in plain.named_parameters()] == [
        "0.weight", "0.bias", "2.weight", "2.bias", "4.weight", "4.bias"]
    batch = nn.MLP([2, 8, 8, 3], norm="batch", xp=xp)
    assert [n for n, _ in batch.named_parameters()] == [
        "0.weight", "0.bias", "1.weight", "1.bias", "3.weight", "3.bias", "4.weight",
        "4.bias", "6.weight", "6.bias"]
    assert list(batch.state_dict())[:5] == [
        "0.weight", "0.bias", "1.weight", "1.bias", "1.running_mean"]
    assert [n for n, _ in batch.named_buffers()] == [
        "1.running_mean", "1.running_var", "1.num_batches_tracked",
        "4.running_mean", "4.running_var", "4.num_batches_tracked"]
    dropped = nn.MLP([2, 8, 8, 3], norm="layer", dropout=0.1, xp=xp)
    assert [n for n, _ in dropped.named_parameters()] == [
        "0.weight", "0.bias", "1.weight", "1.bias", "4.weight", "4.bias", "5.weight",
        "5.bias", "8.weight", "8.bias"]


def test_train_and_eval_are_recursive(xp):
    model = Outer(xp)
    mlp = nn.MLP([2, 4, 4, 2], norm="batch", dropout=0.5, xp=xp)
    for m in (model, mlp):
        modules = [module for _, module in m.named_modules()]
        assert len(modules) > 2
        assert m.eval() is m
        assert not any(module.training for module in modules)
        assert m.train() is m
        assert all(module.training for module in modules)
        m.train(False)
        assert not any(module.training for module in modules)


def test_zero_grad_sets_none(xp):
    model = nn.MLP([2, 4, 3], norm="layer", xp=xp)
    F.cross_entropy(model(_tensor(xp, [[1.0, 2.0], [0.5, -1.0]])), xp.asarray([0, 2])).backward()
    assert all(p.grad is not None for p in model.parameters())
    model.zero_grad()
    assert all(p.grad is None for p in model.parameters())


def _trained_bn_mlp(xp, seed):
    """An MLP whose BatchNorm buffers have moved away from their initial values."""
    model = nn.MLP([3, 4, 2], norm="batch", seed=seed, xp=xp)
    model(_tensor(xp, np.arange(15.0).reshape(5, 3) * 0.1 * (seed + 1)))
    return model


def test_state_dict_round_trip_in_and_across_namespaces(xp):
    source = _trained_bn_mlp(xp, seed=0)
    expected = _snapshot(source)
    assert int(expected["1.num_batches_tracked"]) == 1
    for target_xp in (xp, _other(xp)):
        target = nn.MLP([3, 4, 2], norm="batch", seed=1, xp=target_xp)
        target.load_state_dict(source.state_dict())
        _assert_same_state(target, expected)
        for name, value in target.state_dict().items():
            assert backend.get_namespace(value) is target_xp, name
        assert target.state_dict()["1.num_batches_tracked"].dtype == target_xp.int64
        assert all(p.xp is target_xp for p in target.parameters())
    # the loaded arrays are copies: training the source further leaves the target as it was
    source(_tensor(xp, np.ones((4, 3))))
    _assert_same_state(target, expected)


def test_load_state_dict_errors_leave_the_model_unchanged(xp):
    model = _trained_bn_mlp(xp, seed=0)
    before = _snapshot(model)
    good = _trained_bn_mlp(xp, seed=3).state_dict()  # every value differs from the model's

    missing = dict(good)
    del missing["1.running_var"]
    with pytest.raises(KeyError, match=r"missing \['1.running_var'\], unexpected \[\]"):
        model.load_state_dict(missing)
    unexpected = dict(good, **{"5.weight": xp.ones((2, 2))})
    with pytest.raises(KeyError, match=r"missing \[\], unexpected \['5.weight'\]"):
        model.load_state_dict(unexpected)
    wrong = dict(good, **{"3.bias": xp.zeros((3,))})  # the last entry: all others come first
    with pytest.raises(ValueError, match=r"state_dict\['3.bias'\] has shape \(3,\), "
                                         r"expected \(2,\)"):
        model.load_state_dict(wrong)
    _assert_same_state(model, before)


def test_to_moves_every_parameter_and_buffer(xp):
    other = _other(xp)
    model = _trained_bn_mlp(other, seed=0)
    model(_tensor(other, np.ones((2, 3)))).sum().backward()
    before = _snapshot(model)
    assert model.to(xp) is model
    _assert_same_state(model, before)
    for name, p in model.named_parameters():
        assert backend.get_namespace(p.data) is xp, name
        assert p.xp is xp, name
        assert p.grad is None, name  # the old gradients belong to the old arrays
    for name, b in model.named_buffers():
        assert backend.get_namespace(b) is xp, name
    out = model.eval()(_tensor(xp, np.ones((2, 3))))  # eval: the buffers stay as they are
    assert backend.get_namespace(out.data) is xp

    model.to(dtype="float32")
    assert all(p.dtype == xp.float32 for p in model.parameters())
    buffers = dict(model.named_buffers())
    assert buffers["1.running_mean"].dtype == xp.float32
    assert buffers["1.running_var"].dtype == xp.float32
    assert buffers["1.num_batches_tracked"].dtype == xp.int64  # not a float: left alone
    for name, value in model.state_dict().items():
        assert np.array_equal(backend.to_numpy(value), before[name].astype(
            np.float32 if before[name].dtype == np.float64 else before[name].dtype)), name
    assert model(_tensor(xp, np.ones((2, 3)), dtype="float32")).dtype == xp.float32


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
    with pytest.raises(ValueError, match="out_features must be a positive int"):
        nn.Linear(3, 2.0, xp=xp)
    with pytest.raises(TypeError, match="cannot mix"):
        layer(_tensor(_other(xp), np.ones((4, 3))))


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
    bn.weight.data = xp.asarray([2.0, 0.5])
    bn.bias.data = xp.asarray([1.0, -1.0])
    bn.running_mean = xp.asarray([1.0, -2.0])
    bn.running_var = xp.asarray([4.0 - EPS, 0.25 - EPS])  # so that sqrt(var + eps) is 2, 0.5
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
    for groups in (3, 0, 2.0):
        with pytest.raises(ValueError, match=r"num_groups.*num_channels=4"):
            nn.GroupNorm(groups, 4, xp=xp)
    with pytest.raises(ValueError, match=r"GroupNorm\(2, 4\).*\(3, 6\)"):
        nn.GroupNorm(2, 4, xp=xp)(_tensor(xp, np.ones((3, 6))))
    with pytest.raises(ValueError, match=r"LayerNorm\(4,\).*\(3, 5\)"):
        nn.LayerNorm(4, xp=xp)(_tensor(xp, np.ones((3, 5))))


# ----- MLP ----------------------------------------------------------------------------------------
def test_mlp_block_order(xp):
    model = nn.MLP([2, 8, 8, 3], activation="tanh", norm="layer", dropout=0.2, xp=xp)
    assert [type(m) for m in model] == [
        nn.Linear, nn.LayerNorm, nn.Tanh, nn.Dropout,
        nn.Linear, nn.LayerNorm, nn.Tanh, nn.Dropout,
        nn.Linear]
    assert len(model) == 9
    assert (model[-1].in_features, model[-1].out_features) == (8, 3)
    assert model[3].seed != model[7].seed  # each dropout layer draws its own masks
    plain = nn.MLP([4, 5], xp=xp)
    assert [type(m) for m in plain] == [nn.Linear]
    for norm, cls in (("batch", nn.BatchNorm1d), ("group", nn.GroupNorm)):
        assert type(nn.MLP([2, 8, 3], norm=norm, xp=xp)[1]) is cls
    assert nn.MLP([2, 6, 3], norm="group", xp=xp)[1].num_groups == 2  # default_groups(6)
    for name, cls in (("relu", nn.ReLU), ("sigmoid", nn.Sigmoid), ("gelu", nn.GELU)):
        assert type(nn.MLP([2, 8, 3], activation=name, xp=xp)[1]) is cls


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"sizes": [3]}, "sizes"),
    ({"sizes": [3, 0, 2]}, "sizes"),
    ({"sizes": [3, 2.5, 2]}, "sizes"),
    ({"activation": "softplus"}, "activation.*'softplus'"),
    ({"norm": "instance"}, "norm.*'instance'"),
    ({"dropout": -0.1}, r"dropout must be in \[0, 1\]"),
    ({"dropout": 1.5}, r"dropout must be in \[0, 1\]"),
])
def test_mlp_bad_arguments_raise_naming_the_argument(xp, kwargs, match):
    args = {"sizes": [3, 4, 2], **kwargs}
    with pytest.raises(ValueError, match=match):
        nn.MLP(xp=xp, **args)


@pytest.mark.parametrize("norm", NORMS)
def test_float32_mlp_gives_float32_outputs_and_grads(xp, norm):
    model = nn.MLP([3, 8, 2], "gelu", norm, dtype="float32", xp=xp)
    x = _tensor(xp, np.linspace(-1.0, 1.0, 12).reshape(4, 3), dtype="float32")
    out = model(x)
    assert out.dtype == xp.float32
    loss = F.cross_entropy(out, xp.asarray([0, 1, 1, 0]))
    assert loss.dtype == xp.float32
    loss.backward()
    for name, p in model.named_parameters():
        assert p.grad.dtype == xp.float32, name
        assert backend.get_namespace(p.grad) is xp, name
    for name, b in model.named_buffers():
        if name.endswith("running_mean") or name.endswith("running_var"):
            assert b.dtype == xp.float32, name


# ----- small modules and losses ------------------------------------------------------------------
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


def test_loss_modules(xp):
    logits = _tensor(xp, [[0.5, -1.0, 2.0], [1.0, 0.0, 3.0], [0.0, 0.0, 0.0]])
    target = xp.asarray([2, 9, 0])
    ce = nn.CrossEntropyLoss(ignore_index=9)
    assert ce(logits, target).item() == F.cross_entropy(logits, target, ignore_index=9).item()
    assert ce(logits, target, reduction="sum").item() == F.cross_entropy(
        logits, target, "sum", ignore_index=9).item()
    assert ce.num_items(target) == 2
    assert nn.CrossEntropyLoss().num_items(Tensor(xp.asarray([1, -100, -100]))) == 1
    mse = nn.MSELoss(reduction="sum")
    y = _tensor(xp, np.zeros((3, 3)))
    assert mse(logits, y).item() == F.mse_loss(logits, y, "sum").item()
    assert mse.num_items(y) == 9
    for cls in (nn.CrossEntropyLoss, nn.MSELoss):
        with pytest.raises(ValueError, match="reduction.*'avg'"):
            cls(reduction="avg")


# ----- torch as an oracle, where it is installed --------------------------------------------------
@pytest.mark.parametrize("norm", NORMS)
@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_mlp_matches_torch(xp, activation, norm):
    torch = pytest.importorskip("torch")
    model = nn.MLP([3, 8, 3], activation, norm, seed=0, xp=xp, num_groups=2)
    acts = {"relu": torch.nn.ReLU, "tanh": torch.nn.Tanh, "sigmoid": torch.nn.Sigmoid,
            "gelu": lambda: torch.nn.GELU(approximate="tanh")}
    norms = {"batch": lambda: torch.nn.BatchNorm1d(8), "group": lambda: torch.nn.GroupNorm(2, 8),
             "layer": lambda: torch.nn.LayerNorm(8)}
    layers = [torch.nn.Linear(3, 8)] + ([norms[norm]()] if norm else [])
    reference = torch.nn.Sequential(*layers, acts[activation](), torch.nn.Linear(8, 3)).double()
    reference.load_state_dict({k: torch.from_numpy(np.array(backend.to_numpy(v)))
                               for k, v in model.state_dict().items()})
    x = np.random.default_rng(1).normal(size=(6, 3))
    for step in range(2):  # two steps: BatchNorm's running statistics move twice
        model.zero_grad()
        reference.zero_grad()
        loss = F.cross_entropy(model(_tensor(xp, x + step)), xp.asarray(TARGET))
        loss.backward()
        t_loss = torch.nn.functional.cross_entropy(reference(torch.from_numpy(x + step)),
                                                   torch.from_numpy(TARGET))
        t_loss.backward()
        assert loss.item() == pytest.approx(t_loss.item(), rel=1e-12)
        torch_params = dict(reference.named_parameters())
        for name, p in model.named_parameters():
            np.testing.assert_allclose(_np(p.grad), torch_params[name].grad.numpy(),
                                       rtol=1e-10, atol=1e-12, err_msg=name)
    torch_state = reference.state_dict()
    for name, value in model.state_dict().items():
        np.testing.assert_allclose(backend.to_numpy(value), torch_state[name].numpy(),
                                   rtol=1e-12, err_msg=name)


def test_sizes_reject_booleans():
    with pytest.raises(ValueError, match="in_features must be a positive int"):
        nn.Linear(True, 3)
    with pytest.raises(ValueError, match="sizes must list"):
        nn.MLP([2, True, 3])
