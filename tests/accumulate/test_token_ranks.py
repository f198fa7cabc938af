"""Token-level losses across MPI ranks, on the character-level language model (``nn.CharMLP``
on the Census names, ``tests/tokens.py``).

The rule of ``tests/studies/test_token_losses.py`` one level up: the items are tokens, and
the divisor is the window's real tokens over every micro-batch of every rank, added up ONCE
per window by the reduction (``accumulate.step(..., reduction=AllReduce(comm))``). ONE
``mpirun -n 2`` launch (``mpi_demo.launch``) runs every case of ``CASES`` with this file as the
script; rank 0 prints every rank's results as one JSON line (a float64 goes through JSON
exactly), and the tests below judge them against one process, this one. What they show:

* names sharded by rows, [27, 13] names per rank (so the ranks hold different numbers of
  tokens), one micro-batch each: parameters after three updates of SGD with momentum EQUAL
  (``==``) one process on the whole batch cut at the same row. The arithmetic is the same:
  the same two per-rank sums, added once (two ranks' all-reduce adds each element once, and
  a + b is b + a), divided by the same global count;
* any micro-batches on each rank, padded or packed rows: the update's gradient is the unsplit
  full batch's within ``token_bound`` (k = every micro-batch of every rank);
* context parallelism: one packed row's positions cut between the two ranks (every position
  carries its own context, so no rank needs the other's tokens): the gradient equals
  (``==``) one process adding the same two shards as micro-batches, and is the whole row's
  within the bound (k = 2);
* two mutants of the count, far outside the bound (``FAR``) where the ranks hold different
  numbers of tokens: each rank dividing by its own tokens (the ranks' means then averaged,
  as a mean all-reduce does), and the sums all-reduced but the count not (each rank divides
  the global sum by its own tokens; the replicas then drift apart). Where the two shards hold
  the same number of tokens the first is right (within the bound) and the second is off by a
  factor 2: the check tells them apart.

The gradient an update used is kept by ``Recorder``, an optimizer of its own, which the
driver steps on the window's sums divided once (``minigrad.accumulate.commit``).
"""

import os
import sys
from dataclasses import replace

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
if __name__ == "__main__":  # the MPI worker: the helpers that conftest.py puts on the path
    sys.path.insert(0, os.path.dirname(HERE))

from helpers import launch_two_ranks, run_cases_on_ranks  # noqa: E402
from tokens import (  # noqa: E402
    CE,
    CORPUS,
    FAR,
    gap,
    gradients,
    make_model,
    packed,
    padded,
    token_bound,
    token_counts,
)

from minigrad.accumulate import Accumulator  # noqa: E402
from minigrad.accumulate import step as accumulate_step  # noqa: E402
from minigrad.accumulate.distributed import AllReduce, shard  # noqa: E402
from minigrad.optim import SGD  # noqa: E402
from minigrad.studies import text  # noqa: E402

SEED = 0  # CharMLP with C = 3, D = 4, hidden 16
NAMES, SHARDS = range(40), [27, 13]  # names sharded by rows: names per rank
ROW_NAMES = range(24)  # one packed row, its positions cut between the ranks
TOKENS = sum(len(CORPUS[i]) + 1 for i in ROW_NAMES)
ROW = packed(ROW_NAMES, TOKENS + 8)  # every real token, then 8 positions of padding
CUTS = {"uneven": TOKENS - 20, "even": TOKENS // 2}  # rank 0 holds the positions [:cut]


def layout(name):
    """The global batch of layout ``name`` (40 names), and its rows per rank."""
    if name == "padded":
        return padded(NAMES), SHARDS
    w = packed(NAMES, 20)
    rows = w.x.shape[0]
    return w, [rows - rows // 3, rows // 3]


def row_shard(cut, rank):
    """Rank ``rank``'s positions of ``ROW``: ``(x, y)`` of shape (1, L_r, C) and (1, L_r)."""
    part = slice(None, CUTS[cut]) if rank == 0 else slice(CUTS[cut], None)
    return ROW.x[:, part], ROW.y[:, part]


# ----- the MPI worker (run by mpirun, not by pytest) -------------------------------------------
class Recorder(SGD):
    """SGD that keeps the gradient of each update: the driver steps an optimizer of its own
    on the window's sums divided once by its items."""

    def __init__(self, params):
        super().__init__(params, lr=0.1)
        self.seen = []

    def step(self):
        self.seen.append([np.array(p.grad) for p in self.params])
        super().step()


class LocalMeans(AllReduce):
    """Mutant: each rank divides its sums by its own tokens and counts one item, so the
    ranks' means are averaged (a mean all-reduce of local means)."""

    def update(self, acc):
        grads = [None if p.grad is None else p.grad / acc.pending_items for p in acc.params]
        acc.load_sums(grads, replace(acc.window, items=1))
        return super().update(acc)


class LocalCount(AllReduce):
    """Mutant: the gradient sums are all-reduced, the count is not: each rank divides the
    global sum by its own tokens."""

    def update(self, acc):
        own, load = acc.pending_items, acc.load_sums
        acc.load_sums = lambda grads, window: load(grads, replace(window, items=own))
        return super().update(acc)


REDUCTIONS = {"rule": AllReduce, "local_means": LocalMeans, "local_count": LocalCount}


def first_update(model, opt):
    """Name -> the gradient of the first update ``opt`` (a ``Recorder``) made, as lists."""
    return {name: g.tolist() for (name, _), g in zip(model.named_parameters(), opt.seen[0])}


def recorded(comm, x, y, reduction, **split):
    """Name -> the gradient ONE update of a fresh model used, this rank holding ``(x, y)``."""
    model = make_model(SEED)
    opt = Recorder(model.parameters())
    accumulate_step(model, CE, opt, x, y, reduction=REDUCTIONS[reduction](comm), **split)
    return first_update(model, opt)


def case_names_equal(comm):
    """[27, 13] names per rank, one micro-batch each, three updates of SGD with momentum;
    beside it one process on the whole batch, cut at the same row."""
    model, full = make_model(SEED), make_model(SEED)
    opt, full_opt = (SGD(m.parameters(), lr=0.5, momentum=0.9) for m in (model, full))
    equal, tokens = [], []
    for t in range(3):
        w = padded(range(40 * t, 40 * t + 40))
        x, y = shard(w.x, w.y, comm, sizes=SHARDS)
        accumulate_step(model, CE, opt, x, y, reduction=AllReduce(comm))
        accumulate_step(full, CE, full_opt, w.x, w.y, sizes=SHARDS)
        equal.append(all(np.array_equal(p.data, q.data)
                         for p, q in zip(model.parameters(), full.parameters())))
        tokens.append(token_counts(w, SHARDS))
    return {"equal": equal, "tokens": tokens}


def case_names(comm, name, reduction):
    """One update of layout ``name``, sharded by rows, micro-batches of 5 rows on each rank."""
    w, rows = layout(name)
    x, y = shard(w.x, w.y, comm, sizes=rows)
    return {"grads": recorded(comm, x, y, reduction, micro_batch_size=5),
            "micro_batches": -(-x.shape[0] // 5)}


def case_positions(comm, cut, reduction):
    """One update, rank r holding its positions of ``ROW``."""
    x, y = row_shard(cut, comm.Get_rank())
    return {"grads": recorded(comm, x, y, reduction),
            "tokens": int(np.sum(y != text.IGNORE_INDEX))}


def case_positions_one_process(comm):
    """The uneven cut's two shards as two micro-batches of one process (each rank alone)."""
    model = make_model(SEED)
    opt = Recorder(model.parameters())
    acc = Accumulator(model, CE, opt)
    for rank in (0, 1):
        acc.add(*row_shard("uneven", rank))
    acc.update()
    return first_update(model, opt)


CASES = {
    "names_equal": case_names_equal,
    "names_padded_rule": lambda comm: case_names(comm, "padded", "rule"),
    "names_packed_rule": lambda comm: case_names(comm, "packed", "rule"),
    "names_padded_local_means": lambda comm: case_names(comm, "padded", "local_means"),
    "names_padded_local_count": lambda comm: case_names(comm, "padded", "local_count"),
    "positions_uneven_rule": lambda comm: case_positions(comm, "uneven", "rule"),
    "positions_uneven_local_means": lambda comm: case_positions(comm, "uneven", "local_means"),
    "positions_uneven_local_count": lambda comm: case_positions(comm, "uneven", "local_count"),
    "positions_even_rule": lambda comm: case_positions(comm, "even", "rule"),
    "positions_even_local_means": lambda comm: case_positions(comm, "even", "local_means"),
    "positions_even_local_count": lambda comm: case_positions(comm, "even", "local_count"),
    "positions_one_process": case_positions_one_process,
}


if __name__ == "__main__":
    run_cases_on_ranks(CASES)
    raise SystemExit(0)


# ----- the tests ---------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def ranks():
    """Every case's result on rank 0 and rank 1, from one 2-rank launch."""
    return launch_two_ranks(os.path.abspath(__file__), timeout=120)


def grads(result):
    return {name: np.array(g) for name, g in result["grads"].items()}


def test_ranks_of_different_token_counts_equal_one_process_exactly(ranks):
    """Three updates, the ranks' token counts different in each: ``==`` on both ranks."""
    tokens = ranks[0]["names_equal"]["tokens"]
    assert all(a != b for a, b in tokens), tokens
    for rank in ranks:
        assert rank["names_equal"]["equal"] == [True, True, True]


@pytest.mark.parametrize("name", ["padded", "packed"])
def test_any_micro_batches_on_each_rank_are_full_batch_training(ranks, name):
    w, rows = layout(name)
    assert len(set(token_counts(w, rows))) == 2
    results = [rank[f"names_{name}_rule"] for rank in ranks]
    full = gradients(SEED, CE, w.x, w.y)
    bound = token_bound(SEED, NAMES, [w], sum(r["micro_batches"] for r in results))
    assert gap(grads(results[0]), full, bound) <= 1.0
    assert results[1]["grads"] == results[0]["grads"]  # one reduced gradient, every rank


@pytest.mark.parametrize("mutant", ["local_means", "local_count"])
def test_mutants_of_the_count_across_ranks_fail(ranks, mutant):
    """The names of the test above, padded: each mutant is far outside the bound that the
    rule meets, on every rank."""
    w, _ = layout("padded")
    full = gradients(SEED, CE, w.x, w.y)
    results = [rank[f"names_padded_{mutant}"] for rank in ranks]
    bound = token_bound(SEED, NAMES, [w], sum(r["micro_batches"] for r in results))
    assert all(gap(grads(r), full, bound) > FAR for r in results)


def test_context_parallel_shards_are_micro_batches_of_one_process(ranks):
    """Positions of one row on two ranks: the same sums, added once, divided by the same
    count as one process adding the two shards, so ``==``."""
    one_process = ranks[0]["positions_one_process"]
    for rank in ranks:
        assert rank["positions_uneven_rule"]["grads"] == one_process


@pytest.mark.parametrize("cut", list(CUTS))
def test_context_parallel_shards_are_the_whole_rows_training(ranks, cut):
    """The global count (the rule) is within the bound on both cuts; dividing by each
    rank's own tokens is far outside it where the shards hold different numbers of tokens
    (and within it where they hold the same); not all-reducing the count is far outside
    it on both (a factor 2 where the counts are equal; where they differ, the ranks disagree
    too)."""
    tokens = [rank[f"positions_{cut}_rule"]["tokens"] for rank in ranks]
    assert ROW.x.shape[0] == 1 and sum(tokens) == ROW.num_tokens
    assert (tokens[0] == tokens[1]) == (cut == "even")
    # the cut falls inside a name: rank 1's first context holds tokens of rank 0's positions
    assert ROW.sequence[0, CUTS[cut] - 1] == ROW.sequence[0, CUTS[cut]]
    full = gradients(SEED, CE, ROW.x, ROW.y)
    bound = token_bound(SEED, ROW_NAMES, [ROW], 2)
    for rank in ranks:
        assert gap(grads(rank[f"positions_{cut}_rule"]), full, bound) <= 1.0
        local_means = gap(grads(rank[f"positions_{cut}_local_means"]), full, bound)
        assert local_means <= 1.0 if cut == "even" else local_means > FAR
        assert gap(grads(rank[f"positions_{cut}_local_count"]), full, bound) > FAR
    replicas = [rank[f"positions_{cut}_local_count"]["grads"] for rank in ranks]
    assert (replicas[0] == replicas[1]) == (cut == "even")  # own counts differ: replicas drift
