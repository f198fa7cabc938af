"""Exact BatchNorm accumulation: accumulate.step(..., strategy="exact_batchnorm") IS full-batch
BatchNorm training (gradients, trajectories, running statistics), for any split, at any
BatchNorm depth, while plain accumulation is not."""

import numpy as np
import pytest
from bounds import (
    bound_ratio,
    condition_number,
    gamma,
    gradient_bound,
    per_item_gradients,
)
from helpers import to_np
from hypothesis import given
from hypothesis import strategies as st

from minigrad import backend, nn, optim
from minigrad.accumulate import step
from minigrad.analysis.equivalence import float_state

U = np.finfo(np.float64).eps / 2  # float64 unit roundoff


def tolerance(sizes, n):
    """Relative gap allowed between exact accumulation and full batch, on the largest entry.

    Both compute the same real-valued function; only the order of their sums differs: the
    batch statistics (Chan's merge of micro-batch moments vs one mean over N rows), the sums
    A and B (micro-batch sums added vs one sum), and the weight gradients (k partial matmuls
    added vs one). A sum of T terms in any order is off by <= (T - 1) u sum|terms|; forward
    and backward chain 2 * L layers of sums of T <= max(N, width) terms, with one division
    by sqrt(var + eps) per BatchNorm in each direction; 8 allows for the terms' cancellation
    (sum|terms| / |value|), as in tests/nn/test_ghost_bn.py. A wrong statistic or a missing
    correction moves the gradient by O(10%) (see the contrast test).
    """
    return 8 * 2 * (len(sizes) - 1) * max(n, max(sizes)) * U


def gap(a, b):
    """max |a - b| over every entry of every name, relative to max |b|."""
    diff = max(float(np.max(np.abs(backend.to_numpy(a[k]) - backend.to_numpy(b[k])))) for k in b)
    scale = max(float(np.max(np.abs(backend.to_numpy(b[k])))) for k in b)
    return diff / scale


def train(widths, xp, x, y, loss, steps, *, lr=0.1, momentum=0.9, seed=0, dropout=0.0,
          activation="relu", **split):
    model = nn.MLP(widths, norm="batch", activation=activation, dropout=dropout, seed=seed,
                   xp=xp)
    opt = optim.SGD(model.parameters(), lr=lr, momentum=momentum)
    start = {k: v for k, v in float_state(model).items()}
    losses = [step(model, loss, opt, x, y, **split) for _ in range(steps)]
    return model, start, losses


def data(xp, n, d, classes, seed):
    rng = np.random.default_rng(seed)
    x = rng.normal(0.5, 2.0, size=(n, d))
    y = rng.integers(0, classes, size=n)
    return xp.asarray(x), xp.asarray(y)


@st.composite
def problems(draw):
    depth = draw(st.integers(1, 3))
    sizes = [draw(st.integers(1, 4))] + [draw(st.integers(2, 6)) for _ in range(depth)]
    sizes.append(draw(st.integers(2, 4)))
    n = draw(st.integers(2, 16))
    cuts = sorted(draw(st.sets(st.integers(1, n - 1), max_size=n - 1)))
    split = [b - a for a, b in zip([0] + cuts, cuts + [n])]
    return sizes, n, split, draw(st.integers(0, 2**16)), draw(st.sampled_from(["relu", "tanh"]))


def one_update_bound(make, loss, x, y, start, grad):
    """Name -> elementwise bound on the gap of the gradients that one SGD(lr=1) update shows.

    Exact accumulation and full batch compute the same function with differently grouped
    sums (Chan's merge of micro-batch moments, micro-batch sums of A and B, partial weight
    products added): the situation of ``gradient_bound`` (minigrad.analysis.bounds), with
    the four batch sums of every BatchNorm counted in m_item and kappa for the division by
    sigma. Each run also rounds theta - g once, and recovering g = start - theta rounds
    again: <= u |start - g| + u |g| per run, 2 gamma_2 (|start| + 2 |g|) for both.
    """
    bound = gradient_bound(per_item_gradients(make(), loss, x, y), loss.num_items(y),
                           make().sizes, condition_number(make(), loss, x, y),
                           batch_norm_samples=x.shape[0])
    return {k: bound[k] + 2 * gamma(2) * (np.abs(start[k]) + 2 * np.abs(grad[k]))
            for k in bound}


@given(problem=problems())
def test_one_update_equals_full_batch_for_any_split_and_depth(xp, problem):
    # With SGD(lr=1, no momentum), the parameter change is minus the gradient.
    sizes, n, split, seed, activation = problem
    x, y = data(xp, n, sizes[0], sizes[-1], seed)
    loss = nn.CrossEntropyLoss()
    full, start, _ = train(sizes, xp, x, y, loss, 1, lr=1.0, momentum=0.0, seed=seed,
                           activation=activation)
    exact, _, _ = train(sizes, xp, x, y, loss, 1, lr=1.0, momentum=0.0, seed=seed,
                        activation=activation, sizes=split, strategy="exact_batchnorm")
    names = [name for name, _ in full.named_parameters()]
    start = to_np({k: start[k] for k in names})
    grad_full = {k: start[k] - v for k, v in to_np(dict(full.named_parameters())).items()}
    grad_exact = {k: start[k] - v for k, v in to_np(dict(exact.named_parameters())).items()}

    def make():
        return nn.MLP(sizes, norm="batch", activation=activation, seed=seed, xp=xp)

    bound = one_update_bound(make, loss, x, y, start, grad_full)
    assert max(bound_ratio(np.abs(grad_exact[k] - grad_full[k]), bound[k]) for k in names) <= 1


@given(problem=problems())
def test_trajectories_and_running_statistics_equal_full_batch(problem):
    xp = backend.resolve_namespace("numpy")
    sizes, n, split, seed, activation = problem
    x, y = data(xp, n, sizes[0], sizes[-1], seed)
    full, _, full_losses = train(sizes, xp, x, y, nn.CrossEntropyLoss(), 3, seed=seed,
                                 activation=activation)
    exact, _, exact_losses = train(sizes, xp, x, y, nn.CrossEntropyLoss(), 3, seed=seed,
                                   activation=activation, sizes=split, strategy="exact_batchnorm")
    # float_state holds parameters and running_mean / running_var of every BatchNorm.
    assert gap(float_state(exact), float_state(full)) <= 3 * tolerance(sizes, n)
    assert np.allclose(exact_losses, full_losses, rtol=3 * tolerance(sizes, n), atol=0)
    counts = [int(m.num_batches_tracked) for m in exact if isinstance(m, nn.BatchNorm1d)]
    assert counts == [3] * (len(sizes) - 2)  # once per update, as full batch


@pytest.mark.parametrize("split", [[4, 4, 4, 4], [1, 5, 10], [1] * 16])
def test_contrast_plain_accumulation_is_not_full_batch(xp, split):
    sizes = [3, 8, 8, 3]
    x, y = data(xp, 16, 3, 3, seed=7)
    loss = nn.CrossEntropyLoss()
    full, _, _ = train(sizes, xp, x, y, loss, 2)
    exact, _, _ = train(sizes, xp, x, y, loss, 2, sizes=split, strategy="exact_batchnorm")
    assert gap(float_state(exact), float_state(full)) <= 3 * tolerance(sizes, 16)
    if min(split) >= 2:  # plain BatchNorm cannot even run on a micro-batch of one
        plain, _, _ = train(sizes, xp, x, y, loss, 2, sizes=split)
        assert gap(float_state(plain), float_state(full)) > 1e-3


def test_dropout_and_mse_with_exact_batchnorm(xp):
    sizes = [4, 6, 6, 2]
    rng = np.random.default_rng(3)
    x = xp.asarray(rng.normal(size=(12, 4)))
    y = xp.asarray(rng.normal(size=(12, 2)))
    full, _, _ = train(sizes, xp, x, y, nn.MSELoss(), 3, dropout=0.3)
    exact, _, _ = train(sizes, xp, x, y, nn.MSELoss(), 3, dropout=0.3, sizes=[5, 2, 5],
                        strategy="exact_batchnorm")
    assert gap(float_state(exact), float_state(full)) <= 3 * tolerance(sizes, 12)


def test_hand_built_sequential_with_ignore_index(xp):
    model_full = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.ReLU(), nn.Linear(4, 3))
    model_exact = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.ReLU(), nn.Linear(4, 3))
    for m in (model_full, model_exact):
        m.to(xp)
    x, y = data(xp, 10, 3, 3, seed=1)
    y = xp.where(xp.arange(10) % 4 == 0, xp.asarray(-100), y)
    loss = nn.CrossEntropyLoss()
    for model, split in ((model_full, {}), (model_exact, {"sizes": [3, 3, 4],
                                                          "strategy": "exact_batchnorm"})):
        # SGD, not Adam: the bias of a Linear just before a BatchNorm has a gradient that is
        # mathematically 0, so both runs hold rounding noise there, and Adam's first step
        # moves each entry by lr * sign(noise), which differs between the two runs.
        opt = optim.SGD(model.parameters(), lr=0.1)
        step(model, loss, opt, x, y, **split)
    assert gap(float_state(model_exact), float_state(model_full)) <= tolerance([3, 4, 3], 10)


def test_refusals_leave_everything_unchanged(xp):
    model = nn.MLP([3, 5, 3], norm="batch", xp=xp)
    opt = optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    x, y = data(xp, 8, 3, 3, seed=2)
    bad_y = xp.where(xp.arange(8) == 7, xp.asarray(5), y)  # label 5 of 3 in the last micro-batch
    before = {k: backend.to_numpy(v).copy() for k, v in model.state_dict().items()}
    attributes = {name: dict(vars(m)) for name, m in model.named_modules()}
    with pytest.raises(ValueError, match="target labels"):
        step(model, nn.CrossEntropyLoss(), opt, x, bad_y, sizes=[4, 4],
             strategy="exact_batchnorm")
    after = model.state_dict()
    assert all(np.array_equal(backend.to_numpy(after[k]), before[k]) for k in before)
    assert opt.step_count == 0
    assert all(p.grad is None for p in model.parameters())
    # nothing was attached to a layer: the statistics are passed as an argument
    assert {name: dict(vars(m)) for name, m in model.named_modules()} == attributes
    with pytest.raises(ValueError, match="normalize='items'"):
        step(model, nn.CrossEntropyLoss(), opt, x, y, sizes=[4, 4], strategy="exact_batchnorm",
             normalize="micro_batch_mean")
    with pytest.raises(ValueError, match="strategy must be one of"):
        step(model, nn.CrossEntropyLoss(), opt, x, y, strategy="ghost")


def test_nested_batchnorm_is_refused():
    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.bn = nn.BatchNorm1d(3)

        def forward(self, x):
            return self.bn(x)

    model = nn.Sequential(nn.Linear(2, 3), Block())
    opt = optim.SGD(model.parameters(), lr=0.1)
    x, y = np.ones((4, 2)), np.zeros((4, 3))
    with pytest.raises(TypeError, match="directly in the Sequential"):
        step(model, nn.MSELoss(), opt, x, y, sizes=[2, 2], strategy="exact_batchnorm")
