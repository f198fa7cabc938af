"""The accumulation contract, proved in float64: for ANY split of a global batch into
micro-batches, accumulated gradients and K-step training trajectories equal the full-batch
ones within a derived rounding bound; and the report's metrics, by hand.

The gradient bound and the trajectory bound are derived in ``minigrad.analysis.bounds``
(``tests/equivalence_checks.py`` replays them). Dropout, and what breaks the contract and
by how much: test_counterexamples.py.
"""

import numpy as np
import pytest
from bounds import (
    condition_number,
    factory,
    make_batches,
    make_data,
    mlp_configs,
    partitions,
)
from equivalence_checks import (
    OPTIMIZERS,
    check_gradients,
    optimizer_factory,
    replay_with_bound,
    scheduler_factory,
)
from helpers import to_np
from hypothesis import given, target
from hypothesis import strategies as st

from minigrad import nn, optim
from minigrad.accumulate import accumulated_gradients
from minigrad.analysis.equivalence import (
    compare_arrays,
    gradient_report,
    trajectory_report,
    ulp_distance,
)


# ----- the report's metrics, by hand -------------------------------------------------------------
def test_ulp_distance_counts_the_floats_in_between():
    """Across zero the counts of both sides add up: 4.0 and -4.0 are 2 (2^62 + 2^52) =
    2^63 + 2^53 floats apart, more than a signed 64-bit integer holds."""
    a = np.array([1.0, 0.0, 5e-324, 4.0])
    b = np.array([np.nextafter(1.0, 2.0), -0.0, -5e-324, -4.0])
    assert ulp_distance(a, b).tolist() == [1, 0, 2, 2**63 + 2**53]
    assert ulp_distance(b, a).tolist() == [1, 0, 2, 2**63 + 2**53]
    assert int(ulp_distance(np.float32(-1.0), np.float32(1.0))) == 2 * 0x3F800000


def test_compare_arrays_by_hand():
    """[0, 2] against [0, 1]: off by 1 = 100% of max|b|, 2^52 floats between 1 and 2, and
    parallel (cosine 1)."""
    assert compare_arrays(np.array([0.0, 2.0]), np.array([0.0, 1.0])) == {
        "max_abs": 1.0, "max_rel": 1.0, "max_ulp": 2.0**52, "cosine": 1.0}


# ----- gradients: any split, within the bound -------------------------------------------------
def test_dyadic_linear_model_is_exact_for_every_split(xp):
    """Every value is a short dyadic fraction, so nothing rounds: every split gives the
    full-batch gradient to the bit. By hand: residuals r = 0.75, 0.25, 1.75, -2.25;
    dW = (2/4) sum r x = 4.375, db = (2/4) sum r = 0.25."""
    model = nn.MLP([1, 1], xp=xp)
    model[0].weight.data = xp.asarray([[0.5]], dtype=xp.float64)
    model[0].bias.data = xp.asarray([0.25], dtype=xp.float64)
    x = xp.asarray([[1.0], [2.0], [3.0], [-1.0]], dtype=xp.float64)
    y = xp.asarray([[0.0], [1.0], [0.0], [2.0]], dtype=xp.float64)
    for sizes in ([4], [1, 3], [3, 1], [2, 2], [1, 1, 2], [2, 1, 1], [1, 1, 1, 1]):
        grads = to_np(accumulated_gradients(model, nn.MSELoss(), x, y, sizes=sizes))
        assert grads["0.weight"].tolist() == [[4.375]] and grads["0.bias"].tolist() == [0.25]


@given(config=mlp_configs(), data=st.data())
def test_accumulated_gradient_within_bound(xp, config, data):
    n = data.draw(st.integers(1, 24), label="batch size")
    sizes = data.draw(partitions(n), label="micro-batch sizes")
    x, y, loss = make_data(xp, config, n, data.draw(st.integers(0, 2**32 - 1)))
    _, worst = check_gradients(factory(xp, config), loss, x, y, sizes)
    target(worst, label="error / bound")
    assert worst <= 1.0


def test_nearly_equal_values_in_a_layer_norm(xp):
    """Found by ``target()``: the width-2 LayerNorm centres -0.26506 and -0.26455 of sample 0,
    so x - mean = -+2.6e-4 carries the rounding of 0.265 and is divided by sigma ~ sqrt(eps).
    The per-item model without kappa was exceeded 4.5 times (OpenBLAS, x86-64); kappa is
    1.5e4 here, and the bound holds with it."""
    config = {"sizes": [3, 8, 3, 2, 3], "activation": "gelu", "norm": "layer", "dropout": 0.0,
              "loss": "mse", "seed": 21242906}
    x, y, loss = make_data(xp, config, 2, 341925)
    make = factory(xp, config)
    assert condition_number(make(), loss, x, y) > 1e4  # observed: 15205
    _, worst = check_gradients(make, loss, x, y, [1, 1])
    assert worst <= 1.0


# ----- trajectories: K updates, within a bound carried through the optimizer ---------------------
@st.composite
def optimizer_specs(draw, kind):
    """Hyperparameters, a schedule and a clipping norm for one optimizer family."""
    if kind == "sgd":
        momentum = draw(st.sampled_from([0.0, 0.9]))
        hyper = {"lr": draw(st.sampled_from([0.05, 0.2])), "momentum": momentum,
                 "nesterov": momentum > 0 and draw(st.booleans())}
    else:
        hyper = {"lr": draw(st.sampled_from([1e-3, 1e-2]))}
    hyper["weight_decay"] = draw(st.sampled_from([0.0, 0.01]))
    return {"kind": kind, "hyper": hyper,
            "schedule": draw(st.sampled_from(["constant", "cosine", "warmup"])),
            "max_grad_norm": draw(st.sampled_from([None, 0.1, 1.0]))}


@given(config=mlp_configs(), data=st.data())
def test_accumulated_trajectory_within_bound(xp, config, data):
    """SGD (momentum, Nesterov, L2), Adam (L2) and AdamW, with clipping and schedules; batches
    of 1-12 samples (fewer than for gradients: each update costs N per-item gradients)."""
    kind = data.draw(st.sampled_from(sorted(OPTIMIZERS)), label="optimizer family")
    spec = data.draw(optimizer_specs(kind), label="optimizer")
    steps = data.draw(st.integers(2, 4), label="K")
    n = data.draw(st.integers(1, 12), label="batch size")
    sizes = data.draw(partitions(n), label="micro-batch sizes")
    batches, loss = make_batches(xp, config, steps, n, data.draw(st.integers(0, 2**31)))
    make = factory(xp, config)
    gaps, worst = replay_with_bound(make, spec, loss, batches, sizes)
    target(worst, label="gap / bound")
    assert worst <= 1.0
    report = trajectory_report(make, optimizer_factory(spec), loss, batches, sizes=sizes,
                               max_grad_norm=spec["max_grad_norm"],
                               scheduler_factory=scheduler_factory(spec, steps))
    assert [{k: r[k]["max_abs"] for k in gap} for r, gap in zip(report["steps"], gaps)] == gaps


# ----- arguments are checked before any model is built -------------------------------------------
X, Y = np.ones((6, 2)), np.zeros((6, 1))


def counted():
    """A model factory that counts its calls in ``.calls``: a refused call builds no model."""
    def build():
        build.calls += 1
        return nn.MLP([2, 3, 1], seed=0)
    build.calls = 0
    return build


def sgd(params):
    return optim.SGD(params, lr=0.1)


FACTORY = (r"^model_factory must be a function returning a new model \(e.g. lambda: "
           r"nn.MLP\(...\)\), got MLP$")


@pytest.mark.parametrize("kwargs, error, message", [
    ({"x": X.tolist()}, TypeError, r"^x must be an array \(NumPy, CuPy, ...\) or a Tensor, "
                                   "got list$"),
    ({"y": Y[:4]}, ValueError, "^x has 6 samples but y has 4$"),
    ({"model_factory": nn.MLP([2, 3, 1])}, TypeError, FACTORY),
    ({"sizes": [4, 4]}, ValueError, r"^micro-batch sizes \[4, 4\] must be positive and sum "
                                    "to the batch size 6$"),
    ({"sizes": [3, 3], "micro_batch_size": 3}, ValueError,
     "^give at most one of micro_batch_size, num_micro_batches, sizes; got "),
    ({"normalize": "mean"}, ValueError, "^normalize must be one of 'items', 'micro_batch_mean', "
                                        "'sum', got 'mean'$"),
])
def test_gradient_report_checks_its_arguments(kwargs, error, message):
    factory = counted()
    arguments = {"model_factory": factory, "loss_fn": nn.MSELoss(), "x": X, "y": Y, **kwargs}
    with pytest.raises(error, match=message):
        gradient_report(**arguments)
    assert factory.calls == 0


@pytest.mark.parametrize("kwargs, error, message", [
    ({"model_factory": nn.MLP([2, 3, 1])}, TypeError, FACTORY),
    ({"optimizer_factory": "sgd"}, TypeError, "^optimizer_factory must be a function returning "
                                              "a new optimizer from parameters .*got str$"),
    ({"scheduler_factory": 0.1}, TypeError, "^scheduler_factory must be a function returning "
                                            "a new scheduler from an optimizer .*got float$"),
    ({"batches": None}, TypeError, r"^batches must be a sequence of \(x, y\) pairs, got "
                                   "NoneType$"),
    ({"sizes": [3, 3], "num_micro_batches": 2}, ValueError, "^give at most one of"),
    ({"normalize": "mean"}, ValueError, "^normalize must be one of"),
])
def test_trajectory_report_checks_its_arguments_before_building_a_model(kwargs, error, message):
    factory = counted()
    arguments = {"model_factory": factory, "optimizer_factory": sgd, "loss_fn": nn.MSELoss(),
                 "batches": [(X, Y)], **kwargs}
    with pytest.raises(error, match=message):
        trajectory_report(**arguments)
    assert factory.calls == 0


def test_trajectory_report_names_a_batch_that_is_not_a_pair():
    with pytest.raises(TypeError, match=r"^batches\[1\] must be an \(x, y\) pair, got ndarray$"):
        trajectory_report(counted(), sgd, nn.MSELoss(), [(X, Y), X])


def test_a_model_factory_must_return_a_model():
    message = r"^model_factory\(\) must return an nn.Module, got str$"
    with pytest.raises(TypeError, match=message):
        gradient_report(lambda: "mlp", nn.MSELoss(), X, Y)
    with pytest.raises(TypeError, match=message):
        trajectory_report(lambda: "mlp", sgd, nn.MSELoss(), [(X, Y)])
