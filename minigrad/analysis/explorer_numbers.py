"""The numbers behind the floating-point and memory explorers (``explorers`` holds the
others and the registry): the gap and bound in ulps for every number of micro-batches, and
the constants of the memory theory, which the page evaluates for any layer sizes."""

import numpy as np

from minigrad import nn, optim
from minigrad.accumulate import accumulated_gradients, split_sizes
from minigrad.analysis import bounds, memory_theory, metrics
from minigrad.analysis.explorer_controls import control, key, positive_ints
from minigrad.engine import backend, validate
from minigrad.optim import in_place


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


# ----- memory: the constants of theoretical_peak ----------------------------------------------
MEMORY_OPTIMIZERS = {
    "sgd": ("SGD", lambda ps: optim.SGD(ps, lr=0.1)),
    "momentum": ("SGD, momentum", lambda ps: optim.SGD(ps, lr=0.1, momentum=0.9)),
    "nesterov": ("SGD, Nesterov momentum",
                 lambda ps: optim.SGD(ps, lr=0.1, momentum=0.9, nesterov=True)),
    "adam": ("Adam", lambda ps: optim.Adam(ps, lr=1e-3)),
    "adamw": ("AdamW (weight decay)", lambda ps: optim.AdamW(ps, lr=1e-3)),
}
"""The memory planner's optimizers: name -> (label, factory from parameters)."""
MEMORY_LOSSES = {"cross_entropy": ("cross-entropy", nn.CrossEntropyLoss),
                 "mse": ("mean squared error", nn.MSELoss)}
"""The memory planner's losses: name -> (label, class)."""


def _update_arrays(optimizer):
    """(t, r) of ``memory.theoretical_peak``'s update for a fresh ``optimizer``: the
    workspace's arrays of the largest parameter's size, and the arrays of each parameter's
    size its first update makes (SGD's momentum buffers)."""
    h = optimizer.hyperparams
    made = 1 if isinstance(optimizer, optim.SGD) and h["momentum"] != 0 else 0
    return memory_theory.WORKSPACE_ARRAYS, made


def _state_arrays(optimizer):
    """How many arrays of its parameter's size ``optimizer`` keeps after an update, counted
    as ``memory.update_memory`` counts the optimizer state."""
    p = optimizer.params[0]
    p.grad = np.zeros_like(p.data)
    optimizer.step()
    return sum(backend.is_array(a) for field in optimizer.state[0] if isinstance(field, tuple)
               for a in field)


def memory_explorer(sizes="784,256,256,10", batch_sizes=(64, 128, 256, 512, 1024, 2048, 4096),
                    budgets_mib=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096)):
    """The controls of the memory planner and the constants of ``memory.theoretical_peak``:
    bytes per value (``itemsize``), arrays of n x C at the loss (``head``), and per optimizer
    of ``MEMORY_OPTIMIZERS`` its ``t`` (workspace arrays of the largest parameter's size)
    and ``r`` (arrays of each parameter's size its first update makes) and ``state``,
    the arrays of a parameter's size it keeps. The page evaluates the formula with them."""
    kinds = {}
    for name, (label, factory) in MEMORY_OPTIMIZERS.items():
        t, r = _update_arrays(factory([nn.Parameter(np.zeros(1))]))
        kinds[name] = {"label": label, "t": t, "r": r,
                       "state": _state_arrays(factory([nn.Parameter(np.zeros(1))]))}
    budgets = positive_ints("budgets_mib", budgets_mib)
    controls = [control("sizes", "layer sizes d_0, ..., d_L", [sizes]),
                control("batch", "global batch N", positive_ints("batch_sizes", batch_sizes)),
                control("optimizer", "optimizer", kinds, [kinds[k]["label"] for k in kinds]),
                control("dtype", "dtype", ("float32", "float64")),
                control("loss", "loss", MEMORY_LOSSES,
                         [label for label, _ in MEMORY_LOSSES.values()]),
                control("budget", "memory budget", [b * 2**20 for b in budgets],
                         [f"{b} MiB" if b < 1024 else f"{b // 1024} GiB" for b in budgets])]
    return {"controls": controls, "formula": {
        "itemsize": {d: np.dtype(d).itemsize for d in ("float32", "float64")},
        "head": {name: memory_theory.HEAD_ARRAYS[cls] for name, (_, cls) in MEMORY_LOSSES.items()},
        "chunk": in_place.CHUNK, "optimizers": kinds}}
