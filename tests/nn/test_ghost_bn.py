"""Ghost BatchNorm: GhostBatchNorm1d(..., ghost_batch_size=g) normalises consecutive virtual
batches of g samples on their own. The positive control: full-batch training with ghost
size g IS accumulated BatchNorm training over micro-batches of g (gradients, trajectories,
running statistics), up to rounding; and g >= N is plain BatchNorm, bit for bit."""

import autograd.numpy as anp
import numpy as np
import pytest
from gradcheck import OpSpec, check_op
from hypothesis import given
from hypothesis import strategies as st

from minigrad import backend, nn, optim
from minigrad.accumulate import accumulated_gradients, step
from minigrad.analysis.equivalence import float_state
from minigrad.engine.tensor import Tensor

U = np.finfo(np.float64).eps / 2  # unit roundoff
SIZES = [4, 8, 8, 3]  # MLP: 3 Linear layers, 2 BatchNorms, width 8


def _ghost(model, g):
    """``model`` (a new MLP) with a GhostBatchNorm1d of g in place of each BatchNorm1d."""
    for name, layer in model.named_children():
        if isinstance(layer, nn.BatchNorm1d):
            setattr(model, name, nn.GhostBatchNorm1d(layer.num_features, g, xp=layer.weight.xp,
                                                     device=layer.weight.device))
    return model


def _data(xp, n, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(1.0, 2.0, size=(n, SIZES[0]))
    y = rng.integers(0, SIZES[-1], size=n)
    return xp.asarray(x), xp.asarray(y)


def _tolerance(n):
    """Relative gap allowed between ghost and accumulated training, on one gradient.

    Both compute the same real-valued function; only the order of their sums differs (a
    virtual batch's statistics: one matmul over N rows, most of them zero, vs a sum over
    g rows; a weight gradient: one matmul over N samples vs k partial sums added). A sum of
    T terms in any order is off by <= (T - 1) u sum|terms|; forward and backward chain
    2 * 3 layers of sums of T <= max(N, width) terms; 8 allows for the terms' cancellation
    (sum|terms| / |value|). A wrong virtual-batch boundary moves the gradient by O(10%).
    """
    return 8 * 2 * (len(SIZES) - 1) * max(n, max(SIZES)) * U


def _max_gap(a, b):
    """max |a - b| over all names, and max |b| (the scale), as floats."""
    gap = max(float(np.max(np.abs(backend.to_numpy(a[k]) - backend.to_numpy(b[k])))) for k in b)
    scale = max(float(np.max(np.abs(backend.to_numpy(b[k])))) for k in b)
    return gap, scale


# ----- one layer: exact tiny case, gradient check, errors -------------------------------------
def test_three_virtual_batches_by_hand(xp):
    # virtual batches (1, 3), (0, 4), (10, 14): means 2, 2, 12; biased variances 1, 4, 4
    bn = nn.GhostBatchNorm1d(1, ghost_batch_size=2, xp=xp)
    out = bn(Tensor(xp.asarray([[1.0], [3.0], [0.0], [4.0], [10.0], [14.0]], dtype=xp.float64)))
    s1, s2 = 1 / np.sqrt(1 + 1e-5), 2 / np.sqrt(4 + 1e-5)
    np.testing.assert_allclose(out.numpy()[:, 0], [-s1, s1, -s2, s2, -s2, s2], rtol=1e-15)
    # running_mean: 0 -> 0.2 -> 0.38 -> 1.542; running_var (unbiased 2, 8, 8): 1 -> 1.1 ->
    # 1.79 -> 2.411; one update per virtual batch
    np.testing.assert_allclose(backend.to_numpy(bn.running_mean), [1.542], rtol=1e-15)
    np.testing.assert_allclose(backend.to_numpy(bn.running_var), [2.411], rtol=1e-15)
    assert int(bn.num_batches_tracked) == 3


def _ghost_ref(g):
    def ref(x, w, b):
        axes = (0,) if x.ndim == 2 else (0, 2)
        parts = []
        for start in range(0, x.shape[0], g):
            c = x[start:start + g]
            mean = anp.mean(c, axis=axes, keepdims=True)
            var = anp.mean((c - mean) ** 2, axis=axes, keepdims=True)
            parts.append((c - mean) / anp.sqrt(var + 1e-5))
        shape = (1, -1) + (1,) * (x.ndim - 2)
        return anp.concatenate(parts, axis=0) * anp.reshape(w, shape) + anp.reshape(b, shape)

    return ref


@pytest.mark.parametrize("x_shape, g", [((11, 3), 4), ((8, 2, 3), 3)])
def test_gradient_check(xp, x_shape, g):
    """vs finite differences and HIPS autograd on a sliced reference (last batch smaller)."""
    bn = nn.GhostBatchNorm1d(x_shape[1], g, xp=xp)

    def fn(x, w, b):
        bn._parameters["weight"], bn._parameters["bias"] = w, b  # check_op's leaves
        return bn(x)

    shapes = (x_shape, (x_shape[1],), (x_shape[1],))
    check_op(OpSpec(f"ghost_bn_{len(x_shape)}d", fn, _ghost_ref(g), shapes), xp)


@pytest.mark.parametrize("momentum", [0.1, None])
@pytest.mark.parametrize("x_shape, g", [((10, 3), 4), ((7, 2, 2), 3)])
def test_layer_equals_sequence_of_micro_batches(xp, x_shape, g, momentum):
    """One ghost forward = the same layer run on each virtual batch in turn."""
    x = np.random.default_rng(1).normal(size=x_shape)
    ghost = nn.GhostBatchNorm1d(x_shape[1], g, momentum=momentum, xp=xp)
    plain = nn.BatchNorm1d(x_shape[1], momentum=momentum, xp=xp)
    out = ghost(Tensor(xp.asarray(x))).numpy()
    parts = [plain(Tensor(xp.asarray(x[s:s + g]))).numpy() for s in range(0, len(x), g)]
    # The same formulas; only the sums' order differs (a few values each): a few ulps.
    np.testing.assert_allclose(out, np.concatenate(parts), rtol=0, atol=1e-14)
    for name in ("running_mean", "running_var"):
        np.testing.assert_allclose(backend.to_numpy(getattr(ghost, name)),
                                   backend.to_numpy(getattr(plain, name)), rtol=1e-14)
    assert int(ghost.num_batches_tracked) == int(plain.num_batches_tracked) == -(-len(x) // g)


@pytest.mark.parametrize("g", [6, 7, 100])
def test_ghost_size_at_least_batch_is_plain_batchnorm(xp, g):
    x = Tensor(xp.asarray(np.random.default_rng(2).normal(size=(6, 3))))
    ghost, plain = nn.GhostBatchNorm1d(3, g, xp=xp), nn.BatchNorm1d(3, xp=xp)
    assert np.array_equal(ghost(x).numpy(), plain(x).numpy())
    for (_, a), (_, b) in zip(ghost.named_buffers(), plain.named_buffers()):
        assert np.array_equal(backend.to_numpy(a), backend.to_numpy(b))


def test_eval_mode_ignores_ghost_size(xp):
    x = Tensor(xp.asarray(np.random.default_rng(3).normal(size=(9, 3))))
    ghost, plain = nn.GhostBatchNorm1d(3, 2, xp=xp), nn.BatchNorm1d(3, xp=xp)
    for bn in (ghost, plain):
        bn(Tensor(xp.asarray(np.random.default_rng(4).normal(size=(8, 3)))))  # 1 / 4 updates
    ghost.running_mean, ghost.running_var = plain.running_mean, plain.running_var
    assert np.array_equal(ghost.eval()(x).numpy(), plain.eval()(x).numpy())


def test_bad_ghost_sizes(xp):
    for bad, error, shown in ((0, ValueError, "0"), (-2, ValueError, "-2"),
                              (2.5, TypeError, "float 2.5"), ("4", TypeError, "str '4'"),
                              (True, TypeError, "bool True"), (None, TypeError, "NoneType None")):
        with pytest.raises(error, match=f"^ghost_batch_size must be a positive int, got {shown}$"):
            nn.GhostBatchNorm1d(3, bad, xp=xp)
    with pytest.raises(TypeError, match="missing 1 required positional argument: "
                                        "'ghost_batch_size'"):
        nn.GhostBatchNorm1d(3)
    with pytest.raises(ValueError, match="eps must be a finite number"):
        nn.GhostBatchNorm1d(3, 4, eps=-1.0)  # BatchNorm1d's own checks, unchanged
    with pytest.raises(TypeError, match="unexpected keyword argument 'ghost_batch_size'"):
        nn.BatchNorm1d(3, ghost_batch_size=4)  # a layer of its own, no longer a mode
    bn = nn.GhostBatchNorm1d(3, 4, xp=xp)
    with pytest.raises(ValueError, match=r"^GhostBatchNorm1d\(3, ghost_batch_size=4\) needs more "
                                         r"than 1 value .*\(9, 3\) leaves 1 in the last one$"):
        bn(Tensor(xp.ones((9, 3), dtype=xp.float64)))
    # a last virtual batch of 1 sample with 2 values per channel is fine, as in BatchNorm1d
    assert bn(Tensor(xp.ones((9, 3, 2), dtype=xp.float64))).shape == (9, 3, 2)
    assert repr(bn) == "GhostBatchNorm1d(3, eps=1e-05, momentum=0.1, ghost_batch_size=4)"


def test_a_batchnorm_of_its_own_with_batchnorms_state():
    ghost, plain = nn.GhostBatchNorm1d(3, 2, momentum=None, affine=False), nn.BatchNorm1d(3)
    assert isinstance(ghost, nn.BatchNorm1d)  # every check for BatchNorm finds it
    assert (ghost.momentum, ghost.affine, ghost.ghost_batch_size) == (None, False, 2)
    assert list(nn.GhostBatchNorm1d(3, 2).state_dict()) == list(plain.state_dict())


@pytest.mark.parametrize("x_shape, g", [((6, 2), 2), ((10, 3), 4), ((5, 2, 2), 2)])
def test_equals_the_hand_composed_ghost_batch_exactly(xp, x_shape, g):
    """``==`` to BatchNorm1d standardising each virtual batch on its own, on data where
    every operation is exact (small dyadic values; per channel, each virtual batch holds
    pairs m +- d, so its mean is m and its variance d^2, a power of two, over a power-of-two
    count; eps = 0): output, running statistics, and the gradients of x, weight and bias.
    A virtual batch one sample off moves a mean by a multiple of 1/4."""
    rng = np.random.default_rng(5)
    n, c = x_shape[:2]
    x = np.empty(x_shape)
    for start in range(0, n, g):
        for k in range(c):
            part = x[start:start + g, k, ...]
            signs = np.reshape(np.resize([1.0, -1.0], part.size), part.shape)
            part[...] = rng.integers(-4, 5) / 4 + 2.0 ** rng.integers(-1, 2) * signs
    weight, bias = rng.integers(1, 5, size=c) / 2, rng.integers(-4, 5, size=c) / 4
    seed = rng.integers(-4, 5, size=x_shape) / 8

    def trained(layer):
        layer.weight.data, layer.bias.data = xp.asarray(weight), xp.asarray(bias)
        return layer

    ghost = trained(nn.GhostBatchNorm1d(c, g, eps=0.0, momentum=0.5, xp=xp))
    x_ghost = Tensor(xp.asarray(x), requires_grad=True)
    out_ghost = ghost(x_ghost)
    (out_ghost * Tensor(xp.asarray(seed))).sum().backward()

    hand = trained(nn.BatchNorm1d(c, eps=0.0, momentum=0.5, xp=xp))
    parts = [Tensor(xp.asarray(x[s:s + g]), requires_grad=True) for s in range(0, n, g)]
    outs = [hand(part) for part in parts]  # one batch after the other, as accumulation runs
    sum((out * Tensor(xp.asarray(seed[s:s + g]))).sum()
        for out, s in zip(outs, range(0, n, g))).backward()

    def host(arrays):
        return np.concatenate([backend.to_numpy(a) for a in arrays])

    assert np.array_equal(out_ghost.numpy(), host(out.data for out in outs))
    assert np.array_equal(backend.to_numpy(x_ghost.grad), host(part.grad for part in parts))
    for name in ("weight", "bias"):
        assert np.array_equal(backend.to_numpy(getattr(ghost, name).grad),
                              backend.to_numpy(getattr(hand, name).grad))
    for (name, a), (_, b) in zip(ghost.named_buffers(), hand.named_buffers()):
        assert np.array_equal(backend.to_numpy(a), backend.to_numpy(b)), name
    assert int(ghost.num_batches_tracked) == -(-n // g)


# ----- the positive control: ghost full batch == accumulated BatchNorm training ---------------
@pytest.mark.parametrize("n, g", [(24, 8), (22, 8), (30, 4), (17, 5)])
def test_gradients_match_accumulated_batchnorm(xp, n, g):
    x, y = _data(xp, n)
    full = accumulated_gradients(_ghost(nn.MLP(SIZES, norm="batch", xp=xp), g),
                                 nn.CrossEntropyLoss(), x, y)
    acc = accumulated_gradients(nn.MLP(SIZES, norm="batch", xp=xp), nn.CrossEntropyLoss(), x, y,
                                micro_batch_size=g)
    plain = accumulated_gradients(nn.MLP(SIZES, norm="batch", xp=xp), nn.CrossEntropyLoss(), x, y)
    gap, scale = _max_gap(full, acc)
    assert gap <= _tolerance(n) * scale
    assert _max_gap(plain, acc)[0] > 1e-3 * scale  # without ghosts, the split shows


@pytest.mark.parametrize("n, g", [(24, 8), (22, 6)])
def test_trajectory_and_running_stats_match_accumulated_batchnorm(xp, n, g):
    """K = 5 SGD-with-momentum steps, each on a new batch: parameters and running stats."""
    ghost = _ghost(nn.MLP(SIZES, norm="batch", xp=xp), g)
    accumulated = nn.MLP(SIZES, norm="batch", xp=xp)
    runs = [(ghost, None), (accumulated, g)]
    optimizers = [optim.SGD(m.parameters(), lr=0.1, momentum=0.9) for m, _ in runs]
    k_steps = 5
    for k in range(k_steps):
        x, y = _data(xp, n, seed=10 + k)
        losses = [step(m, nn.CrossEntropyLoss(), o, x, y, micro_batch_size=split)
                  for (m, split), o in zip(runs, optimizers)]
        assert abs(losses[0] - losses[1]) <= _tolerance(n) * abs(losses[1])
    gap, scale = _max_gap(float_state(ghost), float_state(accumulated))
    # Each step's update differs by at most the gradient's gap times lr / (1 - momentum) = 1;
    # over K steps the gaps add up (a few steps: no room for growth beyond that).
    assert gap <= k_steps * _tolerance(n) * scale
    for (name, a), (_, b) in zip(ghost.named_buffers(), accumulated.named_buffers()):
        if name.endswith("num_batches_tracked"):
            assert int(a) == int(b) == k_steps * -(-n // g)


@given(n=st.integers(4, 40), g=st.integers(2, 40))
def test_property_any_split(n, g):
    while n % g == 1:  # a last virtual batch of one sample has no batch statistics
        g += 1
    xp = backend.resolve_namespace("numpy")
    x, y = _data(xp, n, seed=n)
    full = accumulated_gradients(_ghost(nn.MLP(SIZES, norm="batch"), g),
                                 nn.CrossEntropyLoss(), x, y)
    acc = accumulated_gradients(nn.MLP(SIZES, norm="batch"), nn.CrossEntropyLoss(), x, y,
                                micro_batch_size=g)
    gap, scale = _max_gap(full, acc)
    assert gap <= _tolerance(n) * scale
