"""What an update costs: seconds by the clock, bytes kept after a backward pass, the machine.

* ``seconds_per_update``: ``accumulate.step`` timed for several splits of one global batch,
  in interleaved rounds (a burst of other load hits every split alike); the least time of
  the rounds is the one least disturbed. Timings describe this machine at this moment:
  compare splits measured in one call, never numbers from different runs.
* ``gradient_memory``: one forward and backward pass of a fresh model under ``tracemalloc``:
  the peak while it ran, and the bytes still held once its graph is gone (the gradients).
* ``machine``: one line saying what the timings ran on.

>>> import numpy as np
>>> from minigrad import nn
>>> x, y = np.zeros((16, 4)), np.arange(16) % 2
>>> small, large = (gradient_memory(lambda: nn.MLP([4, 8, 2]), nn.CrossEntropyLoss(),
...                                 x[:n], y[:n]) for n in (2, 16))
>>> small["gradients"] == large["gradients"] == 8 * (4 * 8 + 8 + 8 * 2 + 2)
True
"""

import os
import platform
import time

import numpy as np

from minigrad.accumulate import as_loss, step
from minigrad.analysis.memory import check_numpy, peak_and_held
from minigrad.engine import Tensor, validate


def seconds_per_update(make_model, make_optimizer, loss_fn, x, y, splits, *, rounds=3):
    """Seconds of one ``accumulate.step(model, loss_fn, optimizer, x, y, **splits[label])``
    for each label: the least of ``rounds`` timings, after one untimed warm-up step.

    Each label trains its own ``make_model()`` with ``make_optimizer(params)``; the rounds
    interleave the labels. Returns ``{label: seconds}``.
    """
    rounds = validate.positive_int("rounds", rounds)
    if not splits:
        raise ValueError("splits must name at least one split, e.g. {'full batch': {}}")
    runs = {}
    for label, options in splits.items():
        model = make_model()
        optimizer = make_optimizer(model.parameters())
        step(model, loss_fn, optimizer, x, y, **options)  # warm-up: first-call allocations
        runs[label] = (model, optimizer, options)
    best = {label: float("inf") for label in runs}
    for _ in range(rounds):
        for label, (model, optimizer, options) in runs.items():
            start = time.perf_counter()
            step(model, loss_fn, optimizer, x, y, **options)
            best[label] = min(best[label], time.perf_counter() - start)
    return best


def gradient_memory(make_model, loss_fn, x, y):
    """One forward and backward pass of ``make_model()`` on the whole ``(x, y)``, in bytes.

    ``peak``: the most memory newly allocated at one moment while it ran (activations,
    temporaries and gradients); ``held``: what is still allocated when it is over and the
    graph is gone, that is the gradients and their Python objects; ``gradients``: the sum of
    ``p.grad.nbytes``. NumPy arrays only (``tracemalloc`` sees NumPy's buffers).
    """
    model = make_model()
    check_numpy(model, x, y)
    loss = as_loss(loss_fn)

    def forward_backward():
        loss(model(Tensor(x)), y).backward()

    _, peak, held = peak_and_held(forward_backward)
    return {"peak": peak, "held": held,
            "gradients": sum(p.grad.nbytes for p in model.parameters() if p.grad is not None)}


def machine():
    """What the timings ran on: processor, logical CPUs, the load, Python and NumPy."""
    cpu = platform.processor() or platform.machine()
    load = ""
    if hasattr(os, "getloadavg"):
        load = f", load average {os.getloadavg()[0]:.1f}"
    return (f"{platform.system()} {cpu}, {os.cpu_count()} logical CPUs{load}; "
            f"Python {platform.python_version()}, NumPy {np.__version__}")


__all__ = ["gradient_memory", "machine", "seconds_per_update"]
