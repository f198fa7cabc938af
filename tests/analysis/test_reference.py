"""minigrad against HIPS autograd (``minigrad.reference``): an engine that shares no code
with minigrad's computes the same MLP gradients, and shows the accumulation equivalence too.

Tolerance. Both engines compute g = (1/items) sum_i a_i from the same per-item terms a_i in
float64, with different operations (autograd composes log-softmax, the normalisations and
the derivative rules differently), different groupings of the sums over the batch and
different matrix-product kernels. That is exactly the situation of accumulated against
full-batch training, so the tolerance is the same derived bound, ``gradient_bound`` from
``minigrad.analysis.bounds`` (its docstring derives it):

    |g_minigrad - g_autograd| <= 2 gamma_{N+1} S + 2 gamma_{m_item} kappa S_norm

about 1e-13 of the gradient's scale, with no tuned constant. BatchNorm in training mode
couples the samples: a_i is then the gradient of sample i's loss through the whole batch
(``per_item_gradients`` computes it so), and each a_i also depends on 4 sums over the batch
(mean, variance and their two derivative sums), counted in m_item. A wrong derivative rule
is off by O(1) of the gradient, about 10^12 times the bound; the worst ratio seen in the
long profile is 0.04.
"""

import numpy as np
from bounds import (
    bound_ratio,
    condition_number,
    factory,
    gradient_bound,
    make_data,
    mlp_configs,
    partitions,
    per_item_gradients,
)
from helpers import to_np
from hypothesis import given, target
from hypothesis import strategies as st

from minigrad import backend, nn, reference
from minigrad.accumulate import accumulated_gradients

ALL_NORMS = (None, "group", "layer", "batch")


def worst_ratio(grads, reference_grads, bound):
    assert grads.keys() == reference_grads.keys() == bound.keys()
    return max(bound_ratio(np.abs(grads[k] - reference_grads[k]), bound[k]) for k in grads)


def bound_for(make, loss, x, y):
    model = make()
    batch_norm = any(isinstance(m, nn.BatchNorm1d) for m in model)
    return gradient_bound(per_item_gradients(model, loss, x, y), loss.num_items(y), model.sizes,
                          condition_number(make(), loss, x, y),
                          batch_norm_samples=x.shape[0] if batch_norm else 0)


def test_dyadic_linear_model_gives_the_same_bits_in_both_engines():
    """No rounding anywhere (see test_equivalence): both engines give 4.375 and 0.25 exactly."""
    model = nn.MLP([1, 1])
    model[0].weight.data = np.array([[0.5]])
    model[0].bias.data = np.array([0.25])
    x, y = np.array([[1.0], [2.0], [3.0], [-1.0]]), np.array([[0.0], [1.0], [0.0], [2.0]])
    for sizes in ([4], [1, 3], [2, 1, 1]):
        grads = reference.accumulated_gradients(model, nn.MSELoss(), x, y, sizes=sizes)
        assert grads["0.weight"].tolist() == [[4.375]] and grads["0.bias"].tolist() == [0.25]


@given(config=mlp_configs(norms=ALL_NORMS),
       activation=st.sampled_from(["relu", "tanh", "sigmoid", "gelu"]), data=st.data())
def test_minigrad_gradients_equal_autograd_gradients(xp, config, activation, data):
    config = {**config, "activation": activation}
    n = data.draw(st.integers(2 if config["norm"] == "batch" else 1, 24), label="batch size")
    x, y, loss = make_data(xp, config, n, data.draw(st.integers(0, 2**32 - 1)))
    make = factory(xp, config)
    expected = reference.accumulated_gradients(make(), loss, x, y)
    worst = worst_ratio(to_np(accumulated_gradients(make(), loss, x, y)), expected,
                        bound_for(make, loss, x, y))
    target(worst, label="error / bound")
    assert worst <= 1.0


@given(config=mlp_configs(), data=st.data())
def test_accumulation_is_equivalent_in_autograd_too(config, data):
    """Item-weighted accumulation over any split, inside the other engine."""
    xp = backend.resolve_namespace("numpy")
    n = data.draw(st.integers(1, 24), label="batch size")
    sizes = data.draw(partitions(n), label="micro-batch sizes")
    x, y, loss = make_data(xp, config, n, data.draw(st.integers(0, 2**32 - 1)))
    make = factory(xp, config)
    full = reference.accumulated_gradients(make(), loss, x, y)
    split = reference.accumulated_gradients(make(), loss, x, y, sizes=sizes)
    worst = worst_ratio(split, full, bound_for(make, loss, x, y))
    target(worst, label="error / bound")
    assert worst <= 1.0


def test_dropout_of_one_drops_everything_in_both_engines():
    """p = 1 zeroes every hidden unit: only the last bias has a gradient, in both engines.
    (The reference used to compute 0 / 0 = NaN for the kept-unit scale 1 / (1 - p).)"""
    config = {"sizes": [3, 4, 2], "activation": "tanh", "norm": None, "dropout": 1.0,
              "loss": "mse", "seed": 0}
    xp = backend.resolve_namespace("numpy")
    x, y, loss = make_data(xp, config, 5, 0)
    make = factory(xp, config)
    expected = reference.accumulated_gradients(make(), loss, x, y)
    grads = to_np(accumulated_gradients(make(), loss, x, y))
    assert all(not np.any(grads[k]) and not np.any(expected[k]) for k in grads if k != "3.bias")
    assert worst_ratio(grads, expected, bound_for(make, loss, x, y)) <= 1.0
