"""Classification data sets: synthetic ones drawn from a seeded NumPy ``Generator``, and
scikit-learn's bundled handwritten digits (offline).

Each returns NumPy arrays ``x`` (float64, shape (N, D)) and ``y`` (int64, shape (N,)), with
the samples in a seeded random order; ``to_namespace`` moves them into any array-API
namespace.

>>> x, y = spirals(6, n_classes=3, seed=0)
>>> x.shape, x.dtype, y.tolist().count(2)
((6, 2), dtype('float64'), 2)
"""

import math

import numpy as np

from minigrad.engine import backend, validate


def _labels(n_samples, n_classes, generator):
    """Class k for sample i = k, k + C, k + 2C, ... (balanced to within one), then shuffled.

    Also returns each sample's position j within its class and the class sizes n_k.
    """
    n_classes = validate.integer("n_classes", n_classes, low=2)
    n_samples = validate.integer("n_samples", n_samples)
    if n_samples < n_classes:
        raise ValueError(f"n_samples must be an integer >= n_classes={n_classes}, "
                         f"got {n_samples!r}")
    i = np.arange(n_samples)
    y = i % n_classes
    position = i // n_classes
    sizes = -(-(n_samples - np.arange(n_classes)) // n_classes)  # ceil((N - k) / C)
    order = generator.permutation(n_samples)
    return y[order], position[order], sizes


def spirals(n_samples=400, n_classes=2, noise=0.1, turns=1.0, seed=0):
    """C interleaved spiral arms in the plane, one per class.

    Sample j of class k (of n_k) sits at radius r = (j + 1) / n_k and angle
    theta = 2 pi (k / C + turns * r), plus N(0, noise^2) on each coordinate:
    x = r (cos theta, sin theta) + noise * eps.
    """
    noise = validate.real("noise", noise)
    turns = validate.real("turns", turns, low=None)
    generator = backend.rng(seed)
    y, position, sizes = _labels(n_samples, n_classes, generator)
    r = (position + 1) / sizes[y]
    theta = 2.0 * math.pi * (y / n_classes + turns * r)
    x = r[:, None] * np.stack([np.cos(theta), np.sin(theta)], axis=1)
    x = x + noise * generator.normal(size=x.shape)
    return x.astype(np.float64), y.astype(np.int64)


def blobs(n_samples=400, n_classes=3, n_features=2, spread=0.5, box=3.0, seed=0):
    """Isotropic Gaussian clusters: x = mu_y + spread * eps, with centres mu_k ~ U(-box, box)^D."""
    spread = validate.real("spread", spread)
    box = validate.real("box", box)
    n_features = validate.positive_int("n_features", n_features)
    generator = backend.rng(seed)
    centres = generator.uniform(-box, box, size=(n_classes, n_features))
    y, _, _ = _labels(n_samples, n_classes, generator)
    x = centres[y] + spread * generator.normal(size=(n_samples, n_features))
    return x.astype(np.float64), y.astype(np.int64)


def digits(seed=0, test_fraction=0.25):
    """scikit-learn's 1,797 8x8 digits: ``(x_train, y_train, x_test, y_test)``.

    x = pixels / 16 in [0, 1], shape (N, 64); y in 0..9. The samples are shuffled by ``seed``
    and the last ``round(test_fraction * 1797)`` of them are the test set. Needs
    scikit-learn (``pip install minigrad[data]``); its copy of the data ships with it.
    """
    test_fraction = validate.real("test_fraction", test_fraction, low=0.0, high=1.0,
                                  strict_low=True, strict_high=True)
    try:
        from sklearn.datasets import load_digits
    except ImportError as err:
        raise ImportError("digits() needs scikit-learn: pip install minigrad[data] "
                          "(or pip install scikit-learn)") from err
    pixels, labels = load_digits(return_X_y=True)
    order = backend.rng(seed).permutation(len(labels))
    x = (pixels[order] / 16.0).astype(np.float64)
    y = labels[order].astype(np.int64)
    n_train = len(y) - round(test_fraction * len(y))
    return x[:n_train], y[:n_train], x[n_train:], y[n_train:]


def to_namespace(x, y, xp=None, *, dtype="float64", device=None):
    """``(x, y)`` as arrays of namespace ``xp`` (NumPy when None): x in float ``dtype``,
    y in int64."""
    xp = backend.resolve_namespace(xp)
    x = backend.move(x, xp, device=device)
    y = backend.move(y, xp, device=device)
    return xp.astype(x, backend.as_dtype(xp, dtype)), xp.astype(y, xp.int64)
