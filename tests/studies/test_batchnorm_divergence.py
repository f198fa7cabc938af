"""The BatchNorm measurements: what they return, that they see the BatchNorm gap (and its
size for a fixed seed), that the gap closes at m = N, and that GroupNorm, LayerNorm and
BatchNorm in eval mode stay within a float64 bound at every micro-batch size."""

import importlib.util
import math
import sys

import numpy as np
import pytest
from bounds import bound_ratio, condition_number, gradient_bound, per_item_gradients
from helpers import to_np

from minigrad import backend, nn, optim
from minigrad.accumulate import accumulated_gradients, step
from minigrad.analysis.metrics import eval_accuracy
from minigrad.studies.batchnorm.divergence import (
    forward_gap,
    gradient_divergence,
    running_stat_drift,
)
from minigrad.studies.data import digits

U = np.finfo(np.float64).eps / 2  # unit roundoff
N = 32
MICRO = [2, 4, 8, 16, N]
SIZES = [5, 8, 8, 3]  # width W = 8


def _factory(norm, xp=None, mode="train"):
    def make():
        model = nn.MLP(SIZES, norm=norm, seed=0, xp=xp)
        return model.eval() if mode == "eval" else model

    return make


def _data(xp, n=N, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(0.5, 1.5, size=(n, SIZES[0]))
    return xp.asarray(x), xp.asarray(rng.integers(0, SIZES[-1], size=n))


def _flat(grads):
    return np.concatenate([np.ravel(backend.to_numpy(g)) for g in grads.values()])


# ----- BatchNorm in training mode: a gap, shrinking to exactly 0 at m = N ---------------------
def test_gradient_divergence_batchnorm(xp):
    x, y = _data(xp)
    report = gradient_divergence(_factory("batch", xp), nn.CrossEntropyLoss(), x, y, MICRO)
    names = [name for name, _ in _factory("batch", xp)().named_parameters()]
    assert list(report) == MICRO
    for rows in report.values():
        assert list(rows) == names + ["all"]
        assert all(set(r) == {"rel_error", "cosine"} for r in rows.values())
    errors = [report[m]["all"]["rel_error"] for m in MICRO]
    cosines = [report[m]["all"]["cosine"] for m in MICRO]
    # One micro-batch runs the full batch's code on the same arrays in the same process: the
    # same kernels give the same bits, so the gap is 0 and the cosine is 1.0 by definition.
    assert errors[-1] == 0.0 and cosines[-1] == 1.0
    # For this seed the gap shrinks as m grows ...
    assert errors[0] > errors[1] > errors[2] > errors[3] > 0.0
    assert cosines[0] < cosines[1] < cosines[2] < cosines[3] < 1.0
    # ... and is no rounding effect: with micro-batches of 4 of 32 the accumulated gradient
    # is further from the full-batch one than that is from 0 (measured in float64: relative
    # error 3.42, 2.07, 1.08, 0.51 and cosine 0.07, 0.21, 0.55, 0.87 for m = 2, 4, 8, 16).
    assert report[4]["all"]["rel_error"] == pytest.approx(2.0709, rel=1e-3)
    assert report[4]["all"]["cosine"] == pytest.approx(0.2124, rel=1e-3)


def test_forward_gap_batchnorm(xp):
    x, _ = _data(xp)
    report = forward_gap(_factory("batch", xp), x, MICRO)
    assert list(report) == MICRO
    for rows in report.values():
        assert list(rows) == ["1", "4"]  # the two BatchNorm1d layers of the MLP
        assert all(set(r) == {"max_abs", "mean_abs"} for r in rows.values())
    for layer in ("1", "4"):
        means = [report[m][layer]["mean_abs"] for m in MICRO]
        assert means[0] > means[1] > means[2] > means[3] > means[4] == 0.0
        assert report[N][layer]["max_abs"] == 0.0
        assert report[2][layer]["mean_abs"] > 0.5  # two samples: x_hat = +-1 (almost)


def test_forward_gap_without_batchnorm_is_empty(xp):
    x, _ = _data(xp)
    assert forward_gap(_factory("layer", xp), x, [4, N]) == {4: {}, N: {}}


def test_forward_gap_needs_reachable_batchnorms(xp):
    class Wrapped(nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = nn.MLP(SIZES, norm="batch", xp=xp)

        def forward(self, x):
            return self.inner(x)

    with pytest.raises(ValueError, match=r"walks Sequentials.*inner\.1"):
        forward_gap(Wrapped, _data(xp)[0], [4])


def test_running_stat_drift(xp):
    batches = [_data(xp, seed=s) for s in range(3)]
    sgd = lambda params: optim.SGD(params, lr=0.1)  # noqa: E731
    loss = nn.CrossEntropyLoss()
    same = running_stat_drift(_factory("batch", xp), sgd, loss, batches, N)
    drift = running_stat_drift(_factory("batch", xp), sgd, loss, batches, 4)
    assert list(drift) == ["1", "4"]
    for layer in drift:
        for stat in ("running_mean", "running_var"):
            assert set(drift[layer][stat]) == {"max_abs", "max_rel"}
            assert len(drift[layer][stat]["max_abs"]) == len(batches)
            assert same[layer][stat]["max_abs"] == [0.0] * len(batches)
            # 8 updates per step with 4-sample statistics vs 1 with 32: visibly apart
            assert min(drift[layer][stat]["max_abs"]) > 1e-2
    assert running_stat_drift(_factory("group", xp), sgd, loss, batches, 4) == {}


# ----- the remedies: equivalence within a float64 bound ----------------------------------------
@pytest.mark.parametrize("norm, mode", [("group", "train"), ("layer", "train"),
                                        ("batch", "eval"), (None, "train")])
def test_gradient_divergence_within_rounding(xp, norm, mode):
    """Every entry within ``gradient_bound`` (minigrad.analysis.bounds derives it):
    2 gamma_{N+1} S + 2 gamma_{m_item} kappa S_norm.

    Without batch coupling both runs compute g = (1/N) sum_i a_i, but not from the same a_i:
    BLAS picks its kernels (and, in MKL, its code path by alignment) by shape, so a sample's
    forward and backward round differently in a micro-batch of m and in the batch of N, and a
    normalisation amplifies that by kappa. The first term covers the order of the sum over
    samples, the second the per-sample roundings. The report's two norms follow from it:
    |g_m - g| <= |bound| (2-norms), and 1 - cos <= 2 rel^2 plus the cosine's own rounding,
    three dot products of n terms: <= (2 n + 6) u.
    """
    factory, loss = _factory(norm, xp, mode), nn.CrossEntropyLoss()
    x, y = _data(xp)
    report = gradient_divergence(factory, loss, x, y, MICRO)
    model = factory()
    bound = gradient_bound(per_item_gradients(model, loss, x, y), loss.num_items(y),
                           model.sizes, condition_number(factory(), loss, x, y))
    full = to_np(accumulated_gradients(factory(), loss, x, y))
    n = sum(np.size(g) for g in full.values())
    rel = np.linalg.norm(_flat(bound)) / np.linalg.norm(_flat(full)) * (1 + (n + 4) * U)
    for m in MICRO:
        acc = to_np(accumulated_gradients(factory(), loss, x, y, micro_batch_size=m))
        assert max(bound_ratio(np.abs(acc[k] - full[k]), bound[k]) for k in full) <= 1.0, m
        assert report[m]["all"]["rel_error"] <= rel, (m, report[m]["all"], rel)
        assert report[m]["all"]["cosine"] >= 1.0 - 2 * rel**2 - (2 * n + 6) * U


# ----- digits and the training curves -----------------------------------------------------------
needs_sklearn = pytest.mark.skipif(
    importlib.util.find_spec("sklearn") is None,
    reason="scikit-learn is not installed (pip install minigrad[data]); digits() needs it")


@needs_sklearn
def test_digits():
    x_train, y_train, x_test, y_test = digits(seed=0)
    assert x_train.shape == (1348, 64) and x_test.shape == (449, 64)
    assert x_train.dtype == np.float64 and y_train.dtype == np.int64
    assert 0.0 <= x_train.min() and x_train.max() == 1.0
    assert sorted(set(y_train.tolist())) == list(range(10))
    again, other = digits(seed=0), digits(seed=1)
    assert np.array_equal(again[0], x_train) and not np.array_equal(other[0], x_train)
    assert len(digits(test_fraction=0.5)[3]) == round(0.5 * 1797)
    with pytest.raises(ValueError, match="test_fraction"):
        digits(test_fraction=1.0)


def test_digits_without_sklearn(monkeypatch):
    monkeypatch.setitem(sys.modules, "sklearn.datasets", None)  # import now fails
    with pytest.raises(ImportError, match=r"pip install minigrad\[data\]"):
        digits()


def training_curves(data, norms=("batch", "group", "layer"), micro_batch_size=16,
                    global_batch_size=128, epochs=10, hidden=(64,), lr=0.1, momentum=0.9,
                    seed=0):
    """Full batch against accumulated training, for each norm: curves per epoch.

    An MLP [D, *hidden, classes] with the norm after each hidden Linear, cross-entropy and
    SGD(lr, momentum), trained on ``data = (x_train, y_train, x_test, y_test)`` (NumPy, e.g.
    ``minigrad.studies.data.digits()``). Each epoch
    visits the training set in one seeded order shared by both runs, in global batches of
    ``global_batch_size`` (a shorter last one is dropped), one ``accumulate.step`` each:
    whole, or in micro-batches of ``micro_batch_size``. ``train_loss`` is the mean of the
    epoch's step losses; ``test_accuracy`` is measured after the epoch in eval mode.
    Returns ``{norm: {"full" | "accumulated": {"train_loss": [...], "test_accuracy": [...]}}}``.
    """
    x_train, y_train, x_test, y_test = data
    n_batches = x_train.shape[0] // global_batch_size
    if n_batches < 1:
        raise ValueError(f"global_batch_size={global_batch_size} exceeds the "
                         f"{x_train.shape[0]} training samples")
    generator = backend.rng(seed)
    orders = [generator.permutation(x_train.shape[0]) for _ in range(epochs)]
    sizes = [x_train.shape[1], *hidden, int(np.max(y_train)) + 1]
    loss = nn.CrossEntropyLoss()
    curves = {}
    for norm in norms:
        curves[norm] = {}
        for run, split in (("full", None), ("accumulated", micro_batch_size)):
            model = nn.MLP(sizes, norm=norm, seed=seed)
            optimizer = optim.SGD(model.parameters(), lr=lr, momentum=momentum)
            losses, accuracies = [], []
            for order in orders:
                epoch = []
                for b in range(n_batches):
                    idx = order[b * global_batch_size:(b + 1) * global_batch_size]
                    epoch.append(step(model, loss, optimizer, x_train[idx], y_train[idx],
                                      micro_batch_size=split))
                losses.append(float(np.mean(epoch)))
                accuracies.append(eval_accuracy(model, x_test, y_test))
            curves[norm][run] = {"train_loss": losses, "test_accuracy": accuracies}
    return curves


@needs_sklearn
def test_training_curves_tiny():
    x_train, y_train, x_test, y_test = digits(seed=0)
    data = (x_train[:96], y_train[:96], x_test[:60], y_test[:60])
    curves = training_curves(data, norms=("batch", "group"), micro_batch_size=8,
                             global_batch_size=32, epochs=2, hidden=(16,))
    assert list(curves) == ["batch", "group"]
    for runs in curves.values():
        assert list(runs) == ["full", "accumulated"]
        for run in runs.values():
            assert list(run) == ["train_loss", "test_accuracy"]
            assert len(run["train_loss"]) == len(run["test_accuracy"]) == 2
            assert all(math.isfinite(v) and v > 0 for v in run["train_loss"])
            assert all(0.0 <= a <= 1.0 for a in run["test_accuracy"])
            assert run["train_loss"][1] < run["train_loss"][0]  # it learns
    group, batch = curves["group"], curves["batch"]
    # GroupNorm: the same training up to rounding. Each of the 6 updates gets a gradient
    # within 2 (N + W) u |S| / |g| ~ 1e-14 of the full batch's (bound of the test above);
    # six SGD steps cannot grow that to 1e-12 (measured here: equal).
    assert group["full"]["test_accuracy"] == group["accumulated"]["test_accuracy"]
    for a, b in zip(group["full"]["train_loss"], group["accumulated"]["train_loss"]):
        assert abs(a - b) <= 1e-12 * b
    # BatchNorm: micro-batch statistics make it a different training run.
    assert abs(batch["full"]["train_loss"][0] - batch["accumulated"]["train_loss"][0]) > 1e-3


def test_training_curves_rejects_too_large_batches():
    data = tuple(np.zeros(s) for s in ((10, 4), (10,), (5, 4), (5,)))
    with pytest.raises(ValueError, match="exceeds the 10 training samples"):
        training_curves(data, global_batch_size=16)
