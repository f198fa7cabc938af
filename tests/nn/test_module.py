"""Module: registration of parameters, buffers and children, names (as torch's), train and
eval modes, zero_grad, state_dict round trips and refusals, and ``to`` another namespace or
dtype."""

import numpy as np
import pytest
from helpers import constant as _tensor
from helpers import other_namespace as _other

from minigrad import backend, nn
from minigrad.engine.tensor import Parameter
from minigrad.nn import functional as F


def _snapshot(model):
    """A NumPy copy of every parameter and buffer, by dotted name."""
    return {k: np.array(backend.to_numpy(v), copy=True) for k, v in model.state_dict().items()}


def _assert_same_state(model, snapshot):
    state = model.state_dict()
    assert list(state) == list(snapshot)
    for k, v in state.items():
        assert np.array_equal(backend.to_numpy(v), snapshot[k]), k


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


class _Fragile(Parameter):
    """A parameter whose next ``.data`` write raises ``KeyboardInterrupt`` once armed (once:
    the rollback's own write goes through)."""

    armed = False

    @property
    def data(self):
        return self.__dict__["data"]

    @data.setter
    def data(self, value):
        if _Fragile.armed:
            _Fragile.armed = False
            raise KeyboardInterrupt
        self.__dict__["data"] = value


@pytest.mark.parametrize("operation", ["load_state_dict", "to"])
def test_an_interrupt_half_way_through_the_writes_leaves_the_module_as_it_was(operation):
    holder = nn.Module()
    holder.last = _Fragile([1.0, 2.0])
    model = nn.Sequential(nn.Linear(3, 2), nn.BatchNorm1d(2), holder)  # written last
    for p in model.parameters():
        p.grad = p.data * 2.0
    before = _snapshot(model)
    grads = [p.grad for p in model.parameters()]
    new_state = {k: np.asarray(backend.to_numpy(v)) + 1 for k, v in model.state_dict().items()}
    _Fragile.armed = True
    try:
        with pytest.raises(KeyboardInterrupt):
            if operation == "load_state_dict":
                model.load_state_dict(new_state)
            else:
                model.to(dtype="float32")
    finally:
        _Fragile.armed = False
    _assert_same_state(model, before)
    assert all(p.data.dtype == np.float64 for p in model.parameters())
    assert all(p.grad is g for p, g in zip(model.parameters(), grads))


@pytest.mark.parametrize("how", ["register_buffer", "deepcopy"])
def test_a_module_with_buffers_turns_on_the_forward_snapshot(monkeypatch, how):
    # Module.__call__ snapshots buffers only once some module has them (_buffers_seen); a
    # deep copy (as analysis.memory makes) skips register_buffer, so __setstate__ notes it.
    import copy
    import types

    from minigrad.nn import module

    norm = nn.BatchNorm1d(3)
    monkeypatch.setattr(module, "_buffers_seen", False)
    if how == "deepcopy":
        code = {id(v): v for obj in (norm, *norm.parameters()) for v in vars(obj).values()
                if isinstance(v, types.ModuleType)}
        made = copy.deepcopy(norm, code)
    else:
        made = nn.BatchNorm1d(3)
    assert module._buffers_seen
    model = nn.Sequential(made, nn.Linear(2, 1))  # BatchNorm runs, then Linear refuses
    before = {k: np.array(v, copy=True) for k, v in model.named_buffers()}
    with pytest.raises(ValueError, match="last dimension must be 2"):
        model(np.arange(12.0).reshape(4, 3))
    assert all(np.array_equal(v, before[k]) for k, v in model.named_buffers())
