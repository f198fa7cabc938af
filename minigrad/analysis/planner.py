"""Adaptive accumulation: the largest micro-batch whose update fits a memory budget.

The global batch, and so the update, stays the same: ``accumulate.step`` with
``micro_batch_size=m`` is full-batch training under the item-weighted rule for every m.
Only the memory changes. The peak of one update grows with m about linearly,

    peak(m) ~ a + b m    (b: the activations one sample keeps for the backward pass),

until it meets the floor that the parameters, gradients and optimizer state set whatever
m is (``minigrad.analysis.memory.theoretical_peak`` derives both parts). ``plan`` fits
that line to two measured micro-batch sizes and verifies its choice by measuring it.

>>> parse_bytes("256MB"), parse_bytes("1.5 KiB"), format_bytes(43_200_000)
(256000000, 1536, '41.2 MiB')
"""

import math
import re
from fractions import Fraction

from minigrad import nn
from minigrad.accumulate import split_sizes
from minigrad.analysis import recompute_choice
from minigrad.analysis.memory import check_update, copy_update, update_memory
from minigrad.engine import validate

UNITS = {"b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9,
         "kib": 2**10, "mib": 2**20, "gib": 2**30}
_SIZE = re.compile(r"\s*(\d+\.?\d*|\.\d+)\s*([a-z]*)\s*", re.IGNORECASE)


class BudgetTooSmall(ValueError):
    """No micro-batch size fits. ``smallest``: the least peak measured (at ``size``), a
    budget that fits. Usually at size 1; where the arrays weigh little, Python's objects
    of each micro-batch (about 0.5 KiB) can make a few samples per micro-batch cheaper."""

    def __init__(self, budget, smallest, size):
        super().__init__(f"no micro-batch size fits budget_bytes={budget}: the smallest peak "
                         f"measured is {smallest} bytes ({format_bytes(smallest)}, at "
                         f"micro_batch_size={size}), the smallest budget known to fit")
        self.budget, self.smallest, self.size = budget, smallest, size


def parse_bytes(text):
    """``text`` such as ``"256MB"``, ``"1.5 GiB"`` or ``"4096"`` as a positive int of bytes.

    Units in any case: B, KB, MB, GB (powers of 1000), KiB, MiB, GiB (powers of 1024); no
    unit means bytes. A fraction of a byte is dropped.
    """
    if not isinstance(text, str):
        raise TypeError(f"a memory size must be a string such as '256MB', got "
                        f"{type(text).__name__} {text!r}")
    match = _SIZE.fullmatch(text)
    unit = UNITS.get((match.group(2) or "b").lower()) if match else None
    size = math.floor(Fraction(match.group(1)) * unit) if unit else 0
    if size < 1:
        raise ValueError(f"memory must be a positive size such as '256MB' or '1.5GiB' (units "
                         f"B, KB, MB, GB, KiB, MiB, GiB), got {text!r}")
    return size


def format_bytes(size):
    """``size`` bytes in binary units with one decimal, e.g. ``'41.2 MiB'``."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}"
    return f"{size} B"


RECOMPUTE = ("none", "all", "auto")


def plan(model, loss_fn, optimizer, x, y, budget_bytes, *, recompute="none", rounds=3):
    """The largest micro-batch size m (1 <= m <= N) whose one update fits ``budget_bytes``,
    and, with ``recompute``, which hidden layers of an ``nn.MLP`` to recompute.

    1. Probe two small sizes, m1 = min(N, 8) and m2 = min(N, 2 m1), and fit the line
       peak(m) = a + b m through their measured peaks. Where the line's choice lies beyond
       2 m2 (the probes may sit on the floor, where b says little), double both and refit,
       so no measured run goes far past the budget.
    2. Verify: measure the line's choice. Then search, measuring, until a size m fits and
       m + 1 does not (or m = N): upwards along the line through the largest fitting size
       and the size measured below it (at most doubling m); between a fitting and a
       failing size by the chord through their peaks (bisecting when the chord did not
       halve the interval). Peaks are not monotone in m everywhere (m = N/2 + 1 leaves a
       smaller second micro-batch than m = N/2), so m is the first fitting size below a
       failing one that this search meets.

    ``recompute``: ``"none"`` keeps every activation; ``"all"`` recomputes every hidden
    layer of the MLP (``model.blocks("all")``); ``"auto"`` chooses. Recomputation changes
    memory and time, never the update (``nn.Recompute``), so the choice is the fastest
    update that fits: for every way of recomputing runs of consecutive hidden layers,
    ``theoretical_peak`` gives the largest m that fits; of the choices that reach the same
    m only the one recomputing the fewest multiply-adds stays, and the few with the largest
    m (``recompute_choice.SHORTLIST``) are planned as above, measured, and timed (the least
    of ``rounds`` steps, interleaved). Choices whose times lie within the rounds' own spread of the
    fastest (how far the median of one step's rounds fell from their least) are taken as
    equally fast, and of those the one that recomputes the fewest multiply-adds wins.
    Where the theory does not cover the model, "auto" weighs "none" and "all". The
    model's own ``recompute_segments`` are ignored; the choice is returned, not set (pass
    ``recompute`` to ``nn.MLP`` or ``segments`` to ``set_recompute``).

    Each measurement is ``update_memory`` (a step on a copy: the model is untouched).
    Returns ``micro_batch_size``, ``num_micro_batches``, ``predicted_peak`` (a + b m; above
    N/2 the largest micro-batch is the first, with no accumulated sum beside it, and the
    line over-predicts by up to the gradients' bytes), ``measured_peak``, ``budget``, the
    line's ``a`` and ``b``, ``runs`` (measured updates), ``recompute`` (the recomputed runs
    as ``[first, last]`` hidden-layer pairs) and ``segments`` (the same as layer runs, for
    ``model.set_recompute``); with ``recompute`` other than "none" also
    ``seconds_per_update`` and ``candidates``, one record per choice planned (its
    ``recompute``, ``micro_batch_size``, ``measured_peak``, ``seconds_per_update`` and
    ``seconds_without_recompute``, the same m timed with nothing recomputed: the time
    recomputation costs). When not even m = 1 fits, ``BudgetTooSmall`` (a ``ValueError``)
    names the smallest peak measured: a budget that fits.

    >>> import numpy as np
    >>> from minigrad import nn, optim
    >>> model = nn.MLP([8, 512, 4], seed=0)
    >>> opt = optim.SGD(model.parameters(), lr=0.1)
    >>> x, y = np.zeros((64, 8)), np.arange(64) % 4
    >>> choice = plan(model, nn.CrossEntropyLoss(), opt, x, y, parse_bytes("500KB"))
    >>> 1 <= choice["micro_batch_size"] < 64, choice["measured_peak"] <= 500_000
    (True, True)
    """
    x, y = check_update(model, optimizer, x, y)
    budget = validate.positive_int("budget_bytes", budget_bytes)
    validate.choice("recompute", recompute, RECOMPUTE)
    rounds = validate.positive_int("rounds", rounds)
    if recompute == "none":
        return {**_plan_size(model, loss_fn, optimizer, x, y, budget, ()), "recompute": [],
                "segments": []}
    if not isinstance(model, nn.MLP) or not model.block_layers:
        raise TypeError(f"recompute={recompute!r} chooses hidden layers of an nn.MLP with "
                        f"one or more hidden layers, got {type(model).__name__}; use "
                        f"recompute='none'")
    every = [(k, k) for k in range(len(model.block_layers))]
    choices = [every] if recompute == "all" else \
        recompute_choice.shortlist(model, loss_fn, optimizer, x, budget)
    planned, smallest = [], None
    for runs in choices:
        try:
            result = _plan_size(model, loss_fn, optimizer, x, y, budget, _segments(model, runs))
        except BudgetTooSmall as err:
            smallest = min(smallest or (err.smallest, err.size), (err.smallest, err.size))
            continue
        planned.append({**result, "recompute": [list(r) for r in runs],
                        "segments": [list(s) for s in _segments(model, runs)]})
    if not planned:
        raise BudgetTooSmall(budget, *smallest)
    spread = recompute_choice.time_choices(model, loss_fn, optimizer, x, y, planned, rounds)
    fastest = min(r["seconds_per_update"] for r in planned)
    ties = [r for r in planned if r["seconds_per_update"] <= fastest * (1 + spread)]
    best = min(ties, key=lambda r: (recompute_choice.work(model, r["recompute"]),
                                    -r["micro_batch_size"]))
    keys = ("recompute", "micro_batch_size", "measured_peak", "seconds_per_update",
            "seconds_without_recompute")
    return {**best, "candidates": [{k: r[k] for k in keys} for r in planned]}


def _plan_size(model, loss_fn, optimizer, x, y, budget, segments):
    """Steps 1 and 2 of ``plan`` with the runs ``segments`` recomputed."""
    n = x.shape[0]
    peaks = {}
    model, optimizer = _with_segments(model, optimizer, segments)

    def peak(m):
        if m not in peaks:
            peaks[m] = update_memory(model, loss_fn, optimizer, x, y,
                                     micro_batch_size=m)["peak"]
        return peaks[m]

    m1, m2 = min(n, 8), min(n, 16)
    while True:
        p1, p2 = peak(m1), peak(m2)
        b = (p2 - p1) / (m2 - m1) if m2 > m1 else 0.0
        a = p1 - b * m1
        guess = _largest_below(a, b, budget, n)
        if guess <= 2 * m2 or m2 == n:
            break
        m1, m2 = m2, min(n, 2 * m2)
    m = _search(peak, peaks, guess, budget, n)
    return {"micro_batch_size": m, "num_micro_batches": len(split_sizes(n, micro_batch_size=m)),
            "predicted_peak": round(a + b * m), "measured_peak": peaks[m], "budget": budget,
            "a": a, "b": b, "runs": len(peaks)}


def _with_segments(model, optimizer, segments):
    """``(model, optimizer)`` as they are when ``segments`` equal the model's runs; else
    copies of both with ``segments`` set (the caller's model is never changed)."""
    if tuple(getattr(model, "recompute_segments", ())) == tuple(segments):
        return model, optimizer
    model, optimizer = copy_update(model, optimizer)
    model.set_recompute(segments)
    return model, optimizer


def _segments(model, runs):
    """Hidden-layer runs ``[(first, last), ...]`` as the MLP's layer runs."""
    return list(model.blocks(runs))


def _largest_below(a, b, budget, n):
    """The largest m in [1, n] with a + b m <= budget (1 if none); n when b <= 0: probes on
    the floor, where the line bounds nothing."""
    if b <= 0:
        return n
    return min(n, max(1, math.floor((budget - a) / b)))


def _search(peak, peaks, guess, budget, n):
    """A measured m that fits, with m = n or m + 1 failing, starting from ``guess``."""
    peak(guess)
    lo = max((m for m, p in peaks.items() if p <= budget), default=None)
    if lo is None:
        if peak(1) > budget:
            raise BudgetTooSmall(budget, *min((p, m) for m, p in peaks.items()))
        lo = 1
    hi = min((m for m, p in peaks.items() if p > budget and m > lo), default=None)
    bisect = False
    while lo < n and (hi is None or hi - lo > 1):
        width = None if hi is None else hi - lo
        m = _upwards(peaks, lo, budget, n) if hi is None else \
            _between(peaks, lo, hi, budget, bisect)
        if peak(m) <= budget:
            lo = m
        else:
            hi = m
        # A chord that did not halve the interval (one end stuck): bisect next time.
        bisect = width is not None and hi - lo > width // 2
    return lo


def _upwards(peaks, lo, budget, n):
    """Above the fitting ``lo``: the line through it and the size measured just below it,
    extended to the budget; at most doubling ``lo``."""
    below = max((m for m in peaks if m < lo), default=None)
    rise = peaks[lo] - peaks[below] if below is not None else 0
    m = 2 * lo if rise <= 0 else lo + math.floor((budget - peaks[lo]) * (lo - below) / rise)
    return min(n, 2 * lo, max(lo + 1, m))


def _between(peaks, lo, hi, budget, bisect):
    """Between the fitting ``lo`` and the failing ``hi``: where the chord through their
    peaks meets the budget, or the midpoint."""
    rise = peaks[hi] - peaks[lo]
    m = (lo + hi) // 2
    if not bisect and rise > 0:
        m = lo + math.floor((budget - peaks[lo]) * (hi - lo) / rise)
    return min(hi - 1, max(lo + 1, m))
