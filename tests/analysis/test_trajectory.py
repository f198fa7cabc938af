"""The trajectory bound of minigrad.analysis.trajectory: ``TrajectoryReplay`` observed once per
update gives, bit for bit, the bound of ``TrajectoryBound`` fed by hand; it refuses a call out
of order or of the wrong shape, naming what is wrong; and a float32 trajectory needs the
float32 bound."""

import warnings

import numpy as np
import pytest

from minigrad import accumulate, nn, optim
from minigrad.accumulate import accumulated_gradients
from minigrad.analysis.bounds import (
    U32,
    U64,
    bound_ratio,
    condition_number,
    flat,
    gradient_bound,
    per_item_gradients,
)
from minigrad.analysis.trajectory import (
    Diverged,
    Observation,
    TrajectoryBound,
    TrajectoryReplay,
    optimizer_state,
    trajectory_bounds,
)


def batches(n_batches=3, n=8, seed=0):
    rng = np.random.default_rng(seed)
    return [(rng.normal(size=(n, 3)), rng.integers(0, 2, n)) for _ in range(n_batches)]


def make():
    return nn.MLP([3, 4, 2], norm="batch", seed=0)


def sgd(params):
    return optim.SGD(params, lr=0.1, momentum=0.9)


def buffers(*models):
    return [b for model in models for _, b in model.named_buffers()]


def test_an_observation_by_hand():
    seen = Observation(2, np.array([0.0, 2.0**-60, 2.0**-58]), np.array([0.0, 2.0**-56, 2.0**-56]))
    assert seen.max_abs == 2.0**-58 and seen.ratio == 0.25  # a 0 gap within a 0 bound holds
    assert Observation(1, np.array([1e-20]), np.array([0.0])).ratio == np.inf


def test_observe_gives_the_bound_of_the_trajectory_bound_fed_by_hand():
    """BatchNorm (the measurements must leave the running statistics alone; accumulated, it
    is not full-batch training, which does not matter here), momentum and clipping: the
    replay's rows equal, bit for bit, ``TrajectoryBound.update`` on the same measurements
    made by hand, and its bounds are ``trajectory_bounds``'s."""
    loss = nn.CrossEntropyLoss()
    data = batches()
    full, acc, by_hand = make(), make(), make()
    opt, acc_opt = sgd(full.parameters()), sgd(acc.parameters())
    replay = TrajectoryReplay(full, opt, loss, max_grad_norm=0.5)
    tracker, bounds = TrajectoryBound("sgd", opt.hyperparams, 0.5), []
    for t, (x, y) in enumerate(data):
        for q, p in zip(by_hand.parameters(), acc.parameters()):
            q.data = p.data
        g = flat(accumulated_gradients(full, loss, x, y, step_index=t).values())
        g_at = flat(accumulated_gradients(by_hand, loss, x, y, step_index=t).values())
        rounding = gradient_bound(per_item_gradients(by_hand, loss, x, y, t), loss.num_items(y),
                                  by_hand.sizes, condition_number(by_hand, loss, x, y, t),
                                  x.shape[0])
        dg = flat(rounding.values()) + np.abs(g_at - g)
        theta, before = flat(p.data for p in full.parameters()), optimizer_state(opt)
        kept = buffers(full, acc)
        replay.measure(acc, x, y)
        assert all(a is b for a, b in zip(buffers(full, acc), kept, strict=True))
        accumulate.step(full, loss, opt, x, y, max_grad_norm=0.5)
        accumulate.step(acc, loss, acc_opt, x, y, sizes=[5, 3], max_grad_norm=0.5)
        expected = tracker.update(dg, theta, g, before, optimizer_state(opt), 0.1)
        seen = replay.observe(flat(p.data for p in acc.parameters()))
        gap = np.abs(flat(p.data for p in acc.parameters())
                     - flat(p.data for p in full.parameters()))
        assert seen.step == t + 1 and np.array_equal(seen.bound, expected)
        assert np.array_equal(seen.gap, gap) and seen.ratio == bound_ratio(gap, expected)
        bounds.append(seen.bound)
    replayed = trajectory_bounds(make, sgd, loss, data, [5, 3], max_grad_norm=0.5)
    assert all(np.array_equal(a, b) for (*_, a), b in zip(replayed, bounds, strict=True))


def test_a_call_out_of_order_or_of_the_wrong_shape_is_refused():
    loss, [(x, y)] = nn.CrossEntropyLoss(), batches(1)
    full, acc = make(), make()
    opt = sgd(full.parameters())
    replay = TrajectoryReplay(full, opt, loss)
    theta = flat(p.data for p in acc.parameters())
    with pytest.raises(RuntimeError, match=r"observe\(theta\) of update 1 needs "
                                           r"measure\(model, x, y\) before the update"):
        replay.observe(theta)
    with pytest.raises(ValueError, match=r"model must hold parameters of the reference's "
                                         r"shapes \[\(4, 3\), .*, got \[\(4, 3\), \(4,\)\]"):
        replay.measure(nn.MLP([3, 4], seed=0), x, y)
    replay.measure(acc, x, y)
    with pytest.raises(RuntimeError, match=r"measure\(model, x, y\) was called twice for "
                                           r"update 1"):
        replay.measure(acc, x, y)
    with pytest.raises(RuntimeError, match=r"after one update of the reference run; its "
                                           r"optimizer made 0 since measure"):
        replay.observe(theta)
    accumulate.step(full, loss, opt, x, y)
    with pytest.raises(ValueError, match=rf"theta must be the other run's parameters, flat: "
                                         rf"shape \({theta.size},\), got \({theta.size - 1},\)"):
        replay.observe(theta[1:])
    assert replay.observe(theta).step == 1 and replay.updates == 1


def test_a_run_that_stops_being_finite_is_named():
    loss, [(x, y)] = nn.CrossEntropyLoss(), batches(1)
    full, other = make(), make()
    other[0].weight.data = other[0].weight.data * np.inf
    replay = TrajectoryReplay(full, sgd(full.parameters()), loss, runs=("numpy", "torch"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        with pytest.raises(Diverged, match="the torch run stopped at update 1: ") as info:
            replay.measure(other, x, y)
    assert info.value.run == "torch" and info.value.update == 1


def test_a_float32_trajectory_needs_the_float32_bound():
    """GELU and LayerNorm (no kink), Adam with clipping: the float32 gap is within the bound
    in u = 2^-24 at every update, and beyond the same bound in float64's u: the dtype
    changes the bound, nothing else does."""
    rng = np.random.default_rng(1)
    data = [(rng.normal(size=(12, 6)).astype("float32"), rng.integers(0, 3, 12))
            for _ in range(3)]

    def make():
        return nn.MLP([6, 8, 3], activation="gelu", norm="layer", seed=1, dtype="float32")

    ratios = {}
    for u in (U32, U64):
        replay = trajectory_bounds(make, lambda ps: optim.Adam(ps, lr=1e-2),
                                   nn.CrossEntropyLoss(), data, [5, 5, 2], max_grad_norm=1.0,
                                   u=u)
        ratios[u] = [bound_ratio(np.abs(flat(p.data for p in acc.parameters())
                                        - flat(p.data for p in full.parameters())), bound)
                     for full, acc, bound in replay]
    assert max(ratios[U32]) <= 1.0
    assert max(ratios[U64]) > 1.0


def test_trajectory_bounds_leaves_batchnorm_statistics_to_the_updates():
    # The bound's measurements run training-mode forwards; the yielded models must carry
    # the running statistics of their updates alone, as models trained by step() do.
    import numpy as np

    from minigrad import accumulate, nn, optim
    from minigrad.analysis.trajectory import trajectory_bounds

    def make():
        return nn.MLP([3, 4, 2], norm="batch", seed=0)

    rng = np.random.default_rng(0)
    batches = [(rng.normal(size=(8, 3)), rng.integers(0, 2, 8)) for _ in range(2)]
    loss = nn.CrossEntropyLoss()
    plain = make()
    opt = optim.SGD(plain.parameters(), lr=0.1)
    for x, y in batches:
        accumulate.step(plain, loss, opt, x, y)
    *_, (full, _, _) = trajectory_bounds(make, lambda p: optim.SGD(p, lr=0.1), loss,
                                         batches, [4, 4])
    for (name, a), (_, b) in zip(plain.named_buffers(), full.named_buffers()):
        assert np.array_equal(np.asarray(a), np.asarray(b)), name
