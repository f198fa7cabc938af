"""The data sets refuse what they cannot honour: every argument is checked before it is used,
data that overflowed to inf or NaN is never returned, a split never leaves a set empty, and
``to_namespace`` neither truncates labels nor guesses at strings.

Also: shapes, balance and determinism of the data sets.
"""

import numpy as np
import pytest
from blobs import blobs

from minigrad import backend
from minigrad.studies import data

NAN, INF = float("nan"), float("inf")


# ----- every argument is checked first -----------------------------------------------------
@pytest.mark.parametrize("name, value, error, message", [
    ("n_classes", 1.5, TypeError, "n_classes must be an integer, got float 1.5"),
    ("n_classes", NAN, TypeError, "n_classes must be an integer, got float nan"),
    ("n_classes", True, TypeError, "n_classes must be an integer, got bool True"),
    ("n_classes", -1, ValueError, "n_classes must be an integer >= 2, got -1"),
    ("n_classes", 1, ValueError, "n_classes must be an integer >= 2, got 1"),
    ("n_samples", 2, ValueError, "n_samples must be an integer >= n_classes=3, got 2"),
    ("n_samples", 4.0, TypeError, "n_samples must be an integer, got float 4.0"),
    ("n_features", 0, ValueError, "n_features must be a positive int, got 0"),
    ("spread", -0.5, ValueError, "spread must be a finite number with spread >= 0, got -0.5"),
    ("spread", INF, ValueError, "spread must be a finite number with spread >= 0, got inf"),
    ("box", NAN, ValueError, "box must be a finite number with 0 <= box <= 8.98847e\\+307"),
    ("box", 1e308, ValueError, "box must be a finite number with 0 <= box <= 8.98847e\\+307, "
                               "got 1e\\+308"),
    ("seed", -1, ValueError, "seed must be an integer >= 0, got -1"),
    ("seed", "0", TypeError, "seed must be an integer, got str '0'"),
])
def test_blobs_check_every_argument_before_using_it(name, value, error, message):
    with pytest.raises(error, match=f"^{message}"):
        blobs(**{name: value})


@pytest.mark.parametrize("n_classes", [1.5, NAN, -1, True])
def test_spirals_check_n_classes_too(n_classes):
    with pytest.raises((TypeError, ValueError), match="^n_classes must be an integer"):
        data.spirals(10, n_classes=n_classes)


# ----- no inf or NaN data ------------------------------------------------------------------
@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")
@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
@pytest.mark.parametrize("build, named", [
    (lambda: data.spirals(noise=1e308), r"noise=1e\+308"),
    (lambda: data.spirals(turns=1e308), r"turns=1e\+308"),
    (lambda: blobs(spread=1e308), r"spread=1e\+308, box=3.0"),
])
def test_data_that_overflowed_is_refused_naming_the_argument(build, named):
    with pytest.raises(ValueError, match=f"^the data overflowed to inf or NaN with {named}; "
                                         "use smaller values$"):
        build()


def test_large_finite_arguments_that_do_not_overflow_are_kept():
    x, _ = data.spirals(20, noise=1e300, seed=1)
    assert np.all(np.isfinite(x)) and np.abs(x).max() > 1e299
    x, _ = blobs(20, box=1e300, seed=1)
    assert np.all(np.isfinite(x)) and np.abs(x).max() > 1e298


# ----- digits: neither set empty -----------------------------------------------------------
@pytest.mark.parametrize("test_fraction, empty", [(1e-4, "test"), (0.9999, "training")])
def test_digits_refuse_a_split_that_leaves_a_set_empty(test_fraction, empty):
    pytest.importorskip("sklearn")
    with pytest.raises(ValueError, match=f"^test_fraction={test_fraction} leaves 0 {empty} "
                                         "samples of 1797$"):
        data.digits(test_fraction=test_fraction)


def test_digits_smallest_and_largest_splits_keep_one_sample():
    pytest.importorskip("sklearn")
    # round(f * 1797) test samples: 1 for f = 1/1797, 1796 for f = 1796/1797.
    assert [len(a) for a in data.digits(test_fraction=1 / 1797)] == [1796, 1796, 1, 1]
    assert [len(a) for a in data.digits(test_fraction=1796 / 1797)] == [1, 1, 1796, 1796]


@pytest.mark.parametrize("seed, error", [(-1, ValueError), (1.5, TypeError)])
def test_digits_check_the_seed(seed, error):
    with pytest.raises(error, match="^seed must be an integer"):
        data.digits(seed=seed)


# ----- to_namespace: labels are integers, x is numbers -------------------------------------
X, Y = data.spirals(10)


@pytest.mark.parametrize("y", [Y + 0.5, np.where(Y == 0, NAN, Y), np.where(Y == 0, INF, Y),
                               Y * 1e19])
def test_to_namespace_refuses_labels_that_are_not_whole_numbers(y):
    with pytest.raises(ValueError, match="^y must hold integer class labels, got float64 "
                                         "values that are not whole numbers"):
        data.to_namespace(X, y)


def test_to_namespace_keeps_whole_float_labels(xp):
    _, y = data.to_namespace(X, Y.astype(np.float64), xp)
    assert y.dtype == xp.int64
    assert np.array_equal(backend.to_numpy(y), Y)  # moved explicitly: CuPy refuses np.asarray


@pytest.mark.parametrize("x, y, message", [
    ([["a", "b"]] * 10, Y, "^x must be an array of real numbers, got list of dtype <U1$"),
    ([[1.0], [2.0, 3.0]], Y[:2], "^x must be an array of numbers, got list: "),
    (X + 1j, Y, "^x must be an array of real numbers, got ndarray of dtype complex128$"),
    (X, Y.astype(str), "^y must be an array of real numbers, got ndarray of dtype <U"),
    (X, Y == 1, "^y must hold integer class labels, got a bool array$"),
])
def test_to_namespace_refuses_what_is_not_numbers(x, y, message):
    with pytest.raises(TypeError, match=message):
        data.to_namespace(x, y)


def test_to_namespace_needs_one_label_per_sample():
    with pytest.raises(ValueError, match="^x has 10 samples but y has 9$"):
        data.to_namespace(X, Y[:9])


def test_to_namespace_names_an_unknown_namespace():
    with pytest.raises(ValueError, match="nonexistent_mod"):
        data.to_namespace(X, Y, xp="nonexistent_mod")


# ----- shapes, balance and determinism -------------------------------------------------------
@pytest.mark.parametrize("n_samples, n_classes", [(2, 2), (7, 3), (400, 2), (101, 5)])
def test_spirals_shapes_dtypes_and_balance(n_samples, n_classes):
    x, y = data.spirals(n_samples, n_classes)
    assert x.shape == (n_samples, 2) and x.dtype == np.float64
    assert y.shape == (n_samples,) and y.dtype == np.int64
    counts = np.bincount(y, minlength=n_classes)
    assert len(counts) == n_classes
    assert counts.max() - counts.min() <= 1


def test_spirals_are_determined_by_the_seed():
    x0, y0 = data.spirals(50, 3, seed=7)
    x1, y1 = data.spirals(50, 3, seed=7)
    x2, _ = data.spirals(50, 3, seed=8)
    assert np.array_equal(x0, x1) and np.array_equal(y0, y1)
    assert not np.array_equal(x0, x2)


def test_noiseless_spiral_points_lie_on_their_arm():
    # Sample j of class k: radius (j + 1) / n_k, angle 2 pi (k / C + turns * r).
    x, y = data.spirals(12, 3, noise=0.0, turns=0.25)
    r = np.hypot(x[:, 0], x[:, 1])
    for k in range(3):
        assert np.allclose(np.sort(r[y == k]), [0.25, 0.5, 0.75, 1.0])
    expected = np.exp(2j * np.pi * (y / 3 + 0.25 * r))
    assert np.allclose((x[:, 0] + 1j * x[:, 1]) / r, expected)


def test_blobs_shapes_and_determinism():
    x, y = blobs(30, n_classes=3, n_features=4, seed=1)
    assert x.shape == (30, 4) and x.dtype == np.float64 and y.dtype == np.int64
    assert np.bincount(y).tolist() == [10, 10, 10]
    assert np.array_equal(x, blobs(30, n_classes=3, n_features=4, seed=1)[0])


@pytest.mark.parametrize("bad", [dict(n_classes=1), dict(n_samples=1), dict(noise=-1.0)])
def test_spirals_reject_bad_arguments(bad):
    with pytest.raises(ValueError):
        data.spirals(**{"n_samples": 10, **bad})


def test_to_namespace_moves_and_casts(xp):
    x, y = data.to_namespace(*data.spirals(10), xp, dtype="float32")
    assert x.dtype == xp.float32 and y.dtype == xp.int64
    assert tuple(x.shape) == (10, 2) and tuple(y.shape) == (10,)
