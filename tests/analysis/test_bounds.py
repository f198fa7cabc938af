"""The gradient bound of minigrad.analysis.bounds: written in the dtype's unit roundoff and
equal to its formula on a hand-computed case (that a float32 trajectory needs the float32
bound is in test_trajectory.py). The equivalence tests under tests/analysis/ use the same
functions through tests/bounds.py."""

import math

import numpy as np
import pytest

from minigrad import nn
from minigrad.accumulate import accumulated_gradients
from minigrad.analysis import bounds
from minigrad.analysis.bounds import (
    U32,
    U64,
    bound_ratio,
    gamma,
    gradient_bound,
    per_item_gradients,
    unit_roundoff,
)


def test_unit_roundoff_is_half_the_machine_epsilon(xp):
    assert unit_roundoff("float64") == U64 == np.finfo(np.float64).eps / 2 == 2.0**-53
    assert unit_roundoff("float32") == U32 == np.finfo(np.float32).eps / 2 == 2.0**-24
    assert unit_roundoff(xp.float32) == U32 and unit_roundoff(np.float64) == U64
    with pytest.raises(ValueError, match="dtype must be float64 or float32, got 'float16'"):
        unit_roundoff("float16")


def test_gamma_is_higham_gamma_and_infinite_beyond_first_order():
    assert gamma(1) == U64 / (1 - U64)
    assert gamma(3, U32) == 3 * U32 / (1 - 3 * U32)
    assert gamma(2**24, U32) == math.inf  # m u = 1: no bound at all


def test_gradient_bound_by_hand():
    """Two samples, one parameter of 2 entries, sizes [1, 1] (m_item = 66 + 2 + 10 = 78):
    S = [4, 2] / 2, S_norm = (2 + 3) / 2."""
    per_item = [{"w": np.array([1.0, -2.0])}, {"w": np.array([3.0, 0.0])}]
    for u in (U64, U32):
        bound = gradient_bound(per_item, 2, [1, 1], u=u)["w"]
        expected = (2 * gamma(3, u) * np.array([4.0, 2.0]) + 2 * gamma(78, u) * 5.0) / 2
        assert np.array_equal(bound, expected)
    assert bounds.per_item_roundings([1, 1]) == 78
    assert bounds.per_item_roundings([3, 8, 2], batch_norm_samples=5) == 2 * (108 + 20) + 14


def test_bound_ratio_counts_a_gap_where_the_bound_is_zero_as_infinite():
    assert bound_ratio([0.0, 1.0], [0.0, 2.0]) == 0.5
    assert bound_ratio([1.0, 0.0], [0.0, 2.0]) == math.inf


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_per_item_gradients_add_up_to_the_summed_gradient(dtype):
    """sum_i a_i is the gradient of the summed loss (to rounding), in float64 NumPy arrays
    whatever the model's dtype."""
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(5, 3)).astype(dtype), np.array([0, 1, -100, 1, 0])
    model, loss = nn.MLP([3, 4, 2], norm="layer", dropout=0.2, seed=0, dtype=dtype), \
        nn.CrossEntropyLoss()
    per_item = per_item_gradients(model, loss, x, y)
    summed = accumulated_gradients(model, loss, x, y, normalize="sum")
    assert all(a[name].dtype == np.float64 for a in per_item for name in a)
    assert not any(np.any(g) for g in per_item[2].values())  # an ignored target adds nothing
    for name, g in summed.items():
        total = sum(a[name] for a in per_item)
        assert np.allclose(total, np.asarray(g, dtype=np.float64), rtol=0,
                           atol=100 * unit_roundoff(dtype) * np.max(np.abs(total)))
