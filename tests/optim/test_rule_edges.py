"""The rules at the edges of their hyperparameters, and what the pure rules promise besides
their values: torch's defaults, the errors naming the array that does not fit, a momentum
buffer that never aliases the caller's gradient, and the arrays that take Adam's fast path.

Mutation testing (docs/mutation.md) found each of these unpinned: the property tests draw
momentum below 1 and weight decay below 0.1, so a rule that tested ``!= 1`` instead of
``!= 0`` passed them. Values are compared exactly against the NumPy transcriptions of
torch's formulas in ``test_rules.py`` (``optim_oracle.py`` says why 0 ulps hold)."""

import sys
import types

import numpy as np
import pytest
from optim_oracle import np_, sqrt_of, torch_adam
from test_rules import run_pure, torch_sgd

from minigrad.engine.tensor import Parameter
from minigrad.optim import SGD, Adam, AdamW, adam, adamw, sgd

rng = np.random.default_rng(7)
PARAMS = [rng.normal(size=(3, 2)), rng.normal(size=(4,))]
GRADS = [[rng.normal(size=p.shape) for p in PARAMS] for _ in range(3)]

SGD_EDGES = [
    {"lr": 0.5, "momentum": 0.0, "dampening": 0.5},  # dampening without momentum: no buffer
    {"lr": 0.5, "momentum": 1.0},  # a momentum of exactly 1
    {"lr": 0.5, "momentum": 0.5, "dampening": 1.0},  # the new gradient fully damped
    {"lr": 0.5, "weight_decay": 1.0},  # a weight decay of exactly 1
    {"lr": 0.5, "momentum": 1.0, "nesterov": True, "weight_decay": 1.0},
]
ADAM_EDGES = [{"lr": 0.5, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 1.0},
              {"lr": 0.5, "betas": (0.0, 0.0), "eps": 1.0, "weight_decay": 0.0}]


def optimizer_run(cls, xp, **h):
    """The same trajectory through an optimizer: its in-place commit."""
    ps = [Parameter(xp.asarray(p.copy())) for p in PARAMS]
    opt = cls(ps, **h)
    for step in GRADS:
        for p, g in zip(ps, step):
            p.grad = xp.asarray(g)
        opt.step()
    return [np_(p.data) for p in ps]


@pytest.mark.parametrize("h", SGD_EDGES, ids=str)
def test_sgd_at_the_edges_matches_torch_formulas(xp, h):
    pure, state = run_pure(sgd, xp, PARAMS, GRADS, **h)
    stepped = optimizer_run(SGD, xp, **h)
    for i, p in enumerate(PARAMS):
        ref, buf = torch_sgd(p, [step[i] for step in GRADS], **h)
        np.testing.assert_array_equal(pure[i], ref)
        np.testing.assert_array_equal(stepped[i], ref)
        np.testing.assert_array_equal(None if state.mu is None else np_(state.mu[i]), buf)


@pytest.mark.parametrize("rule, cls, decoupled", [(adam, Adam, False), (adamw, AdamW, True)],
                         ids=["adam", "adamw"])
@pytest.mark.parametrize("h", ADAM_EDGES, ids=str)
def test_adam_at_the_edges_matches_torch_formulas(xp, rule, cls, decoupled, h):
    pure, _ = run_pure(rule, xp, PARAMS, GRADS, **h)
    stepped = optimizer_run(cls, xp, **h)
    for i, p in enumerate(PARAMS):
        ref, _, _ = torch_adam(p, [step[i] for step in GRADS], decoupled=decoupled,
                               sqrt=sqrt_of(xp), **h)
        np.testing.assert_array_equal(pure[i], ref)
        np.testing.assert_array_equal(stepped[i], ref)


# ----- torch's defaults -----------------------------------------------------------------------
@pytest.mark.parametrize("rule, defaults", [
    (sgd, {"momentum": 0.0, "dampening": 0.0, "nesterov": False, "weight_decay": 0.0}),
    (adam, {"lr": 1e-3, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0.0}),
    (adamw, {"lr": 1e-3, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 1e-2}),
], ids=["sgd", "adam", "adamw"])
def test_the_rules_defaults_are_torchs(rule, defaults):
    lr = {"lr": 0.5} if rule is sgd else {}
    checked = rule.check_hyperparams(**lr)
    assert {k: checked[k] for k in defaults} == defaults
    # update() without hyperparameters is update() with torch's defaults, bit for bit
    params = [p * 100.0 for p in PARAMS]  # large, so that a weight decay shows
    grads = [g * 1e-9 for g in GRADS[0]]  # small, so that eps shows
    state = rule.init(params)
    got, _ = rule.update(grads, state, params, **lr)
    want, _ = rule.update(grads, state, params, **lr, **defaults)
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)
    if rule is not sgd:
        explicit = {**defaults, "lr": 0.5, "eps": 1.0, "weight_decay": 0.5}
        other, _ = rule.update(grads, state, params, **explicit)
        assert not np.array_equal(other[0], got[0])


# ----- errors name the array that does not fit ---------------------------------------------
@pytest.mark.parametrize("rule, field", [(sgd, "mu"), (adam, "mu"), (adam, "nu"),
                                         (adamw, "nu"), (adam, "grads"), (sgd, "grads")])
def test_a_state_or_gradient_of_another_shape_is_named(rule, field):
    params = [np.zeros((2, 2)), np.zeros(3)]
    grads = [np.zeros((2, 2)), np.zeros(3)]
    state = rule.init(params)
    if rule is sgd:  # the buffers exist after a first update with momentum
        _, state = rule.update(grads, state, params, lr=0.5, momentum=0.5)
    h = {"lr": 0.5, "momentum": 0.5} if rule is sgd else {}
    if field == "grads":
        grads = [grads[0], np.zeros(4)]
        name = r"grads\[1\]"
    else:
        state = state._replace(**{field: (getattr(state, field)[0], np.zeros(4))})
        name = rf"state\.{field}\[1\]"
    with pytest.raises(ValueError, match=rf"^{name}"):
        rule.update(grads, state, params, **h)


def test_the_first_momentum_buffer_is_a_copy_of_the_gradient():
    params, grads = [np.zeros(3)], [np.array([1.0, 2.0, 3.0])]
    _, state = sgd.update(grads, sgd.init(params), params, lr=0.5, momentum=0.9)
    grads[0][...] = 0.0  # the caller reuses its gradient array
    np.testing.assert_array_equal(state.mu[0], [1.0, 2.0, 3.0])


# ----- the arrays that take Adam's fast path -----------------------------------------------
def fake_arrays(module, name, ndim=1):
    """Four arrays of a stand-in type: only its module, name and ``ndim`` are looked at."""
    kind = type(name, (), {"ndim": ndim})
    kind.__module__ = module
    return [kind() for _ in range(4)]


def test_cupy_arrays_take_the_fast_path_recognised_without_importing_cupy(monkeypatch):
    lib = types.ModuleType("cupy")
    monkeypatch.setitem(sys.modules, "cupy", lib)
    cupy = fake_arrays("cupy._core.core", "ndarray")
    assert adam._in_place_library(*cupy) is lib
    for module, name in (("dask.array", "ndarray"), ("cupy._core.core", "Array")):
        assert adam._in_place_library(*fake_arrays(module, name)) is None
    assert adam._in_place_library(*fake_arrays("cupy._core.core", "ndarray", 0)) is None
    mixed = [np.zeros(2), np.zeros(2), np.zeros(2), cupy[0]]
    assert adam._in_place_library(*mixed) is None
    assert adam._in_place_library(*[np.zeros(2)] * 4) is np
    assert adam._in_place_library(*[np.float64(1.0)] * 4) is None
