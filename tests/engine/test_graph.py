"""The reverse walk (``engine.graph``): backward() through a 10000-op chain, seeds,
gradients accumulated out of place, diamonds and shared subexpressions, no_grad and
detach, the dtypes of the gradients, a failure half-way through backward that leaves
every grad unchanged, Ctrl-C while entering no_grad, and the walk freeing the graph's saved
arrays as it goes."""

import weakref

import numpy as np
import pytest
from faults import interrupt_each_entry_line
from helpers import equal as _equal
from helpers import leaf as _tensor

from minigrad.engine import Tensor, is_grad_enabled, maximum, no_grad, primitive


# ----- backward() ---------------------------------------------------------------------------
def test_backward_through_a_10000_op_chain(xp):
    x = _tensor(xp, [1.0, 2.0])
    y = x
    for _ in range(10_000):
        y = y + 0.5
    y.sum().backward()  # recursion would exceed Python's default limit of 1000
    assert _equal(y.data, [5001.0, 5002.0])
    assert _equal(x.grad, [1.0, 1.0])


def test_non_scalar_backward_without_seed_names_shape_and_gradient(xp):
    y = _tensor(xp, [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]) * 2.0
    with pytest.raises(RuntimeError, match=r"\(2, 3\).*gradient"):
        y.backward()


def test_seeded_non_scalar_backward(xp):
    x = _tensor(xp, [[1.0, 2.0], [3.0, 4.0]])
    (x * x).backward(xp.asarray([[1.0, 0.0], [-1.0, 0.5]], dtype=xp.float64))
    assert _equal(x.grad, [[2.0, 0.0], [-6.0, 4.0]])


def test_seed_of_wrong_shape_raises_and_keeps_grad(xp):
    x = _tensor(xp, [1.0, 2.0])
    (x * 3.0).sum().backward()
    before = x.grad
    with pytest.raises(ValueError, match=r"\(3,\).*\(2,\)"):
        (x * x).backward(xp.ones((3,), dtype=xp.float64))
    assert x.grad is before
    assert _equal(x.grad, [3.0, 3.0])


def test_gradients_accumulate_out_of_place(xp):
    x = _tensor(xp, [1.0, -2.0])
    (x * x).sum().backward()
    first = x.grad
    (x * 3.0).sum().backward()
    assert _equal(x.grad, [5.0, -1.0])  # 2x + 3
    assert x.grad is not first
    assert _equal(first, [2.0, -4.0])  # the first array was not written to


def test_diamond_sums_both_paths(xp):
    x = _tensor(xp, [0.5, -1.25, 2.0])
    a = x * 3.0
    b = x * x
    (a + b).sum().backward()
    assert _equal(x.grad, [4.0, 0.5, 7.0])  # 3 + 2x


def test_shared_subexpression_is_visited_once(xp):
    x = _tensor(xp, [1.0, 2.0])
    h = x * 2.0
    (h * h + h).sum().backward()  # d/dx (4x^2 + 2x) = 8x + 2
    assert _equal(x.grad, [10.0, 18.0])


def test_no_grad_records_nothing_and_restores(xp):
    x = _tensor(xp, [1.0, 2.0])
    with pytest.raises(KeyError), no_grad():
        y = (x * 2.0).exp()
        raise KeyError
    assert not y.requires_grad
    assert y.is_leaf
    assert is_grad_enabled()
    assert (x * 2.0).requires_grad


def grad_enabled_is(expected):
    def check():
        assert is_grad_enabled() is expected
    return check


def test_ctrl_c_while_entering_no_grad_leaves_grad_enabled():
    # Ctrl-C at any line that entering runs; the old generator-based manager cleared the
    # flag, then met the fault at its ``try:`` line, outside the try that restores it.
    assert interrupt_each_entry_line(no_grad, grad_enabled_is(True)) >= 1
    with no_grad():  # inside an outer block, the outer block's flag stays
        assert interrupt_each_entry_line(no_grad, grad_enabled_is(False)) >= 1
    assert is_grad_enabled()


def test_one_no_grad_object_nests_in_itself_and_decorates_recursion():
    quiet = no_grad()
    with quiet:
        with quiet:
            assert not is_grad_enabled()
        assert not is_grad_enabled()
    assert is_grad_enabled()

    @no_grad()
    def depth(n):
        assert not is_grad_enabled()
        return 0 if n == 0 else 1 + depth(n - 1)

    assert depth(3) == 3
    assert is_grad_enabled()


def test_detach_cuts_the_graph(xp):
    x = _tensor(xp, [1.0, -3.0])
    d = x.detach()
    assert not d.requires_grad
    (d * x).sum().backward()
    assert _equal(x.grad, [1.0, -3.0])  # d is a constant: not 2x
    assert d.grad is None


def test_float32_graph_keeps_float32(xp):
    x = _tensor(xp, [[0.5, -1.0], [2.0, 0.25]], dtype=xp.float32)
    w = _tensor(xp, [1.5, -0.5], dtype=xp.float32)
    out = ((x @ w).tanh().exp() + (x**2).mean() + maximum(0.0, x).sum() / 3.0).sum()
    assert out.dtype == xp.float32
    out.backward()
    assert x.grad.dtype == xp.float32
    assert w.grad.dtype == xp.float32


def test_mixed_dtypes_give_each_grad_its_input_dtype(xp):
    x = _tensor(xp, [1.0, 2.0], dtype=xp.float32)
    y = _tensor(xp, [3.0, 4.0], dtype=xp.float64)
    out = (x * y).sum()
    assert out.dtype == xp.float64
    out.backward()
    assert x.grad.dtype == xp.float32
    assert y.grad.dtype == xp.float64
    assert _equal(x.grad, [3.0, 4.0])
    assert _equal(y.grad, [1.0, 2.0])


# ----- a failure during backward ----------------------------------------------------------
def test_failure_during_backward_leaves_every_grad_unchanged(xp):
    x = _tensor(xp, [1.0, 2.0])
    y = _tensor(xp, [3.0, 4.0])
    (x * y).sum().backward()

    def broken(g):
        raise MemoryError("simulated failure half-way through backward")

    # y's gradient is complete before the broken node is reached, x's comes after it
    out = y * 2.0 + primitive(x.data, (x,), broken, name="broken")
    with pytest.raises(MemoryError):
        out.sum().backward()
    assert _equal(x.grad, [3.0, 4.0])
    assert _equal(y.grad, [1.0, 2.0])


# ----- memory: the walk frees what it has used ---------------------------------------------
def test_the_walk_frees_each_nodes_saved_arrays_as_soon_as_its_backward_ran():
    x = Tensor(np.linspace(-1.0, 1.0, 6), requires_grad=True)
    seen = {}

    def probe(t):
        # The first op on x: its backward runs LAST in the walk. By then the activations
        # made after it (held only by the graph) must be gone.
        def backward(g):
            seen["alive"] = hidden() is not None
            return g

        return primitive(t.data * 1.0, (t,), backward, name="probe")

    def forward():
        h = probe(x).exp()  # h.data is saved by exp's backward and by the product below
        hidden_ref = weakref.ref(h.data)
        return (h * h).sum(), hidden_ref

    loss, hidden = forward()
    assert hidden() is not None  # alive after the forward: the graph holds it
    loss.backward()
    assert seen == {"alive": False}  # freed during the walk, before it reached x
    assert np.allclose(x.grad, 2.0 * np.exp(2.0 * x.data))


def test_a_second_backward_needs_retain_graph():
    x = Tensor([1.0, 2.0], requires_grad=True)
    y = (x * x).sum()
    y.backward(retain_graph=True)
    y.backward()  # walks the retained graph again: gradients add up
    assert np.array_equal(x.grad, [4.0, 8.0])
    with pytest.raises(RuntimeError, match="already freed.*retain_graph=True"):
        y.backward()
    assert np.array_equal(x.grad, [4.0, 8.0])


def test_an_input_written_in_place_after_the_forward_is_refused_naming_its_node():
    w = Tensor(np.array([1.0, 2.0]), requires_grad=True)
    loss = (w.exp() * 2.0).sum()
    w._version += 1  # what an optimizer's in-place step does (minigrad.optim.in_place)
    with pytest.raises(RuntimeError, match=r"shape \(2,\), an input of this graph's 'exp' "
                                           r"node, was updated in place after the forward"):
        loss.backward()
    assert w.grad is None
