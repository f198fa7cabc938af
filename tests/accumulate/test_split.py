"""Splitting a global batch: ``split_sizes`` (exact cases, properties, errors) and
``micro_batches`` (consecutive slices that partition the batch)."""

import math

import numpy as np
import pytest
from dyadic import regression
from hypothesis import given
from hypothesis import strategies as st

from minigrad.accumulate import micro_batches, split_sizes


# ----- split_sizes and micro_batches ------------------------------------------------------
@pytest.mark.parametrize("n, kwargs, sizes", [
    (10, {"micro_batch_size": 4}, [4, 4, 2]),
    (10, {"num_micro_batches": 4}, [3, 3, 2, 2]),
    (10, {}, [10]),
    (8, {"micro_batch_size": 8}, [8]),
    (8, {"micro_batch_size": 100}, [8]),
    (7, {"micro_batch_size": 1}, [1] * 7),
    (5, {"num_micro_batches": 5}, [1] * 5),
    (9, {"num_micro_batches": 1}, [9]),
])
def test_split_sizes_exact_cases(n, kwargs, sizes):
    assert split_sizes(n, **kwargs) == sizes


@given(n=st.integers(1, 300), data=st.data())
def test_split_sizes_by_micro_batch_size(n, data):
    size = data.draw(st.integers(1, n + 3))
    sizes = split_sizes(n, micro_batch_size=size)
    assert sum(sizes) == n
    assert len(sizes) == math.ceil(n / size)
    assert all(s == size for s in sizes[:-1])
    assert 1 <= sizes[-1] <= size


@given(n=st.integers(1, 300), data=st.data())
def test_split_sizes_by_count_is_near_equal(n, data):
    k = data.draw(st.integers(1, n))
    sizes = split_sizes(n, num_micro_batches=k)
    assert sum(sizes) == n and len(sizes) == k
    assert min(sizes) >= 1 and max(sizes) - min(sizes) <= 1
    assert sizes == sorted(sizes, reverse=True)  # the larger ones first


@pytest.mark.parametrize("kwargs, error, message", [
    ({"micro_batch_size": 2, "num_micro_batches": 2}, ValueError, "not both"),
    ({"micro_batch_size": 0}, ValueError, "micro_batch_size must be a positive int, got 0"),
    ({"micro_batch_size": 2.5}, TypeError,
     "micro_batch_size must be a positive int, got float 2.5"),
    ({"micro_batch_size": True}, TypeError,
     "micro_batch_size must be a positive int, got bool True"),
    ({"num_micro_batches": 0}, ValueError,
     r"num_micro_batches must be an integer in \[1, 10\], got 0"),
    ({"num_micro_batches": 11}, ValueError,
     r"num_micro_batches must be an integer in \[1, 10\], got 11"),
])
def test_split_sizes_errors(kwargs, error, message):
    with pytest.raises(error, match=message):
        split_sizes(10, **kwargs)


def test_split_sizes_takes_numpy_integers():
    assert split_sizes(np.int64(10), micro_batch_size=np.int64(4)) == [4, 4, 2]
    assert split_sizes(10, num_micro_batches=np.int32(4)) == [3, 3, 2, 2]
    assert all(type(s) is int for s in split_sizes(10, micro_batch_size=np.int64(4)))


def test_micro_batches_are_consecutive_slices(xp):
    x, y = regression(xp)
    parts = list(micro_batches(x, y, [3, 1, 4]))
    assert [start for start, _, _ in parts] == [0, 3, 4]
    assert [xj.shape[0] for _, xj, _ in parts] == [3, 1, 4]
    assert bool(xp.all(xp.concat([xj for _, xj, _ in parts]) == x))
    assert bool(xp.all(xp.concat([yj for _, _, yj in parts]) == y))


@pytest.mark.parametrize("sizes, error, message", [
    ([3, 3], ValueError, r"must be positive and sum to the batch size 8"),
    ([4, 5], ValueError, r"must be positive and sum to the batch size 8"),
    ([8, 0], ValueError, r"sizes\[1\] must be a positive int, got 0"),
    ([9, -1], ValueError, r"sizes\[1\] must be a positive int, got -1"),
    ([4.0, 4.0], TypeError, r"sizes\[0\] must be a positive int, got float 4.0"),
])
def test_micro_batches_refuses_sizes_that_do_not_partition_the_batch(xp, sizes, error,
                                                                      message):
    x, y = regression(xp)
    with pytest.raises(error, match=message):
        list(micro_batches(x, y, sizes))
