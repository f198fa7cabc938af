"""The numbers behind the floating-point explorer: for every number of micro-batches of one
batch, in float64 and float32, the gap between the accumulated and the full-batch gradient
and its derived bound, in units in the last place."""


import numpy as np

from minigrad import nn
from minigrad.accumulate import accumulated_gradients, split_sizes
from minigrad.analysis import bounds, metrics
from minigrad.engine import backend, validate
from minigrad.studies.explorers import control, key


# ----- floating point: the gap and its bound in units in the last place ---------------------
def floating_point_setup(dtype, seed=0):
    """The floating-point explorer's MLP [8, 32, 4] (LayerNorm) factory in ``dtype``,
    cross-entropy, and 32 samples (inputs in ``dtype``)."""
    bounds.unit_roundoff(dtype)
    generator = backend.rng(seed)
    x, y = generator.normal(size=(32, 8)), generator.integers(0, 4, size=32)
    return {"make": lambda: nn.MLP([8, 32, 4], norm="layer", seed=0, dtype=dtype),
            "loss": nn.CrossEntropyLoss(), "x": x.astype(dtype), "y": y}


def floating_point_explorer(dtypes=("float64", "float32"),
                            num_micro_batches=tuple(range(1, 33)), seed=0):
    """Per dtype and number of micro-batches k (``split_sizes(32, num_micro_batches=k)``) on
    ``floating_point_setup``: the largest gap |g_acc - g_full|, the largest entry of
    ``bounds.gradient_bound``, their largest elementwise ratio (``bounds.bound_ratio``), the
    largest elementwise ULP distance, and the gap and the bound in units of the last place
    of the largest |g_full| entry."""
    num_micro_batches = [validate.integer("num_micro_batches", k, low=1, high=32)
                         for k in num_micro_batches]
    controls = [control("dtype", "dtype", dtypes),
                control("micro", "micro-batches k", num_micro_batches)]
    cases = {}
    for i, dtype in enumerate(dtypes):
        setup = floating_point_setup(dtype, seed)
        make, loss, x, y = (setup[k] for k in ("make", "loss", "x", "y"))
        full = accumulated_gradients(make(), loss, x, y)
        bound = bounds.gradient_bound(bounds.per_item_gradients(make(), loss, x, y),
                                      loss.num_items(y), make().sizes,
                                      bounds.condition_number(make(), loss, x, y),
                                      u=bounds.unit_roundoff(dtype))
        top = max(float(np.max(np.abs(g))) for g in full.values())
        unit = float(np.spacing(np.asarray(top, dtype=dtype)))
        largest = max(float(np.max(b)) for b in bound.values())
        for j, k in enumerate(num_micro_batches):
            acc = accumulated_gradients(make(), loss, x, y, num_micro_batches=k)
            gaps = {n: np.abs(acc[n].astype(np.float64) - full[n].astype(np.float64))
                    for n in full}
            gap = max(float(np.max(g)) for g in gaps.values())
            cases[key(i, j)] = {
                "sizes": split_sizes(32, num_micro_batches=k), "gap": gap, "bound": largest,
                "ratio": max(bounds.bound_ratio(gaps[n], bound[n]) for n in full),
                "max_ulp": max(float(np.max(metrics.ulp_distance(acc[n], full[n])))
                               for n in full),
                "gap_ulps": gap / unit, "bound_ulps": largest / unit}
    return {"controls": controls, "cases": cases}
