"""Gradient clipping by the global norm: hand-computed cases (3-4-5, the inf norm),
non-finite norms, the definition as a property, float32 and validation."""

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from optim_oracle import U64, arr, np_

from minigrad import backend, optim
from minigrad.engine.tensor import Parameter


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


# Elements are 0 or at least 1e-150 in size, so every square is a normal float (>= 1e-300):
# the relative rounding bound below holds only without underflow. Below that, squares
# lose relative precision or flush to 0, and implementations legitimately differ (torch
# scales the vector before squaring, NumPy and minigrad do not).
NORMAL_SQUARES = st.one_of(st.just(0.0), st.floats(1e-150, 1e3), st.floats(-1e3, -1e-150))


@given(grads=st.lists(hnp.arrays(np.float64, hnp.array_shapes(max_dims=2, max_side=4),
                                 elements=NORMAL_SQUARES), min_size=1, max_size=4),
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


def test_clip_refuses_what_is_not_a_sequence_of_arrays():
    with pytest.raises(TypeError, match="grads must be a sequence of arrays"):
        optim.clip_by_global_norm(np.array([3.0, 4.0]), 1.0)
    with pytest.raises(TypeError, match=r"grads\[0\] must be an array, got list"):
        optim.clip_by_global_norm([[3.0, 4.0]], 1.0)
    for bad in (None, 5):
        with pytest.raises(TypeError, match="params must be a Tensor or an iterable"):
            optim.clip_grad_norm_(bad, 1.0)
