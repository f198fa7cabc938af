"""Everything stays in the parameters' namespace and on their device.

PyTorch tensors (the CPU stand-in for CuPy) silently accept some mixes with NumPy
(``tensor + ndarray`` is a tensor), so a NumPy array routed through the engine would not
always raise. These tests train with every feature and then look at every array the run
holds: parameters, ``.grad``, BatchNorm buffers, optimizer moments, the accumulator's pending
sums, checkpoints loaded back, and the analysis results. On array-api-strict the model lives
on its second device (``Device("device1")``), so an array created without ``device=`` fails.
"""

import re

import numpy as np
import pytest

from minigrad import backend, checkpoint, nn, optim
from minigrad.accumulate import Accumulator, accumulated_gradients, step
from minigrad.engine.tensor import Tensor


@pytest.fixture
def place(xp):
    """``(xp, device)``: a non-default device where the namespace has one (array-api-strict)."""
    if backend.namespace_name(xp) == "array_api_strict":
        return xp, xp.Device("device1")
    return xp, backend.device(xp.zeros(1))


def arrays_of(model, opt=None, acc=None):
    """Every array a training run holds, by a name saying where it was found."""
    found = {f"param {k}": p.data for k, p in model.named_parameters()}
    found |= {f"grad {k}": p.grad for k, p in model.named_parameters() if p.grad is not None}
    found |= {f"buffer {k}": b for k, b in model.named_buffers()}
    if opt is not None:
        state = opt.state_dict()
        for field, values in state.items():
            if isinstance(values, list):
                found |= {f"optimizer {field}[{i}]": v for i, v in enumerate(values)
                          if backend.is_array(v)}
    if acc is not None:
        found |= {f"accumulator {k}": v for k, v in acc.state_dict().items()
                  if backend.is_array(v)}
    return found


def assert_placed(found, xp, device):
    assert found
    for where, array in found.items():
        assert backend.is_array(array), f"{where} is a {type(array).__name__}, not an array"
        assert backend.get_namespace(array) is xp, f"{where} left {backend.namespace_name(xp)}"
        assert backend.device(array) == device, f"{where} is on {backend.device(array)}"


def data(xp, device, n=12, features=3, classes=4, seed=0):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, classes, size=n)
    y[::5] = -100
    return (xp.asarray(rng.normal(size=(n, features)), device=device),
            xp.asarray(y, device=device))


@pytest.mark.parametrize("norm, strategy", [("batch", "micro"), ("batch", "exact_batchnorm"),
                                            ("group", "micro"), ("layer", "micro")])
@pytest.mark.parametrize("kind", ["sgd", "adamw"])
def test_training_keeps_every_array_in_place(place, norm, strategy, kind):
    xp, device = place
    model = nn.MLP([3, 8, 8, 4], norm=norm, dropout=0.2, xp=xp, device=device)
    if kind == "sgd":
        opt = optim.SGD(model.parameters(), lr=0.1, momentum=0.9, nesterov=True,
                        weight_decay=0.01)
    else:
        opt = optim.AdamW(model.parameters(), lr=0.01)
    scheduler = optim.Scheduler(opt, optim.cosine(0.1, 4))
    x, y = data(xp, device)
    for _ in range(2):
        loss = step(model, nn.CrossEntropyLoss(), opt, x, y, sizes=[5, 3, 4],
                    max_grad_norm=0.5, scheduler=scheduler, strategy=strategy)
        assert isinstance(loss, float) and np.isfinite(loss)
    assert_placed(arrays_of(model, opt), xp, device)
    model.eval()
    out = model(Tensor(x))
    assert_placed({"eval output": out.data}, xp, device)


def test_streaming_accumulator_and_ghost_batchnorm_keep_arrays_in_place(place):
    xp, device = place
    model = nn.MLP([3, 6, 4], norm="batch", xp=xp, device=device)
    setattr(model, "1", nn.GhostBatchNorm1d(6, ghost_batch_size=4, xp=xp, device=device))
    opt = optim.Adam(model.parameters(), lr=0.01)
    acc = Accumulator(model, nn.CrossEntropyLoss(), opt, every=3, max_grad_norm=1.0)
    x, y = data(xp, device, n=8)
    for _ in range(4):
        acc.add(x, y)
    assert acc.pending_num_micro_batches == 1
    assert_placed(arrays_of(model, opt, acc), xp, device)
    grads = accumulated_gradients(model, nn.CrossEntropyLoss(), x, y, sizes=[2, 6])
    assert_placed({f"accumulated {k}": g for k, g in grads.items()}, xp, device)


def test_checkpoints_load_onto_the_models_device(place, tmp_path):
    xp, device = place
    numpy = backend.resolve_namespace("numpy")
    source = nn.MLP([3, 5, 4], norm="batch", xp=numpy)
    opt = optim.Adam(source.parameters(), lr=0.01)
    x, y = data(numpy, None)
    step(source, nn.CrossEntropyLoss(), opt, x, y)
    checkpoint.save(tmp_path / "run.npz", source, opt)

    model = nn.MLP([3, 5, 4], norm="batch", xp=xp, device=device)
    opt2 = optim.Adam(model.parameters(), lr=0.01)
    checkpoint.load(tmp_path / "run.npz", model, opt2)
    assert_placed(arrays_of(model, opt2), xp, device)
    for (name, a), b in zip(source.state_dict().items(), model.state_dict().values()):
        assert np.array_equal(backend.to_numpy(a), backend.to_numpy(b)), name
    x2, y2 = data(xp, device)
    step(model, nn.CrossEntropyLoss(), opt2, x2, y2, sizes=[6, 6])
    assert_placed(arrays_of(model, opt2), xp, device)


def test_like_is_the_one_way_a_saved_array_is_loaded_into_place(place):
    xp, device = place
    target = xp.zeros((2, 3), dtype=xp.float32, device=device)
    saved = np.arange(6.0).reshape(2, 3)  # a checkpoint's NumPy float64
    value = backend.like(saved, target, "saved")
    assert_placed({"like": value}, xp, device)
    assert value.dtype == xp.float32 and np.array_equal(backend.to_numpy(value), saved)
    assert backend.like(target, target, "saved") is not target  # always a copy
    # The model's, the optimizer's and the accumulator's state are loaded by it: the same
    # message for a wrong shape from each.
    model = nn.MLP([3, 2], xp=xp, device=device)
    opt = optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    acc = Accumulator(model, nn.CrossEntropyLoss(), opt)
    acc.add(*data(xp, device, n=4, classes=2))
    opt.step()
    wrong = np.zeros((3, 3))
    loads = {"state_dict['0.weight']": lambda: model.load_state_dict(
                 {**model.state_dict(), "0.weight": wrong}),
             "state_dict['mu'][0]": lambda: opt.load_state_dict(
                 {**opt.state_dict(), "mu": [wrong, opt.state_dict()["mu"][1]]}),
             "accumulator gradient 0": lambda: acc.load_state_dict(
                 {**acc.state_dict(), "grads": [wrong, acc.state_dict()["grads"][1]]})}
    for name, load in loads.items():
        with pytest.raises(ValueError, match=rf"^{re.escape(name)} has shape \(3, 3\), "
                                             rf"expected \(2, 3\)$"):
            load()
    with pytest.raises(TypeError, match="^saved: Tensor data must be numbers"):
        backend.like("x", target, "saved")


def test_functional_results_stay_in_place(place):
    xp, device = place
    x = Tensor(xp.asarray(np.linspace(-2, 2, 12).reshape(4, 3), device=device),
               requires_grad=True)
    target = xp.asarray([0, 2, -100, 1], device=device)
    outputs = {
        "cross_entropy": nn.functional.cross_entropy(x, target),
        "mse": nn.functional.mse_loss(x, Tensor(xp.zeros((4, 3), dtype=xp.float64,
                                                         device=device))),
        "dropout": nn.functional.dropout(x, 0.5).sum(),
        "sigmoid": nn.functional.sigmoid(x).sum(),
        "gelu": nn.functional.gelu(x).sum(),
        "softmax": nn.functional.softmax(x).sum(),
    }
    for name, out in outputs.items():
        x.grad = None
        out.backward()
        assert_placed({f"{name} value": out.data, f"{name} grad": x.grad}, xp, device)
        assert x.grad.dtype == xp.float64


def test_scalars_and_lists_take_the_tensors_dtype_and_device(place):
    xp, device = place
    t = Tensor(xp.asarray([1.0, 2.0], dtype=xp.float32, device=device), requires_grad=True)
    for out in (t + 1, 2.0 * t, t - 0.5, 1.0 / t, t**2, t * [1.0, 3.0]):
        assert_placed({"result": out.data}, xp, device)
        assert out.dtype == xp.float32
