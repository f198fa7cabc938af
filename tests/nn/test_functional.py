"""Composites (activations, softmax, losses, dropout): gradients against finite differences
and HIPS autograd on every namespace; exact tiny cases; stability at +-1e4; bad input.
Dropout's masks (rate, scale, split-invariance) are tested in test_dropout.py."""

import math

import autograd.numpy as anp
import numpy as np
import pytest
from gradcheck import OpSpec, check_op
from helpers import as_numpy as _np
from helpers import leaf as _tensor
from helpers import other_namespace as _other

from minigrad.engine import take_along_axis
from minigrad.engine.tensor import Tensor
from minigrad.nn import Dropout
from minigrad.nn import functional as F

GELU_C = math.sqrt(2.0 / math.pi)
EPS = np.finfo(np.float64).eps


# ----- autograd references, written from the formulas (not from minigrad's code) -------------
def _log_softmax_ref(x, axis):
    return x - anp.log(anp.sum(anp.exp(x), axis=axis, keepdims=True))


def _cross_entropy_ref(logits, target, reduction, ignore_index):
    kept = target != ignore_index
    safe = np.where(kept, target, 0)
    loss = -_log_softmax_ref(logits, 1)[np.arange(len(target)), safe] * kept
    if reduction == "none":
        return loss
    return anp.sum(loss) if reduction == "sum" else anp.sum(loss) / np.sum(kept)


def _mse_ref(x, y, reduction):
    loss = (x - y) ** 2
    return {"none": loss, "sum": anp.sum(loss), "mean": anp.mean(loss)}[reduction]


def _dropout_mask(p, shape, seed, step):
    """The mask*scale that minigrad's forward applies, read off a forward on ones."""
    return F.dropout(Tensor(np.ones(shape)), p, True, seed=seed, step=step).numpy()


TARGETS = np.array([2, -100, 0, 3, 1, -100, 3])  # 7 samples, 4 classes, 2 ignored
TARGETS_IGNORE_1 = np.array([1, 0, 3, 1, 2])  # ignore_index=1: a valid class, still ignored

SPECS = [
    OpSpec("relu", F.relu, lambda x: anp.maximum(x, 0.0), [(3, 4)], "nonzero"),
    OpSpec("tanh", F.tanh, anp.tanh, [(3, 4)]),
    OpSpec("sigmoid", F.sigmoid, lambda x: 1.0 / (1.0 + anp.exp(-x)), [(3, 4)]),
    OpSpec("gelu", F.gelu,
           lambda x: 0.5 * x * (1.0 + anp.tanh(GELU_C * (x + 0.044715 * x**3))), [(3, 4)]),
    OpSpec("dropout_eval", lambda x: F.dropout(x, 0.4, training=False), lambda x: x, [(3, 4)]),
    OpSpec("dropout_train_p=0.3", lambda x: F.dropout(x, 0.3, True, seed=7, step=2),
           lambda x: x * _dropout_mask(0.3, (6, 5), 7, 2), [(6, 5)]),
    OpSpec("dropout_train_3d", lambda x: F.dropout(x, 0.5, True, seed=1, step=0),
           lambda x: x * _dropout_mask(0.5, (3, 2, 4), 1, 0), [(3, 2, 4)]),
]
for _axis in (0, -1):
    SPECS += [
        OpSpec(f"softmax_axis={_axis}", lambda x, a=_axis: F.softmax(x, axis=a),
               lambda x, a=_axis: anp.exp(x) / anp.sum(anp.exp(x), axis=a, keepdims=True),
               [(3, 5)]),
        OpSpec(f"log_softmax_axis={_axis}", lambda x, a=_axis: F.log_softmax(x, axis=a),
               lambda x, a=_axis: _log_softmax_ref(x, a), [(3, 5)]),
        OpSpec(f"log_softmax_3d_axis={_axis}", lambda x, a=_axis: F.log_softmax(x, axis=a),
               lambda x, a=_axis: _log_softmax_ref(x, a), [(2, 3, 4)]),
    ]
for _red in F.REDUCTIONS:
    SPECS += [
        OpSpec(f"cross_entropy_{_red}",
               lambda x, t, r=_red: F.cross_entropy(x, t, reduction=r),
               lambda x, t, r=_red: _cross_entropy_ref(x, t, r, -100),
               [(7, 4)], extra=(TARGETS,)),
        OpSpec(f"cross_entropy_{_red}_ignore_index=1",
               lambda x, t, r=_red: F.cross_entropy(x, t, reduction=r, ignore_index=1),
               lambda x, t, r=_red: _cross_entropy_ref(x, t, r, 1),
               [(5, 4)], extra=(TARGETS_IGNORE_1,)),
        OpSpec(f"mse_loss_{_red}", lambda x, y, r=_red: F.mse_loss(x, y, reduction=r),
               lambda x, y, r=_red: _mse_ref(x, y, r), [(4, 3), (4, 3)]),
    ]


@pytest.mark.parametrize("spec", SPECS, ids=lambda spec: spec.name)
def test_gradients(xp, spec):
    check_op(spec, xp)


def test_dropout_gradient_is_mask_times_scale(xp):
    x = _tensor(xp, np.linspace(-1.0, 1.0, 40).reshape(8, 5))
    out = F.dropout(x, 0.25, True, seed=3, step=5)
    out.sum().backward()
    kept = _np(out) != 0.0  # no x is 0, so an output is 0 exactly where it was dropped
    assert np.array_equal(_np(x.grad), np.where(kept, 1.0 / 0.75, 0.0))


# ----- the fused cross-entropy is the composite, bit for bit --------------------------------
def _composite_cross_entropy(logits, target, reduction, ignore_index):
    """Cross-entropy of (rows, C) logits from the engine's primitives (log_softmax, a gather,
    reshapes, a negation, a mask, the reduction): what F.cross_entropy fuses into one node."""
    xp = logits.xp
    kept = target != ignore_index
    safe = xp.reshape(xp.where(kept, target, xp.zeros_like(target)), (-1, 1))
    picked = take_along_axis(F.log_softmax(logits, axis=1), safe, axis=1)
    weight = Tensor(xp.astype(kept, logits.dtype))
    loss = -picked.reshape(-1) * weight
    count = int(xp.sum(xp.astype(kept, xp.int64)))
    if reduction == "none":
        return loss
    if reduction == "sum":
        return loss.sum()
    return loss.sum() / count if count else loss.sum() * 0.0 + float("nan")


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("case", range(6))
def test_fused_cross_entropy_equals_the_composite(xp, reduction, dtype, case):
    # Both evaluate the same IEEE operations on the same values (the docstring of
    # minigrad.engine.primitives.softmax.cross_entropy_rows): the loss -((z_t - c) - lse),
    # the gradient G - p * rowsum(G) with G = -s at the target. So the values are equal
    # (np.array_equal counts -0.0 == 0.0: the composite's one-hot product makes -0.0 where
    # torch, and the fused node, write 0.0).
    rng = np.random.default_rng(case)
    rows, classes = [(1, 1), (7, 4), (64, 10), (33, 3), (5, 2), (128, 17)][case]
    z = rng.normal(scale=[1.0, 3.0, 30.0][case % 3], size=(rows, classes))
    y = rng.integers(0, classes, size=rows)
    y[rng.random(rows) < [0.0, 0.3, 0.1, 1.0, 0.0, 0.2][case]] = -100  # case 3: all ignored
    seed = rng.normal(size=rows) if reduction == "none" else rng.normal()
    results = []
    for loss_fn in (F.cross_entropy, _composite_cross_entropy):
        logits = _tensor(xp, z, dtype=dtype)
        loss = loss_fn(logits, xp.asarray(y), reduction, -100)
        loss.backward(xp.asarray(seed, dtype=getattr(xp, dtype)))
        results.append((_np(loss), _np(logits.grad)))
    (fused, fused_grad), (composite, composite_grad) = results
    assert np.array_equal(fused, composite, equal_nan=True)
    assert np.array_equal(fused_grad, composite_grad)


@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
def test_cross_entropy_zeros_carry_torchs_signs(reduction):
    torch = pytest.importorskip("torch")
    # Rows whose loss or gradient entries are exactly zero: a certain class (loss -0.0 in
    # torch), an ignored row, and a sure miss; upstream gradients of both signs.
    z = np.array([[0.0, -1000.0], [3.0, 1.0], [-1000.0, 0.0], [0.0, -1000.0]])
    y = np.array([0, -100, 1, 1])
    seed = np.array([-1.0, 2.0, 0.5, 1.0]) if reduction == "none" else np.array(-1.0)
    ours = Tensor(z, requires_grad=True)
    loss = F.cross_entropy(ours, y, reduction)
    loss.backward(seed)
    theirs = torch.tensor(z, requires_grad=True)
    expected = torch.nn.functional.cross_entropy(theirs, torch.tensor(y), reduction=reduction)
    expected.backward(torch.tensor(seed))
    for got, want in ((loss.numpy(), expected.detach().numpy()),
                      (ours.grad, theirs.grad.numpy())):
        assert np.array_equal(got, want)  # these values are exact: exp(-1000) is 0
        assert np.array_equal(np.signbit(got), np.signbit(want))


def test_cross_entropy_backward_uses_the_labels_of_its_forward(xp):
    # The primitive keeps its own copy of the labels: changing the caller's array after the
    # forward pass changes nothing (torch would refuse such an in-place change).
    z = np.array([[0.5, -1.0, 2.0], [1.0, 0.0, -3.0]])
    grads = []
    for mutate in (False, True):
        logits, target = _tensor(xp, z), xp.asarray(np.array([0, 1]))
        loss = F.cross_entropy(logits, target)
        if mutate:
            target[...] = 2
        loss.backward()
        grads.append(_np(logits.grad))
    assert np.array_equal(grads[0], grads[1])


def test_labels_of_a_small_integer_dtype_name_classes_past_its_range():
    # 300 classes with uint8 labels: the one-hot must compare in int64; in uint8 the class
    # numbers wrap (class 256 would count as label 0). Same gradients as int64 labels, for
    # both cross_entropy and take_along_axis.
    z = np.random.default_rng(0).normal(size=(3, 300))
    y = np.array([44, 0, 255])
    grads = []
    for labels in (y, y.astype(np.uint8)):
        logits = Tensor(z, requires_grad=True)
        F.cross_entropy(logits, labels).backward()
        gathered = Tensor(z, requires_grad=True)
        take_along_axis(gathered, labels[:, None], axis=1).sum().backward()
        grads.append((logits.grad, gathered.grad))
    assert np.array_equal(grads[0][0], grads[1][0])
    assert np.array_equal(grads[0][1], grads[1][1])


# ----- exact tiny cases ----------------------------------------------------------------------
def test_cross_entropy_of_two_equal_logits_is_log_2(xp):
    logits = _tensor(xp, [[0.0, 0.0]])
    loss = F.cross_entropy(logits, xp.asarray([0]))
    assert loss.item() == pytest.approx(math.log(2.0), rel=2 * EPS, abs=0)
    loss.backward()
    # softmax - onehot; exp(-log 2) is 0.5 only if exp and log round well there
    np.testing.assert_allclose(_np(logits.grad), [[-0.5, 0.5]], rtol=0, atol=2 * EPS)


# Rows whose losses are exact: -log_softmax([1e4, -1e4, 0]) = [0, 2e4, 1e4].
BIG = [[1e4, -1e4, 0.0]] * 4


def test_cross_entropy_mean_divides_by_the_non_ignored_count(xp):
    logits = _tensor(xp, BIG)
    target = xp.asarray([0, 1, 2, -100])
    assert np.array_equal(_np(F.cross_entropy(logits, target, reduction="none")),
                          [0.0, 2e4, 1e4, 0.0])
    assert F.cross_entropy(logits, target, reduction="sum").item() == 3e4
    loss = F.cross_entropy(logits, target)
    assert loss.item() == 1e4  # 3e4 / 3 kept targets, not / 4 samples
    loss.backward()
    third = 1.0 / 3.0  # softmax = [1, 0, 0]; (softmax - onehot) / 3 per kept row
    assert np.array_equal(_np(logits.grad), [[0.0, 0.0, 0.0], [third, -third, 0.0],
                                             [third, 0.0, -third], [0.0, 0.0, 0.0]])


def test_cross_entropy_all_ignored(xp):
    target = xp.asarray([-100, -100])
    logits = _tensor(xp, [[0.5, -1.0, 2.0], [1.0, 0.0, 3.0]])
    mean = F.cross_entropy(logits, target)
    assert math.isnan(mean.item())  # torch: a mean over zero items is 0 / 0
    mean.backward()
    # torch's nll_loss backward writes only non-ignored targets: the gradient is 0, not NaN
    assert np.array_equal(_np(logits.grad), np.zeros((2, 3)))
    logits.grad = None
    total = F.cross_entropy(logits, target, reduction="sum")
    assert total.item() == 0.0
    total.backward()
    assert np.array_equal(_np(logits.grad), np.zeros((2, 3)))
    none = F.cross_entropy(logits, target, reduction="none")
    assert np.array_equal(_np(none), [0.0, 0.0])


def test_cross_entropy_reduction_none_is_zero_at_ignored_positions(xp):
    logits = _tensor(xp, [[0.5, -1.0], [1.0, 0.0], [3.0, 2.0]])
    loss = F.cross_entropy(logits, xp.asarray([1, 7, 0]), reduction="none", ignore_index=7)
    values = _np(loss)
    assert values[1] == 0.0
    assert values[0] == pytest.approx(math.log(1.0 + math.exp(1.5)), rel=1e-15)
    assert values[2] == pytest.approx(math.log(1.0 + math.exp(-1.0)), rel=1e-15)


def test_mse_loss_exact(xp):
    x = _tensor(xp, [[1.0, 2.0], [3.0, 4.0]])
    y = _tensor(xp, [[0.0, 2.0], [5.0, 1.0]], requires_grad=False)
    assert np.array_equal(_np(F.mse_loss(x, y, reduction="none")), [[1.0, 0.0], [4.0, 9.0]])
    assert F.mse_loss(x, y, reduction="sum").item() == 14.0
    loss = F.mse_loss(x, y)
    assert loss.item() == 3.5
    loss.backward()
    assert np.array_equal(_np(x.grad), [[0.5, 0.0], [-1.0, 1.5]])  # 2 (x - y) / 4


def test_activations_exact(xp):
    x = _tensor(xp, [-2.0, 0.0, 3.0])
    assert np.array_equal(_np(F.relu(x)), [0.0, 0.0, 3.0])
    assert np.array_equal(_np(F.sigmoid(_tensor(xp, [0.0, 1e4, -1e4]))), [0.5, 1.0, 0.0])
    assert np.array_equal(_np(F.gelu(_tensor(xp, [0.0, 1e4, -1e4]))), [0.0, 1e4, 0.0])
    probs = _np(F.softmax(_tensor(xp, [[1.0, 1.0, 1.0, 1.0]])))
    np.testing.assert_allclose(probs, [[0.25, 0.25, 0.25, 0.25]], rtol=4 * EPS, atol=0)


# ----- stability at +-1e4 --------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_log_softmax_and_cross_entropy_are_stable_at_1e4(xp, dtype):
    logits = _tensor(xp, [[1e4, -1e4, 0.0]], dtype=dtype)
    out = F.log_softmax(logits)
    assert np.array_equal(_np(out), [[0.0, -2e4, -1e4]])
    out.sum().backward()
    assert np.all(np.isfinite(_np(logits.grad)))
    assert np.array_equal(_np(logits.grad), [[-2.0, 1.0, 1.0]])  # 1 - 3 softmax
    for label, value, grad in [(0, 0.0, [0.0, 0.0, 0.0]), (1, 2e4, [1.0, -1.0, 0.0])]:
        logits.grad = None
        loss = F.cross_entropy(logits, xp.asarray([label]))
        assert loss.item() == value
        assert loss.dtype == getattr(xp, dtype)
        loss.backward()
        assert np.array_equal(_np(logits.grad), [grad])


# ----- bad input: errors name the argument ----------------------------------------------------
def test_cross_entropy_bad_input(xp):
    logits = _tensor(xp, [[0.0, 1.0, 2.0], [1.0, 0.0, 0.0]])
    with pytest.raises(TypeError, match="target.*integer.*float64"):
        F.cross_entropy(logits, xp.asarray([0.0, 1.0], dtype=xp.float64))
    for labels in ([0, 3], [-1, 0]):
        with pytest.raises(ValueError, match=r"target labels.*\[0, 3\).*ignore_index=-100"):
            F.cross_entropy(logits, xp.asarray(labels))
    with pytest.raises(ValueError, match=r"target has shape \(3,\), expected \(2,\)"):
        F.cross_entropy(logits, xp.asarray([0, 1, 2]))
    with pytest.raises(ValueError, match=r"target has shape \(2, 1\)"):
        F.cross_entropy(logits, xp.asarray([[0], [1]]))
    with pytest.raises(ValueError, match=r"target has shape \(1,\), expected \(\) for logits"):
        F.cross_entropy(_tensor(xp, [0.0, 1.0, 2.0]), xp.asarray([0]))  # (C,) takes a 0-d
    with pytest.raises(ValueError, match=r"logits must have shape \(C,\), \(N, C\)"):
        F.cross_entropy(_tensor(xp, 1.0), xp.asarray(0))
    with pytest.raises(ValueError, match="reduction.*'avg'"):
        F.cross_entropy(logits, xp.asarray([0, 1]), reduction="avg")


def test_mse_loss_bad_input(xp):
    x = _tensor(xp, [[1.0, 2.0, 3.0]])
    with pytest.raises(ValueError, match=r"input shape \(1, 3\) and target shape \(3, 1\)"):
        F.mse_loss(x, _tensor(xp, [[1.0], [2.0], [3.0]]))
    with pytest.raises(ValueError, match="reduction.*'mena'"):
        F.mse_loss(x, x, reduction="mena")


@pytest.mark.parametrize("p", [-0.1, 1.5, float("nan")])
def test_dropout_p_outside_unit_interval_raises(xp, p):
    x = _tensor(xp, [[1.0, 2.0]])
    with pytest.raises(ValueError, match=r"p must be a finite number with 0 <= p <= 1"):
        F.dropout(x, p)
    with pytest.raises(ValueError, match=r"p must be a finite number with 0 <= p <= 1"):
        Dropout(p)


def test_mixing_namespaces_raises_type_error(xp):
    other = _other(xp)
    logits = _tensor(xp, [[0.0, 1.0], [1.0, 0.0]])
    with pytest.raises(TypeError, match="cannot mix"):
        F.cross_entropy(logits, other.asarray([0, 1]))
    with pytest.raises(TypeError, match="cannot mix"):
        F.mse_loss(logits, _tensor(other, [[0.0, 1.0], [1.0, 0.0]]))


def test_sigmoid_keeps_its_tails(xp):
    # sigmoid(-40) = 1 / (1 + e^40) = 4.248354255291589e-18: the tanh form rounds it to 0.
    out = _np(F.sigmoid(_tensor(xp, [-40.0, 40.0, -800.0, 800.0])))
    assert out[0] == pytest.approx(1.0 / (1.0 + math.exp(40.0)), rel=4 * np.finfo(float).eps)
    assert out[1] == 1.0 - 1.0 / (1.0 + math.exp(40.0))
    assert out[2] == 0.0 and out[3] == 1.0  # e^-800 underflows: the limits, no overflow


def test_cross_entropy_on_more_dimensions_and_unbatched(xp):
    # (N, C, d) logits with (N, d) targets are N * d rows of (C,) logits, as in torch.
    rng = np.random.default_rng(4)
    x = rng.normal(size=(2, 3, 4))
    y = rng.integers(0, 3, size=(2, 4))
    y[0, 1] = -100
    rows = np.transpose(x, (0, 2, 1)).reshape(-1, 3)
    per_row = _np(F.cross_entropy(_tensor(xp, rows), xp.asarray(y.reshape(-1)), "none"))
    per_elem = _np(F.cross_entropy(_tensor(xp, x), xp.asarray(y), "none"))
    assert per_elem.shape == (2, 4)
    assert np.array_equal(per_elem.reshape(-1), per_row)
    mean = F.cross_entropy(_tensor(xp, x), xp.asarray(y))
    assert float(_np(mean)) == pytest.approx(per_row.sum() / 7, rel=1e-15)
    single = F.cross_entropy(_tensor(xp, [0.0, 0.0]), xp.asarray(1))
    assert single.shape == () and float(_np(single)) == pytest.approx(math.log(2.0), rel=1e-15)


@pytest.mark.parametrize("target", [
    [[2, -100], [0, 1]], [3, 0, 1], [-100, -100], [[5]], [[-100, 4, 7], [1, -100, -100]],
], ids=["ignored", "none_ignored", "all_ignored", "one", "rows"])
def test_label_counts_is_the_same_read_on_the_host_and_on_a_device(target):
    """``label_counts`` takes a NumPy shortcut (reading costs nothing there); the device path
    (array-api-strict) must give the same facts, and both the per-sample item counts."""
    import array_api_strict as xps

    host = np.array(target)
    labels, counts = F.label_counts(host, -100)
    device_labels, device_counts = F.label_counts(xps.asarray(host), -100)
    assert labels == device_labels
    assert counts.tolist() == device_counts.tolist() == \
        (host.reshape(host.shape[0], -1) != -100).sum(axis=1).tolist()
    kept = host[host != -100]
    assert (labels.low, labels.high) == ((int(kept.min()), int(kept.max())) if kept.size
                                         else (None, None))
    assert labels.ignored == bool((host == -100).any())
