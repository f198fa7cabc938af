"""The pure update rules (``sgd``, ``adam``, ``adamw``): torch's formulas re-implemented in
NumPy as an oracle, compared exactly (0 ulps; ``optim_oracle.py`` says why), and
hand-computed cases through the rules and the optimizers."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from optim_oracle import U64, arr, np_, sqrt_of, torch_adam

from minigrad import backend
from minigrad.engine.tensor import Parameter
from minigrad.optim import SGD, Adam, AdamW, adam, adamw, sgd


# ----- torch's single-tensor formulas, written out in NumPy (one parameter) ----------------
def torch_sgd(p, grads, *, lr, momentum=0.0, dampening=0.0, nesterov=False, weight_decay=0.0):
    buf = None
    for grad in grads:
        if weight_decay != 0:
            grad = grad + weight_decay * p
        if momentum != 0:
            buf = grad.copy() if buf is None else buf * momentum + (1 - dampening) * grad
            grad = grad + momentum * buf if nesterov else buf
        p = p + (-lr) * grad
    return p, buf


@st.composite
def trajectories(draw, dtype=np.float64):
    """``(params, grads)``: 1-3 NumPy parameters and ``grads[t][i]`` for 1-4 updates."""
    shapes = draw(st.lists(hnp.array_shapes(min_dims=0, max_dims=2, max_side=3),
                           min_size=1, max_size=3))
    values = st.floats(-100, 100, width=np.finfo(dtype).bits)
    params = [draw(hnp.arrays(dtype, s, elements=values)) for s in shapes]
    steps = draw(st.integers(1, 4))
    grads = [[draw(hnp.arrays(dtype, s, elements=values)) for s in shapes] for _ in range(steps)]
    return params, grads


@st.composite
def sgd_hyperparams(draw):
    nesterov = draw(st.booleans())
    return {"lr": draw(st.floats(0, 1)), "momentum": draw(st.floats(0.01 if nesterov else 0, 0.99)),
            "dampening": 0.0 if nesterov else draw(st.floats(0, 1)), "nesterov": nesterov,
            "weight_decay": draw(st.floats(0, 0.1))}


adam_hyperparams = st.fixed_dictionaries({
    "lr": st.floats(0, 1), "betas": st.tuples(st.floats(0, 0.999), st.floats(0, 0.999)),
    "eps": st.floats(1e-10, 1e-2), "weight_decay": st.floats(0, 0.1)})


def run_pure(rule, xp, params, grads, **hyperparams):
    ps = [xp.asarray(p) for p in params]
    state = rule.init(ps)
    for step in grads:
        ps, state = rule.update([xp.asarray(g) for g in step], state, ps, **hyperparams)
    return [np_(p) for p in ps], state


# ----- pure rules against the oracle --------------------------------------------------------
@given(case=trajectories(), h=sgd_hyperparams())
def test_sgd_matches_torch_formulas(xp, case, h):
    params, grads = case
    ours, state = run_pure(sgd, xp, params, grads, **h)
    for i, p in enumerate(params):
        ref, buf = torch_sgd(p, [step[i] for step in grads], **h)
        np.testing.assert_array_equal(ours[i], ref)
        np.testing.assert_array_equal(None if state.mu is None else np_(state.mu[i]), buf)
    assert state.count == len(grads)


@pytest.mark.parametrize("rule, decoupled", [(adam, False), (adamw, True)],
                         ids=["adam", "adamw"])
@given(case=trajectories(), h=adam_hyperparams)
def test_adam_and_adamw_match_torch_formulas(xp, rule, decoupled, case, h):
    params, grads = case
    ours, state = run_pure(rule, xp, params, grads, **h)
    for i, p in enumerate(params):
        ref, m, v = torch_adam(p, [step[i] for step in grads], decoupled=decoupled,
                               sqrt=sqrt_of(xp), **h)
        np.testing.assert_array_equal(ours[i], ref)
        np.testing.assert_array_equal(np_(state.mu[i]), m)
        np.testing.assert_array_equal(np_(state.nu[i]), v)
    assert state.count == len(grads)


@given(case=trajectories(np.float32), h=adam_hyperparams)
def test_float32_adamw_matches_torch_formulas_in_float32(xp, case, h):
    # NumPy 2 and the array API cast Python scalars to the array's dtype, so both sides
    # compute every operation in float32.
    params, grads = case
    ours, _ = run_pure(adamw, xp, params, grads, **h)
    for i, p in enumerate(params):
        ref, _, _ = torch_adam(p, [step[i] for step in grads], decoupled=True,
                               sqrt=sqrt_of(xp), **h)
        assert ours[i].dtype == np.float32
        np.testing.assert_array_equal(ours[i], ref)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("rule, h", [(sgd, {"lr": 0.1, "momentum": 0.9}), (adam, {}),
                                     (adamw, {})], ids=["sgd", "adam", "adamw"])
def test_pure_update_returns_new_arrays_in_the_params_namespace_and_dtype(xp, dtype, rule, h):
    params = [arr(xp, [1.0, -2.0], dtype), arr(xp, [[0.5]], dtype)]
    grads = [arr(xp, [0.5, 0.25], dtype), arr(xp, [[-1.0]], dtype)]
    before = [np_(a).copy() for a in params + grads]
    state = rule.init(params)
    for _ in range(2):
        new, state = rule.update(grads, state, params, **h)
    assert [np_(a).tolist() for a in params + grads] == [b.tolist() for b in before]
    arrays = list(new) + [a for field in state[1:] for a in field]
    assert len(arrays) == 4 + 2 * (rule is not sgd)
    for a, p in zip(arrays, params * 3):
        assert backend.get_namespace(a) is xp
        assert a.dtype == getattr(xp, dtype)
        assert tuple(a.shape) == tuple(p.shape)
        assert backend.device(a) == backend.device(p)


# ----- hand-computed cases -------------------------------------------------------------------
def sgd_trajectory(xp, grads, **h):
    w = Parameter(arr(xp, [1.0]))
    opt = SGD([w], **h)
    out = []
    for g in grads:
        w.grad = arr(xp, [g])
        opt.step()
        out.append(float(w.data[0]))
    return out


def test_sgd_momentum_with_dampening_three_steps_by_hand(xp):
    # lr = 0.25, momentum = 0.5, dampening = 0.5, p = 1, g = 4, 8, -4 (all exact in binary)
    # t=1: b = g = 4 (torch copies g; NOT (1 - 0.5) * 4)   p = 1 - 0.25 * 4    = 0
    # t=2: b = 0.5 * 4 + 0.5 * 8 = 6                        p = 0 - 0.25 * 6    = -1.5
    # t=3: b = 0.5 * 6 + 0.5 * (-4) = 1                     p = -1.5 - 0.25 * 1 = -1.75
    assert sgd_trajectory(xp, [4, 8, -4], lr=0.25, momentum=0.5, dampening=0.5) == [0, -1.5, -1.75]


def test_sgd_nesterov_three_steps_by_hand(xp):
    # lr = 0.25, momentum = 0.5, p = 1, g = 4, 8, -4
    # t=1: b = 4                   g = 4 + 0.5 * 4 = 6      p = 1 - 1.5          = -0.5
    # t=2: b = 0.5 * 4 + 8 = 10    g = 8 + 0.5 * 10 = 13    p = -0.5 - 3.25      = -3.75
    # t=3: b = 0.5 * 10 - 4 = 1    g = -4 + 0.5 * 1 = -3.5  p = -3.75 + 0.875    = -2.875
    assert sgd_trajectory(xp, [4, 8, -4], lr=0.25, momentum=0.5, nesterov=True) \
        == [-0.5, -3.75, -2.875]


def test_sgd_l2_weight_decay_by_hand(xp):
    # lr = 0.25, weight_decay = 0.5, p = 1, g = 1, 1
    # t=1: g = 1 + 0.5 * 1 = 1.5        p = 1 - 0.375       = 0.625
    # t=2: g = 1 + 0.5 * 0.625 = 1.3125 p = 0.625 - 0.328125 = 0.296875
    assert sgd_trajectory(xp, [1, 1], lr=0.25, weight_decay=0.5) == [0.625, 0.296875]


def test_adam_one_step_by_hand(xp):
    # betas = (0.5, 0.75), eps = 0, lr = 0.125, p = 1, g = 2
    # m = 0.5 * 2 = 1; v = 0.25 * 4 = 1; step size = 0.125 / (1 - 0.5) = 0.25
    # d = sqrt(1) / sqrt(1 - 0.75) + 0 = 2; p = 1 - 0.25 * 1 / 2 = 0.875
    new, state = adam.update([arr(xp, [2.0])], adam.init([arr(xp, [1.0])]), [arr(xp, [1.0])],
                             lr=0.125, betas=(0.5, 0.75), eps=0.0)
    assert (np_(new[0]).tolist(), np_(state.mu[0]).tolist(), np_(state.nu[0]).tolist()) \
        == ([0.875], [1.0], [1.0])


def test_adam_first_step_moves_each_coordinate_by_lr_times_sign(xp):
    # At t=1, m_hat = g and sqrt(v_hat) = |g|, so the step is lr * g / (|g| + eps): it
    # differs from lr * sign(g) by at most lr * eps / |g|. Rounding: ~10 operations, each
    # off by a relative U64, plus one rounding of the new p.
    lr, eps, g = 0.1, 1e-8, np.array([-3.0, 0.5, 2.0, 1e-3])
    p0 = np.array([1.0, -2.0, 0.25, 4.0])
    w = Parameter(xp.asarray(p0))
    opt = Adam([w], lr=lr, eps=eps)
    w.grad = xp.asarray(g)
    opt.step()
    p1 = np_(w.data)
    bound = lr * eps / np.abs(g) + 10 * U64 * lr + U64 * np.abs(p1)
    assert np.all(np.abs(p1 - (p0 - lr * np.sign(g))) <= bound)


def test_adamw_decays_the_parameter_not_the_gradient(xp):
    # g = 0: Adam's own step is 0 / (0 + eps) = 0, so AdamW only decays:
    # p = 2 * (1 - lr * wd) = 2 * (1 - 0.5 * 0.25) = 1.75 exactly.
    # Adam's L2 term instead turns the zero gradient into g = 0.25 * 2 = 0.5, and its first
    # step moves p by ~lr * sign(g) = 0.5 (bound as in the test above).
    decoupled, coupled = Parameter(arr(xp, [2.0])), Parameter(arr(xp, [2.0]))
    for w, opt in [(decoupled, AdamW([decoupled], lr=0.5, weight_decay=0.25)),
                   (coupled, Adam([coupled], lr=0.5, weight_decay=0.25))]:
        w.grad = arr(xp, [0.0])
        opt.step()
    assert float(decoupled.data[0]) == 1.75
    lr, eps, g = 0.5, 1e-8, 0.5
    assert abs(float(coupled.data[0]) - 1.5) <= lr * eps / g + 10 * U64 * lr + U64 * 1.5


# ----- the NumPy fast path of Adam: the same IEEE operations, so the same bits ------------
@given(dtype=st.sampled_from([np.float32, np.float64]), data=st.data(),
       b1=st.floats(0, 0.999), b2=st.floats(0, 0.9999), t=st.integers(1, 10**6),
       lr=st.floats(0, 10), eps=st.floats(0, 1))
def test_adam_numpy_fast_path_gives_the_plain_rules_bits(dtype, data, b1, b2, t, lr, eps):
    # Any values, NaN, infinities and subnormals included: both paths make the same correctly
    # rounded operations in the same order, so IEEE 754 guarantees identical bits everywhere.
    shape = data.draw(hnp.array_shapes(min_dims=1, max_dims=2, max_side=4))
    g, m, v, p = (data.draw(hnp.arrays(dtype, shape)) for _ in range(4))
    v = np.abs(v)  # a second moment; sqrt of a negative would be NaN in both paths anyway
    before = [a.copy() for a in (g, m, v, p)]
    step_size, bc2 = lr / (1 - b1**t), (1 - b2**t) ** 0.5
    with np.errstate(all="ignore"):
        plain = adam._one(g, m, v, p, b1, b2, step_size, bc2, eps)
        fast = adam._one_fresh(np, g, m, v, p, b1, b2, step_size, bc2, eps)
    for a, b in zip(plain, fast):
        a, b = np.asarray(a), np.asarray(b)
        assert a.dtype == b.dtype == dtype and a.shape == b.shape
        assert a.tobytes() == b.tobytes()
    for a, b in zip(before, (g, m, v, p)):
        assert a.tobytes() == b.tobytes()  # the inputs are not written to


def test_adam_takes_the_fast_path_for_numpy_and_cupy_arrays_only(monkeypatch):
    calls = []
    monkeypatch.setattr(adam, "_one_fresh", lambda lib, *a: calls.append(lib) or adam._one(*a))
    params, grads = [np.ones((2, 2))], [np.ones((2, 2))]
    adam.update(grads, adam.init(params), params)
    assert calls == [np]
    strict = backend.resolve_namespace("array_api_strict")
    sp, sg = [strict.ones((2, 2))], [strict.ones((2, 2))]
    adam.update(sg, adam.init(sp), sp)
    assert calls == [np]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_adam_fast_path_on_cupy_gives_the_plain_rules_bits(cupy_xp, dtype):
    """One CuPy kernel per operation on both paths (no fused multiply-add across kernels),
    in the same order: the same bits, as on NumPy. ``update`` takes the fast path."""
    import cupy
    rng = np.random.default_rng(0)
    g, m, v, p = (cupy.asarray(rng.normal(size=(64, 33)).astype(dtype)) for _ in range(4))
    v = cupy.abs(v)
    step_size, bc2 = 1e-3 / (1 - 0.9**7), (1 - 0.999**7) ** 0.5
    plain = adam._one(g, m, v, p, 0.9, 0.999, step_size, bc2, 1e-8)
    fast = adam._one_fresh(cupy, g, m, v, p, 0.9, 0.999, step_size, bc2, 1e-8)
    for a, b in zip(plain, fast):
        assert a.dtype == b.dtype and cupy.asnumpy(a).tobytes() == cupy.asnumpy(b).tobytes()
    assert adam._in_place_library(g, m, v, p) is cupy
