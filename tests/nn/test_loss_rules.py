"""The losses at their edges: ``ignore_index`` equal to the smallest or the largest label
present (``_kept`` settles the usual batch by the labels' minimum and maximum, so these are
the batches where that shortcut must step aside), a mean over one item and over none, the
one-read ``label_counts`` at int64's ends, and what the loss modules default to.

The logits are rows whose cross-entropy is exact in float64: each row has one logit 1e4
above the others by at least 5e3, so its log-sum-exp is exactly 1e4 (exp(-5e3) underflows
to 0 in the sum), each loss is 1e4 - logit, a multiple of 5e3, and softmax is exactly the
one-hot of the largest logit. Every expected number below is therefore computed in Python
floats and compared with ``==``; torch gives the same bits on them.
"""

import math
from fractions import Fraction

import array_api_strict
import numpy as np
import pytest
import torch
from helpers import as_numpy as _np
from helpers import leaf
from host_reads import install

from minigrad import backend, nn
from minigrad.engine.tensor import Tensor
from minigrad.nn import functional as F

ROWS = [
    [1e4, -1e4, 0.0, 5e3, -5e3],
    [0.0, 1e4, 5e3, -1e4, -5e3],
    [-5e3, 5e3, 1e4, 0.0, -1e4],
    [5e3, 0.0, -1e4, 1e4, -5e3],
    [-1e4, -5e3, 5e3, 0.0, 1e4],
    [1e4, 5e3, -5e3, -1e4, 0.0],
]
C = 5


def expected(rows, target, reduction, ignore_index):
    """Loss and gradient of cross-entropy on ``ROWS``-like rows, from the formula."""
    losses = [0.0 if t == ignore_index else 1e4 - row[t] for row, t in zip(rows, target)]
    count = sum(t != ignore_index for t in target)
    scale = {"mean": 1.0 / count if count else 0.0, "sum": 1.0, "none": 1.0}[reduction]
    grad = []
    for row, t in zip(rows, target):
        g = [0.0] * len(row)
        if t != ignore_index:
            g[row.index(max(row))] += scale  # softmax: the one-hot of the largest logit
            g[t] -= scale
        grad.append(g)
    value = losses if reduction == "none" else sum(losses) if reduction == "sum" else \
        (sum(losses) / count if count else math.nan)
    return value, grad


def torch_cross_entropy(rows, target, reduction, ignore_index):
    logits = torch.tensor(rows, dtype=torch.float64, requires_grad=True)
    loss = torch.nn.functional.cross_entropy(logits, torch.tensor(target), reduction=reduction,
                                             ignore_index=ignore_index)
    (loss.sum() if reduction == "none" else loss).backward()
    value = loss.tolist()
    return value, logits.grad.tolist()


def same(got, want):
    """``(value, grad)`` pairs equal to the bit, NaN equal to NaN (an all-ignored mean)."""
    return all(np.array_equal(np.asarray(g), np.asarray(w), equal_nan=True)
               for g, w in zip(got, want))


def run(xp, rows, target, reduction, ignore_index, loss=None):
    logits = leaf(xp, rows)
    call = loss if loss is not None else (
        lambda lg, t, r: F.cross_entropy(lg, t, r, ignore_index=ignore_index))
    out = call(logits, xp.asarray(target), reduction)
    (out.sum() if reduction == "none" else out).backward()
    value = _np(out).tolist()
    return value, _np(logits.grad).tolist()


# The labels present are 1, 2 and 3 of C = 5: ignore_index at the low end (1), at the high
# end (3), at both when every label is the same, just past either end (0, 4: nothing
# ignored), outside [0, C) (-100, C) and inside the range without being present.
CASES = [
    ([1, 3, 2, 3, 1, 2], 1),
    ([1, 3, 2, 3, 1, 2], 3),
    ([2, 2, 2, 2, 2, 2], 2),
    ([1, 3, 2, 3, 1, 2], 0),
    ([1, 3, 2, 3, 1, 2], 4),
    ([1, 3, 2, 3, 1, 2], -100),
    ([1, 3, 5, 3, 1, 5], 5),
    ([1, 3, 3, 3, 1, 3], 2),
    ([0, 4, 0, 4, 0, 4], 0),
    ([0, 4, 0, 4, 0, 4], 4),
]


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("target, ignore_index", CASES,
                         ids=[f"{t}-ignore{i}" for t, i in CASES])
def test_ignore_index_at_the_ends_of_the_labels_present(xp, target, ignore_index, reduction):
    value, grad = expected(ROWS, target, reduction, ignore_index)
    assert same(run(xp, ROWS, target, reduction, ignore_index), (value, grad))
    if max(target) < C:  # torch refuses a label of C even where it is ignore_index's value
        assert same(torch_cross_entropy(ROWS, target, reduction, ignore_index), (value, grad))


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("target, ignore_index", CASES,
                         ids=[f"{t}-ignore{i}" for t, i in CASES])
def test_a_batch_read_once_settles_each_part_the_same(xp, target, ignore_index, reduction):
    """``CrossEntropyLoss.for_batch`` reads the whole batch's labels once and checks each
    part from that read (``_kept_by``); the parts' losses and gradients are the plain ones."""
    loss = nn.CrossEntropyLoss(ignore_index=ignore_index)
    read, counts = loss.for_batch(xp.asarray(target))
    assert counts.tolist() == [int(t != ignore_index) for t in target]
    for part in (slice(0, 2), slice(2, 3), slice(3, 6)):
        rows, labels = ROWS[part], target[part]
        assert same(run(xp, rows, labels, reduction, ignore_index, loss=read),
                    run(xp, rows, labels, reduction, ignore_index))


@pytest.mark.parametrize("target, ignore_index", [([1, 5, 2], 3), ([1, -1, 2], -100),
                                                  ([5, 5], 4), ([-1, 0], 0)])
def test_a_label_outside_the_classes_that_is_not_ignored_is_refused(xp, target, ignore_index):
    rows = ROWS[:len(target)]
    with pytest.raises(ValueError, match=rf"target labels must lie in \[0, 5\) or equal "
                                         rf"ignore_index={ignore_index}"):
        F.cross_entropy(leaf(xp, rows), xp.asarray(target), ignore_index=ignore_index)
    loss = nn.CrossEntropyLoss(ignore_index=ignore_index)
    read, _ = loss.for_batch(xp.asarray(target))
    with pytest.raises(ValueError, match=r"target labels must lie in \[0, 5\)"):
        read(leaf(xp, rows), xp.asarray(target))


def test_the_mean_over_one_item_is_that_item(xp):
    """One kept target: the mean is its loss and its gradient (softmax - one-hot) / 1."""
    value, grad = expected(ROWS[:3], [-100, 2, -100], "mean", -100)
    assert value == 5e3  # 1e4 - 5e3
    assert run(xp, ROWS[:3], [-100, 2, -100], "mean", -100) == (value, grad)
    x = leaf(xp, [[3.0]])
    loss = F.mse_loss(x, leaf(xp, [[1.0]], requires_grad=False))
    assert loss.item() == 4.0
    loss.backward()
    assert _np(x.grad).tolist() == [[4.0]]  # 2 (x - y) / 1


@pytest.mark.parametrize("shape", [(0,), (0, 3), (2, 0)])
def test_the_mean_squared_error_of_no_element_is_nan_as_torch(xp, shape):
    """torch: ``mse_loss`` of empty tensors is NaN for "mean", 0 for "sum"; the gradient is
    an empty array. The NaN is a constant, not 0 / 0: NumPy set to raise on an invalid
    operation raises nothing."""
    x = Tensor(xp.zeros(shape, dtype=xp.float64), requires_grad=True)
    y = xp.zeros(shape, dtype=xp.float64)
    with np.errstate(all="raise"):  # a NaN made without an invalid operation (no 0 / 0)
        mean = F.mse_loss(x, y)
    reference = torch.nn.functional.mse_loss(torch.zeros(shape, dtype=torch.float64),
                                             torch.zeros(shape, dtype=torch.float64))
    assert math.isnan(mean.item()) and math.isnan(reference.item())
    mean.backward()
    assert tuple(x.grad.shape) == shape
    assert F.mse_loss(x, y, "sum").item() == 0.0
    assert tuple(F.mse_loss(x, y, "none").shape) == shape


def test_the_loss_modules_default_to_the_mean_and_take_a_reduction_per_call(xp):
    x = leaf(xp, [[1.0, 2.0], [3.0, 4.0]])
    y = leaf(xp, [[0.0, 2.0], [5.0, 1.0]], requires_grad=False)
    mse = nn.MSELoss()
    assert mse.reduction == "mean"
    assert mse(x, y).item() == 3.5  # (1 + 0 + 4 + 9) / 4
    assert mse(x, y, reduction="sum").item() == 14.0
    assert _np(mse(x, y, reduction="none")).tolist() == [[1.0, 0.0], [4.0, 9.0]]
    assert nn.MSELoss(reduction="sum")(x, y, reduction="mean").item() == 3.5
    assert mse.num_items(y) == mse.num_items(y.data) == 4
    ce = nn.CrossEntropyLoss()
    assert (ce.reduction, ce.ignore_index) == ("mean", -100)
    value, _ = expected(ROWS[:3], [0, -100, 2], "mean", -100)
    assert ce(leaf(xp, ROWS[:3]), xp.asarray([0, -100, 2])).item() == value
    assert ce(leaf(xp, ROWS[:3]), xp.asarray([0, -100, 2]), reduction="sum").item() == 0.0
    assert ce.num_items(Tensor(xp.asarray([0, -100, 2]))) == 2


@pytest.mark.parametrize("make", [
    lambda: nn.CrossEntropyLoss(ignore_index=1.5),
    lambda: nn.CrossEntropyLoss(ignore_index="-100"),
    lambda: F.label_counts(np.array([1, 2]), ignore_index=1.5),
    lambda: F.cross_entropy(np.zeros((1, 2)), np.array([0]), ignore_index=True),
], ids=["module-float", "module-str", "label_counts", "functional-bool"])
def test_a_bad_ignore_index_is_refused_by_name(make):
    with pytest.raises(TypeError, match="ignore_index must be an integer, got"):
        make()


def test_a_loss_of_non_floating_input_names_the_loss(xp):
    with pytest.raises(TypeError, match="mse_loss needs floating-point input, got dtype"):
        F.mse_loss(xp.asarray([1, 2]), xp.asarray([1.0, 2.0]))
    with pytest.raises(TypeError, match="mse_loss needs floating-point input"):
        nn.MSELoss()(xp.asarray([[1]]), xp.asarray([[1.0]]))


# ----- label_counts: one read, on the host (NumPy) and on a device (the other namespaces) ---
BIG = 2**63 - 1


@pytest.mark.parametrize("target, ignore_index, labels", [
    ([[200, -100], [130, 126]], -100, (126, 200, True)),    # labels far above 0
    ([[BIG, -100]], -100, (BIG, BIG, True)),                # int64's largest label
    ([[-200, -100, -150]], -100, (-200, -150, True)),        # far below: reported, refused later
    ([[-2**63, 5]], 5, (-2**63, -2**63, True)),             # int64's smallest
    ([0, -100, 1], -100, (0, 1, True)),                     # one target per sample
    ([[0], [-100], [1]], -100, (0, 1, True)),
    ([[3, 1, 2]], -100, (1, 3, False)),
    ([[-100, -100], [-100, -100]], -100, (None, None, True)),
    ([[7, 7, 7]], 7, (None, None, True)),
])
def test_label_counts_reads_the_kept_labels_range_at_any_values(xp, target, ignore_index,
                                                               labels):
    array = xp.asarray(np.array(target, dtype=np.int64))
    read, counts = F.label_counts(array, ignore_index)
    assert (read.low, read.high, read.ignored) == labels
    host = np.array(target, dtype=np.int64).reshape(len(target), -1)
    assert counts.tolist() == (host != ignore_index).sum(axis=1).tolist()
    again, counts_again = F.label_counts(Tensor(array), ignore_index)  # a Tensor's data
    assert again == read and counts_again.tolist() == counts.tolist()


@pytest.mark.parametrize("target", [np.array([0.0, 1.0]), np.array(3), np.array(True)],
                         ids=["float", "0-d", "bool-0-d"])
def test_label_counts_wants_integer_labels_with_a_sample_axis(xp, target):
    with pytest.raises(TypeError, match="target must be an integer array with a sample axis"):
        F.label_counts(xp.asarray(target))


# ----- a batch read once: what each part reads, what a loss of one's own gets -------------------
@pytest.fixture(params=["array_api_strict", "torch"])
def device_reads(request, monkeypatch):
    """A namespace standing for a device, and a counter of every read from it to the host
    (``tests/host_reads.py``; it counts only inside ``reads.counting()``)."""
    xp = backend.resolve_namespace(request.param)
    return xp, install(monkeypatch, xp)


@pytest.mark.parametrize("target, ignore_index", [([1, 3, 2, 3, 1, 2], 1),
                                                  ([1, 3, 2, 3, 1, 2], 3),
                                                  ([1, 3, 2, 3, 1, 2], -100)],
                         ids=["ignore-low", "ignore-high", "none-ignored"])
def test_the_parts_of_a_batch_read_once_read_nothing_more(device_reads, target, ignore_index):
    """On a device each read waits for the GPU: ``for_batch`` reads the batch's labels once,
    and then a part's loss reads nothing to check its labels; only a mean over a part with
    ignored targets reads its item count (``host_reads`` counts every door to the host)."""
    xp, reads = device_reads
    loss = nn.CrossEntropyLoss(ignore_index=ignore_index)
    batch = xp.asarray(target)
    parts = [(leaf(xp, ROWS[p]), xp.asarray(target[p])) for p in (slice(0, 2), slice(2, 6))]
    with reads.counting():
        read, counts = loss.for_batch(batch)
    assert len(reads) == 1, reads.summary()
    assert read.labels.ignored == (ignore_index in target)
    for logits, labels in parts:
        for reduction in ("sum", "none", "mean"):
            with reads.counting():
                read(logits, labels, reduction)
            counted = reduction == "mean" and ignore_index in target
            assert len(reads) == counted, (reduction, reads.summary())


class OwnForward(nn.CrossEntropyLoss):
    def forward(self, logits, target, reduction=None):
        return super().forward(logits, target, reduction) * 2.0


class OwnCount(nn.CrossEntropyLoss):
    def num_items(self, target):
        return 2 * super().num_items(target)


class OwnSquares(nn.MSELoss):
    def num_items(self, target):
        return 1


@pytest.mark.parametrize("cls", [OwnForward, OwnCount, OwnSquares])
def test_a_loss_of_ones_own_is_used_as_it_is_for_a_batch(xp, cls):
    """A subclass with its own forward or its own count is not replaced by the one-read
    view: ``for_batch`` gives it back unchanged, with no counts (they are then asked per
    part, through its own ``num_items``)."""
    loss = cls()
    assert loss.for_batch(xp.asarray([0, 1, 2])) == (loss, None)


def test_the_view_of_a_batch_read_once_is_the_loss_it_came_from(xp):
    loss = nn.CrossEntropyLoss(reduction="sum", ignore_index=3)
    read, _ = loss.for_batch(xp.asarray([1, 3, 2]))
    assert (read.reduction, read.ignore_index, read.loss) == ("sum", 3, loss)
    assert read.num_items(xp.asarray([1, 3, 2, 3])) == 2
    value, _ = expected(ROWS[:3], [1, 3, 2], "sum", 3)
    assert read(leaf(xp, ROWS[:3]), xp.asarray([1, 3, 2])).item() == value


@pytest.mark.parametrize("shape", [(3,), (3, 4), (2, 2, 5), (0, 4), (0,)])
def test_the_squared_error_counts_every_element_of_a_sample(xp, shape):
    target = xp.zeros(shape, dtype=xp.float64)
    per_sample = math.prod(shape[1:])
    for t in (target, Tensor(target)):
        loss, counts = nn.MSELoss().for_batch(t)
        assert type(loss) is nn.MSELoss
        assert counts == [per_sample] * shape[0]
        assert all(type(c) is int for c in counts)


# ----- cross_entropy's inputs -------------------------------------------------------------------
@pytest.mark.parametrize("call", [
    lambda: F.cross_entropy(np.zeros((1, 2)), np.array([0]), "avg"),
    lambda: F.mse_loss(np.zeros(2), np.zeros(2), "avg"),
    lambda: nn.CrossEntropyLoss(reduction="avg"),
])
def test_an_unknown_reduction_is_refused_by_its_name(call):
    with pytest.raises(ValueError, match=r"^reduction must be one of 'mean', 'sum', 'none', "
                                         r"got 'avg'$"):
        call()


def test_cross_entropy_names_itself_for_non_floating_and_exact_logits(xp):
    with pytest.raises(TypeError, match="^cross_entropy needs floating-point input, got"):
        F.cross_entropy(xp.asarray([[1, 2]]), xp.asarray([0]))
    exact = Tensor(np.array([[Fraction(1), Fraction(2)]], dtype=object))
    with pytest.raises(TypeError, match="^cross_entropy needs exp and log, which are not exact"):
        F.cross_entropy(exact, np.array([0]))


def test_a_target_given_as_a_tensor_or_a_list_is_the_array_it_holds(xp):
    value, grad = expected(ROWS[:3], [0, 4, 2], "mean", -100)
    for target in (xp.asarray([0, 4, 2]), Tensor(xp.asarray([0, 4, 2])), [0, 4, 2]):
        logits = leaf(xp, ROWS[:3])
        loss = F.cross_entropy(logits, target)
        loss.backward()
        assert (loss.item(), _np(logits.grad).tolist()) == (value, grad)


def test_a_list_target_goes_to_the_logits_device():
    device = array_api_strict.Device("device1")
    logits = Tensor(array_api_strict.asarray(ROWS[:3], device=device), requires_grad=True)
    loss = F.cross_entropy(logits, [0, 4, 2])
    assert loss.data.device == device
    assert loss.item() == expected(ROWS[:3], [0, 4, 2], "mean", -100)[0]


@pytest.mark.parametrize("shape", [(3, 0), (3, 0, 2), (0,)])
def test_logits_without_a_class_are_refused(xp, shape):
    target = xp.zeros(shape[:1] + shape[2:], dtype=xp.int64) if len(shape) > 1 else \
        xp.asarray(0)
    with pytest.raises(ValueError, match=r"have no class \(C = 0\)"):
        F.cross_entropy(Tensor(xp.zeros(shape, dtype=xp.float64)), target)


@pytest.mark.parametrize("shape", [(0, 3), (0, 3, 2), (2, 3, 0)])
def test_a_batch_of_no_item_is_torchs_nan_mean_and_zero_sum(xp, shape):
    """Logits with classes but no item: torch gives NaN for the mean, 0 for the sum."""
    target_shape = shape[:1] + shape[2:]
    logits = Tensor(xp.zeros(shape, dtype=xp.float64), requires_grad=True)
    target = xp.zeros(target_shape, dtype=xp.int64)
    reference = torch.nn.functional.cross_entropy(torch.zeros(shape, dtype=torch.float64),
                                                  torch.zeros(target_shape, dtype=torch.long))
    mean = F.cross_entropy(logits, target)
    assert math.isnan(mean.item()) and math.isnan(reference.item())
    mean.backward()
    assert tuple(logits.grad.shape) == shape
    assert F.cross_entropy(logits, target, "sum").item() == 0.0
    assert tuple(F.cross_entropy(logits, target, "none").shape) == target_shape


@pytest.mark.parametrize("target", [[0, 3, 4, 1], [1, 3, 4, 2], [0, 0, 0, 0]])
def test_a_batch_with_nothing_ignored_is_settled_by_one_read(device_reads, target):
    """The usual batch (labels in [0, C), none equal to ignore_index), label 0 included: one
    read of its smallest and largest label, and no mask (a mask would read again, to check
    the kept labels and to count them)."""
    xp, reads = device_reads
    logits, labels = leaf(xp, ROWS[:4]), xp.asarray(target)
    for reduction in ("mean", "sum", "none"):
        with reads.counting():
            F.cross_entropy(logits, labels, reduction)
        assert len(reads) == 1, (reduction, reads.summary())
