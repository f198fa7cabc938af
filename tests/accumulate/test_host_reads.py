"""At most 2 device-to-host reads per update, however many micro-batches it holds.

A read (a device array converted to a Python number or a NumPy array) makes a GPU finish
its queue and copy; one per micro-batch stalls the pipeline every micro-batch. The labels
are checked once per batch, finiteness is decided once per window from a flag kept on the
device, and the item count is read once. ``host_reads`` counts the reads of ONE update on
array-api-strict (on its second device, standing for a GPU) and on PyTorch CPU tensors,
for ``step``, ``accumulated_gradients`` and MPI's ``distributed.step`` (one rank, a
communicator without MPI); a failing test lists every read by the line that made it.

Each model makes one update before the counted one (Adam's moments are created on the
first), so the count is that of an update in the middle of training.
"""

import pickle

import numpy as np
import pytest
from helpers import OneRank
from host_reads import install

from minigrad import backend, nn, optim
from minigrad.accumulate import accumulated_gradients, distributed, step
from minigrad.engine.tensor import Tensor

LIMIT = 2
N, MICRO, FEATURES, CLASSES = 32, 4, 5, 3  # 8 micro-batches of 4


@pytest.fixture(params=["array_api_strict", "torch"])
def place(request):
    """``(xp, device)``: array-api-strict's second device (a NumPy conversion there is an
    error, as for a GPU array), or PyTorch CPU tensors through array-api-compat."""
    if request.param == "torch":
        pytest.importorskip("torch", reason="PyTorch is not installed")
    xp = backend.resolve_namespace(request.param)
    if request.param == "array_api_strict":
        return xp, xp.Device("device1")
    return xp, backend.device(xp.zeros(1))


@pytest.fixture
def reads(place, monkeypatch):
    return install(monkeypatch, place[0])


def batch(xp, device, loss, ignored):
    """``(x, y)`` of N samples for ``loss``: labels (every third one ``ignore_index`` when
    ``ignored``) or regression targets."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(N, FEATURES))
    if loss == "mse":
        y = rng.normal(size=(N, CLASSES))
    else:
        y = rng.integers(0, CLASSES, size=N)
        if ignored:
            y[::3] = -100
    return xp.asarray(x, device=device), xp.asarray(y, device=device)


def trained(xp, device, clip=False, dtype="float64"):
    """An MLP, its Adam and the options of ``step`` (clipping and a schedule with ``clip``)."""
    model = nn.MLP([FEATURES, 16, 16, CLASSES], activation="tanh", seed=0, xp=xp,
                   device=device, dtype=dtype)
    opt = optim.Adam(model.parameters(), lr=0.01)
    options = {"micro_batch_size": MICRO}
    if clip:
        options |= {"max_grad_norm": 1.0, "scheduler": optim.Scheduler(opt, optim.cosine(0.01, 10))}
    return model, opt, options


LOSSES = {"mse": nn.MSELoss, "cross_entropy": nn.CrossEntropyLoss}


@pytest.mark.parametrize("loss, ignored, clip", [
    ("cross_entropy", True, False), ("cross_entropy", False, False), ("mse", False, False),
    ("cross_entropy", True, True),
], ids=["cross_entropy_ignore_index", "cross_entropy", "mse", "clip_and_schedule"])
def test_step_reads_the_device_at_most_twice(place, reads, loss, ignored, clip):
    xp, device = place
    x, y = batch(xp, device, loss, ignored)
    model, opt, options = trained(xp, device, clip)
    step(model, LOSSES[loss](), opt, x, y, **options)  # warm-up: Adam's moments are created
    with reads.counting():
        step(model, LOSSES[loss](), opt, x, y, **options)
    assert opt.step_count == 2
    assert len(reads) <= LIMIT, reads.report(LIMIT)


@pytest.mark.parametrize("loss, ignored", [("cross_entropy", True), ("mse", False)],
                         ids=["cross_entropy_ignore_index", "mse"])
def test_accumulated_gradients_reads_the_device_at_most_twice(place, reads, loss, ignored):
    xp, device = place
    x, y = batch(xp, device, loss, ignored)
    model, _, _ = trained(xp, device)
    accumulated_gradients(model, LOSSES[loss](), x, y, micro_batch_size=MICRO)
    with reads.counting():
        grads = accumulated_gradients(model, LOSSES[loss](), x, y, micro_batch_size=MICRO)
    assert len(grads) == len(model.parameters())
    assert len(reads) <= LIMIT, reads.report(LIMIT)


def test_a_float32_step_reads_the_device_at_most_twice(place, reads):
    xp, device = place
    x, y = batch(xp, device, "cross_entropy", ignored=True)
    model, opt, options = trained(xp, device, clip=True, dtype="float32")
    x = xp.astype(x, xp.float32)
    step(model, nn.CrossEntropyLoss(), opt, x, y, **options)
    with reads.counting():
        step(model, nn.CrossEntropyLoss(), opt, x, y, **options)
    assert len(reads) <= LIMIT, reads.report(LIMIT)


@pytest.mark.parametrize("dtype, limit", [("float64", LIMIT), ("float32", LIMIT + 1)])
def test_mpi_step_reads_the_device_at_most_twice_on_a_rank(place, reads, dtype, limit):
    """One rank's reads: the labels of its shard, and the gradient and loss sums packed into
    the host buffer of the Allreduce, ONE conversion per dtype. A float32 model has two
    dtypes there (float32 gradients, the float64 loss sum: a float32 sum would round the
    reported loss differently), so it reads three times in all."""
    xp, device = place
    x, y = batch(xp, device, "cross_entropy", ignored=True)
    model, opt, options = trained(xp, device, clip=True, dtype=dtype)
    x = xp.astype(x, getattr(xp, dtype))
    distributed.step(model, nn.CrossEntropyLoss(), opt, x, y, comm=OneRank(), **options)
    with reads.counting():
        distributed.step(model, nn.CrossEntropyLoss(), opt, x, y, comm=OneRank(), **options)
    assert opt.step_count == 2
    assert len(reads) <= limit, reads.report(limit)


# ----- the counter itself: it sees every door, once per conversion ------------------------------
CONVERSIONS = {
    "float": (lambda xp, a: float(a[0]), 1),
    "bool": (lambda xp, a: bool(xp.all(a > 0)), 1),
    "int": (lambda xp, a: int(xp.sum(xp.astype(a > 0, xp.int64))), 1),
    "index": (lambda xp, a: [0, 1, 2][xp.astype(a[0] > 0, xp.int64)], 1),
    "format": (lambda xp, a: f"{a[0]}", 1),
    "repr": (lambda xp, a: repr(a), 1),
    "pickle": (lambda xp, a: pickle.dumps(a), 1),
    "Tensor.item": (lambda xp, a: Tensor(a[0]).item(), 1),
    "to_numpy": (lambda xp, a: backend.to_numpy(a), 1),
    "int_range": (lambda xp, a: backend.int_range(xp, xp.astype(a, xp.int64)), 1),
    "two": (lambda xp, a: (float(a[0]), float(a[1])), 2),
    "on the device": (lambda xp, a: xp.sum(a * a), 0),
    "a NumPy array": (lambda xp, a: (backend.to_numpy(np.ones(2)), float(np.ones(1)[0])), 0),
}


@pytest.mark.parametrize("name", list(CONVERSIONS))
def test_the_counter_counts_each_conversion_once(place, reads, name):
    xp, device = place
    convert, expected = CONVERSIONS[name]
    a = xp.asarray([1.5, 2.5, 3.5], device=device)
    with reads.counting():
        convert(xp, a)
    assert len(reads) == expected, f"{len(reads)} reads, not {expected}:\n{reads.summary()}"
    for r in reads.reads:  # the line that asked: this test's, or minigrad's helper
        assert "test_host_reads.py" in str(r) or "minigrad/engine/" in str(r), reads.summary()


def test_the_streaming_update_reads_the_device_once(place, reads):
    """``Accumulator.add`` returns each micro-batch's loss (a read each, by its contract);
    ``update()`` then decides the window's finiteness with one read, not one per parameter."""
    from minigrad.accumulate import Accumulator

    xp, device = place
    x, y = batch(xp, device, "cross_entropy", ignored=False)
    model, opt, _ = trained(xp, device)
    acc = Accumulator(model, nn.CrossEntropyLoss(), opt)
    for start in range(0, N, MICRO):
        acc.add(x[start:start + MICRO, ...], y[start:start + MICRO, ...])
    with reads.counting():
        acc.update()
    assert opt.step_count == 1
    assert len(reads) <= 1, reads.report(1)
