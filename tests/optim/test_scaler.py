"""GradScaler against ``torch.amp.GradScaler("cpu")``: the same windows (finite or not)
give the same scale trajectory, the same skipped updates and the same parameters."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from minigrad.engine.tensor import Parameter
from minigrad.optim import SGD, GradScaler

torch = pytest.importorskip("torch")


def run_both(pattern, *, init_scale=2.0**16, growth_factor=2.0, backoff_factor=0.5,
             growth_interval=3, seed=0):
    """Drive both scalers with the same scaled gradients, one window per entry of
    ``pattern`` (True: finite; False: one entry is inf or nan). Returns both trajectories."""
    rng = np.random.default_rng(seed)
    w0 = rng.normal(size=(3, 2)).astype(np.float32)
    mine, theirs = Parameter(w0.copy()), torch.nn.Parameter(torch.tensor(w0))
    opt, topt = SGD([mine], lr=0.1, momentum=0.9), torch.optim.SGD([theirs], lr=0.1,
                                                                    momentum=0.9)
    options = dict(init_scale=init_scale, growth_factor=growth_factor,
                   backoff_factor=backoff_factor, growth_interval=growth_interval)
    scaler, tscaler = GradScaler(**options), torch.amp.GradScaler("cpu", **options)
    trajectory = []
    for finite in pattern:
        # The gradient a backward of scale(loss) gives: the true gradient times S.
        true = rng.normal(size=(3, 2)).astype(np.float32)
        g = np.float32(scaler.scale(1.0)) * true
        assert float(tscaler.scale(torch.tensor(1.0))) == scaler.scale(1.0)
        if not finite:
            g[rng.integers(3), rng.integers(2)] = rng.choice([np.inf, -np.inf, np.nan])
        mine.grad, theirs.grad = g.copy(), torch.tensor(g.copy())
        skipped = scaler.step(opt) is None and scaler.found_inf()
        tscaler.step(topt)
        scaler.update()
        tscaler.update()
        trajectory.append((scaler.get_scale(), tscaler.get_scale(), skipped, opt.step_count))
    return trajectory, mine.data, theirs.detach().numpy(), opt, topt


@given(st.lists(st.booleans(), min_size=1, max_size=12), st.integers(1, 4))
def test_scale_trajectory_and_skips_match_torch(pattern, growth_interval):
    trajectory, w, tw, opt, topt = run_both(pattern, growth_interval=growth_interval)
    assert [mine for mine, _, _, _ in trajectory] == [t for _, t, _, _ in trajectory]
    assert [skipped for _, _, skipped, _ in trajectory] == [not f for f in pattern]
    assert opt.step_count == sum(pattern)
    torch_steps = topt.state[topt.param_groups[0]["params"][0]].get("momentum_buffer")
    assert (torch_steps is None) == (sum(pattern) == 0)
    # Same float32 gradients and SGD formulas: within float32 rounding of a few updates.
    np.testing.assert_allclose(w, tw, rtol=0, atol=16 * np.finfo(np.float32).eps)


@pytest.mark.filterwarnings("ignore:overflow:RuntimeWarning")  # the scaled gradients
def test_growth_caps_at_float32_max_and_backoff_from_odd_factors():
    pattern = [True] * 6 + [False] + [True] * 4
    trajectory, *_ = run_both(pattern, init_scale=2.0**120, growth_factor=3.0,
                              backoff_factor=0.3, growth_interval=1)
    assert [m for m, _, _, _ in trajectory] == [t for _, t, _, _ in trajectory]


def test_exact_tiny_case():
    w = Parameter(np.array([1.0], dtype=np.float32))
    opt, scaler = SGD([w], lr=1.0), GradScaler(init_scale=8.0, growth_interval=2)
    scales = []
    for g in (16.0, np.inf, 8.0, 8.0):
        w.grad = np.array([g], dtype=np.float32)
        scaler.step(opt)
        scaler.update()
        scales.append(scaler.get_scale())
    # 16/8 = 2 applied; inf skipped, backoff to 4; 8/4 = 2 twice, growth to 8 after two.
    assert scales == [8.0, 4.0, 4.0, 8.0]
    assert w.data.tolist() == [1.0 - 2.0 - 2.0 - 2.0] and opt.step_count == 3


def test_unscale_once_before_clipping_then_step_does_not_unscale_again():
    w = Parameter(np.array([0.0]))
    opt, scaler = SGD([w], lr=1.0), GradScaler(init_scale=4.0)
    w.grad = np.array([8.0])
    scaler.unscale_(opt)
    assert w.grad.tolist() == [2.0]
    with pytest.raises(RuntimeError, match="already been called"):
        scaler.unscale_(opt)
    scaler.step(opt)
    assert w.data.tolist() == [-2.0]
    with pytest.raises(RuntimeError, match="step"):
        scaler.step(opt)
    scaler.update()
    with pytest.raises(RuntimeError, match="once per window"):
        scaler.update()


def test_disabled_is_a_pass_through():
    w = Parameter(np.array([0.0]))
    opt, scaler = SGD([w], lr=1.0), GradScaler(enabled=False)
    assert scaler.scale(3.0) == 3.0 and scaler.get_scale() == 1.0
    w.grad = np.array([1.0])
    scaler.step(opt)
    scaler.update()
    assert w.data.tolist() == [-1.0] and scaler.state_dict() == {}


def test_state_dict_round_trip_and_matches_torch_keys():
    scaler = GradScaler(init_scale=4.0, growth_interval=5)
    w = Parameter(np.array([0.0]))
    opt = SGD([w], lr=1.0)
    w.grad = np.array([1.0])
    scaler.step(opt)
    scaler.update()
    state = scaler.state_dict()
    assert set(state) == set(torch.amp.GradScaler("cpu").state_dict())
    other = GradScaler()
    other.load_state_dict(state)
    assert other.state_dict() == state


@pytest.mark.parametrize("bad, match", [
    ({"scale": 1.0}, "missing"),
    ({"scale": -1.0, "growth_factor": 2.0, "backoff_factor": 0.5, "growth_interval": 3,
      "_growth_tracker": 0}, "init_scale"),
    ({"scale": 1.0, "growth_factor": 2.0, "backoff_factor": 0.5, "growth_interval": 3,
      "_growth_tracker": 3}, "_growth_tracker"),
])
def test_load_state_dict_is_all_or_nothing(bad, match):
    scaler = GradScaler(init_scale=4.0)
    before = scaler.state_dict()
    with pytest.raises(ValueError, match=match):
        scaler.load_state_dict(bad)
    assert scaler.state_dict() == before


@pytest.mark.parametrize("kwargs, match", [
    ({"init_scale": 0.0}, "init_scale"), ({"growth_factor": 1.0}, "growth_factor"),
    ({"backoff_factor": 1.0}, "backoff_factor"), ({"growth_interval": 0}, "growth_interval"),
    ({"enabled": "yes"}, "enabled"),
])
def test_bad_arguments_name_the_argument(kwargs, match):
    with pytest.raises((TypeError, ValueError), match=match):
        GradScaler(**kwargs)


def test_a_failing_step_leaves_the_scaler_ready_to_retry():
    w = Parameter(np.array([1.0]))
    opt, scaler = SGD([w], lr=1.0), GradScaler(init_scale=2.0)
    w.grad = np.array([2.0, 2.0])  # the wrong shape: the optimizer refuses
    with pytest.raises(ValueError):
        scaler.step(opt)
    assert w.grad.tolist() == [1.0, 1.0] and opt.step_count == 0  # unscaled, as torch
    w.grad = np.array([1.0])  # already unscaled: step() does not divide again
    scaler.step(opt)
    scaler.update()
    assert w.data.tolist() == [0.0] and opt.step_count == 1
