"""Measured memory: ``peak_bytes`` against sizes computed by hand, ``update_memory``'s
breakdown against parameter counts, and ``theoretical_peak`` against the measurement.

Slack. ``peak_bytes`` counts every traced allocation, so beside an array's buffer it sees
the ndarray object (about 100 bytes with its shape and strides) and the transient Python
objects of the call (a few hundred bytes; 304 measured for ``np.ones(1000)``): 1 KiB of
slack covers them. The theory counts only arrays alive at one moment, so it is a lower
bound; what it neglects (Python objects, about 20 KiB per step) must stay under 15% of the
peak for these models, whose arrays weigh 0.2 to 12 MiB.
"""

import tracemalloc

import numpy as np
import pytest

from minigrad import backend, nn, optim
from minigrad.analysis.memory import (
    PYTHON_OBJECTS,
    peak_bytes,
    theoretical_peak,
    update_memory,
)

SLACK = 1024  # bytes: the array object and the call's transient objects (module docstring)


def test_peak_of_one_array_is_its_buffer():
    result, peak = peak_bytes(np.ones, 1000)
    assert result.shape == (1000,)
    assert 8000 <= peak < 8000 + SLACK


def test_peak_counts_a_temporary_that_is_gone_by_the_end():
    def two_arrays():
        temporary = np.ones(2000)  # 16000 bytes, alive beside the result
        result = np.zeros(1000)  # 8000 bytes
        del temporary
        return result

    _, peak = peak_bytes(two_arrays)
    assert 24000 <= peak < 24000 + SLACK


def test_memory_allocated_before_the_call_is_not_counted():
    big = np.ones(10**5)  # 800 kB, before the call
    last, peak = peak_bytes(lambda a: float(a[-1]), big)
    assert last == 1.0 and peak < SLACK


def test_tracing_is_left_as_it_was_found():
    assert not tracemalloc.is_tracing()
    peak_bytes(np.ones, 10)
    assert not tracemalloc.is_tracing()
    tracemalloc.start()
    try:
        peak_bytes(np.ones, 10)
        assert tracemalloc.is_tracing()
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("name", ["array_api_strict", "torch"])
def test_other_namespaces_are_refused(name):
    pytest.importorskip(name)
    xp = backend.resolve_namespace(name)
    with pytest.raises(NotImplementedError, match=f"NumPy arrays .* or CuPy arrays .*{name}"):
        peak_bytes(lambda a: a, xp.asarray([1.0]))
    model = nn.MLP([3, 4, 2], xp=xp)
    x, y = xp.asarray(np.zeros((4, 3))), xp.asarray(np.zeros(4, dtype=np.int64))
    with pytest.raises(NotImplementedError, match=f"one of them at a time; got .*{name}"):
        update_memory(model, nn.CrossEntropyLoss(), optim.SGD(model.parameters(), lr=0.1),
                      x, y)


# ----- update_memory -----------------------------------------------------------------------------
def _batch(sizes, n, dtype="float64", seed=0):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, sizes[0])).astype(dtype), rng.integers(0, sizes[-1], n)


@pytest.mark.parametrize("dtype, itemsize", [("float64", 8), ("float32", 4)])
@pytest.mark.parametrize("make, moments", [
    (lambda ps: optim.SGD(ps, lr=0.1), 0),
    (lambda ps: optim.SGD(ps, lr=0.1, momentum=0.9), 1),
    (lambda ps: optim.Adam(ps), 2),
])
def test_breakdown_by_hand(dtype, itemsize, make, moments):
    """MLP(3, 4, 2): 3*4 + 4 + 4*2 + 2 = 26 values; momentum keeps one buffer, Adam two."""
    model = nn.MLP([3, 4, 2], seed=0, dtype=dtype)
    x, y = _batch([3, 4, 2], 6, dtype)
    report = update_memory(model, nn.CrossEntropyLoss(), make(model.parameters()), x, y,
                           micro_batch_size=4)
    assert report["parameters"] == report["gradients"] == 26 * itemsize
    assert report["optimizer_state"] == moments * 26 * itemsize
    assert report["activations"] == max(0, report["peak"] - (2 + moments) * 26 * itemsize)
    assert report["peak"] >= report["theory"] > 0


def test_the_callers_model_and_optimizer_are_untouched():
    model = nn.MLP([3, 4, 2], seed=0)
    opt = optim.Adam(model.parameters())
    data, state = [p.data for p in model.parameters()], opt.state
    update_memory(model, nn.CrossEntropyLoss(), opt, *_batch([3, 4, 2], 6))
    assert [p.data for p in model.parameters()] == data  # the very same arrays
    assert all(p.grad is None for p in model.parameters())
    assert opt.step_count == 0 and opt.state is state


def test_bad_arguments_are_refused():
    model = nn.MLP([3, 4, 2], seed=0)
    x, y = _batch([3, 4, 2], 6)
    with pytest.raises(TypeError, match="optimizer"):
        update_memory(model, nn.CrossEntropyLoss(), None, x, y)
    other = optim.SGD(nn.MLP([3, 4, 2]).parameters(), lr=0.1)
    with pytest.raises(ValueError, match="not a parameter of the model"):
        update_memory(model, nn.CrossEntropyLoss(), other, x, y)
    with pytest.raises(ValueError, match="samples"):
        update_memory(model, nn.CrossEntropyLoss(), other, x, y[:5])


# ----- theoretical_peak ---------------------------------------------------------------------------
def test_theory_by_hand_where_the_hidden_layer_dominates():
    """MLP(2, 100, 2), float64, two micro-batches of 50, SGD: P = 8 (200 + 100 + 200 + 2) =
    4016 bytes. The peak is at the ReLU's backward in the second micro-batch: the sum so
    far (P), 50 samples x (2 saved arrays + g + the mask, which becomes g*mask, of 100, +
    the 2 logits) x 8 bytes, and the last layer's gradients, 8 (200 + 2)."""
    model = nn.MLP([2, 100, 2], seed=0)
    opt = optim.SGD(model.parameters(), lr=0.1)
    x, y = _batch([2, 100, 2], 100)
    expected = 4016 + 50 * 8 * (4 * 100 + 2) + 8 * (200 + 2)
    assert theoretical_peak(model, nn.CrossEntropyLoss(), opt, x, [50, 50]) == expected
    report = update_memory(model, nn.CrossEntropyLoss(), opt, x, y, micro_batch_size=50)
    assert report["theory"] == expected
    assert expected <= report["peak"] <= expected / 0.85


@pytest.mark.parametrize("sizes, m, kind, dtype", [
    ([784, 256, 256, 10], 32, "sgd", "float32"),
    ([784, 256, 256, 10], 128, "adam", "float64"),
    ([64, 128, 10], 32, "adam", "float32"),
    ([64, 128, 10], 512, "sgd", "float64"),
])
def test_theory_is_within_15_percent_below_the_measured_peak(sizes, m, kind, dtype):
    """Two micro-batches of m (so the accumulated sum is alive in the second)."""
    model = nn.MLP(sizes, seed=0, dtype=dtype)
    opt = optim.SGD(model.parameters(), lr=0.1) if kind == "sgd" else \
        optim.Adam(model.parameters())
    report = update_memory(model, nn.CrossEntropyLoss(), opt, *_batch(sizes, 2 * m, dtype),
                           micro_batch_size=m)
    assert report["theory"] <= report["peak"] <= report["theory"] / 0.85


def test_models_outside_the_theory_get_none():
    model = nn.MLP([3, 4, 2], activation="tanh", seed=0)
    opt = optim.SGD(model.parameters(), lr=0.1)
    x, y = _batch([3, 4, 2], 6)
    assert update_memory(model, nn.CrossEntropyLoss(), opt, x, y)["theory"] is None
    with pytest.raises(ValueError, match="not a Sequential of Linear"):
        theoretical_peak(model, nn.CrossEntropyLoss(), opt, x, [6])


# ----- CuPy: a hook on the memory pool (runs only where a GPU is present) -------------------
def test_the_pool_hook_counts_a_cupy_allocation_in_the_pools_blocks(cupy_xp):
    import cupy

    # A CuPy array among the arguments selects the pool's hook (with none, as in
    # peak_bytes(cupy.ones, 1000), tracemalloc measures and sees only Python objects).
    _, peak = peak_bytes(cupy.ones_like, cupy.zeros(1000))  # 8000 bytes: one block of 512s
    assert peak == 8192


def test_an_update_on_cupy_is_measured_and_splits_its_peak(cupy_xp):
    sizes = [64, 128, 10]
    model = nn.MLP(sizes, seed=0, xp=cupy_xp)
    opt = optim.Adam(model.parameters())
    x, y = _batch(sizes, 64, "float64")
    x, y = cupy_xp.asarray(x), cupy_xp.asarray(y)
    report = update_memory(model, nn.CrossEntropyLoss(), opt, x, y, micro_batch_size=32)
    assert report["parameters"] == 8 * (64 * 128 + 128 + 128 * 10 + 10)
    assert report["optimizer_state"] == 2 * report["parameters"]
    # at least the new parameters and the gradients exist at once during the update
    assert report["peak"] >= 2 * report["parameters"]


def test_a_mix_of_numpy_and_another_namespace_is_refused():
    strict = backend.resolve_namespace("array_api_strict")
    with pytest.raises(NotImplementedError, match=r"\['array_api_strict', 'numpy'\]"):
        peak_bytes(lambda a, b: a, np.ones(3), strict.ones(3))


# ----- recomputation ------------------------------------------------------------------------------
@pytest.mark.parametrize("sizes, m, dtype, runs", [
    ([16, 1024, 64, 1024, 64, 10], 128, "float64", [(0, 4), (4, 8)]),
    ([16, 1024, 64, 1024, 64, 10], 128, "float64", [(0, 2)]),
    ([16, 1024, 64, 1024, 64, 10], 128, "float64", "all"),
    ([32, 256, 256, 256, 256, 10], 128, "float32", [(0, 8)]),
    ([32, 256, 256, 256, 256, 10], 128, "float32", [(2, 4), (6, 8)]),
    ([8, 100, 2], 64, "float64", "all"),
])
def test_recomputed_runs_are_within_15_percent_below_the_measured_peak(sizes, m, dtype, runs):
    """The theory of recomputed runs (``_kept``, ``_held``): two micro-batches of m."""
    model = nn.MLP(sizes, seed=0, dtype=dtype)
    model.set_recompute(model.blocks("all") if runs == "all" else runs)
    opt = optim.SGD(model.parameters(), lr=0.1)
    report = update_memory(model, nn.CrossEntropyLoss(), opt, *_batch(sizes, 2 * m, dtype),
                           micro_batch_size=m)
    assert report["theory"] <= report["peak"] <= report["theory"] / 0.85


def test_recomputing_lowers_the_measured_peak_where_the_theory_says_so():
    """MLP(16, 1024, 64, 1024, 64, 10), float64, 256 samples in two micro-batches: the
    activations (2 x 8 x 2176 values per sample) outweigh the 1.2 MB of parameters. Runs
    of two hidden layers keep only every second layer's output: the theory predicts a lower
    peak, and the measurement shows it, by more than the Python objects the theory neglects.
    Recomputing only the third hidden layer (1024 wide) holds its first output beside the
    recomputed one while its lower layers keep everything: higher, in both."""
    sizes = [16, 1024, 64, 1024, 64, 10]
    x, y = _batch(sizes, 256)
    peaks = {}
    for name, runs in {"none": [], "pairs": [(0, 4), (4, 8)], "third": [(4, 6)]}.items():
        model = nn.MLP(sizes, seed=0).set_recompute(runs)
        peaks[name] = update_memory(model, nn.CrossEntropyLoss(),
                                    optim.SGD(model.parameters(), lr=0.1), x, y,
                                    micro_batch_size=128)
    theory = {name: report["theory"] for name, report in peaks.items()}
    assert theory["pairs"] < theory["none"] < theory["third"]
    assert peaks["pairs"]["peak"] + PYTHON_OBJECTS < peaks["none"]["peak"]
    assert peaks["none"]["peak"] + PYTHON_OBJECTS < peaks["third"]["peak"]


def test_runs_not_made_of_whole_hidden_layers_are_outside_the_theory():
    model = nn.MLP([3, 8, 8, 2], seed=0).set_recompute([(1, 3)])
    opt = optim.SGD(model.parameters(), lr=0.1)
    x, y = _batch([3, 8, 8, 2], 6)
    assert update_memory(model, nn.CrossEntropyLoss(), opt, x, y)["theory"] is None
    with pytest.raises(ValueError, match=r"recomputed run \(\(1, 3\),\) does not start"):
        theoretical_peak(model, nn.CrossEntropyLoss(), opt, x, [6])
