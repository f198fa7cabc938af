"""Equivalence reports: full-batch training against accumulated training.

Two copies of one model (same factory, same seed) take the same data; one in one batch,
one in micro-batches. The reports give, per parameter, how far apart they end up:

* ``max_abs``: max |a - b|
* ``max_rel``: max |a - b| / max |b| (normwise, so entries near zero do not blow it up)
* ``max_ulp``: max distance in units in the last place (0 means bitwise equal)
* ``cosine``: <a, b> / (|a| |b|)

All numbers are plain Python floats in plain dicts, ready for a table or a plot. The
metrics themselves are in ``minigrad.analysis.metrics`` (re-exported here).
"""

from minigrad import nn
from minigrad.accumulate import NORMALIZE, accumulated_gradients, step
from minigrad.accumulate.guard import as_batch
from minigrad.accumulate.split import one_way, sizes_for
from minigrad.analysis.metrics import compare_arrays, cosine, ulp_distance
from minigrad.engine import backend, validate

__all__ = ["compare_arrays", "compare_named", "cosine", "float_state", "gradient_report",
           "trajectory_report", "ulp_distance"]


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


def _check_factory(name, factory, example):
    """A factory, not the object it builds: each run needs its own fresh copy."""
    if isinstance(factory, nn.Module) or not callable(factory):
        raise TypeError(f"{name} must be a function returning a new {example}, "
                        f"got {type(factory).__name__}")


def _new_model(model_factory):
    model = model_factory()
    if not isinstance(model, nn.Module):
        raise TypeError(f"model_factory() must return an nn.Module, got {type(model).__name__}")
    return model


def _check_split(micro_batch_size, num_micro_batches, sizes, normalize):
    one_way(micro_batch_size, num_micro_batches, sizes)
    validate.choice("normalize", normalize, NORMALIZE)


def gradient_report(model_factory, loss_fn, x, y, *, micro_batch_size=None,
                    num_micro_batches=None, sizes=None, normalize="items"):
    """One step's gradient: accumulated over the split vs the full batch, per parameter."""
    _check_factory("model_factory", model_factory, "model (e.g. lambda: nn.MLP(...))")
    _check_split(micro_batch_size, num_micro_batches, sizes, normalize)
    x, y = as_batch(x, y)
    sizes = sizes_for(x.shape[0], micro_batch_size=micro_batch_size,
                      num_micro_batches=num_micro_batches, sizes=sizes)
    full = accumulated_gradients(_new_model(model_factory), loss_fn, x, y)
    acc = accumulated_gradients(_new_model(model_factory), loss_fn, x, y, sizes=sizes,
                                normalize=normalize)
    return {"sizes": list(sizes), "normalize": normalize, "params": compare_named(acc, full)}


def trajectory_report(model_factory, optimizer_factory, loss_fn, batches, *,
                      micro_batch_size=None, num_micro_batches=None, sizes=None,
                      normalize="items", max_grad_norm=None, scheduler_factory=None):
    """K updates, one per ``(x, y)`` in ``batches``: full batch vs accumulated.

    ``optimizer_factory(params)`` and ``scheduler_factory(optimizer)`` build fresh ones for
    each run. Returns the per-step losses of both runs and, per step, the parameter gap.
    """
    _check_factory("model_factory", model_factory, "model (e.g. lambda: nn.MLP(...))")
    _check_factory("optimizer_factory", optimizer_factory,
                   "optimizer from parameters (e.g. lambda ps: optim.SGD(ps, lr=0.1))")
    if scheduler_factory is not None:
        _check_factory("scheduler_factory", scheduler_factory,
                       "scheduler from an optimizer (e.g. lambda opt: optim.Scheduler(opt, "
                       "schedule))")
    _check_split(micro_batch_size, num_micro_batches, sizes, normalize)
    if isinstance(batches, (str, bytes)) or not hasattr(batches, "__iter__"):
        raise TypeError(f"batches must be a sequence of (x, y) pairs, "
                        f"got {type(batches).__name__}")
    split = dict(micro_batch_size=micro_batch_size, num_micro_batches=num_micro_batches,
                 sizes=sizes, normalize=normalize)
    runs = {}
    for key, split_kwargs in (("full", {}), ("accumulated", split)):
        model = _new_model(model_factory)
        optimizer = optimizer_factory(model.parameters())
        scheduler = scheduler_factory(optimizer) if scheduler_factory else None
        runs[key] = (model, optimizer, scheduler, split_kwargs)
    losses = {key: [] for key in runs}
    steps = []
    for i, batch in enumerate(batches):
        if not isinstance(batch, (tuple, list)) or len(batch) != 2:
            raise TypeError(f"batches[{i}] must be an (x, y) pair, got {type(batch).__name__}")
        x, y = batch
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
