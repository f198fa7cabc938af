"""Optimizers, clipping and schedules: hand-computed cases, torch's formulas re-implemented
in NumPy as an oracle, state placement, validation, and "an error changes nothing".

Exactness of the oracle comparisons: the NumPy reference below performs torch's operations
in torch's order. Every float operation used (+, -, *, /, sqrt) is correctly rounded in
IEEE 754, so the same operations in the same order give the same bits: the derived
tolerance is 0 ulps, and any difference means that a formula differs.

One exception, measured: PyTorch's CPU ``sqrt`` is not always correctly rounded (float64
sqrt(432.33) came out 1 ulp above NumPy's). So the Adam reference takes the square root of
the namespace under test (``sqrt=``) as a given primitive; everything else stays the
reference's own IEEE arithmetic, and the comparison stays exact.
"""

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from minigrad import backend, optim
from minigrad.engine.tensor import Parameter
from minigrad.optim import SGD, Adam, AdamW, adam, adamw, sgd

U64 = np.finfo(np.float64).eps / 2  # unit roundoff: one rounding has relative error <= U64


def arr(xp, values, dtype="float64"):
    return xp.asarray(values, dtype=getattr(xp, dtype))


def np_(x):
    return None if x is None else np.asarray(backend.to_numpy(x))


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


def torch_adam(p, grads, *, lr, betas, eps, weight_decay=0.0, decoupled=False, sqrt=np.sqrt):
    beta1, beta2 = betas
    exp_avg, exp_avg_sq = np.zeros_like(p), np.zeros_like(p)
    for step, grad in enumerate(grads, start=1):
        if weight_decay != 0 and decoupled:
            p = p * (1 - lr * weight_decay)
        elif weight_decay != 0:
            grad = grad + weight_decay * p
        exp_avg = exp_avg * beta1 + (1 - beta1) * grad
        exp_avg_sq = exp_avg_sq * beta2 + (1 - beta2) * grad * grad
        step_size = lr / (1 - beta1**step)
        denom = sqrt(exp_avg_sq) / (1 - beta2**step) ** 0.5 + eps
        p = p + (-step_size) * exp_avg / denom
    return p, exp_avg, exp_avg_sq


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


def sqrt_of(xp):
    """The square root of namespace ``xp``, as a function of NumPy arrays."""
    return lambda a: np_(xp.sqrt(xp.asarray(a))).astype(a.dtype)


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


# ----- the stateful wrappers ------------------------------------------------------------------
MAKERS = {
    "sgd": lambda ps: SGD(ps, lr=0.1, momentum=0.9, dampening=0.1, weight_decay=0.01),
    "adam": lambda ps: Adam(ps, lr=0.01, weight_decay=0.1),
    "adamw": lambda ps: AdamW(ps, lr=0.01),
}


@pytest.fixture(params=sorted(MAKERS))
def make_opt(request):
    return MAKERS[request.param]


def two_params(xp, dtype="float64"):
    return Parameter(arr(xp, [1.0, -2.0], dtype)), Parameter(arr(xp, [[3.0]], dtype))


def set_grads(params, xp, scale=1.0, dtype="float64"):
    for p in params:
        p.grad = xp.full(p.shape, scale, dtype=getattr(xp, dtype))


def snapshot(opt):
    """Everything ``step()`` or ``load_state_dict()`` could change, as plain NumPy/Python."""
    sd = opt.state_dict()
    fields = {k: v if k == "count" else [np_(a) for a in v]
              for k, v in sd.items() if k not in ("lr", "hyperparams", "step_count")}
    return repr((opt.lr, sd["hyperparams"], opt.step_count, [np_(p.data) for p in opt.params],
                 fields))


def test_wrapper_equals_the_pure_update(xp, make_opt):
    a, b = two_params(xp)
    opt = make_opt([a, b])
    rule = {SGD: sgd, Adam: adam, AdamW: adamw}[type(opt)]
    params, state = [a.data, b.data], rule.init([a.data, b.data])
    for scale in (1.0, -0.5, 2.0):
        set_grads([a, b], xp, scale)
        opt.step()
        params, state = rule.update([a.grad, b.grad], state, params, lr=opt.lr,
                                    **opt.hyperparams)
    assert np_(a.data).tolist() == np_(params[0]).tolist()
    assert np_(b.data).tolist() == np_(params[1]).tolist()
    assert opt.step_count == 3


@pytest.mark.parametrize("bad", ["shape", "dtype", "integer", "namespace"])
def test_a_bad_grad_changes_nothing(xp, make_opt, bad):
    a, b = two_params(xp)
    opt = make_opt([a, b])
    set_grads([a, b], xp)
    opt.step()
    before = snapshot(opt)
    set_grads([a, b], xp)
    other = backend.resolve_namespace("numpy" if xp.__name__ == "array_api_strict"
                                  else "array_api_strict")
    b.grad = {"shape": arr(xp, [1.0, 1.0]), "dtype": arr(xp, [[1.0]], "float32"),
              "integer": xp.asarray([[1]]), "namespace": arr(other, [[1.0]])}[bad]
    error = ValueError if bad == "shape" else TypeError
    with pytest.raises(error, match=r"params\[1\]\.grad"):
        opt.step()
    assert snapshot(opt) == before


def test_a_parameter_without_grad_is_skipped_and_keeps_its_count(xp):
    a, b = two_params(xp)
    b_start = np_(b.data)
    opt = Adam([a, b], lr=0.1)
    set_grads([a, b], xp)
    opt.step()
    b_after_one = np_(b.data)
    b.grad = None
    a.grad = arr(xp, [1.0, 1.0])
    opt.step()
    assert opt.state_dict()["count"] == [2, 1]
    assert np_(b.data).tolist() == b_after_one.tolist()
    b.grad = arr(xp, [[0.5]])
    opt.step()
    # b saw two updates (t = 1, 2), exactly as if the skipped one had never happened
    ref, _, _ = torch_adam(b_start, [np.ones((1, 1)), np.full((1, 1), 0.5)], lr=0.1,
                           betas=(0.9, 0.999), eps=1e-8, sqrt=sqrt_of(xp))
    assert np_(b.data).tolist() == ref.tolist()
    assert (opt.state_dict()["count"], opt.step_count) == ([3, 2], 3)


def test_zero_grad_sets_grad_to_none(xp, make_opt):
    a, b = two_params(xp)
    opt = make_opt([a, b])
    set_grads([a, b], xp)
    opt.zero_grad()
    assert a.grad is None and b.grad is None


def test_float32_parameters_keep_float32_state(xp, make_opt):
    a, b = two_params(xp, "float32")
    opt = make_opt([a, b])
    for _ in range(2):
        set_grads([a, b], xp, 0.5, "float32")
        opt.step()
    state = opt.state_dict()
    arrays = [a.data, b.data] + [x for k in ("mu", "nu") for x in state.get(k, [])]
    assert len(arrays) >= 4
    assert all(x.dtype == xp.float32 and backend.get_namespace(x) is xp for x in arrays)


def test_state_dict_round_trip_continues_identically(xp, make_opt):
    a, b = two_params(xp)
    opt = make_opt([a, b])
    for scale in (1.0, -2.0):
        set_grads([a, b], xp, scale)
        opt.step()
    a2, b2 = Parameter(a.data), Parameter(b.data)
    opt2 = make_opt([a2, b2])
    opt2.lr = 123.0
    # through NumPy, as a checkpoint file stores it: loading moves arrays to the params' xp
    saved = {k: [np_(x) for x in v] if k in ("mu", "nu") else v
             for k, v in opt.state_dict().items()}
    opt2.load_state_dict(saved)
    assert snapshot(opt2) == snapshot(opt)
    for pair in ([a, b], [a2, b2]):
        set_grads(pair, xp, 0.75)
    opt.step()
    opt2.step()
    assert snapshot(opt2) == snapshot(opt)


@pytest.mark.parametrize("corrupt, message", [
    (lambda sd: sd["nu" if "nu" in sd else "mu"].pop(), "has 1 entries for 2 parameters"),
    (lambda sd: sd["mu"].__setitem__(1, np.zeros(3)), r"state_dict\['mu'\]\[1\] has shape"),
    (lambda sd: sd["count"].append(1), r"state_dict\['count'\] has 3 entries"),
    (lambda sd: sd.pop("step_count"), "missing"),
    (lambda sd: sd["hyperparams"].update(other=1.0), "hyperparameters"),
    (lambda sd: sd.update(lr=-1.0), "lr must be"),
])
def test_a_bad_state_dict_raises_and_changes_nothing(xp, make_opt, corrupt, message):
    a, b = two_params(xp)
    opt = make_opt([a, b])
    set_grads([a, b], xp)
    opt.step()
    sd = opt.state_dict()
    corrupt(sd)
    set_grads([a, b], xp)
    opt.step()
    before = snapshot(opt)
    with pytest.raises(ValueError, match=message):
        opt.load_state_dict(sd)
    assert snapshot(opt) == before


@pytest.mark.parametrize("make, kwargs, message", [
    (SGD, {"lr": -0.1}, "lr must be a finite number with lr >= 0"),
    (SGD, {"lr": math.nan}, "lr must be"),
    (SGD, {"lr": 0.1, "momentum": -0.5}, "momentum must be .* momentum >= 0"),
    (SGD, {"lr": 0.1, "dampening": -1.0}, "dampening must be"),
    (SGD, {"lr": 0.1, "weight_decay": -1.0}, "weight_decay must be .* weight_decay >= 0"),
    (SGD, {"lr": 0.1, "nesterov": True}, "nesterov=True requires momentum > 0"),
    (SGD, {"lr": 0.1, "momentum": 0.9, "dampening": 0.1, "nesterov": True}, "dampening = 0"),
    (Adam, {"lr": -1e-3}, "lr must be"),
    (Adam, {"betas": (1.0, 0.999)}, r"betas\[0\] must be .* 0 <= betas\[0\] < 1"),
    (Adam, {"betas": (0.9, -0.1)}, r"betas\[1\] must be"),
    (Adam, {"betas": 0.9}, "betas must be a pair"),
    (Adam, {"eps": -1e-8}, "eps must be .* eps >= 0"),
    (AdamW, {"weight_decay": -0.01}, "weight_decay must be"),
])
def test_bad_hyperparameters_raise_naming_the_argument(xp, make, kwargs, message):
    with pytest.raises(ValueError, match=message):
        make(two_params(xp), **kwargs)


def test_bad_hyperparameter_types_and_the_pure_rules_are_checked_too():
    with pytest.raises(TypeError, match="lr must be a real number"):
        SGD([Parameter([1.0])], lr="0.1")
    with pytest.raises(TypeError, match="nesterov must be True or False"):
        SGD([Parameter([1.0])], lr=0.1, momentum=0.9, nesterov=1)
    with pytest.raises(ValueError, match="lr must be"):
        adam.update([], adam.init([]), [], lr=-1.0)
    with pytest.raises(ValueError, match="expected one array per parameter for grads"):
        sgd.update([np.ones(1)], sgd.init([]), [], lr=0.1)


def test_numpy_scalar_hyperparameters_work_on_every_namespace(xp):
    # array-api-strict refuses NumPy scalars inside array expressions: they become floats
    w = Parameter(arr(xp, [1.0]))
    opt = SGD([w], lr=np.float32(0.5), momentum=np.float64(0.5))
    w.grad = arr(xp, [1.0])
    opt.step()
    assert float(w.data[0]) == 0.5


def test_bad_parameter_lists():
    w = Parameter([1.0])
    with pytest.raises(ValueError, match="empty parameter list"):
        SGD([], lr=0.1)
    with pytest.raises(ValueError, match="more than once"):
        SGD([w, w], lr=0.1)
    with pytest.raises(TypeError, match="iterable of Tensors"):
        SGD(w, lr=0.1)
    with pytest.raises(ValueError, match="not a leaf"):
        SGD([w * 2.0], lr=0.1)


def test_cupy_state_lives_on_the_gpu(cupy_xp):
    a, b = two_params(cupy_xp)
    opt = Adam([a, b])
    set_grads([a, b], cupy_xp)
    opt.step()
    assert all(backend.get_namespace(x) is cupy_xp for x in opt.state_dict()["nu"])


# ----- gradient clipping ----------------------------------------------------------------------
def test_clip_grad_norm_three_four_five(xp):
    a, b, idle = Parameter(arr(xp, [0.0])), Parameter(arr(xp, [0.0])), Parameter(arr(xp, [0.0]))
    a.grad, b.grad = arr(xp, [3.0]), arr(xp, [4.0])
    assert optim.clip_grad_norm_([a, b, idle], max_norm=1.0) == 5.0
    coef = 1.0 / (5.0 + 1e-6)
    assert (float(a.grad[0]), float(b.grad[0])) == (3.0 * coef, 4.0 * coef)
    assert idle.grad is None


def test_clip_grad_norm_leaves_small_gradients_alone(xp):
    grads = (arr(xp, [3.0]), arr(xp, [4.0]))
    clipped, total = optim.clip_by_global_norm(grads, max_norm=10.0)
    assert total == 5.0 and clipped == grads


def test_clip_by_inf_norm(xp):
    clipped, total = optim.clip_by_global_norm([arr(xp, [3.0, -7.0]), arr(xp, [4.0])], 3.5,
                                               norm_type=math.inf)
    coef = 3.5 / (7.0 + 1e-6)
    assert total == 7.0
    assert [np_(g).tolist() for g in clipped] == [[3.0 * coef, -7.0 * coef], [4.0 * coef]]


@pytest.mark.parametrize("bad, is_nan", [(math.inf, False), (math.nan, True)])
def test_non_finite_norm_leaves_grads_unchanged(xp, bad, is_nan):
    grads = (arr(xp, [bad]), arr(xp, [4.0]))
    clipped, total = optim.clip_by_global_norm(grads, max_norm=1.0)
    assert clipped == grads
    assert math.isnan(total) if is_nan else total == math.inf


@given(grads=st.lists(hnp.arrays(np.float64, hnp.array_shapes(max_dims=2, max_side=4),
                                 elements=st.floats(-1e3, 1e3)), min_size=1, max_size=4),
       max_norm=st.floats(0, 100))
def test_clip_matches_the_definition(xp, grads, max_norm):
    # Summation order may differ from np.linalg.norm: a sum of n squares is within n * U64
    # (relative), the square root halves that and adds U64, and so does the division into
    # the factor; one more U64 for the product with each element.
    clipped, total = optim.clip_by_global_norm([xp.asarray(g) for g in grads], max_norm)
    ref = math.sqrt(sum(float(np.sum(g * g)) for g in grads))
    n = sum(g.size for g in grads) + len(grads)
    assert abs(total - ref) <= (n + 2) * U64 * ref
    coef = max_norm / (ref + 1e-6)
    for g, c in zip(grads, clipped):
        expected = g * coef if coef < 1 else g
        np.testing.assert_allclose(np_(c), expected, rtol=(n + 6) * U64, atol=0)


def test_clip_keeps_float32_and_validates(xp):
    clipped, _ = optim.clip_by_global_norm([arr(xp, [30.0, 40.0], "float32")], 1.0)
    assert clipped[0].dtype == xp.float32 and backend.get_namespace(clipped[0]) is xp
    with pytest.raises(ValueError, match="max_norm must be"):
        optim.clip_by_global_norm([arr(xp, [1.0])], -1.0)
    with pytest.raises(ValueError, match="norm_type must be .* norm_type >= 1"):
        optim.clip_by_global_norm([arr(xp, [1.0])], 1.0, norm_type=0.5)
    assert optim.clip_by_global_norm([], 1.0) == ((), 0.0)


# ----- learning-rate schedules ----------------------------------------------------------------
def test_schedules_exact_values():
    assert [optim.constant(0.1)(t) for t in (0, 5)] == [0.1, 0.1]
    assert [optim.step_decay(1.0, 2, 0.5)(t) for t in range(6)] == [1, 1, 0.5, 0.5, 0.25, 0.25]
    # (1 + cos(pi * t / 4)) / 2 = 1, 0.853.., 0.5, 0.146.., 0; then it stays at min_lr
    cos = optim.cosine(1.1, total_steps=4, min_lr=0.1)
    assert [cos(t) for t in (0, 2, 4, 9)] == [1.1, 0.6, 0.1, 0.1]
    assert cos(1) == pytest.approx(0.1 + (1 + math.sqrt(0.5)) / 2, rel=4 * U64)
    # factor 0.25 + 0.75 * t / 4 = 0.25, 0.4375, 0.625, 0.8125; then the inner schedule at t - 4
    warm = optim.linear_warmup(optim.step_decay(1.0, 1, 0.5), warmup_steps=4, start_factor=0.25)
    assert [warm(t) for t in range(7)] == [0.25, 0.4375, 0.625, 0.8125, 1.0, 0.5, 0.25]


def test_step_decay_multiplies_repeatedly_like_torch():
    # torch's StepLR.step() multiplies by gamma at each boundary; 0.1**4 differs in the last
    # bit from 0.1 * 0.1 * 0.1 * 0.1
    # (the correctly rounded 0.1^4, computed exactly: no libm pow involved)
    repeated = 1.0 * 0.1 * 0.1 * 0.1 * 0.1
    assert optim.step_decay(1.0, 1, 0.1)(4) == repeated != float(Fraction(0.1) ** 4)


@pytest.mark.parametrize("make, message", [
    (lambda: optim.constant(-1.0), "lr must be"),
    (lambda: optim.step_decay(0.1, 0), "step_size must be an integer >= 1"),
    (lambda: optim.cosine(0.1, 0), "total_steps must be an integer >= 1"),
    (lambda: optim.cosine(0.1, 10, min_lr=-1.0), "min_lr must be"),
    (lambda: optim.linear_warmup(optim.constant(0.1), -1), "warmup_steps must be"),
    (lambda: optim.linear_warmup(optim.constant(0.1), 5, start_factor=2.0), "start_factor"),
    (lambda: optim.constant(0.1)(-1), "t must be an integer >= 0"),
])
def test_schedule_validation(make, message):
    with pytest.raises(ValueError, match=message):
        make()


def test_scheduler_sets_lr_once_per_update_and_refuses_micro_batch_steps(xp):
    # lr_t = 0.5^t, p = 0, g = 1: p = -1, -1.5, -1.75
    w = Parameter(arr(xp, [0.0]))
    opt = SGD([w], lr=99.0)
    sched = optim.Scheduler(opt, optim.step_decay(1.0, 1, 0.5))
    assert opt.lr == 1.0
    for expected in (-1.0, -1.5, -1.75):
        w.grad = arr(xp, [1.0])
        opt.step()
        sched.step()
        assert float(w.data[0]) == expected
    with pytest.raises(RuntimeError, match="once per optimizer.step"):
        sched.step()
    assert (sched.t, opt.lr) == (3, 0.125)
    again = optim.Scheduler(opt, optim.step_decay(1.0, 1, 0.5))
    again.load_state_dict(sched.state_dict())
    assert (again.t, opt.lr) == (3, 0.125)


# ----- torch itself, where it is installed ----------------------------------------------------
@pytest.mark.parametrize("name, kwargs", [
    ("SGD", {"lr": 0.1, "momentum": 0.9, "dampening": 0.1, "weight_decay": 0.01}),
    ("SGD", {"lr": 0.1, "momentum": 0.9, "nesterov": True}),
    ("Adam", {"lr": 0.01, "weight_decay": 0.1}),
    ("AdamW", {"lr": 0.01, "weight_decay": 0.1}),
])
def test_optimizers_match_torch(name, kwargs):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    p0, grads = rng.normal(size=(3, 2)), rng.normal(size=(5, 3, 2))
    theirs = torch.tensor(p0, requires_grad=True)
    their_opt = getattr(torch.optim, name)([theirs], foreach=False, **kwargs)
    ours = Parameter(p0.copy())
    our_opt = getattr(optim, name)([ours], **kwargs)
    for g in grads:
        theirs.grad = torch.tensor(g)
        their_opt.step()
        ours.grad = g.copy()
        our_opt.step()
    # torch may fuse a * b + c (FMA) and writes m's update as a lerp, so each of the ~10
    # operations of a step may round differently (<= 1 ulp of values of size <= 2 here);
    # errors add up over the 5 steps: 10 * 5 * 2 ulps of 1.
    np.testing.assert_allclose(ours.data, theirs.detach().numpy(), rtol=0, atol=200 * U64)


def test_clip_and_step_lr_match_torch():
    torch = pytest.importorskip("torch")
    grads = [np.array([3.0, -1.0]), np.array([[4.0, 2.0]])]
    tensors = [torch.zeros(g.shape, dtype=torch.float64, requires_grad=True) for g in grads]
    for t, g in zip(tensors, grads):
        t.grad = torch.tensor(g)
    total = torch.nn.utils.clip_grad_norm_(tensors, 1.0)
    clipped, ours = optim.clip_by_global_norm(grads, 1.0)
    assert ours == pytest.approx(float(total), rel=8 * U64)
    for c, t in zip(clipped, tensors):
        np.testing.assert_allclose(c, t.grad.numpy(), rtol=16 * U64, atol=0)
    opt = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=1.0)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=3, gamma=0.1)
    theirs = []
    for _ in range(10):
        theirs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    assert [optim.step_decay(1.0, 3, 0.1)(t) for t in range(10)] == theirs
