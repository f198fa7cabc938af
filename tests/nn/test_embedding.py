"""Embedding: forward and weight gradient against ``torch.nn.Embedding`` (with and without
``padding_idx``, on indices of shapes (N,), (N, C) and ()); the gradients of repeated
indices ADD, exactly: ``==`` the sequential sum and ``np.add.at`` on dyadic values, on every
namespace, and the failure mode of a scatter that keeps one of several repeated indices;
NumPy's fast path against the plain path; init, repr, bad arguments, Sequential,
state_dict and float32."""

import math

import numpy as np
import pytest
from helpers import as_numpy as _np
from helpers import other_namespace as _other
from hypothesis import given
from hypothesis import strategies as st

from minigrad import Tensor, backend, nn
from minigrad.engine.primitives.indexing import index_add

EPS = np.finfo(np.float64).eps
SHAPES = {"(N,)": (7,), "(N, C)": (4, 5), "()": ()}


def _table(xp, weight, padding_idx=None):
    """An Embedding of ``xp`` holding ``weight`` (a NumPy array)."""
    layer = nn.Embedding(*weight.shape, padding_idx=padding_idx, xp=xp)
    layer.weight.data = xp.asarray(weight)
    return layer


def _weight_grad(xp, weight, indices, g, padding_idx=None, dtype="float64"):
    """The weight's gradient, as NumPy, for the upstream gradient ``g`` of the output."""
    layer = _table(xp, weight.astype(dtype), padding_idx)
    out = layer(xp.asarray(indices))
    out.backward(xp.asarray(g.astype(dtype)))
    return _np(layer.weight.grad)


# ----- against torch -------------------------------------------------------------------------
@pytest.mark.parametrize("padding_idx", [None, 0, 3, -1], ids=lambda p: f"padding_idx={p}")
@pytest.mark.parametrize("shape", SHAPES.values(), ids=list(SHAPES))
def test_forward_and_weight_gradient_match_torch(xp, shape, padding_idx):
    torch = pytest.importorskip("torch", reason="torch is not installed (the oracle)")
    rng = np.random.default_rng(len(shape) * 10 + (padding_idx or 0) % 7)
    indices = rng.integers(0, 6, shape)  # 6 rows: most indices repeat
    weight = rng.normal(size=(6, 3))
    g = rng.normal(size=shape + (3,))
    g[g < -1.0] = -0.0  # a zero of each sign: the signs of the sums are torch's too
    theirs = torch.nn.Embedding(6, 3, padding_idx=padding_idx, dtype=torch.float64)
    with torch.no_grad():
        theirs.weight.copy_(torch.tensor(weight))
    expected = theirs(torch.tensor(indices))
    expected.backward(torch.tensor(g))

    ours = _table(xp, weight, padding_idx)
    out = ours(xp.asarray(indices))
    out.backward(xp.asarray(g))
    assert repr(ours) == repr(theirs) and ours.padding_idx == theirs.padding_idx
    assert out.shape == shape + (3,) and backend.get_namespace(out.data) is xp
    assert np.array_equal(_np(out), expected.detach().numpy())  # a gather copies: exact
    got, want = _np(ours.weight.grad), theirs.weight.grad.numpy()
    # Each entry sums the n <= N gradients of its copies; torch adds them one after the
    # other (error <= gamma_(n-1) sum|g|), the plain path as a tree (<= gamma_ceil(log2 n)
    # sum|g|), so the two differ by at most 2 gamma_N sum|g|.
    n = max(indices.size, 1)
    magnitude = np.zeros_like(weight)
    np.add.at(magnitude, indices.reshape(-1), np.abs(g).reshape(-1, 3))
    assert np.all(np.abs(got - want) <= 2 * n * EPS / (1 - n * EPS) * magnitude)
    assert np.array_equal(np.signbit(got), np.signbit(want))
    if padding_idx is not None:
        assert np.array_equal(got[padding_idx], np.zeros(3))


def test_init_is_torchs_distribution_from_a_seeded_numpy_generator(xp):
    layer = nn.Embedding(50, 4, padding_idx=-3, seed=7, xp=xp)
    expected = np.random.default_rng(7).normal(size=(50, 4))
    expected[47] = 0.0
    assert np.array_equal(_np(layer.weight), expected)
    assert backend.get_namespace(layer.weight.data) is xp
    assert layer.padding_idx == 47 and repr(layer) == "Embedding(50, 4, padding_idx=47)"
    assert repr(nn.Embedding(10, 3)) == "Embedding(10, 3)"
    assert not np.array_equal(_np(nn.Embedding(50, 4, seed=8, xp=xp).weight), expected)


# ----- repeated indices add, exactly ----------------------------------------------------------
@st.composite
def repeated_lookups(draw):
    """A small table, many indices into it (most repeated), and a dyadic upstream gradient:
    values k / 2^j with |k| <= 2^8, j <= 8, so each of the <= 96 terms of a sum is a
    multiple of 2^-8 below 2^8 and every partial sum needs at most 23 bits: exact in float32
    and float64, in any order."""
    rows = draw(st.integers(1, 5))
    width = draw(st.integers(1, 3))
    kind = draw(st.sampled_from(["(N,)", "(N, C)", "()"]))
    shape = {"(N,)": lambda: (draw(st.integers(0, 96)),),
             "(N, C)": lambda: (draw(st.integers(1, 8)), 12), "()": lambda: ()}[kind]()
    size = math.prod(shape)
    flat = draw(st.lists(st.integers(0, rows - 1), min_size=size, max_size=size))
    k = draw(st.lists(st.integers(-256, 256), min_size=size * width, max_size=size * width))
    j = draw(st.lists(st.integers(0, 8), min_size=size * width, max_size=size * width))
    g = np.array([a / 2.0**b for a, b in zip(k, j)]).reshape(shape + (width,))
    padding_idx = draw(st.one_of(st.none(), st.integers(-rows, rows - 1)))
    return np.array(flat, dtype=np.int64).reshape(shape), g, rows, padding_idx


def _sequential_sums(indices, g, rows, padding_idx):
    """Row v: the gradients of every position holding v, added in Python one by one."""
    width = g.shape[-1]
    sums = [[0.0] * width for _ in range(rows)]
    for v, row in zip(indices.reshape(-1).tolist(), g.reshape(-1, width).tolist()):
        for d in range(width):
            sums[v][d] += row[d]
    if padding_idx is not None:
        sums[padding_idx] = [0.0] * width
    return np.array(sums)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@given(case=repeated_lookups())
def test_repeated_indices_add_exactly_on_every_namespace(xp, dtype, case):
    indices, g, rows, padding_idx = case
    weight = np.random.default_rng(0).normal(size=(rows, g.shape[-1]))
    got = _weight_grad(xp, weight, indices, g, padding_idx, dtype)
    assert got.dtype == np.dtype(dtype)
    assert np.array_equal(got, _sequential_sums(indices, g, rows, padding_idx))


@given(case=repeated_lookups())
def test_repeated_indices_add_as_numpys_add_at_on_every_namespace(xp, case):
    indices, g, rows, padding_idx = case
    weight = np.random.default_rng(1).normal(size=(rows, g.shape[-1]))
    expected = np.zeros_like(weight)
    np.add.at(expected, indices.reshape(-1), g.reshape(-1, g.shape[-1]))
    if padding_idx is not None:
        expected[padding_idx] = 0.0
    assert np.array_equal(_weight_grad(xp, weight, indices, g, padding_idx), expected)


def test_a_scatter_that_keeps_one_of_several_repeated_indices_is_caught(xp):
    # Row 2 is picked three times: its gradient is 1 + 4 + 8 = 13. A scatter that writes
    # each copy over the last (fancy-indexed +=, array-api-extra's at().add on NumPy)
    # keeps one of them: 8 in NumPy, another copy elsewhere, never 13.
    indices = np.array([2, 0, 2, 2])
    g = np.array([[1.0], [2.0], [4.0], [8.0]])
    kept_one = np.zeros((3, 1))
    kept_one[indices] += g
    assert kept_one[2, 0] in (1.0, 4.0, 8.0)
    expected = [[2.0], [0.0], [13.0]]
    assert np.array_equal(_weight_grad(xp, np.zeros((3, 1)), indices, g), expected)
    assert np.array_equal(_np(index_add(xp, xp.asarray(indices), xp.asarray(g), 3)), expected)


@given(case=repeated_lookups())
def test_numpys_fast_path_equals_the_plain_path_on_dyadic_values(case):
    indices, g, rows, _ = case
    flat, values = indices.reshape(-1), g.reshape(-1, g.shape[-1])
    fast = backend.add_at(flat, values, rows)
    assert type(fast) is np.ndarray
    assert np.array_equal(fast, index_add(np, flat, values, rows))
    assert np.array_equal(np.signbit(fast), np.signbit(index_add(np, flat, values, rows)))


def test_the_fast_path_is_numpys_only(xp):
    indices, values = xp.asarray([0, 1]), xp.asarray([[1.0], [2.0]])
    numpy = backend.namespace_name(xp) == "numpy"
    assert (backend.add_at(indices, values, 2) is None) is not numpy


def test_a_non_finite_gradient_reaches_its_own_row_only(xp):
    # As in torch: inf reaches the row it was picked for; a one-hot product would spread
    # 0 * inf = NaN over every row.
    g = np.array([[np.inf], [1.0], [2.0]])
    got = _weight_grad(xp, np.zeros((3, 1)), np.array([1, 0, 0]), g)
    assert np.array_equal(got, [[3.0], [np.inf], [0.0]])


def test_the_backward_uses_the_indices_of_its_forward(xp):
    layer = nn.Embedding(4, 2, xp=xp)
    indices = xp.asarray([1, 1, 3])
    out = layer(indices)
    indices[...] = 0  # the primitive keeps its own copy (torch would refuse the change)
    out.sum().backward()
    assert np.array_equal(_np(layer.weight.grad), [[0.0, 0.0], [2.0, 2.0], [0.0, 0.0],
                                                   [1.0, 1.0]])


def test_empty_and_small_dtype_indices(xp):
    layer = nn.Embedding(300, 2, xp=xp)
    out = layer(xp.asarray(np.zeros((0, 3), dtype=np.int64)))
    assert out.shape == (0, 3, 2)
    out.sum().backward()
    assert np.array_equal(_np(layer.weight.grad), np.zeros((300, 2)))
    layer.zero_grad()
    small = np.array([255, 7, 255], dtype=np.uint8)  # rows past 255 are fine in int64
    layer(xp.asarray(small)).sum().backward()
    assert _np(layer.weight.grad)[255].tolist() == [2.0, 2.0]
    assert np.array_equal(_np(layer(Tensor(xp.asarray(small)))), _np(layer.weight)[small])


# ----- arguments and errors -------------------------------------------------------------------
def test_bad_arguments_are_named():
    for args, kwargs, error, message in [
        ((0, 3), {}, ValueError, "num_embeddings must be a positive int, got 0"),
        ((True, 3), {}, TypeError, "num_embeddings must be a positive int, got bool True"),
        ((10, 2.5), {}, TypeError, "embedding_dim must be a positive int, got float 2.5"),
        ((10, 3, 10), {}, ValueError, r"padding_idx must be an integer in \[-10, 9\], got 10"),
        ((10, 3, -11), {}, ValueError, r"padding_idx must be an integer in \[-10, 9\], got -11"),
        ((10, 3, True), {}, TypeError, "padding_idx must be an integer, got bool True"),
        ((10, 3), {"seed": -1}, ValueError, "seed must be an integer >= 0, got -1"),
        ((10, 3), {"dtype": "int64"}, ValueError, "dtype must be one of"),
    ]:
        with pytest.raises(error, match=message):
            nn.Embedding(*args, **kwargs)


def test_out_of_range_and_non_integer_indices_are_refused(xp):
    layer = nn.Embedding(10, 3, xp=xp)
    for bad, shown in ((10, "10"), (-1, "-1")):
        with pytest.raises(IndexError, match=r"indices must lie in \[0, 10\) \(the rows of a "
                                             rf"weight of shape \(10, 3\)\), got {shown}$"):
            layer(xp.asarray([[0, bad], [2, 3]]))
    with pytest.raises(TypeError, match="indices must be an integer array, got dtype"):
        layer(xp.asarray([1.0, 2.0]))
    with pytest.raises(TypeError, match="indices must be an integer array, got dtype"):
        layer(xp.asarray([True, False]))
    with pytest.raises(TypeError):  # the namespace of the weight, never mixed
        layer(_other(xp).asarray([1, 2]))


# ----- as a module -------------------------------------------------------------------------------
def test_in_a_sequential_with_state_dict_round_trip(xp):
    model = nn.Sequential(nn.Embedding(5, 4, padding_idx=0, seed=1, xp=xp), nn.Linear(4, 2, xp=xp))
    assert [name for name, _ in model.named_parameters()] == ["0.weight", "1.weight", "1.bias"]
    indices = xp.asarray([[1, 0], [4, 4], [0, 2]])
    out = model(indices)
    assert out.shape == (3, 2, 2)
    out.sum().backward()
    assert np.array_equal(_np(model[0].weight.grad)[0], np.zeros(4))
    copy = nn.Sequential(nn.Embedding(5, 4, seed=2, xp=xp), nn.Linear(4, 2, generator=3, xp=xp))
    copy.load_state_dict(model.state_dict())
    assert np.array_equal(_np(copy(indices)), _np(out))


def test_float32(xp):
    layer = nn.Embedding(6, 3, padding_idx=2, seed=5, dtype="float32", xp=xp)
    assert layer.weight.dtype == xp.float32
    expected = np.random.default_rng(5).normal(size=(6, 3)).astype(np.float32)
    expected[2] = 0.0
    assert np.array_equal(_np(layer.weight), expected)
    out = layer(xp.asarray([2, 5, 5]))
    assert out.dtype == xp.float32
    out.sum().backward()
    assert layer.weight.grad.dtype == xp.float32
    assert _np(layer.weight.grad).tolist()[2:] == [[0.0] * 3, [0.0] * 3, [0.0] * 3, [2.0] * 3]
