"""``blobs``: a seeded data set of Gaussian clusters that the tests draw, checked as the data
sets of ``minigrad.studies.data`` are (every argument first, no inf or NaN returned)."""

import numpy as np

from minigrad.engine import backend, validate
from minigrad.studies.data import _check_finite, _counts, _labels


def blobs(n_samples=400, n_classes=3, n_features=2, spread=0.5, box=3.0, seed=0):
    """Isotropic Gaussian clusters: x = mu_y + spread * eps, with centres mu_k ~ U(-box, box)^D."""
    n_samples, n_classes = _counts(n_samples, n_classes)
    n_features = validate.positive_int("n_features", n_features)
    spread = validate.real("spread", spread)
    box = validate.real("box", box, high=np.finfo(np.float64).max / 2)  # U(-box, box) needs 2 box
    generator = backend.rng(seed)
    centres = generator.uniform(-box, box, size=(n_classes, n_features))
    y, _, _ = _labels(n_samples, n_classes, generator)
    with np.errstate(over="ignore", invalid="ignore"):  # reported once, just below
        x = centres[y] + spread * generator.normal(size=(n_samples, n_features))
    _check_finite(x, {"spread": spread, "box": box})
    return x.astype(np.float64), y.astype(np.int64)
