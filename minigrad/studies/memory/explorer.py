"""The numbers behind the memory explorer: the constants of ``analysis.memory_theory``'s
``theoretical_peak``, which the page evaluates for any layer sizes."""


import numpy as np

from minigrad import nn, optim
from minigrad.analysis import memory_theory
from minigrad.engine import backend
from minigrad.optim import in_place
from minigrad.studies.explorers import control, positive_ints

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
