"""The embedding at its edges: ``index_add``'s order of additions (the same tree on every
namespace, pinned to the bit on data where the order shows), its dtypes and devices, rows
that no index picks below and above the picked ones; the functional ``embedding``'s
``padding_idx`` (its bounds, negative values, its name in errors), indices given as a list,
a weight on another device; the module's default seed.

array-api-strict's second device (``Device("device1")``) stands for a GPU: an array made
without ``device=`` lands on the default device, and mixing the two raises, so a forgotten
``device=`` fails here as it would with CuPy on a second GPU.
"""

import numpy as np
import pytest
from helpers import as_numpy as _np

from minigrad import Tensor, backend, nn
from minigrad.engine.introspect import nodes
from minigrad.engine.primitives.indexing import embedding, index_add


def scan_sum(values):
    """The sum of one run of equal indices, in index_add's order: after the stable sort the
    run keeps its order, and in the step of width s every element adds the partial sum s
    elements above it, when that one is of the run; the run's last element is the sum."""
    sums = list(values)
    step = 1
    while step < len(sums):
        sums = sums[:step] + [sums[i] + sums[i - step] for i in range(step, len(sums))]
        step *= 2
    return sums[-1]


def expected_index_add(index, values, rows):
    out = np.zeros((rows, values.shape[1]), dtype=values.dtype)
    for v in range(rows):
        run = [values[n] for n in range(len(index)) if index[n] == v]
        if run:
            out[v] = out[v] + scan_sum(run)  # added into zeros: -0.0 becomes +0.0
    return out


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("n, rows", [(1, 3), (2, 3), (17, 4), (64, 5), (300, 7)])
def test_index_add_sums_each_run_in_one_order_on_every_namespace(xp, dtype, n, rows):
    """Random values (their sums round) and long runs: the bits are those of the doubling
    scan over each run in the order of positions. An unstable sort, one step more or less,
    or a sequential sum would change them."""
    rng = np.random.default_rng(n)
    index = rng.integers(1, rows - 1, size=n) if rows > 2 else rng.integers(0, rows, size=n)
    values = rng.normal(size=(n, 3)).astype(dtype)
    got = index_add(xp, xp.asarray(index), xp.asarray(values), rows)
    assert got.dtype == getattr(xp, dtype)
    want = expected_index_add(index, values, rows)
    assert np.array_equal(_np(got), want)
    if n >= 17:  # the order shows: a sequential sum of the same runs differs somewhere
        sequential = np.zeros_like(want)
        np.add.at(sequential, index, values)
        assert not np.array_equal(sequential, want)


def test_index_add_leaves_rows_below_and_above_the_picked_ones_zero(xp):
    """Rows 0, 1 (below the smallest index) and 5 (above the largest) are never picked."""
    got = index_add(xp, xp.asarray([3, 2, 3, 4]), xp.asarray([[1.0], [2.0], [4.0], [8.0]]), 6)
    assert _np(got).tolist() == [[0.0], [0.0], [2.0], [5.0], [8.0], [0.0]]


@pytest.mark.parametrize("dtype", ["int32", "int64", "int16"])
def test_index_add_takes_any_integer_index_dtype(xp, dtype):
    index = xp.asarray([2, 0, 2, 2], dtype=getattr(xp, dtype))
    got = index_add(xp, index, xp.asarray([[1.0], [2.0], [4.0], [8.0]]), 3)
    assert _np(got).tolist() == [[2.0], [0.0], [13.0]]


@pytest.fixture
def device1():
    import array_api_strict as xps

    return xps, xps.Device("device1")


def test_index_add_keeps_everything_on_the_values_device(device1):
    xps, device = device1
    got = index_add(xps, xps.asarray([3, 2, 3], device=device),
                    xps.asarray([[1.0], [2.0], [4.0]], device=device), 6)
    assert got.device == device
    assert _np(got).tolist() == [[0.0], [0.0], [2.0], [5.0], [0.0], [0.0]]
    empty = index_add(xps, xps.asarray([], dtype=xps.int64, device=device),
                      xps.zeros((0, 2), dtype=xps.float32, device=device), 3)
    assert (empty.device, empty.dtype, empty.shape) == (device, xps.float32, (3, 2))


@pytest.mark.parametrize("padding_idx", [None, 2, -1])
def test_an_embedding_on_another_device_stays_there(device1, padding_idx):
    """The module's weight, its padding row's zeroing, the output, the gradient (through the
    portable scatter-add and the padding mask) and indices given as a list: all on the
    weight's device."""
    xps, device = device1
    layer = nn.Embedding(5, 3, padding_idx=padding_idx, seed=4, xp=xps, device=device)
    assert layer.weight.data.device == device
    for indices in (xps.asarray([[1, 2], [2, 4]], device=device), [[1, 2], [2, 4]]):
        layer.weight.grad = None
        out = layer(indices)
        assert out.data.device == device
        out.sum().backward()
        assert layer.weight.grad.device == device
        grad = _np(layer.weight.grad)[:, 0].tolist()
        padded = None if padding_idx is None else padding_idx % 5
        assert grad == [0.0 if v == padded else float([1, 2, 2, 4].count(v)) for v in range(5)]
    if padding_idx is not None:
        assert _np(layer.weight)[padding_idx].tolist() == [0.0] * 3


def test_indices_given_as_a_list_are_the_same_as_an_array(xp):
    weight = Tensor(xp.asarray(np.arange(15.0).reshape(5, 3)), requires_grad=True)
    from_list = embedding([[4, 0], [1, 4]], weight)
    from_array = embedding(xp.asarray([[4, 0], [1, 4]]), weight)
    assert _np(from_list).tolist() == _np(from_array).tolist()
    from_list.sum().backward()
    assert _np(weight.grad)[:, 0].tolist() == [1.0, 1.0, 0.0, 0.0, 2.0]


@pytest.mark.parametrize("padding_idx, row", [(0, 0), (4, 4), (-1, 4), (-5, 0), (-3, 2)])
def test_the_functional_padding_idx_counts_from_the_end_when_negative(xp, padding_idx, row):
    weight = Tensor(xp.ones((5, 2), dtype=xp.float64), requires_grad=True)
    out = embedding(xp.asarray([0, 1, 2, 3, 4, 4, 2, 0]), weight, padding_idx)
    out.sum().backward()
    counts = [2.0, 1.0, 2.0, 1.0, 2.0]
    counts[row] = 0.0
    assert _np(weight.grad)[:, 1].tolist() == counts


@pytest.mark.parametrize("padding_idx, error, message", [
    (5, ValueError, r"padding_idx must be an integer in \[-5, 4\], got 5"),
    (-6, ValueError, r"padding_idx must be an integer in \[-5, 4\], got -6"),
    (2.0, TypeError, "padding_idx must be an integer, got float 2.0"),
    ("1", TypeError, "padding_idx must be an integer, got str '1'"),
])
def test_the_functional_padding_idx_is_checked_by_name(xp, padding_idx, error, message):
    weight = Tensor(xp.ones((5, 2), dtype=xp.float64), requires_grad=True)
    with pytest.raises(error, match=message):
        embedding(xp.asarray([0, 1]), weight, padding_idx)


def test_the_graph_names_the_embedding(xp):
    layer = nn.Embedding(4, 2, xp=xp)
    listed = nodes(layer(xp.asarray([1, 3])))
    assert [n.op for n in listed if not n.is_leaf] == ["embedding"]


def test_the_module_draws_from_seed_0_by_default(xp):
    assert np.array_equal(_np(nn.Embedding(6, 4, xp=xp).weight),
                          np.random.default_rng(0).normal(size=(6, 4)))
    assert not np.array_equal(_np(nn.Embedding(6, 4, xp=xp).weight),
                              _np(nn.Embedding(6, 4, seed=1, xp=xp).weight))


def test_numpy_takes_its_own_scatter_add_and_its_order(xp):
    """On NumPy the gradient is ``np.add.at``'s (one sequential sum per row, NumPy's own
    loop: ``backend.fast_paths``); elsewhere the doubling scan's. On random values the two
    orders differ in the last bits, so each namespace's route shows."""
    rng = np.random.default_rng(7)
    index, g = rng.integers(0, 3, size=64), rng.normal(size=(64, 2))
    weight = Tensor(xp.zeros((3, 2), dtype=xp.float64), requires_grad=True)
    embedding(xp.asarray(index), weight).backward(xp.asarray(g))
    sequential = np.zeros((3, 2))
    np.add.at(sequential, index, g)
    scanned = expected_index_add(index, g, 3)
    on_numpy = backend.namespace_name(xp) == "numpy"
    assert np.array_equal(_np(weight.grad), sequential if on_numpy else scanned)
