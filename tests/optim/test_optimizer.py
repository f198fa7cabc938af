"""The stateful optimizers (SGD, Adam, AdamW) around the pure rules: equal to the pure
update, state placement and dtype, state_dict round trips, validation of hyperparameters and
parameter lists, and "an error changes nothing"."""

import math
import sys

import numpy as np
import pytest
from optim_oracle import arr, np_, sqrt_of, torch_adam

from minigrad import backend, optim
from minigrad.engine.tensor import Parameter
from minigrad.optim import SGD, Adam, AdamW, adam, adamw, in_place, sgd

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
    # Copies: the optimizer updates a.data and b.data in place.
    params = [xp.asarray(a.data, copy=True), xp.asarray(b.data, copy=True)]
    state = rule.init(params)
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


def test_optimizers_by_name(xp):
    params = two_params(xp)
    made = {name: optim.make(name, params, 0.1, weight_decay=0.01) for name in optim.OPTIMIZERS}
    assert optim.OPTIMIZERS == ("sgd", "momentum", "adam", "adamw")
    assert [type(made[name]) for name in optim.OPTIMIZERS] == [SGD, SGD, Adam, AdamW]
    assert (made["sgd"].hyperparams["momentum"], made["momentum"].hyperparams["momentum"]) == \
        (0.0, 0.9)
    assert all(o.lr == 0.1 and o.hyperparams["weight_decay"] == 0.01 for o in made.values())
    with pytest.raises(ValueError, match="^optimizer must be one of 'sgd', 'momentum', 'adam', "
                                         "'adamw', got 'rmsprop'"):
        optim.make("rmsprop", params, 0.1)


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
    a2, b2 = (Parameter(xp.asarray(p.data, copy=True)) for p in (a, b))  # not shared
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


def test_an_interrupt_while_loading_changes_nothing_and_a_retry_loads(xp, make_opt, monkeypatch):
    # Ctrl-C while the per-parameter records are built: the old code had already set lr,
    # the hyperparameters and step_count by then.
    a, b = two_params(xp)
    opt = make_opt([a, b])
    set_grads([a, b], xp)
    opt.step()
    saved = opt.state_dict()
    set_grads([a, b], xp, -2.0)
    opt.step()
    opt.lr = 7.0
    before = snapshot(opt)

    def interrupted(self, **fields):
        raise KeyboardInterrupt

    monkeypatch.setattr(type(opt._fresh()), "_replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        opt.load_state_dict(saved)
    monkeypatch.undo()
    assert snapshot(opt) == before
    opt.load_state_dict(saved)
    assert (opt.lr, opt.step_count) == (saved["lr"], 1)


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


def test_fraction_hyperparameters_on_float_parameters_are_used_as_floats():
    from fractions import Fraction

    from minigrad import nn

    model = nn.MLP([2, 3, 1])
    opt = optim.SGD(model.parameters(), lr=Fraction(1, 10), momentum=Fraction(1, 2))
    for _ in range(2):
        for p in model.parameters():
            p.grad = p.data * 1.0
        opt.step()
    assert all(p.data.dtype == np.float64 for p in model.parameters())
    opt.lr = Fraction(1, 3)
    assert type(opt.lr) is float


@pytest.mark.parametrize("state, message", [
    (None, "state_dict must be a dict"),
    ({"lr": 0.1, "hyperparams": 5, "step_count": 0, "count": [0], "mu": [None]},
     r"state_dict\['hyperparams'\] must be a dict"),
])
def test_load_state_dict_refuses_garbage_by_name(state, message):
    w = Parameter([1.0])
    opt = optim.SGD([w], lr=0.1, momentum=0.5)
    with pytest.raises(TypeError, match=message):
        opt.load_state_dict(state)
    with pytest.raises(TypeError, match="params must be an iterable of Tensors"):
        optim.SGD(None, lr=0.1)
    assert opt.lr == 0.1 and opt.step_count == 0


# ----- the in-place commit (minigrad.optim.in_place) -------------------------------------------
@pytest.mark.parametrize("make_rule", [
    lambda ps: (SGD(ps, lr=0.1, momentum=0.9, dampening=0.1, weight_decay=0.01), sgd),
    lambda ps: (SGD(ps, lr=0.1, momentum=0.9, nesterov=True), sgd),
    lambda ps: (Adam(ps, lr=0.01, weight_decay=0.01), adam),
    lambda ps: (AdamW(ps, lr=0.01), adamw),
], ids=["sgd", "nesterov", "adam", "adamw"])
@pytest.mark.parametrize("layout", ["chunked", "fortran"])
def test_the_in_place_commit_has_the_bits_of_the_pure_rule(make_rule, layout):
    """A parameter longer than ``in_place.CHUNK`` is updated slice by slice, one in Fortran
    order through the pure rule (out= needs the flat C-order view): both must give the pure
    update's bits, scaled and clipped as an accumulator asks, three updates running."""
    rng = np.random.default_rng(0)
    shape = (in_place.CHUNK // 300 + 7, 300)  # more than one slice
    start = rng.normal(size=shape).astype(np.float32)
    w = Parameter(np.asfortranarray(start) if layout == "fortran" else start)
    if layout == "fortran":
        w.data = np.asfortranarray(w.data)
    opt, rule = make_rule([w])
    params, state = [start.copy()], rule.init([start.copy()])
    for t in range(3):
        g = rng.normal(size=shape).astype(np.float32) * 7
        w.grad = np.asfortranarray(g) if layout == "fortran" else g
        coef = np.asarray(0.375)  # float64, cast to the gradient's float32
        in_place.commit(opt, opt.plan(scale=7, coef=coef))
        params, state = rule.update([g / 7 * coef.astype(np.float32)], state, params, lr=opt.lr,
                                    **opt.hyperparams)
        assert np.array_equal(w.data, params[0]), t
    assert np.array_equal(opt.state_dict()["mu"][0],
                          state.mu[0]) and opt.state_dict()["count"] == [3]


def test_the_commit_allocates_no_array_and_the_workspace_is_reused():
    import tracemalloc

    rng = np.random.default_rng(1)
    ws = [Parameter(rng.normal(size=(600, 400))), Parameter(rng.normal(size=(400,)))]
    opt = Adam(ws, lr=0.01, weight_decay=0.1)
    for w in ws:
        w.grad = rng.normal(size=w.shape)
    in_place.commit(opt, opt.plan(scale=3))  # the first update makes the workspace
    buffers = {k: [id(b) for b in v] for k, v in opt.workspace.buffers.items()}
    assert all(b[0].size == in_place.CHUNK for b in opt.workspace.buffers.values())
    ready = opt.plan(scale=3)
    tracemalloc.start()
    try:
        in_place.commit(opt, ready)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # Python's own objects (views, ints, the state records): a few KiB. One array of the
    # smaller parameter alone would be 3.2 KB, a slice of the larger 1 MiB.
    assert peak < 3200, peak
    assert {k: [id(b) for b in v] for k, v in opt.workspace.buffers.items()} == buffers


def test_an_optimizer_with_its_workspace_can_be_deep_copied():
    import copy

    w = Parameter(np.ones((3, 2)))
    opt = Adam([w], lr=0.1)
    w.grad = np.ones((3, 2))
    opt.step()  # makes the workspace
    twin = copy.deepcopy(opt, {id(adam): adam, id(w.xp): w.xp})  # code is shared, as in
    # analysis.memory.copy_update
    twin.params[0].grad = np.ones((3, 2))
    twin.step()
    opt.step()
    assert np.array_equal(twin.params[0].data, w.data) and twin.params[0] is not w


@pytest.mark.filterwarnings("error::RuntimeWarning")  # what `python -W error` does
@pytest.mark.parametrize("mode", ["raise", "warn"])
def test_a_floating_point_error_never_stops_the_commit_half_way(mode):
    """A finite gradient whose square overflows float32: under np.seterr(over="raise") the
    error comes from the plan, before anything is written; otherwise the commit writes
    everything (inf where IEEE says so) and raises nothing, warnings as errors included."""
    a, b = Parameter(np.array([1.0, 2.0], dtype=np.float32)), Parameter(np.ones(2, np.float32))
    opt = Adam([a, b], lr=0.1)
    a.grad, b.grad = np.ones(2, np.float32), np.full(2, 1e30, np.float32)
    before = [a.data.copy(), b.data.copy()]
    with np.errstate(over=mode):
        if mode == "raise":
            with pytest.raises(FloatingPointError):
                opt.step()
            assert np.array_equal(a.data, before[0]) and np.array_equal(b.data, before[1])
            assert opt.step_count == 0 and [s.count for s in opt.state] == [0, 0]
            assert not np.any(opt.state[0].mu[0]) and not np.any(opt.state[1].mu[0])
        else:
            opt.step()
            assert opt.step_count == 1 and [s.count for s in opt.state] == [1, 1]
            assert not np.array_equal(a.data, before[0])


def test_a_device_that_cannot_be_a_dict_key_is_named_by_its_number(monkeypatch):
    """CuPy 14's ``cupy.cuda.Device`` defines ``__eq__`` without ``__hash__``: the
    workspace keys its buffers by the GPU's number instead (found on an H200)."""

    class Device:  # as CuPy's: equal by number, not hashable
        def __init__(self, id):
            self.id = id

        def __eq__(self, other):
            return isinstance(other, Device) and other.id == self.id

    monkeypatch.setattr(in_place.backend, "device", lambda a: Device(a.shape[0] % 2))
    lib = type(sys)("gpulib")
    keys = [in_place._key(lib, np.zeros(n, dtype=np.float32)) for n in (2, 3, 4)]
    assert keys[0] == keys[2] == ("gpulib", ("Device", 0), np.dtype(np.float32))
    assert keys[1] == ("gpulib", ("Device", 1), np.dtype(np.float32))
    assert len({*keys}) == 2
