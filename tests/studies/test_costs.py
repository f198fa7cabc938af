"""What an update costs (minigrad.studies.memory.costs): the gradients' bytes do not depend on the
batch size while the peak does; the timer times every split it is given; the machine line.

Slack. After a backward pass the gradients stay allocated, and with them their Python
objects: the ndarray headers and what the model keeps (a few KiB, 8 KiB measured for the MLP
below); ``minigrad.analysis.memory.PYTHON_OBJECTS`` bounds the objects of a whole step.
"""

import numpy as np
import pytest

from minigrad import nn, optim
from minigrad.analysis.memory import PYTHON_OBJECTS
from minigrad.studies.memory.costs import gradient_memory, machine, seconds_per_update

SIZES = [16, 64, 64, 4]
P = 8 * (16 * 64 + 64 + 64 * 64 + 64 + 64 * 4 + 4)  # float64 parameters, so gradients


def _make():
    return nn.MLP(SIZES, seed=0)


def _data(n, seed=0):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, SIZES[0])), rng.integers(0, SIZES[-1], size=n)


def test_gradients_take_the_parameters_bytes_for_every_batch_size():
    results = {n: gradient_memory(_make, nn.CrossEntropyLoss(), *_data(n)) for n in
               (1, 8, 64, 512)}
    for n, r in results.items():
        assert r["gradients"] == P, n
        assert P <= r["held"] <= P + PYTHON_OBJECTS, (n, r)
    peaks = [r["peak"] for r in results.values()]
    assert peaks == sorted(peaks)
    # each sample more keeps, at least, z = x W^T + b and relu(z) of both hidden layers for
    # the backward pass: 2 layers x 2 arrays x 64 values x 8 bytes
    assert peaks[-1] - peaks[0] >= 511 * 2 * 2 * 64 * 8


def test_gradient_memory_is_numpy_only():
    torch = pytest.importorskip("torch")
    x, y = _data(4)
    with pytest.raises(NotImplementedError,
                       match="uses tracemalloc, which sees NumPy.s buffers only; got a torch"):
        gradient_memory(lambda: nn.MLP(SIZES, xp=torch), nn.CrossEntropyLoss(),
                        torch.asarray(x), torch.asarray(y))


def test_seconds_per_update_times_each_split():
    x, y = _data(32)
    splits = {"full batch": {}, "k = 4": {"num_micro_batches": 4},
              "m = 8": {"micro_batch_size": 8}}
    seconds = seconds_per_update(_make, lambda ps: optim.SGD(ps, lr=0.1),
                                 nn.CrossEntropyLoss(), x, y, splits, rounds=2)
    assert list(seconds) == list(splits)
    assert all(isinstance(s, float) and 0 < s < 60 for s in seconds.values())


def test_seconds_per_update_trains_its_own_models():
    """One warm-up and ``rounds`` timed updates per split, on models of its own."""
    built = []

    def make():
        built.append(_make())
        return built[-1]

    optimizers = []

    def sgd(params):
        optimizers.append(optim.SGD(params, lr=0.1))
        return optimizers[-1]

    x, y = _data(16)
    seconds_per_update(make, sgd, nn.CrossEntropyLoss(), x, y, {"a": {}, "b": {}}, rounds=3)
    assert len(built) == 2 and built[0] is not built[1]
    assert [opt.step_count for opt in optimizers] == [4, 4]


@pytest.mark.parametrize("rounds, splits, error, match", [
    (0, {"a": {}}, ValueError, "rounds"),
    (True, {"a": {}}, TypeError, "rounds"),
    (1, {}, ValueError, "at least one split"),
])
def test_seconds_per_update_refuses_bad_arguments(rounds, splits, error, match):
    x, y = _data(8)
    with pytest.raises(error, match=match):
        seconds_per_update(_make, lambda ps: optim.SGD(ps, lr=0.1), nn.CrossEntropyLoss(), x,
                           y, splits, rounds=rounds)


def test_machine_names_the_cpus_python_and_numpy():
    line = machine()
    assert "logical CPUs" in line and f"NumPy {np.__version__}" in line and "Python" in line
