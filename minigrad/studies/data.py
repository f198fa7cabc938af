"""Classification data sets: synthetic ones drawn from a seeded NumPy ``Generator``, and
scikit-learn's bundled handwritten digits (offline), also as pairs of views for contrastive
learning (``paired_digits``).

Each returns NumPy arrays ``x`` (float64, shape (N, D)) and ``y`` (int64, shape (N,)), with
the samples in a seeded random order; ``to_namespace`` moves them into any array-API
namespace.

>>> x, y = spirals(6, n_classes=3, seed=0)
>>> x.shape, x.dtype, y.tolist().count(2)
((6, 2), dtype('float64'), 2)
"""

import math

import numpy as np

from minigrad.accumulate.guard import as_batch
from minigrad.engine import backend, validate


def _counts(n_samples, n_classes):
    """``(n_samples, n_classes)`` checked: at least two classes, at least one sample each."""
    n_classes = validate.integer("n_classes", n_classes, low=2)
    n_samples = validate.integer("n_samples", n_samples)
    if n_samples < n_classes:
        raise ValueError(f"n_samples must be an integer >= n_classes={n_classes}, "
                         f"got {n_samples!r}")
    return n_samples, n_classes


def _labels(n_samples, n_classes, generator):
    """Class k for sample i = k, k + C, k + 2C, ... (balanced to within one), then shuffled.

    Also returns each sample's position j within its class and the class sizes n_k.
    """
    i = np.arange(n_samples)
    y = i % n_classes
    position = i // n_classes
    sizes = -(-(n_samples - np.arange(n_classes)) // n_classes)  # ceil((N - k) / C)
    order = generator.permutation(n_samples)
    return y[order], position[order], sizes


def _check_finite(values, arguments):
    """``ValueError`` naming ``arguments`` (name -> value) if ``values`` overflowed."""
    if not np.all(np.isfinite(values)):
        given = ", ".join(f"{name}={value!r}" for name, value in arguments.items())
        raise ValueError(f"the data overflowed to inf or NaN with {given}; use smaller values")


def spirals(n_samples=400, n_classes=2, noise=0.1, turns=1.0, seed=0):
    """C interleaved spiral arms in the plane, one per class.

    Sample j of class k (of n_k) sits at radius r = (j + 1) / n_k and angle
    theta = 2 pi (k / C + turns * r), plus N(0, noise^2) on each coordinate:
    x = r (cos theta, sin theta) + noise * eps.
    """
    n_samples, n_classes = _counts(n_samples, n_classes)
    noise = validate.real("noise", noise)
    turns = validate.real("turns", turns, low=None)
    generator = backend.rng(seed)
    y, position, sizes = _labels(n_samples, n_classes, generator)
    r = (position + 1) / sizes[y]
    theta = 2.0 * math.pi * (y / n_classes + turns * r)
    _check_finite(theta, {"turns": turns})
    x = r[:, None] * np.stack([np.cos(theta), np.sin(theta)], axis=1)
    with np.errstate(over="ignore", invalid="ignore"):  # reported once, just below
        x = x + noise * generator.normal(size=x.shape)
    _check_finite(x, {"noise": noise})
    return x.astype(np.float64), y.astype(np.int64)


def digits(seed=0, test_fraction=0.25):
    """scikit-learn's 1,797 8x8 digits: ``(x_train, y_train, x_test, y_test)``.

    x = pixels / 16 in [0, 1], shape (N, 64); y in 0..9. The samples are shuffled by ``seed``
    and the last ``round(test_fraction * 1797)`` of them are the test set; like scikit-learn's
    ``train_test_split``, a fraction that leaves either set empty is refused. Needs
    scikit-learn (``pip install minigrad[data]``); its copy of the data ships with it.
    """
    generator = backend.rng(seed)
    test_fraction = validate.real("test_fraction", test_fraction, low=0.0, high=1.0,
                                  strict_low=True, strict_high=True)
    try:
        from sklearn.datasets import load_digits
    except ImportError as err:
        raise ImportError("digits() needs scikit-learn: pip install minigrad[data] "
                          "(or pip install scikit-learn)") from err
    pixels, labels = load_digits(return_X_y=True)
    n_test = round(test_fraction * len(labels))
    if n_test in (0, len(labels)):
        empty = "test" if n_test == 0 else "training"
        raise ValueError(f"test_fraction={test_fraction!r} leaves 0 {empty} samples of "
                         f"{len(labels)}")
    order = generator.permutation(len(labels))
    x = (pixels[order] / 16.0).astype(np.float64)
    y = labels[order].astype(np.int64)
    n_train = len(y) - n_test
    return x[:n_train], y[:n_train], x[n_train:], y[n_train:]


def paired_digits(seed=0, test_fraction=0.25):
    """Two views of each of ``digits``' images, for contrastive learning (offline):
    ``(x_train, y_train, x_test, y_test)``.

    The query view is an image's left half, the passage view its right half (8 rows x 4
    columns each, pixels / 16, flattened to 32 values): ``x`` has shape (N, 2, 32), as
    ``nn.DualEncoder`` reads it, and ``y`` is the digit (which the loss does not read). The
    split and the order are ``digits(seed, test_fraction)``'s. Needs scikit-learn.

    >>> x, y, x_test, y_test = paired_digits(seed=0)
    >>> x.shape, x_test.shape
    ((1348, 2, 32), (449, 2, 32))
    """
    x_train, y_train, x_test, y_test = digits(seed, test_fraction)

    def halves(x):
        images = x.reshape(-1, 8, 8)
        left, right = images[:, :, :4], images[:, :, 4:]
        return np.stack([left.reshape(-1, 32), right.reshape(-1, 32)], axis=1)

    return halves(x_train), y_train, halves(x_test), y_test

def _numbers(name, a):
    """``a`` as an array (lists become NumPy arrays) and its namespace; ``TypeError`` unless
    it holds real numbers."""
    given = type(a).__name__
    if not backend.is_array(a):
        try:
            a = np.asarray(a)
        except (TypeError, ValueError) as err:  # ragged lists
            raise TypeError(f"{name} must be an array of numbers, got {given}: {err}") from None
    xp = backend.get_namespace(a)
    try:
        real = xp.isdtype(a.dtype, ("bool", "integral", "real floating"))
    except (TypeError, ValueError):  # a dtype the namespace does not know (strings, ...)
        real = False
    if not real:
        raise TypeError(f"{name} must be an array of real numbers, got {given} of dtype "
                        f"{a.dtype}")
    return a, xp


def to_namespace(x, y, xp=None, *, dtype="float64", device=None):
    """``(x, y)`` as arrays of namespace ``xp`` (NumPy when None): x in float ``dtype``,
    y in int64.

    x must hold real numbers and y integer class labels (an integer array, or a floating one
    whose values are all whole numbers, as ``x.astype(float)`` round trips make them), one
    per sample of x; nothing is truncated or rounded.
    """
    xp = backend.resolve_namespace(xp)
    x, _ = _numbers("x", x)
    y, y_xp = _numbers("y", y)
    if y_xp.isdtype(y.dtype, "bool"):
        raise TypeError("y must hold integer class labels, got a bool array")
    if y_xp.isdtype(y.dtype, "real floating"):
        whole = y_xp.isfinite(y) & (y == y_xp.round(y)) & (y_xp.abs(y) < 2.0**63)
        if not bool(y_xp.all(whole)):
            raise ValueError(f"y must hold integer class labels, got {y.dtype} values that are "
                             "not whole numbers (fractions, NaN or inf)")
    x, y = as_batch(backend.move(x, xp, device=device), backend.move(y, xp, device=device))
    return xp.astype(x, backend.as_dtype(xp, dtype)), xp.astype(y, xp.int64)
