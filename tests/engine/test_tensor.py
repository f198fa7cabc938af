"""The Tensor and its primitives: every primitive against finite differences and HIPS
autograd, on every namespace; broadcasting properties; edge conventions; comparisons; bad
input. The reverse walk itself (backward(), no_grad, detach) is tested in test_graph.py."""

from fractions import Fraction

import array_api_strict
import autograd.numpy as anp
import numpy as np
import pytest
from gradcheck import OpSpec, check_op
from helpers import equal as _equal
from helpers import leaf as _tensor
from hypothesis import given
from hypothesis import strategies as st

from minigrad import backend
from minigrad.engine import (
    Tensor,
    embedding,
    lift,
    linear,
    maximum,
    primitive,
    take_along_axis,
)


def _gather_ref(x, idx, axis):
    """take_along_axis by fancy indexing (autograd has no take_along_axis rule)."""
    index = list(np.indices(idx.shape, sparse=True))
    index[axis] = idx
    return x[tuple(index)]


def _same(name, fn, shapes, domain="real"):
    """A spec whose minigrad and autograd versions are the same Python code."""
    return OpSpec(name, fn, fn, shapes, domain)


_INDICES = np.random.default_rng(0)
ROWS = _INDICES.integers(0, 3, (5, 4))  # repeated indices: the backward must add them up
LAST = _INDICES.integers(0, 4, (2, 3, 6))
TOKENS = _INDICES.integers(0, 4, (3, 5))  # rows of a (4, 3) table, most picked several times

SPECS = [
    _same("add", lambda x, y: x + y, [(3, 4), (3, 4)]),
    _same("add_broadcast", lambda x, y: x + y, [(2, 1, 4), (3, 1)]),
    _same("add_0d", lambda x, y: x + y, [(), (2, 3)]),
    _same("radd_scalar", lambda x: 2.5 + x, [(3,)]),
    _same("sub", lambda x, y: x - y, [(3, 4), (3, 4)]),
    _same("sub_broadcast", lambda x, y: x - y, [(4,), (3, 1)]),
    _same("rsub_scalar", lambda x: 1.5 - x, [(3,)]),
    _same("mul", lambda x, y: x * y, [(3, 4), (3, 4)]),
    _same("mul_broadcast", lambda x, y: x * y, [(2, 3, 1), (1, 4)]),
    _same("mul_scalar", lambda x: x * 3.0, [(3,)]),
    _same("div", lambda x, y: x / y, [(3, 4), (3, 4)], ("real", "positive")),
    _same("div_broadcast", lambda x, y: x / y, [(3, 1), (2, 1, 4)], ("real", "positive")),
    _same("rtruediv_scalar", lambda x: 4.0 / x, [(3,)], "positive"),
    _same("neg", lambda x: -x, [(2, 3)]),
    _same("pow_0.5", lambda x: x**0.5, [(2, 3)], "positive"),
    _same("pow_2", lambda x: x**2, [(2, 3)]),
    _same("pow_-1", lambda x: x**-1, [(2, 3)], "positive"),
    _same("pow_3", lambda x: x**3, [(2, 3)]),
    _same("pow_0", lambda x: x**0, [(2, 3)]),
    _same("pow_1.5", lambda x: x**1.5, [(2, 3)], "positive"),
    _same("matmul", lambda a, b: a @ b, [(3, 4), (4, 2)]),
    _same("matmul_vec_mat", lambda a, b: a @ b, [(4,), (4, 2)]),
    _same("matmul_mat_vec", lambda a, b: a @ b, [(3, 4), (4,)]),
    _same("matmul_vec_vec", lambda a, b: a @ b, [(4,), (4,)]),
    _same("matmul_batched", lambda a, b: a @ b, [(2, 3, 4), (2, 4, 2)]),
    _same("matmul_batch_broadcast", lambda a, b: a @ b, [(2, 1, 3, 4), (5, 4, 2)]),
    _same("matmul_vec_batched", lambda a, b: a @ b, [(4,), (2, 4, 3)]),
    _same("matmul_batched_vec", lambda a, b: a @ b, [(2, 3, 4), (4,)]),
    OpSpec("exp", lambda x: x.exp(), anp.exp, [(2, 3)]),
    OpSpec("log", lambda x: x.log(), anp.log, [(2, 3)], "positive"),
    OpSpec("sqrt", lambda x: x.sqrt(), anp.sqrt, [(2, 3)], "positive"),
    OpSpec("tanh", lambda x: x.tanh(), anp.tanh, [(2, 3)]),
    OpSpec("relu", lambda x: x.relu(), lambda x: anp.maximum(x, 0.0), [(3, 4)], "nonzero"),
    OpSpec("maximum", maximum, anp.maximum, [(3, 4), (3, 4)], ("grid", "offgrid")),
    OpSpec("linear", linear, lambda x, w, b: x @ w.T + b, [(4, 3), (2, 3), (2,)]),
    OpSpec("linear_no_bias", linear, lambda x, w: x @ w.T, [(4, 3), (2, 3)]),
    OpSpec("linear_1d", linear, lambda x, w, b: x @ w.T + b, [(3,), (2, 3), (2,)]),
    OpSpec("linear_3d", linear, lambda x, w, b: x @ w.T + b, [(2, 4, 3), (5, 3), (5,)]),
    OpSpec("maximum_broadcast", maximum, anp.maximum, [(3, 1), (1, 4)], ("offgrid", "grid")),
    OpSpec("maximum_scalar", lambda x: maximum(x, 0.0), lambda x: anp.maximum(x, 0.0),
           [(5,)], "nonzero"),
    OpSpec("maximum_scalar_first", lambda x: maximum(0.0, x), lambda x: anp.maximum(0.0, x),
           [(5,)], "nonzero"),
]

for _axis in [None, 0, -1, (0, 2), (-1, -3)]:
    for _keep in [False, True]:
        for _name in ["sum", "mean"]:
            SPECS.append(OpSpec(
                f"{_name}_axis={_axis}_keepdims={_keep}",
                lambda x, a=_axis, k=_keep, n=_name: getattr(x, n)(axis=a, keepdims=k),
                lambda x, a=_axis, k=_keep, n=_name: getattr(anp, n)(x, axis=a, keepdims=k),
                [(2, 3, 4)],
            ))

SPECS += [
    OpSpec("sum_0d", lambda x: x.sum(), anp.sum, [()]),
    OpSpec("reshape", lambda x: x.reshape(6, 4), lambda x: anp.reshape(x, (6, 4)), [(2, 3, 4)]),
    OpSpec("reshape_tuple_-1", lambda x: x.reshape((-1,)), lambda x: anp.reshape(x, (-1,)),
           [(2, 3, 4)]),
    OpSpec("reshape_0d", lambda x: x.reshape(1, 1), lambda x: anp.reshape(x, (1, 1)), [()]),
    OpSpec("transpose", lambda x: x.transpose(), anp.transpose, [(2, 3, 4)]),
    OpSpec("transpose_axes", lambda x: x.transpose((2, 0, 1)),
           lambda x: anp.transpose(x, (2, 0, 1)), [(2, 3, 4)]),
    # the reference spells the axes out: autograd's transpose rule gets negative axes wrong
    OpSpec("transpose_negative_axes", lambda x: x.transpose((1, -1, -3)),
           lambda x: anp.transpose(x, (1, 2, 0)), [(2, 3, 4)]),
    OpSpec("T_2d", lambda x: x.T, lambda x: x.T, [(3, 4)]),
    OpSpec("T_3d", lambda x: x.T, lambda x: x.T, [(2, 3, 4)]),
    OpSpec("take_along_axis_0", lambda x, i: take_along_axis(x, i, axis=0),
           lambda x, i: _gather_ref(x, i, 0), [(3, 4)], extra=(ROWS,)),
    OpSpec("take_along_axis_-1", lambda x, i: take_along_axis(x, i, axis=-1),
           lambda x, i: _gather_ref(x, i, 2), [(2, 3, 4)], extra=(LAST,)),
    # padding_idx is not here: its zero gradient is a convention, not the derivative
    # (tests/nn/test_embedding.py checks it against torch)
    OpSpec("embedding", lambda w, i: embedding(i, w), lambda w, i: w[i], [(4, 3)],
           extra=(TOKENS,)),
]


@pytest.mark.parametrize("spec", SPECS, ids=lambda spec: spec.name)
def test_gradients(xp, spec):
    check_op(spec, xp)


def test_gradients_on_cupy(cupy_xp):
    for spec in SPECS:
        check_op(spec, cupy_xp)


# ----- broadcasting, as a property --------------------------------------------------------
@st.composite
def broadcastable_shapes(draw, max_dims=4, max_side=3):
    """Two shapes that broadcast together: each keeps a suffix of a common shape with some
    sides set to 1 (leading dims added and size-1 dims stretched: both ways to unbroadcast)."""
    ndim = draw(st.integers(0, max_dims))
    full = draw(st.lists(st.integers(1, max_side), min_size=ndim, max_size=ndim))

    def operand():
        kept = full[ndim - draw(st.integers(0, ndim)):]
        return tuple(1 if draw(st.booleans()) else n for n in kept)

    return operand(), operand()


BINARY = {
    "add": lambda x, y: x + y,
    "sub": lambda x, y: x - y,
    "mul": lambda x, y: x * y,
    "div": lambda x, y: x / y,
}


@pytest.mark.parametrize("op", BINARY)
@given(shapes=broadcastable_shapes())
def test_broadcast_grad_has_input_shape_and_matches_autograd(xp, op, shapes):
    domain = ("real", "positive" if op == "div" else "real")
    check_op(OpSpec(f"{op}{shapes}", BINARY[op], BINARY[op], shapes, domain), xp)


# ----- edge conventions (exact) -----------------------------------------------------------
def test_relu_derivative_at_zero_is_zero(xp):
    x = _tensor(xp, [-1.0, 0.0, 2.0])
    x.relu().sum().backward()
    assert _equal(x.grad, [0.0, 0.0, 1.0])


def test_maximum_splits_ties_in_half(xp):
    x = _tensor(xp, [1.0, 2.0, 3.0, -1.0])
    y = _tensor(xp, [1.0, 0.0, 3.0, 0.0])
    maximum(x, y).sum().backward()
    assert _equal(x.grad, [0.5, 1.0, 0.5, 0.0])
    assert _equal(y.grad, [0.5, 0.0, 0.5, 1.0])


def test_maximum_ties_under_broadcasting(xp):
    x = _tensor(xp, [[0.0], [2.0]])
    y = _tensor(xp, [0.0, 2.0, 1.0])
    maximum(x, y).sum().backward()
    assert _equal(x.grad, [[0.5], [2.5]])  # row 0: tie, loses, loses; row 1: wins, tie, wins
    assert _equal(y.grad, [0.5, 1.5, 1.0])


def test_pow_zero_has_zero_gradient_even_at_zero(xp):
    x = _tensor(xp, [-1.0, 0.0, 2.0])
    (x**0).sum().backward()
    assert _equal(x.grad, [0.0, 0.0, 0.0])  # not 0 * 0**-1 = nan


def test_pow_two_at_zero(xp):
    x = _tensor(xp, [0.0, 3.0])
    (x**2).sum().backward()
    assert _equal(x.grad, [0.0, 6.0])


# ----- comparisons ------------------------------------------------------------------------
def test_comparisons_are_tensors_without_grad(xp):
    x = _tensor(xp, [1.0, 2.0, 3.0])
    results = {
        "<": (x < 2.0, [True, False, False]),
        "<=": (x <= 2.0, [True, True, False]),
        ">": (x > 2.0, [False, False, True]),
        ">=": (x >= 2.0, [False, True, True]),
        "eq": (x.eq(2.0), [False, True, False]),
        "ne": (x.ne(_tensor(xp, [1.0, 0.0, 3.0])), [False, True, False]),
    }
    for op, (result, expected) in results.items():
        assert isinstance(result, Tensor), op
        assert not result.requires_grad, op
        assert result.dtype == xp.bool, op
        assert _equal(result.data, expected), op


def test_tensors_hash_by_identity():
    """``==`` is identity (``eq`` compares elements), so a Tensor is a dict key or a set member."""
    a, b = Tensor([1.0]), Tensor([1.0])
    assert a == a and a != b and len({a, b, a}) == 2


# ----- bad input ----------------------------------------------------------------------------
@pytest.mark.parametrize(("a", "b"), [((3, 4), (5, 2)), ((4,), (3, 2)), ((2, 3), (4,))])
def test_matmul_mismatch_names_both_shapes(xp, a, b):
    x = Tensor(xp.ones(a, dtype=xp.float64), requires_grad=True)
    y = Tensor(xp.ones(b, dtype=xp.float64))
    with pytest.raises(ValueError) as info:
        x @ y
    assert str(a) in str(info.value)
    assert str(b) in str(info.value)


def test_mixing_namespaces_raises_type_error_naming_both():
    a = Tensor(backend.resolve_namespace("numpy").asarray([1.0, 2.0]), requires_grad=True)
    b = Tensor(backend.resolve_namespace("array_api_strict").asarray([1.0, 2.0]))
    for mix in [lambda: a + b, lambda: b * a, lambda: a @ b, lambda: maximum(a, b)]:
        with pytest.raises(TypeError, match="numpy.*array_api_strict|array_api_strict.*numpy"):
            mix()


def test_take_along_axis_with_float_indices_raises(xp):
    x = _tensor(xp, [[1.0, 2.0], [3.0, 4.0]])
    with pytest.raises(TypeError, match="integer"):
        take_along_axis(x, xp.asarray([[0.0], [1.0]]), axis=1)


def test_failing_op_leaves_grad_unchanged(xp):
    x = _tensor(xp, [1.0, 2.0])
    (x * 2.0).sum().backward()
    before = x.grad
    with pytest.raises(ValueError):
        x @ _tensor(xp, [1.0, 2.0, 3.0])
    with pytest.raises(TypeError):
        take_along_axis(x, xp.asarray([0.5]))
    assert x.grad is before
    assert _equal(x.grad, [2.0, 2.0])


@pytest.mark.parametrize("data", ["abc", ["a", "b"], [[1.0, 2.0], [3.0]], {"a": 1}, None,
                                  np.array([object()], dtype=object),
                                  np.array([Fraction(1, 2), 0.5], dtype=object)])
def test_non_numbers_are_refused(data):
    with pytest.raises(TypeError, match="Tensor data must be numbers"):
        Tensor(data)


def test_exact_tensors_hold_fractions_and_ints_only():
    t = Tensor(np.array([Fraction(1, 2), 3], dtype=object), requires_grad=True)
    assert t.requires_grad and t.data[0] == Fraction(1, 2)


@pytest.mark.parametrize("gradient", [[1.0, 1.0], 1.0, "1"])
def test_backward_refuses_a_seed_that_is_not_an_array(gradient):
    x = Tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(TypeError, match=r"gradient must be a Tensor or an array of shape \(2,\)"):
        (x * 2.0).backward(gradient=gradient)
    assert x.grad is None


# ----- bad shapes, axes and operands: errors as PyTorch's, before NumPy sees them --------------
_T = Tensor(np.ones((2, 3)))


@pytest.mark.parametrize("call, error, message", [
    (lambda: _T + Tensor(np.ones((3, 2))), ValueError,
     r"shapes \(2, 3\) and \(3, 2\) cannot be broadcast for \+"),
    (lambda: _T * [1.0, 2.0], ValueError, r"cannot be broadcast for \*"),
    (lambda: _T < Tensor(np.ones(2)), ValueError, "cannot be broadcast for lt"),
    (lambda: _T + None, TypeError, "cannot combine a Tensor with NoneType"),
    (lambda: _T * "a", TypeError, "cannot combine a Tensor with str"),
    (lambda: _T.reshape(4), ValueError, r"shape \(4,\) is invalid for a tensor of shape"),
    (lambda: _T.reshape(-1, -1), ValueError, "more than one -1"),
    (lambda: _T.reshape(2, 3.0), TypeError, r"shape\[1\] must be an integer"),
    (lambda: _T.transpose((0, 5)), IndexError, r"axis 5 of transpose \(axes\) is out of range"),
    (lambda: _T.transpose((0, 0)), ValueError, "repeats an axis"),
    (lambda: _T.transpose((0, 1, 2)), ValueError, "each of the 2 dimensions once"),
    (lambda: _T.sum(axis=2), IndexError, "axis 2 of sum is out of range"),
    (lambda: _T.mean(axis=1.5), TypeError, "axis of mean must be an integer"),
    (lambda: Tensor(np.ones((2, 3, 4))) @ Tensor(np.ones((5, 4, 2))), ValueError,
     r"batch dimensions"),
    (lambda: _T @ Tensor(2.0), ValueError, r"at least 1 dimension, got shapes \(2, 3\) and \(\)"),
    (lambda: _T.item(), ValueError, r"one element, got shape \(2, 3\)"),
    (lambda: len(Tensor(1.0)), TypeError, "len\\(\\) of a 0-d tensor"),
    (lambda: Tensor([1.0], requires_grad="yes"), TypeError, "requires_grad must be True or"),
    (lambda: Tensor([1.0], dtype=str), TypeError, "dtype must be a numeric dtype"),
    (lambda: Tensor([1.0], xp="no_such_library"), ValueError, "xp must name an installed"),
    (lambda: Tensor([1.0], xp=42), TypeError, "xp must be an array-API namespace"),
    (lambda: Tensor([1.0], device="gpu"), ValueError, "device 'gpu' is not a device of numpy"),
])
def test_bad_shapes_axes_and_operands_are_named(call, error, message):
    with pytest.raises(error, match=message):
        call()


def test_integer_tensors_promote_with_float_numbers_as_pytorch_does():
    ints = Tensor(np.array([1, 2]))
    assert np.array_equal((ints + 0.5).data, [1.5, 2.5])
    assert np.array_equal((ints * 0.5).data, [0.5, 1.0])
    assert (ints * 2).dtype == np.int64  # an int stays an int
    floats32 = Tensor(np.array([1.0], dtype=np.float32))
    assert (floats32 * 0.1).dtype == np.float32  # a number takes a float tensor's dtype


def test_lift_makes_a_value_a_tensor_like_another(xp):
    like = Tensor(xp.asarray([1.0, 2.0], dtype=xp.float32), requires_grad=True)
    number = lift(3, like=like)
    assert type(number) is Tensor and number.xp is like.xp and number.dtype == xp.float32
    assert number.device == like.device and number.shape == () and not number.requires_grad
    assert lift(like, like=like) is like  # a Tensor comes back as it is
    listed = lift([0.5, 1.5], like=like)
    assert listed.dtype == xp.float32 and backend.to_numpy(listed.data).tolist() == [0.5, 1.5]
    array = xp.asarray([1, 2])
    assert lift(array, like=like).data is array  # an array of the namespace keeps its dtype
    ints = Tensor(xp.asarray([1, 2]))
    assert xp.isdtype(lift(0.5, like=ints).dtype, "real floating")  # int * 0.5 is floating
    # the operators lift exactly this way: the same bits as an explicit lift
    assert np.array_equal((like * 0.1).numpy(), (like * lift(0.1, like=like)).numpy())


def test_lift_refuses_another_namespace_and_a_like_that_is_no_tensor():
    like = Tensor(np.array([1.0]))
    other = backend.resolve_namespace("array_api_strict").asarray([1.0])
    for value in (other, Tensor(other)):
        with pytest.raises(TypeError, match="numpy.*array_api_strict|array_api_strict.*numpy"):
            lift(value, like=like)
    with pytest.raises(TypeError, match="cannot combine a Tensor with str"):
        lift("a", like=like)
    with pytest.raises(TypeError, match="like must be a minigrad Tensor, got ndarray"):
        lift(1.0, like=np.ones(1))
    with pytest.raises(TypeError, match="keyword-only argument: 'like'"):
        lift(1.0)


def test_a_number_to_a_tensor_power_has_its_gradient():
    t = Tensor([1.0, 2.0], requires_grad=True)
    (2.0 ** t).sum().backward()
    # The same product of the same two factors; only log and pow may differ by 1 ulp between
    # NumPy's vectorised (array) and scalar paths: 2 ulps of relative error at most, < 4e-16.
    assert np.allclose(t.grad, np.log(2.0) * 2.0 ** np.array([1.0, 2.0]), rtol=4e-16, atol=0)
    assert np.array_equal((t ** np.int64(2)).data, [1.0, 4.0])  # NumPy integers as exponents
    assert Tensor(5.0).mean(axis=0).item() == 5.0  # a 0-d tensor's one axis, as in torch


def test_primitive_seeds_and_gathers_are_checked_by_name():
    x = Tensor([1.0, 2.0, 3.0], requires_grad=True)
    with pytest.raises(TypeError, match="inputs of a primitive must be a non-empty tuple"):
        primitive(np.ones(2), (), lambda g: g, name="identity")
    with pytest.raises(TypeError, match="inputs of a primitive must be a non-empty tuple"):
        primitive(np.ones(2), (np.ones(2),), lambda g: g, name="identity")
    with pytest.raises(TypeError, match="gradient must hold numbers"):
        (x * 2.0).backward(np.array(["a", "b", "c"]))
    with pytest.raises(TypeError, match="gradient must be an array of the output's namespace"):
        (x * 2.0).backward(array_api_strict.ones(3, dtype=array_api_strict.float64))
    table = Tensor(np.ones((2, 3)))
    with pytest.raises(IndexError, match=r"indices must lie in \[0, 3\)"):
        take_along_axis(table, np.array([[5], [0]]), axis=1)
    with pytest.raises(IndexError, match="axis 5 of take_along_axis is out of range"):
        take_along_axis(table, np.array([[1], [0]]), axis=5)
    with pytest.raises(TypeError, match="indices must be an integer array, got list"):
        take_along_axis(table, [[1], [0]], axis=1)
    with pytest.raises(TypeError, match="values beyond 64-bit integers"):
        Tensor(np.array([1, 2])) + 2**70
    assert x.grad is None


def test_linear_is_the_composite_of_matmul_and_add_exactly_on_dyadic_data(xp):
    # Entries are multiples of 1/4 below 4 in size: every product and sum needs at most
    # ~12 bits, so both computations are exact in float64, whatever the summation order.
    rng = np.random.default_rng(7)
    x_np, w_np, b_np = (rng.integers(-15, 16, s) / 4.0 for s in ((5, 3), (4, 3), (4,)))
    fused = [Tensor(xp.asarray(a), requires_grad=True) for a in (x_np, w_np, b_np)]
    plain = [Tensor(xp.asarray(a), requires_grad=True) for a in (x_np, w_np, b_np)]
    g = xp.asarray(rng.integers(-15, 16, (5, 4)) / 4.0)
    out_fused = linear(*fused)
    out_plain = plain[0] @ plain[1].T + plain[2]
    assert np.array_equal(backend.to_numpy(out_fused.data), backend.to_numpy(out_plain.data))
    out_fused.backward(g)
    out_plain.backward(g)
    for a, b in zip(fused, plain):
        assert np.array_equal(backend.to_numpy(a.grad), backend.to_numpy(b.grad))


@pytest.mark.parametrize("shape", [(3, 4, 5), (2, 3, 2, 5)])
def test_linear_on_stacked_rows_gives_the_bits_of_linear_on_the_rows(xp, shape):
    """x of shape (..., in) is one product of its rows (-1, in): the same bits as linear on
    the flattened rows, forward and backward, on any values (the same products run)."""
    rng = np.random.default_rng(3)
    x_np, w_np, b_np = rng.normal(size=shape), rng.normal(size=(6, 5)), rng.normal(size=6)
    g_np = rng.normal(size=(*shape[:-1], 6))
    stacked = [Tensor(xp.asarray(a), requires_grad=True) for a in (x_np, w_np, b_np)]
    rows = [Tensor(xp.asarray(a), requires_grad=True)
            for a in (x_np.reshape(-1, 5), w_np, b_np)]
    out_stacked, out_rows = linear(*stacked), linear(*rows)
    assert tuple(out_stacked.shape) == (*shape[:-1], 6)
    assert np.array_equal(backend.to_numpy(out_stacked.data).reshape(-1, 6),
                          backend.to_numpy(out_rows.data))
    out_stacked.backward(xp.asarray(g_np))
    out_rows.backward(xp.asarray(g_np.reshape(-1, 6)))
    for a, b in zip(stacked, rows):
        assert np.array_equal(backend.to_numpy(a.grad).reshape(backend.to_numpy(b.grad).shape),
                              backend.to_numpy(b.grad))


def test_linear_names_mismatched_shapes():
    x, w = Tensor(np.ones((2, 3))), Tensor(np.ones((4, 5)))
    with pytest.raises(ValueError, match=r"x \(2, 3\) and weight \(4, 5\)"):
        linear(x, w)
    with pytest.raises(ValueError, match=r"bias must have shape \(4,\).*got \(3,\)"):
        linear(Tensor(np.ones((2, 5))), w, Tensor(np.ones(3)))


@pytest.mark.parametrize("which", ["x", "bias"])
def test_linear_refuses_mixed_dtypes_as_torch_does(which):
    # The bias is added in place into x @ W^T: a float64 bias on float32 products would be
    # rounded to float32 silently, so (as torch.nn.functional.linear) dtypes must agree.
    x, w, b = np.ones((2, 3), np.float32), np.ones((4, 3), np.float32), np.ones(4, np.float32)
    if which == "x":
        x = x.astype(np.float64)
    else:
        b = b.astype(np.float64)
    with pytest.raises(TypeError, match=f"linear's {which} has dtype float64, its weight "
                                        "float32"):
        linear(Tensor(x), Tensor(w), Tensor(b))


def test_the_weight_gradient_of_linear_is_row_major_like_the_weight():
    x, w = Tensor(np.ones((6, 3))), Tensor(np.ones((4, 3)), requires_grad=True)
    linear(x, w).sum().backward()
    assert w.grad.flags["C_CONTIGUOUS"]
