"""compare_libraries: the same training on several namespaces, judged against NumPy by the
derived trajectory bound; array-api-strict, which runs NumPy's own kernels, is bit-identical."""

import numpy as np
import pytest

from minigrad import backend, nn, optim
from minigrad.studies.libraries.runs import _deciding_bound, compare_libraries, same_kernels


def batches(n_batches=4, n=12, features=5, classes=3, seed=0):
    """The same batch ``n_batches`` times, so that the loss falls."""
    rng = np.random.default_rng(seed)
    return [(rng.normal(size=(n, features)), rng.integers(0, classes, size=n))] * n_batches


def make(xp, device):
    return nn.MLP([5, 8, 3], seed=0, xp=xp, device=device)


def strict_device():
    import array_api_strict

    return array_api_strict, array_api_strict.Device("device1")


@pytest.mark.parametrize("make_optimizer", [
    lambda ps: optim.SGD(ps, lr=0.1, momentum=0.9),
    lambda ps: optim.Adam(ps, lr=1e-2),
], ids=["sgd", "adam"])
def test_strict_is_bit_identical_and_torch_is_within_the_bound(make_optimizer):
    torch = pytest.importorskip("torch")
    runs = compare_libraries(make, make_optimizer, nn.CrossEntropyLoss(), batches(),
                             namespaces={"numpy": (np, None), "array_api_strict": strict_device(),
                                         "torch": (torch, None)}, sizes=[5, 4, 3])
    ref, strict, tch = runs["numpy"], runs["array_api_strict"], runs["torch"]
    assert ref.gaps == ref.bounds == ref.ratios == [0.0] * 4
    assert strict.device == "array_api_strict.Device('device1')"
    assert strict.losses == ref.losses and strict.gaps == [0.0] * 4
    assert np.array_equal(strict.params, ref.params)
    assert len(tch.losses) == len(tch.gaps) == len(tch.bounds) == len(tch.ratios) == 4
    assert all(0.0 <= r <= 1.0 for r in tch.ratios)
    assert all(0.0 < b < 1e-5 for b in tch.bounds)
    assert all(b > 0 for b in strict.bounds)  # a bound, though the gap is 0
    assert np.max(np.abs(tch.params - ref.params)) == tch.gaps[-1]
    assert ref.losses[-1] < ref.losses[0]  # it trains


def test_a_real_difference_exceeds_the_bound():
    """The bound is no tolerance wide enough for anything: one weight matrix changed by a
    factor 1 + 2^-40 (about 1e-12) in the other run exceeds it at every update."""
    def nudged(xp, device):
        model = make(xp, device)
        if backend.namespace_name(xp) != "numpy":
            model[0].weight.data = model[0].weight.data * (1 + 2.0**-40)
        return model

    runs = compare_libraries(nudged, lambda ps: optim.SGD(ps, lr=0.1), nn.CrossEntropyLoss(),
                             batches(3), namespaces={"numpy": (np, None),
                                                     "array_api_strict": strict_device()})
    assert all(r > 10 for r in runs["array_api_strict"].ratios)


def test_cupy_on_a_gpu_is_within_the_bound(cupy_xp):
    runs = compare_libraries(make, lambda ps: optim.SGD(ps, lr=0.1, momentum=0.9),
                             nn.CrossEntropyLoss(), batches(),
                             namespaces={"numpy": (np, None), "cupy": (cupy_xp, None)},
                             sizes=[5, 4, 3])
    assert all(r <= 1.0 for r in runs["cupy"].ratios)


def test_the_quoted_bound_is_the_one_that_decides():
    gap, bound = np.array([0.0, 1e-16, 4e-16]), np.array([1e-20, 1e-15, 1e-14])
    assert _deciding_bound(gap, bound) == 1e-15  # ratio 0.1 beats 0.04; the 0 gap is not it
    assert _deciding_bound(np.zeros(3), bound) == 1e-20


def test_which_namespaces_share_numpy_kernels():
    assert same_kernels("numpy") and same_kernels("array_api_strict")
    assert not same_kernels("torch") and not same_kernels("cupy")


def test_bad_arguments():
    sgd = lambda ps: optim.SGD(ps, lr=0.1)  # noqa: E731
    with pytest.raises(ValueError, match="must map names to .xp, device. and include 'numpy'"):
        compare_libraries(make, sgd, nn.CrossEntropyLoss(), batches(),
                          namespaces={"array_api_strict": strict_device()})
    with pytest.raises(ValueError, match="the number of batches must be"):
        compare_libraries(make, sgd, nn.CrossEntropyLoss(), [], namespaces={"numpy": (np, None)})
