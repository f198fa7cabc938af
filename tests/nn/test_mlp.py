"""The MLP: gradients with cross-entropy (every activation and norm, and with dropout)
against finite differences and HIPS autograd (via check_op, with the model's parameters as
the checked inputs; the reference is ``layer_refs.mlp_ref``); block order, bad arguments,
float32; and torch's Sequential as an oracle, where torch is installed."""

import numpy as np
import pytest
from gradcheck import check_op
from gradcheck import module_spec as _module_spec
from helpers import as_numpy as _np
from helpers import constant as _tensor
from layer_refs import mlp_ref as _mlp_ref

from minigrad import backend, nn
from minigrad.engine.tensor import Tensor
from minigrad.nn import functional as F

ACTIVATIONS = ("relu", "tanh", "sigmoid", "gelu")
NORMS = (None, "batch", "group", "layer")
TARGET = np.array([0, 2, 1, -100, 2, 0])


# ----- check_op over the model's parameters ---------------------------------------------------
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


@pytest.mark.parametrize(("kwargs", "error", "match"), [
    ({"sizes": [3]}, ValueError, "sizes"),
    ({"sizes": [3, 0, 2]}, ValueError, r"sizes\[1\] must be a positive int, got 0"),
    ({"sizes": [3, 2.5, 2]}, TypeError, r"sizes\[1\] must be a positive int, got float 2.5"),
    ({"sizes": 3}, TypeError, "sizes must list"),
    ({"activation": "softplus"}, ValueError, "activation.*'softplus'"),
    ({"norm": "instance"}, ValueError, "norm.*'instance'"),
    ({"dropout": -0.1}, ValueError, r"dropout must be a finite number with 0 <= dropout <= 1"),
    ({"dropout": 1.5}, ValueError, r"dropout must be a finite number with 0 <= dropout <= 1"),
    ({"seed": -1}, ValueError, "seed must be an integer >= 0, got -1"),
    ({"num_groups": 0}, ValueError, "num_groups must be a positive int, got 0"),
])
def test_mlp_bad_arguments_raise_naming_the_argument(xp, kwargs, error, match):
    args = {"sizes": [3, 4, 2], **kwargs}
    with pytest.raises(error, match=match):
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
