"""Which hidden layers of an MLP to recompute: ``planner.plan(recompute="auto")``'s choices.

Recomputing a run of consecutive hidden layers (``nn.MLP.blocks``, ``nn.Recompute``) keeps
only the run's output and runs its forward again in the backward: less memory, more time,
the same update. ``shortlist`` scores every set of runs with
``memory.peak_of_micro_batches`` (the theory of ``memory.theoretical_peak``), keeping the
few that reach the largest micro-batch for the least recomputed work; ``time_choices``
times the planned choices on one copy of the model, interleaved.

>>> [runs for runs in run_sets(2)]
[[], [(1, 1)], [(0, 0)], [(0, 0), (1, 1)], [(0, 1)]]
"""

import copy
import itertools
import math
import statistics
import time

from minigrad.accumulate import step
from minigrad.analysis.memory import copy_update
from minigrad.analysis.memory_theory import not_covered, peak_of_micro_batches

SHORTLIST = 4  # choices measured by ``plan(recompute="auto")``


def run_sets(count):
    """Every set of disjoint runs of consecutive hidden layers among ``count``, as sorted
    ``[(first, last), ...]``: each layer is kept, starts a run or continues one."""
    for marks in itertools.product((0, 1, 2), repeat=count):  # kept, starts, continues
        if any(mark == 2 and (k == 0 or marks[k - 1] == 0) for k, mark in enumerate(marks)):
            continue
        runs = []
        for k, mark in enumerate(marks):
            if mark == 1:
                runs.append([k, k])
            elif mark == 2:
                runs[-1][1] = k
        yield [tuple(r) for r in runs]


def shortlist(model, loss_fn, optimizer, x, budget):
    """``recompute="auto"``'s choices to measure, as lists of hidden-layer runs (see
    ``planner.plan``): by the theory where it covers the model (at most 8 hidden layers:
    3^8 marks), else nothing and everything. The model's own recomputed runs play no part."""
    count = len(model.block_layers)
    plain = copy.copy(model)
    object.__setattr__(plain, "recompute_segments", ())
    if not_covered(plain, loss_fn, optimizer) is not None or count > 8:
        return [[], [(k, k) for k in range(count)]]
    best = {}  # largest fitting m -> (multiply-adds recomputed, runs)
    for runs in run_sets(count):
        object.__setattr__(plain, "recompute_segments", model.blocks(runs))
        m = _largest_by_theory(plain, loss_fn, optimizer, x, budget)
        cost = work(model, runs)
        if m and (m not in best or cost < best[m][0]):
            best[m] = (cost, runs)
    front, least = [], math.inf
    for m in sorted(best, reverse=True):  # a larger m recomputing less would dominate
        cost, runs = best[m]
        if cost < least:
            front.append(runs)
            least = cost
    return front[:SHORTLIST] or [[]]


def work(model, runs):
    """Multiply-adds per sample that recomputing ``runs`` adds: each recomputed hidden
    layer's Linear again."""
    return sum(model.sizes[k] * model.sizes[k + 1] for first, last in runs
               for k in range(first, last + 1))


def split_pairs(n, m):
    """The ``(size, later)`` pairs of ``split_sizes(n, micro_batch_size=m)`` (what
    ``memory.peak_of_micro_batches`` takes), without building the list: the first, the
    full ones after it, the remainder."""
    k = -(-n // m)
    pairs = {(min(m, n), False)}
    if k >= 3:
        pairs.add((m, True))
    if k >= 2:
        pairs.add((n - (k - 1) * m, True))
    return pairs


def _largest_by_theory(model, loss_fn, optimizer, x, budget):
    """The largest m in [1, N] whose theoretical peak fits ``budget`` (0 if none), by
    bisection."""
    n = x.shape[0]

    def fits(m):
        return peak_of_micro_batches(model, loss_fn, optimizer, x.dtype,
                                     split_pairs(n, m)) <= budget

    if not fits(1):
        return 0
    lo, hi = 1, n
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid - 1)
    return lo


def time_choices(model, loss_fn, optimizer, x, y, planned, rounds):
    """Adds ``seconds_per_update`` (the least of ``rounds`` steps, after one untimed) and
    ``seconds_without_recompute`` (the same micro-batch size, nothing recomputed) to each
    record of ``planned`` (with ``micro_batch_size`` and layer runs ``segments``); the
    steps of all records are interleaved. Returns the rounds' spread: the largest
    (median - least) / least over the records, how far apart two timings of one step fell.

    Every step runs on ONE copy of the model and optimizer, its recomputed runs set before
    each step: recomputation never changes the update, so the copy trains on as any run
    would, and timing holds one model's memory, not one per choice.
    """
    copied, opt = copy_update(model, optimizer)
    runs = []
    for record in planned:
        runs.append((record, "seconds_per_update", record["segments"], []))
        if record["segments"]:
            runs.append((record, "seconds_without_recompute", [], []))
    for first in (True, *([False] * rounds)):
        for record, _, segments, times in runs:
            copied.set_recompute([tuple(s) for s in segments])
            start = time.perf_counter()
            step(copied, loss_fn, opt, x, y, micro_batch_size=record["micro_batch_size"])
            if not first:
                times.append(time.perf_counter() - start)
    spread = 0.0
    for record, key, _, times in runs:
        record[key] = min(times)
        spread = max(spread, statistics.median(times) / min(times) - 1)
    for record in planned:
        if not record["segments"]:
            record["seconds_without_recompute"] = record["seconds_per_update"]
    return spread
