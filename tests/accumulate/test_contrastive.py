"""Contrastive losses under accumulation (``minigrad.accumulate.contrastive``): what each
strategy computes, proved.

* GradCache IS full-batch training: within the derived float64 bound of
  ``minigrad.analysis.contrastive_bound`` for every split (hypothesis), and ``==`` in exact
  Fractions for a rational loss with in-batch negatives (the spectral contrastive loss);
  a dropout that draws fresh masks in the second pass breaks it (gap / bound >> 1).
* Naive accumulation is NOT: it is exactly the sum of each micro-batch's own loss, whose
  queries meet n_j - 1 negatives instead of N - 1 (hand-computed log n_j), far beyond the
  bound.
* The bank's first update is naive's bit for bit; from the second on it differs, and in
  Fractions it is exactly the loss with the banks' rows appended.
"""

import copy
import math

import numpy as np
import pytest
from bounds import partitions
from helpers import assert_same, to_np
from hypothesis import given
from hypothesis import strategies as st
from pairs import batch, dual

from minigrad import nn, optim
from minigrad.accumulate import STRATEGIES, Bank, GradCache, Naive, accumulated_gradients, step
from minigrad.analysis.bounds import bound_ratio
from minigrad.analysis.contrastive_bound import gradcache_bound, sample_gradients
from minigrad.analysis.exact import to_exact, to_fractions
from minigrad.engine import Tensor, backend


def ratio(grads, full, bound):
    return max(bound_ratio(np.abs(to_np(grads[k]) - to_np(full[k])), bound[k]) for k in full)


# ----- GradCache in floating point ------------------------------------------------------------
@pytest.mark.parametrize("symmetric", [False, True])
@pytest.mark.parametrize("sizes", [[12], [5, 5, 2], [3, 9], [1] * 12])
def test_gradcache_is_the_full_batch_gradient_within_the_bound(xp, symmetric, sizes):
    x, y = batch(12, xp=xp)
    loss = nn.InfoNCELoss(temperature=0.5, symmetric=symmetric)
    full = accumulated_gradients(dual(xp=xp), loss, x, y)
    bound, kappa = gradcache_bound(dual(xp=xp), loss, x, y)
    assert kappa >= 1
    cached = accumulated_gradients(dual(xp=xp), loss, x, y, sizes=sizes, strategy="gradcache")
    assert ratio(cached, full, bound) <= 1
    naive = accumulated_gradients(dual(xp=xp), loss, x, y, sizes=sizes, strategy="naive")
    if len(sizes) > 1:  # the negative control: the same comparison fails where it must
        assert ratio(naive, full, bound) > 1e6


@given(data=st.data(), n=st.integers(2, 10), symmetric=st.booleans(),
       temperature=st.sampled_from([1.0, 0.3, 0.05]), seed=st.integers(0, 2**16))
def test_gradcache_within_the_bound_for_every_split(data, n, symmetric, temperature, seed):
    sizes = data.draw(partitions(n))
    x, y = batch(n, seed=seed)
    loss = nn.InfoNCELoss(temperature=temperature, symmetric=symmetric)
    full = accumulated_gradients(dual(seed=seed), loss, x, y)
    bound, _ = gradcache_bound(dual(seed=seed), loss, x, y)
    cached = accumulated_gradients(dual(seed=seed), loss, x, y, sizes=sizes,
                                   strategy=GradCache())
    assert ratio(cached, full, bound) <= 1


def test_the_samples_gradients_add_up_to_the_full_batch_gradient():
    """The bound's a_i = J_i^T G_i are sample i's shares: their sum is the gradient sum."""
    x, y = batch(9)
    loss = nn.InfoNCELoss(temperature=0.5, symmetric=True)
    full = accumulated_gradients(dual(), loss, x, y, normalize="sum")
    shares = sample_gradients(dual(), loss, x, y)
    bound, _ = gradcache_bound(dual(), loss, x, y)
    total = {k: sum(a[k] for a in shares) for k in full}
    assert ratio(total, full, {k: b * loss.num_items(y) for k, b in bound.items()}) <= 1


class FreshDropout(nn.Module):
    """A dropout that ignores the keys and draws from one running generator, as torch's
    global random state does: every call draws new masks."""

    def __init__(self, p, seed):
        super().__init__()
        self.p, self.seed = p, seed
        self.reset()

    def reset(self):
        self.generator = np.random.default_rng(self.seed)

    def forward(self, x):
        keep = self.generator.random(x.shape) >= self.p
        return x * Tensor(keep / (1 - self.p))


def test_a_second_pass_with_fresh_masks_breaks_gradcache():
    """Pass 1 draws the same numbers as the full batch (one stream, consumed in order); pass 2
    draws the next ones: the representations' gradient goes through other masks."""
    def tower(seed, dropout):
        mlp = nn.MLP([5, 8, 4], "tanh", seed=seed)
        return nn.Sequential(mlp[0], mlp[1], dropout, mlp[2])

    x, y = batch(12)
    loss = nn.InfoNCELoss(temperature=0.5)
    fresh = [FreshDropout(0.25, seed=s) for s in (10, 11)]
    model = nn.DualEncoder(tower(0, fresh[0]), tower(1, fresh[1]))
    keyed = nn.DualEncoder(tower(0, nn.Dropout(0.25, seed=10)),
                           tower(1, nn.Dropout(0.25, seed=11)))
    bound, _ = gradcache_bound(keyed, loss, x, y)
    runs = {}
    for name, strategy in (("full", "micro"), ("gradcache", "gradcache")):
        for d in fresh:
            d.reset()
        sizes = [12] if name == "full" else [5, 5, 2]
        runs[name] = accumulated_gradients(model, loss, x, y, sizes=sizes, strategy=strategy)
    assert ratio(runs["gradcache"], runs["full"], bound) > 1e6
    full = accumulated_gradients(keyed, loss, x, y)
    cached = accumulated_gradients(keyed, loss, x, y, sizes=[5, 5, 2], strategy="gradcache")
    assert ratio(cached, full, bound) <= 1


# ----- GradCache in exact arithmetic ----------------------------------------------------------
class SpectralLoss:
    """A rational loss with in-batch negatives (the spectral contrastive loss, HaoChen et al.,
    2021, without its constants): with S = q p^T (N x M), l_i = -2 S_ii + sum_j S_ij^2."""

    in_batch_negatives = True

    def __call__(self, out, target, reduction="sum"):
        q, p = out
        s = q @ p.T
        diagonal = Tensor(to_fractions(np.eye(*s.shape)))
        total = (s * diagonal).sum() * -2 + (s ** 2).sum()
        return total if reduction == "sum" else total / q.shape[0]

    def num_items(self, target):
        return int(target.shape[0])


def exact_dual(seed):
    return to_exact(dual(dropout=0.0, seed=seed, width=3, activation="relu"))


def exact_batch(n, seed):
    x, y = batch(n, seed=seed, width=3)
    return to_fractions(x), y


@given(data=st.data(), n=st.integers(1, 6), seed=st.integers(0, 2**16))
def test_gradcache_equals_the_full_batch_gradient_exactly(data, n, seed):
    sizes = data.draw(partitions(n))
    x, y = exact_batch(n, seed)
    full = accumulated_gradients(exact_dual(seed), SpectralLoss(), x, y)
    cached = accumulated_gradients(exact_dual(seed), SpectralLoss(), x, y, sizes=sizes,
                                   strategy="gradcache")
    assert_same(cached, full)
    naive = accumulated_gradients(exact_dual(seed), SpectralLoss(), x, y, sizes=sizes,
                                  strategy="naive")
    assert all(np.array_equal(naive[k], full[k]) for k in full) == (len(sizes) == 1)


# ----- naive accumulation ---------------------------------------------------------------------
def test_naive_is_the_sum_of_each_micro_batchs_own_loss():
    """Bit for bit: each micro-batch's loss sum with its own negatives, added, divided once
    (no dropout: a micro-batch run alone would number its samples from 0)."""
    x, y = batch(10)
    loss, sizes = nn.InfoNCELoss(temperature=0.5, symmetric=True), [4, 4, 2]
    naive = accumulated_gradients(dual(0.0), loss, x, y, sizes=sizes, strategy="naive")
    own, start = None, 0
    for n in sizes:
        part = accumulated_gradients(dual(0.0), loss, x[start:start + n], y[start:start + n],
                                     normalize="sum")
        own = part if own is None else {k: own[k] + part[k] for k in own}
        start += n
    assert_same(to_np(naive), {k: g / loss.num_items(y) for k, g in own.items()})


def test_a_query_meets_its_micro_batchs_negatives_only():
    """Equal logits (zero towers): a query among n candidates has loss log n. Full batch:
    log 10; naive over [4, 4, 2]: (8 log 4 + 2 log 2) / 10, the mean of log n_j per query."""
    model = dual(dropout=0.0)
    for t in model.parameters():
        t.data = t.data * 0.0
    x, y = batch(10)
    opt = optim.SGD(model.parameters(), lr=0.0)
    loss = nn.InfoNCELoss()
    full = step(model, loss, opt, x, y, strategy="naive")
    naive = step(model, loss, opt, x, y, sizes=[4, 4, 2], strategy="naive")
    cached = step(model, loss, opt, x, y, sizes=[4, 4, 2], strategy="gradcache")
    assert full == pytest.approx(math.log(10), rel=4e-16) and cached == full
    assert naive == pytest.approx((8 * math.log(4) + 2 * math.log(2)) / 10, rel=4e-16)


# ----- the memory bank ------------------------------------------------------------------------
def test_the_bank_starts_as_naive_and_then_differs():
    """At the bank model's parameters, update by update: the bank's gradient (probed on a
    copy of the bank) is naive's bit for bit at the first update, then neither naive's nor
    the full batch's (gap / bound >> 1)."""
    loss, sizes = nn.InfoNCELoss(temperature=0.5), [4, 4, 2]
    model, bank = dual(), Bank(size=8)
    opt = optim.SGD(model.parameters(), lr=0.1)
    for t in range(3):
        x, y = batch(10, seed=t)
        grads = {name: accumulated_gradients(model, loss, x, y, sizes=sizes, strategy=s,
                                             step_index=t)
                 for name, s in (("bank", copy.deepcopy(bank)), ("naive", "naive"),
                                 ("full", "gradcache"))}
        if t == 0:
            assert_same(to_np(grads["bank"]), to_np(grads["naive"]))
        else:
            bound, _ = gradcache_bound(model, loss, x, y, step_index=t)
            assert ratio(grads["bank"], grads["naive"], bound) > 1e6
            assert ratio(grads["bank"], grads["full"], bound) > 1e6
        step(model, loss, opt, x, y, sizes=sizes, strategy=bank)
        assert bank.passages.shape[0] == bank.queries.shape[0] == min(8, 10 * (t + 1))


@pytest.mark.parametrize("dual_bank", [True, False])
def test_in_fractions_the_bank_is_the_loss_with_the_banks_rows_appended(dual_bank):
    """The spectral loss of [q; Q_b] and [p; P_b], written out by blocks (no concatenation,
    the banks as constants), has exactly the bank's gradient at the second window."""
    x, y = exact_batch(6, seed=1)
    model, bank = exact_dual(1), Bank(size=4, dual=dual_bank)
    accumulated_gradients(model, SpectralLoss(), x, y, sizes=[3, 3], strategy=bank)
    qb, pb = Tensor(bank.queries), Tensor(bank.passages)  # the last 4 pairs of window 1
    got = accumulated_gradients(model, SpectralLoss(), x, y, sizes=[2, 4], strategy=bank)
    for t in model.parameters():
        t.grad = None
    items = 0
    for start, n in ((0, 2), (2, 4)):
        q, p = model(x[start:start + n])
        total = (q * p).sum() * -2 + ((q @ p.T) ** 2).sum() + ((q @ pb.T) ** 2).sum()
        items += n
        if dual_bank:
            total = total + ((qb @ p.T) ** 2).sum()
            items += 4
        total.backward()
    want = {k: t.grad / items for k, t in model.named_parameters()}
    assert_same(got, want)


@pytest.mark.parametrize("call, error, text", [
    (lambda: accumulated_gradients(dual(), nn.InfoNCELoss(), *batch(4), strategy="bank"),
     ValueError,
     "strategy='bank' keeps a memory across updates: make one object, Bank(...), and pass it "
     "to every step"),
    (lambda: accumulated_gradients(dual(), nn.MSELoss(), *batch(4), strategy="gradcache"),
     TypeError, "strategy='gradcache' is for losses with in-batch negatives (nn.InfoNCELoss, "
                "or a loss with in_batch_negatives = True), got MSELoss"),
    (lambda: accumulated_gradients(dual(), nn.CrossEntropyLoss(), *batch(4), strategy="naive"),
     TypeError, "strategy='naive' is for losses with in-batch negatives"),
    (lambda: accumulated_gradients(dual(), nn.InfoNCELoss(), *batch(4), strategy="gradcache",
                                   normalize="micro_batch_mean"), ValueError,
     "strategy='gradcache' adds the window's loss sum; it needs normalize='items' or 'sum', "
     "got 'micro_batch_mean'"),
    (lambda: accumulated_gradients(nn.DualEncoder(nn.MLP([5, 4, 2], norm="batch"),
                                                  nn.MLP([5, 2])), nn.InfoNCELoss(),
                                   *batch(4), strategy="gradcache"), ValueError,
     "BatchNorm1d in training mode at ['query_tower.1'] couples each micro-batch"),
    (lambda: accumulated_gradients(nn.MLP([5, 2]), nn.InfoNCELoss(), batch(4)[0][:, 0],
                                   batch(4)[1], strategy="gradcache"), TypeError,
     "strategy='gradcache': a contrastive loss needs the model's output as a pair"),
    (lambda: accumulated_gradients(dual(), nn.InfoNCELoss(symmetric=True), *batch(4),
                                   strategy=Bank(dual=False)), ValueError,
     "Bank(dual=False) keeps passages only, which a symmetric loss cannot use as queries"),
    (lambda: Bank(size=-1), ValueError, "size must be an integer >= 0, got -1"),
])
def test_refusals_name_what_is_wrong(call, error, text):
    with pytest.raises(error) as info:
        call()
    assert text in str(info.value)


def test_the_named_strategies_are_the_classes():
    assert (STRATEGIES["naive"], STRATEGIES["gradcache"], STRATEGIES["bank"]) == (
        Naive, GradCache, Bank)
    assert issubclass(Naive, STRATEGIES["micro"])


def test_a_dropped_window_leaves_the_bank_as_it_was():
    model, bank = dual(), Bank(size=6)
    opt = optim.SGD(model.parameters(), lr=0.1)
    x, y = batch(6)
    step(model, nn.InfoNCELoss(), opt, x, y, sizes=[3, 3], strategy=bank)
    held = [backend.to_numpy(a).copy() for a in (bank.queries, bank.passages)]
    x = np.array(x)
    x[4, 1, 0] = np.nan
    assert math.isnan(step(model, nn.InfoNCELoss(), opt, x, y, sizes=[3, 3], strategy=bank,
                           on_nonfinite="skip"))
    assert_same([backend.to_numpy(a) for a in (bank.queries, bank.passages)], held)
    assert opt.step_count == 1
