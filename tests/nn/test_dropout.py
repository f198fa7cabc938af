"""Dropout masks keyed by (seed, step, sample index): keep rate and exact scale, p = 0 and 1,
the same masks however a batch is split (and in every namespace), different masks across
steps, seeds and samples; the Dropout module and ``dropout_keys``."""

import math

import numpy as np
import pytest
from faults import interrupt_each_entry_line
from helpers import as_numpy as _np
from helpers import leaf as _tensor
from helpers import other_namespace as _other
from hypothesis import given
from hypothesis import strategies as st

from minigrad.nn import Dropout, dropout, dropout_keys
from minigrad.nn import functional as F


# ----- dropout masks ---------------------------------------------------------------------------
@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_dropout_keep_rate_and_exact_scale(xp, p):
    # n elements kept independently with probability 1 - p: kept ~ Binomial(n, 1 - p), so
    # |kept - n (1 - p)| <= 5 sqrt(n p (1 - p)) fails with probability < 6e-7 for a uniform
    # generator. The seed is fixed, so the test is deterministic; the bound says it is not luck.
    n_rows, width = 400, 25
    n = n_rows * width
    out = _np(F.dropout(_tensor(xp, np.ones((n_rows, width))), p, True, seed=11, step=4))
    kept = int(np.sum(out != 0.0))
    assert abs(kept - n * (1 - p)) <= 5 * math.sqrt(n * p * (1 - p))
    assert np.all(out[out != 0.0] == 1.0 / (1.0 - p))  # survivors scaled by exactly 1/(1-p)


def test_dropout_p_0_is_identity_and_p_1_gives_zeros(xp):
    values = [[1.5, -2.0, 3.0], [0.25, 4.0, -1.0]]
    x = _tensor(xp, values)
    same = F.dropout(x, 0.0, True, seed=0, step=0)
    assert np.array_equal(_np(same), values)
    zeros = F.dropout(x, 1.0, True, seed=0, step=0)
    assert np.array_equal(_np(zeros), np.zeros((2, 3)))
    zeros.sum().backward()
    assert np.array_equal(_np(x.grad), np.zeros((2, 3)))
    assert F.dropout(x, 0.5, training=False) is x  # eval mode: the input itself, like torch


def _mask(xp, n, width, p=0.5, seed=5, step=3, sample_index=None):
    ones = _tensor(xp, np.ones((n, width)), requires_grad=False)
    return _np(F.dropout(ones, p, True, seed=seed, step=step, sample_index=sample_index))


def test_dropout_masks_are_split_invariant(xp):
    whole = _mask(xp, 10, 6)
    for bounds in ([0, 3, 7, 10], [0, 1, 2, 10], [0, 5, 10]):
        parts = [_mask(xp, b - a, 6, sample_index=xp.arange(a, b))
                 for a, b in zip(bounds[:-1], bounds[1:])]
        assert np.array_equal(np.concatenate(parts), whole)
    # the same numbers in every namespace: the generator is pure uint64 array-API arithmetic
    assert np.array_equal(_mask(_other(xp), 10, 6), whole)
    # a permuted batch gets the permuted masks when each sample keeps its index
    order = np.array([4, 0, 9, 2])
    assert np.array_equal(_mask(xp, 4, 6, sample_index=xp.asarray(order)), whole[order])


@given(n=st.integers(1, 12), width=st.integers(1, 5), data=st.data())
def test_dropout_masks_are_split_invariant_for_any_partition(xp, n, width, data):
    cuts = sorted(data.draw(st.sets(st.integers(1, n - 1), max_size=n - 1)) if n > 1 else [])
    bounds = [0, *cuts, n]
    whole = _mask(xp, n, width, p=0.3, seed=2, step=9)
    parts = [_mask(xp, b - a, width, p=0.3, seed=2, step=9, sample_index=xp.arange(a, b))
             for a, b in zip(bounds[:-1], bounds[1:])]
    assert np.array_equal(np.concatenate(parts), whole)


def test_dropout_masks_differ_across_steps_seeds_and_samples(xp):
    base = _mask(xp, 8, 16)
    assert not np.array_equal(_mask(xp, 8, 16, step=4), base)
    assert not np.array_equal(_mask(xp, 8, 16, seed=6), base)
    # rows differ from each other (not one mask broadcast over the batch)
    assert len({row.tobytes() for row in base}) == 8


def test_dropout_module(xp):
    x = _tensor(xp, np.ones((6, 8)), requires_grad=False)
    layer = Dropout(0.5, seed=9)
    first, second = _np(layer(x)), _np(layer(x))
    assert layer.calls == 2
    assert not np.array_equal(first, second)  # step = the layer's own call count
    assert np.array_equal(first, _mask(xp, 6, 8, seed=9, step=0))
    with dropout_keys(7, xp.arange(10, 16)):
        keyed = _np(layer(x))
    assert layer.calls == 2  # keyed calls do not advance the count
    assert np.array_equal(keyed, _mask(xp, 16, 8, seed=9, step=7)[10:])
    layer.eval()
    assert np.array_equal(_np(layer(x)), np.ones((6, 8)))


def test_dropout_keys_of_rows_are_the_whole_batchs_masks(xp):
    # Rows 10..15 of a batch, keyed by their positions, draw that batch's masks for them.
    x = _tensor(xp, np.ones((6, 8)), requires_grad=False)
    keys = dropout_keys.rows(7, x.data, start=10)
    assert keys.keys[0] == 7 and _np(keys.keys[1]).tolist() == list(range(10, 16))
    with keys:
        rows = _np(Dropout(0.5, seed=9)(x))
    assert np.array_equal(rows, _mask(xp, 16, 8, seed=9, step=7)[10:])
    assert _np(dropout.positions(x.data)).tolist() == list(range(6))


def test_ctrl_c_while_entering_dropout_keys_leaves_the_keys_as_they_were():
    # Ctrl-C at any line that entering runs: the old generator-based manager set the keys,
    # then met the fault at its ``try:`` line, outside the try that puts them back.
    index = np.arange(4)

    def unkeyed():
        assert dropout._keys is None

    assert interrupt_each_entry_line(lambda: dropout_keys(3, index), unkeyed) >= 1
    with dropout_keys(1, index):
        def outer():
            assert dropout._keys == (1, index)

        assert interrupt_each_entry_line(lambda: dropout_keys(3, index), outer) >= 1
    unkeyed()


def test_dropout_keys_nest_and_one_object_nests_in_itself():
    index, inner = np.arange(4), dropout_keys(2, np.arange(2))
    with dropout_keys(1, index):
        with inner:
            with inner:
                assert dropout._keys[0] == 2
            assert dropout._keys[0] == 2
        assert dropout._keys == (1, index)
    assert dropout._keys is None


def test_dropout_sample_index_must_match_the_batch(xp):
    with pytest.raises(ValueError, match="sample_index must hold one index per sample"):
        F.dropout(_tensor(xp, np.ones((4, 3))), 0.5, True, sample_index=xp.arange(3))
