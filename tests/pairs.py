"""What the contrastive tests share (test_contrastive.py, test_distributed.py's MPI worker):
a small dual encoder, paired batches, an optimizer that only records the gradient, and the
all-gather-WITHOUT-gradient mistake written as a strategy, as a user would write it."""

import numpy as np

from minigrad import backend, nn
from minigrad.accumulate.contrastive import backpropagate, concat, loss_on, pair


def dual(dropout=0.25, seed=0, width=5, xp=None, activation="tanh"):
    """A small dual encoder: two MLP towers width -> 8 -> 4."""
    return nn.DualEncoder(
        nn.MLP([width, 8, 4], activation, dropout=dropout, seed=seed, xp=xp),
        nn.MLP([width, 8, 4], activation, dropout=dropout, seed=seed + 1, xp=xp))


def batch(n, seed=0, width=5, xp=np):
    """n pairs whose two views are correlated (the passage is a noisy copy of the query)."""
    rng = np.random.default_rng(seed)
    q = rng.normal(size=(n, width))
    x = np.stack([q, q + 0.5 * rng.normal(size=(n, width))], axis=1)
    return xp.asarray(x), xp.asarray(np.arange(n))


class Recorder:
    """An optimizer that moves nothing and keeps the gradient it was handed (as NumPy)."""

    def __init__(self, params):
        self.params, self.step_count, self.grads = list(params), 0, None

    def step(self):
        self.grads = [None if p.grad is None else np.array(backend.to_numpy(p.grad))
                      for p in self.params]
        self.step_count += 1


class DetachedGather:
    """The usual data-parallel mistake: every process's representations are all-gathered
    WITHOUT gradient, and each process back-propagates into its own rows only.

    ``scope="local"``: the loss of this process's rows, its queries against every passage
    (and, symmetric, its passages against every query), divided by its own items;
    ``scope="global"``: the loss of the whole batch on every process, each dividing by the
    whole batch's items, the gradients then averaged over the processes (DDP's mean).
    """

    name = "detached_gather"

    def __init__(self, scope):
        self.scope = scope

    def check(self, acc):
        pass

    def run(self, acc, micro_batches, reduction):
        xp = backend.get_namespace(micro_batches[0].x)
        outs = [pair(acc, mb, self.name) for mb in micro_batches]  # one pass, with graph
        local = (concat(xp, [o[0].data for o in outs]), concat(xp, [o[1].data for o in outs]),
                 concat(xp, [mb.y for mb in micro_batches]))
        gathered = reduction.gather("gathering detached representations", local)
        q, p, y = (concat(xp, [g[k] for g in gathered]) for k in range(3))
        start, n = int(micro_batches[0].index[0]), local[0].shape[0]
        if self.scope == "global":
            loss_sum, gq, gp = loss_on(acc.loss, q, p, y)
            gq, gp = gq[start:start + n, ...], gp[start:start + n, ...]
            items = acc.loss.num_items(y)
        else:
            loss_sum, gq, gp = self._own_rows(acc.loss, q, p, start, n)
            items = acc.loss.num_items(local[2])
        row = 0
        for j, (mb, out) in enumerate(zip(micro_batches, outs)):
            rows = slice(row, row + mb.x.shape[0])
            backpropagate(out, gq[rows, ...], gp[rows, ...])
            acc.record(items if j == 0 else 0, mb.x.shape[0], loss_sum if j == 0 else 0)
            row = rows.stop
        return reduction.update(acc)

    @staticmethod
    def _own_rows(loss, q, p, start, n):
        """This process's rows of the loss: its n queries against [own passages; the others]
        (own first: info_nce's positives are the first n), and the same for its passages."""
        others = np.r_[0:start, start + n:q.shape[0]]
        own = slice(start, start + n)
        gq, gp, total = 0, 0, 0
        directions = [(q, p, False)] + ([(p, q, True)] if loss.symmetric else [])
        for a, b, swapped in directions:
            one_way = nn.InfoNCELoss(loss.temperature)
            s, ga, gb = loss_on(one_way, a[own, ...], concat(np, [b[own, ...], b[others, ...]]),
                                np.arange(n))
            g_rows, g_cols = (gb[:n, ...], ga) if swapped else (ga, gb[:n, ...])
            gq, gp, total = gq + g_rows, gp + g_cols, total + s
        return total, gq, gp


# ----- the MPI case (run by test_distributed.py's worker on 2 ranks) ---------------------------
def case_contrastive(comm):
    """Every contrastive strategy on 2 ranks, uneven shards [7, 5] in micro-batches of 3 (a
    shorter last one), judged against one process by gap / bound (<= 1: within).

    The optimizer is a ``Recorder``: it keeps the gradient and moves nothing, so the second
    update sees the same parameters and the banks hold representations of them.
    * gradcache and the mistakes, dropout 1/4, against the full-batch gradient and
      ``gradcache_bound``;
    * naive and bank (no dropout), against one process over the same micro-batches
      [3, 3, 1, 3, 2]: each micro-batch's gradient sum g_j is the same computation in both,
      only the order of adding them differs, so the bound is 2 gamma_k sum_j |g_j| / items.
    """
    import copy

    from minigrad.accumulate import Bank, accumulated_gradients, distributed
    from minigrad.analysis.bounds import bound_ratio, gamma
    from minigrad.analysis.contrastive_bound import gradcache_bound

    x, y = batch(12)
    loss = nn.InfoNCELoss(temperature=0.5, symmetric=True)
    xr, yr = distributed.shard(x, y, comm, sizes=[7, 5])

    def two_ranks(strategy, dropout, updates=1):
        model = dual(dropout)
        names = [name for name, _ in model.named_parameters()]
        recorder = Recorder(model.parameters())
        grads = []
        for _ in range(updates):
            distributed.step(model, loss, recorder, xr, yr, comm=comm, micro_batch_size=3,
                             strategy=strategy)
            grads.append(dict(zip(names, recorder.grads)))
        return grads

    def ratio(grads, reference, bound):
        return max(bound_ratio(np.abs(grads[k] - reference[k]), bound[k]) for k in reference)

    full = accumulated_gradients(dual(), loss, x, y)
    bound, _ = gradcache_bound(dual(), loss, x, y)
    results = {"gradcache": ratio(two_ranks("gradcache", 0.25)[0], full, bound)}
    for scope in ("local", "global"):
        grads = two_ranks(DetachedGather(scope), 0.25)[0]
        results[f"detached_{scope}"] = ratio(grads, full, bound)
        results[f"detached_{scope}_times_ranks"] = ratio(
            {k: g * comm.Get_size() for k, g in grads.items()}, full, bound)
        results[f"detached_{scope}_relative_gap"] = {
            tower: float(np.linalg.norm(np.concatenate([np.ravel(grads[k] - full[k])
                                                        for k in full if k.startswith(tower)]))
                         / np.linalg.norm(np.concatenate([np.ravel(full[k]) for k in full
                                                          if k.startswith(tower)])))
            for tower in ("query_tower", "passage_tower")}
    sizes = [3, 3, 1, 3, 2]
    starts = np.cumsum([0, *sizes[:-1]])
    for name, make in (("naive", lambda: "naive"), ("bank", lambda: Bank(size=4))):
        strategy, one = make(), make()
        got = two_ranks(strategy, 0.0, updates=2)
        for t in range(2):
            before = copy.deepcopy(one)
            want = accumulated_gradients(dual(0.0), loss, x, y, sizes=sizes, strategy=one,
                                         step_index=t)
            parts = [accumulated_gradients(dual(0.0), loss, x[s:s + n], y[s:s + n],
                                           normalize="sum", strategy=copy.deepcopy(before)
                                           if name == "bank" else "naive")
                     for s, n in zip(starts, sizes)]
            held = before.passages.shape[0] if name == "bank" and before.passages is not None \
                else 0
            items = loss.num_items(y) + len(sizes) * 2 * held
            summed = {k: 2 * gamma(len(sizes)) * sum(np.abs(g[k]) for g in parts) / items
                      for k in want}
            results[f"{name}_update_{t + 1}"] = ratio(got[t], want, summed)
        if name == "bank":
            results["banks_equal"] = bool(np.array_equal(strategy.passages, one.passages)
                                          and np.array_equal(strategy.queries, one.queries))
    return results
