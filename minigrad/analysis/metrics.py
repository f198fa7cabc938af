"""Measures of how far apart two results are, and how good a classifier is.

* ``ulp_distance``: how many representable floats lie between two arrays, elementwise
* ``cosine``: <a, b> / (|a| |b|) of two arrays as flat vectors
* ``compare_arrays``: max_abs, max_rel (normwise), max_ulp and cosine, entry by entry
* ``vector_gap``: rel_error = |a - b| / |b| and cosine, with 2-norms of flat vectors
* ``accuracy``: the share of rows classified as their target

Every result is a plain Python float (or dict of floats), computed in NumPy from arrays of
any namespace.

>>> compare_arrays(np.array([0.0, 2.0]), np.array([0.0, 1.0]))["max_rel"]
1.0
"""

import numpy as np

from minigrad.engine import backend
from minigrad.engine.graph import no_grad
from minigrad.engine.tensor import Tensor


def ulp_distance(a, b):
    """Elementwise count of representable floats between ``a`` and ``b`` (NumPy arrays)."""
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype != b.dtype or a.dtype not in (np.float32, np.float64):
        raise TypeError(f"ulp_distance needs two float32 or two float64 arrays, got {a.dtype}"
                        f" and {b.dtype}")
    signed, unsigned = (np.int64, np.uint64) if a.dtype == np.float64 else (np.int32, np.uint32)
    lowest = np.iinfo(signed).min

    def ordered(x):
        # Map the float bit patterns to integers that increase with the float's value.
        i = x.view(signed)
        return np.where(i < 0, lowest - i, i)

    # hi - lo can exceed the signed range (4.0 vs -4.0: 2^63 + 2^53) but never 2^bits:
    # subtracting as unsigned integers gives it exactly (arrays, not scalars, wrap silently).
    shape = np.broadcast_shapes(a.shape, b.shape)
    oa, ob = ordered(np.atleast_1d(a)), ordered(np.atleast_1d(b))
    d = np.maximum(oa, ob).view(unsigned) - np.minimum(oa, ob).view(unsigned)
    return d.reshape(shape)


def cosine(a, b):
    """<a, b> / (|a| |b|) of two NumPy arrays as flat vectors, in [-1, 1].

    Exactly 1.0 when ``a`` and ``b`` are equal (the formula itself rounds to 1 +- 1 ulp,
    differently for each BLAS kernel); 1.0 for two zero vectors, 0.0 for one.
    """
    if np.array_equal(a, b):
        return 1.0 if np.all(np.isfinite(a)) else float("nan")
    norms = float(np.linalg.norm(a)) * float(np.linalg.norm(b))
    if norms == 0:
        return 0.0
    return min(1.0, max(-1.0, float(np.vdot(a, b)) / norms))


def compare_arrays(a, b):
    """The four metrics of ``a`` (accumulated) against ``b`` (reference), as floats."""
    a, b = backend.to_numpy(a), backend.to_numpy(b)
    if a.shape != b.shape:
        raise ValueError(f"cannot compare arrays of shapes {a.shape} and {b.shape}")
    diff = np.abs(a - b)
    scale = float(np.max(np.abs(b))) if b.size else 0.0
    max_abs = float(np.max(diff)) if diff.size else 0.0
    return {
        "max_abs": max_abs,
        "max_rel": max_abs / scale if scale > 0 else (0.0 if max_abs == 0 else float("inf")),
        "max_ulp": float(np.max(ulp_distance(a, b))) if a.size else 0.0,
        "cosine": cosine(a, b),
    }


def vector_gap(a, b):
    """``a`` (accumulated) against ``b`` (reference) as flat vectors, with 2-norms:
    rel_error = |a - b| / |b| and cosine = <a, b> / (|a| |b|)."""
    a = np.ravel(backend.to_numpy(a))
    b = np.ravel(backend.to_numpy(b))
    diff, scale = float(np.linalg.norm(a - b)), float(np.linalg.norm(b))
    return {
        "rel_error": diff / scale if scale > 0 else (0.0 if diff == 0 else float("inf")),
        "cosine": cosine(a, b),
    }


def accuracy(logits, targets):
    """The share of rows of ``logits`` (N, C) whose largest entry is at ``targets`` (N,).

    Both may be Tensors or arrays of any namespace.

    >>> accuracy(np.array([[2.0, 1.0], [0.0, 3.0], [5.0, 4.0]]), np.array([0, 1, 1]))
    0.6666666666666666
    """
    logits = backend.to_numpy(logits.data if isinstance(logits, Tensor) else logits)
    targets = backend.to_numpy(targets.data if isinstance(targets, Tensor) else targets)
    if logits.ndim != 2 or targets.shape != logits.shape[:1]:
        raise ValueError(f"accuracy needs logits of shape (N, C) and targets of shape (N,), "
                         f"got {logits.shape} and {targets.shape}")
    return float(np.mean(np.argmax(logits, axis=1) == targets)) if targets.size else 0.0


def eval_accuracy(model, x, targets):
    """``accuracy`` of ``model(x)`` in eval mode (BatchNorm: running statistics); the model
    is back in training mode afterwards."""
    model.eval()
    try:
        with no_grad():
            logits = model(Tensor(x))
    finally:
        model.train()
    return accuracy(logits, targets)
