"""The same training on several array libraries, each judged against NumPy by a derived bound.

``compare_libraries`` builds one model per namespace from the same seed, feeds every run the
same batches (moved to its namespace and device) and performs the same accumulated updates.
After each update it records every run's loss and its parameter gap to the reference run
(NumPy), and the bound on that gap.

Why a bound, and where ``==`` holds
-----------------------------------
Two libraries compute the same formulas with different kernels: PyTorch groups a sum
differently from NumPy, its matrix products may use other blocking or fused multiply-adds,
its ``exp`` and ``log`` are not always correctly rounded. Each run's gradient is then the
exact gradient up to its own roundings, which is the situation ``minigrad.analysis.bounds``
bounds for accumulated against full-batch training: ``gradient_bound`` covers the sum over
samples in any order and the roundings of each sample's own forward and backward pass (its
derivation does not depend on which of the two runs split the batch), and ``TrajectoryBound``
carries the gap through the optimizer update by update. So the replay here is
``trajectory.TrajectoryReplay`` with "the other library" in place of "accumulated":

    dg_t = gradient_bound(at theta_other) + |g_ref(theta_other) - g_ref(theta_ref)|

computed in NumPy float64: at theta_other on a NumPy copy of the other run's parameters.

array-api-strict is a thin wrapper that calls NumPy's own functions on NumPy arrays: both runs
execute the same sequence of IEEE 754 operations on the same inputs in the same process,
and each operation is correctly rounded, so their results are the same bits and their gap is
0, not merely below the bound. ``same_kernels`` says which namespaces share NumPy's kernels.
"""

from dataclasses import dataclass, field

import numpy as np

from minigrad.accumulate import as_loss, step
from minigrad.analysis.bounds import flat, unit_roundoff
from minigrad.analysis.trajectory import TrajectoryReplay
from minigrad.engine import backend, validate

SAME_KERNELS_AS_NUMPY = ("numpy", "array_api_strict")
"""Namespaces whose functions are NumPy's, called on NumPy arrays: their results are
bit-identical to NumPy's."""


def same_kernels(name):
    """Whether namespace ``name`` computes with NumPy's own kernels (then the gap is 0)."""
    return name in SAME_KERNELS_AS_NUMPY


@dataclass
class LibraryRun:
    """One library's run. Per update: ``losses`` (the mean loss over the batch's items,
    before the update); after it, ``gaps`` (the largest |theta - theta_numpy| over all
    parameters), ``ratios`` (max over elements of gap / bound: the bound holds where it is
    <= 1) and ``bounds`` (the bound of the element that decides the ratio; the smallest
    bound where every gap is 0). The reference run has gaps, bounds and ratios 0."""

    name: str
    device: str
    losses: list = field(default_factory=list)
    gaps: list = field(default_factory=list)
    bounds: list = field(default_factory=list)
    ratios: list = field(default_factory=list)
    params: np.ndarray | None = None  # the final parameters, flat, as NumPy float64


def compare_libraries(make, make_optimizer, loss, batches, *, namespaces, sizes=None):
    """Train the same model on each namespace; returns name -> ``LibraryRun``.

    ``make(xp, device)`` builds the model in namespace ``xp`` on ``device`` (the same seed
    every time, e.g. ``lambda xp, device: nn.MLP([64, 10], seed=0, xp=xp, device=device)``);
    ``make_optimizer(params)`` its
    optimizer (SGD, Adam or AdamW); ``batches`` a list of NumPy ``(x, y)`` pairs, one update
    each, accumulated over micro-batches of ``sizes`` (``None``: the whole batch at once).
    ``namespaces`` maps a name to ``(xp, device)`` (``device=None``: the default) and must
    hold ``"numpy"``, the reference. Everything runs in float64.
    """
    if not isinstance(namespaces, dict) or "numpy" not in namespaces:
        raise ValueError(f"namespaces must map names to (xp, device) and include 'numpy', the "
                         f"reference; got {namespaces!r:.120}")
    loss = as_loss(loss)
    batches = list(batches)
    validate.positive_int("the number of batches", len(batches))
    models, opts, runs = {}, {}, {}
    for name, (xp, device) in namespaces.items():
        xp = backend.resolve_namespace(xp)
        model = make(xp, device)
        models[name], opts[name] = model, make_optimizer(model.parameters())
        runs[name] = LibraryRun(name, str(backend.device(next(iter(model.parameters())).data)))
    ref = models["numpy"]
    replays = {name: TrajectoryReplay(ref, opts["numpy"], loss, runs=("numpy", name),
                                      u=unit_roundoff(next(iter(model.parameters())).data.dtype))
               for name, model in models.items() if name != "numpy"}
    # The other runs are measured on a NumPy copy of their parameters, never on their own
    # model: the analysis computes in NumPy float64, whatever the library.
    mirror = make(backend.resolve_namespace("numpy"), None)
    for x, y in batches:
        x, y = np.asarray(x), np.asarray(y)
        for name, replay in replays.items():
            _copy_parameters(models[name], mirror)
            replay.measure(mirror, x, y)
        for name, model in models.items():
            xp = model_namespace(model)
            device = backend.device(next(iter(model.parameters())).data)
            xt, yt = backend.move(x, xp, device=device), backend.move(y, xp, device=device)
            runs[name].losses.append(step(model, loss, opts[name], xt, yt, sizes=sizes))
        for name, replay in replays.items():
            seen = replay.observe(flat(p.data for p in models[name].parameters()))
            runs[name].gaps.append(seen.max_abs)
            runs[name].bounds.append(_deciding_bound(seen.gap, seen.bound))
            runs[name].ratios.append(seen.ratio)
        runs["numpy"].gaps.append(0.0)
        runs["numpy"].bounds.append(0.0)
        runs["numpy"].ratios.append(0.0)
    for name, model in models.items():
        runs[name].params = flat(p.data for p in model.parameters())
    return runs


def model_namespace(model):
    """The namespace of ``model``'s parameters."""
    return backend.get_namespace(next(iter(model.parameters())).data)


def _copy_parameters(source, target):
    """``target``'s parameters become NumPy float64 copies of ``source``'s."""
    for p, q in zip(source.parameters(), target.parameters()):
        q.data = np.array(backend.to_numpy(p.data), dtype=np.float64)


def _deciding_bound(gap, bound):
    """The bound of the element with the largest gap / bound (the smallest bound if no gap)."""
    if not np.any(gap > 0):
        return float(np.min(bound))
    ratio = np.where(bound > 0, gap / np.where(bound > 0, bound, 1.0), np.inf)
    return float(bound[int(np.argmax(np.where(gap > 0, ratio, -1.0)))])


__all__ = ["LibraryRun", "SAME_KERNELS_AS_NUMPY", "compare_libraries", "model_namespace",
           "same_kernels"]
