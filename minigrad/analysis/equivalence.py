"""Equivalence reports: full-batch training against accumulated training.

Two copies of one model (same factory, same seed) take the same data; one in one batch,
one in micro-batches. The reports give, per parameter, how far apart they end up:

* ``max_abs``: max |a - b|
* ``max_rel``: max |a - b| / max |b| (normwise, so entries near zero do not blow it up)
* ``max_ulp``: max distance in units in the last place (0 means bitwise equal)
* ``cosine``: <a, b> / (|a| |b|)

All numbers are plain Python floats in plain dicts, ready for a table or a plot.
"""

import numpy as np

from minigrad.accumulate import accumulated_gradients, split_sizes, step
from minigrad.engine import backend


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


def compare_named(accumulated, reference):
    """Per-name metrics for two ``name -> array`` dicts, plus ``"all"``: the worst of each."""
    if accumulated.keys() != reference.keys():
        raise KeyError(f"names differ: {sorted(accumulated)} vs {sorted(reference)}")
    report = {name: compare_arrays(accumulated[name], reference[name]) for name in reference}
    report["all"] = {
        "max_abs": max(r["max_abs"] for r in report.values()),
        "max_rel": max(r["max_rel"] for r in report.values()),
        "max_ulp": max(r["max_ulp"] for r in report.values()),
        "cosine": min(r["cosine"] for r in report.values()),
    }
    return report


def gradient_report(model_factory, loss_fn, x, y, *, micro_batch_size=None,
                    num_micro_batches=None, sizes=None, normalize="items"):
    """One step's gradient: accumulated over the split vs the full batch, per parameter."""
    if sizes is None:
        sizes = split_sizes(x.shape[0], micro_batch_size, num_micro_batches)
    full = accumulated_gradients(model_factory(), loss_fn, x, y)
    acc = accumulated_gradients(model_factory(), loss_fn, x, y, sizes=sizes,
                                normalize=normalize)
    return {"sizes": list(sizes), "normalize": normalize, "params": compare_named(acc, full)}


def trajectory_report(model_factory, optimizer_factory, loss_fn, batches, *,
                      micro_batch_size=None, num_micro_batches=None, sizes=None,
                      normalize="items", max_grad_norm=None, scheduler_factory=None):
    """K updates, one per ``(x, y)`` in ``batches``: full batch vs accumulated.

    ``optimizer_factory(params)`` and ``scheduler_factory(optimizer)`` build fresh ones for
    each run. Returns the per-step losses of both runs and, per step, the parameter gap.
    """
    split = dict(micro_batch_size=micro_batch_size, num_micro_batches=num_micro_batches,
                 sizes=sizes, normalize=normalize)
    runs = {}
    for key, split_kwargs in (("full", {}), ("accumulated", split)):
        model = model_factory()
        optimizer = optimizer_factory(model.parameters())
        scheduler = scheduler_factory(optimizer) if scheduler_factory else None
        runs[key] = (model, optimizer, scheduler, split_kwargs)
    losses = {key: [] for key in runs}
    steps = []
    for x, y in batches:
        for key, (model, optimizer, scheduler, split_kwargs) in runs.items():
            losses[key].append(step(model, loss_fn, optimizer, x, y, max_grad_norm=max_grad_norm,
                                    scheduler=scheduler, **split_kwargs))
        steps.append(compare_named(float_state(runs["accumulated"][0]),
                                   float_state(runs["full"][0])))
    return {"losses": losses, "steps": steps, "final": steps[-1] if steps else None}


def float_state(model):
    """Parameters and floating-point buffers (running statistics), by dotted name."""
    return {name: array for name, array in model.state_dict().items()
            if backend.is_floating(backend.get_namespace(array), array)}
