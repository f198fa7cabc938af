"""Token-level losses under accumulation, proved on the Census names with ``nn.CharMLP``.

The rules: dividing the window's summed token losses once by its real tokens
(``normalize="items"``) IS full-batch training, for padded and packed layouts and any split;
the textbook mean of each micro-batch's token mean is not, unless every micro-batch holds the
same number of tokens; averaging per sequence is another objective, exact under accumulation
when it divides by its own items, the sequences; packing with the context reset at each
boundary gives the padded layout's gradient, without the reset the context leaks; a skipped
non-finite micro-batch counts nowhere; and three mutants of the count fail.

The bound (``token_bound``, derived in ``tests/tokens.py``, with the corpus, the model and
its layouts, which ``tests/accumulate/test_token_ranks.py`` shares): two runs over the same
tokens differ by rounding only, per element within 2 gamma_{M+1} S + 2 gamma_m S_norm. Where
every operation is exact (powers of two) a test says ``==`` instead.
"""

import numpy as np
import pytest
from bounds import partitions
from hypothesis import given, note
from hypothesis import strategies as st
from tokens import (
    CE,
    CONFIGS,
    CONTEXT,
    CORPUS,
    FAR,
    VOCAB,
    gap,
    gradients,
    make_model,
    packed,
    padded,
    token_bound,
    token_counts,
)

from minigrad import Tensor, nn
from minigrad.accumulate import Accumulator, step
from minigrad.optim import SGD
from minigrad.studies import text

seeds = st.sampled_from(sorted(CONFIGS))
subsets = st.lists(st.integers(0, len(CORPUS) - 1), min_size=2, max_size=48, unique=True)


# ----- per-token normalisation over the window IS full-batch training ---------------------------
@given(seed=seeds, chosen=subsets, data=st.data())
def test_per_token_normalisation_is_full_batch_training_padded(seed, chosen, data):
    """Any split of the rows, so micro-batches hold different numbers of real tokens; the
    divisor is the window's real tokens (``normalize="items"``, the default)."""
    w = padded(chosen)
    sizes = data.draw(partitions(len(chosen)), label="rows per micro-batch")
    note(f"tokens per micro-batch: {token_counts(w, sizes)}")
    full = gradients(seed, CE, w.x, w.y)
    accumulated = gradients(seed, CE, w.x, w.y, sizes=sizes)
    assert gap(accumulated, full, token_bound(seed, chosen, [w], len(sizes))) <= 1.0


@given(seed=seeds, chosen=subsets, row_length=st.integers(12, 40), data=st.data())
def test_packing_with_reset_is_the_padded_layouts_training(seed, chosen, row_length, data):
    """Packed rows (the context reset at each boundary), split anyhow, against the padded
    layout's full batch: the same items, so within the bound. Not ``==``: the rows group the
    tokens differently, so the products sum them in another order (the items themselves
    are equal, in the same order: ``test_text.py``)."""
    w, p = padded(chosen), packed(chosen, row_length)
    sizes = data.draw(partitions(p.x.shape[0]), label="rows per micro-batch")
    note(f"tokens per micro-batch: {token_counts(p, sizes)}")
    full = gradients(seed, CE, w.x, w.y)
    accumulated = gradients(seed, CE, p.x, p.y, sizes=sizes)
    assert gap(accumulated, full, token_bound(seed, chosen, [w, p], len(sizes))) <= 1.0


@given(seed=seeds, chosen=subsets, row_length=st.integers(24, 40))
def test_packing_without_reset_leaks_across_the_boundary(seed, chosen, row_length):
    """Every row of >= 24 positions holds two names (at most 12 tokens each), so some
    tokens' contexts run into the name before: their items, and the gradient, change."""
    w, leak = padded(chosen), packed(chosen, row_length, reset=False)
    full = gradients(seed, CE, w.x, w.y)
    leaked = gradients(seed, CE, leak.x, leak.y)
    assert gap(leaked, full, token_bound(seed, chosen, [w, leak])) > FAR


# ----- the textbook mean of micro-batch means is not --------------------------------------------
@given(seed=seeds, chosen=subsets, data=st.data())
def test_the_textbook_mean_is_not_full_batch_training(seed, chosen, data):
    """``normalize="micro_batch_mean"`` weighs micro-batch j's tokens 1/(k n_j) instead of
    1/N: off by far more than rounding whenever the n_j differ; within the bound when
    they are all equal (one micro-batch, or a split that happens to balance them)."""
    w = padded(chosen)
    sizes = data.draw(partitions(len(chosen)), label="rows per micro-batch")
    tokens = token_counts(w, sizes)
    note(f"tokens per micro-batch: {tokens}")
    full = gradients(seed, CE, w.x, w.y)
    textbook = gradients(seed, CE, w.x, w.y, sizes=sizes, normalize="micro_batch_mean")
    ratio = gap(textbook, full, token_bound(seed, chosen, [w], len(sizes)))
    assert ratio <= 1.0 if len(set(tokens)) == 1 else ratio > FAR


def test_equal_rows_are_not_equal_tokens():
    """The whole corpus in 4 micro-batches of 48 names each: equal sizes, as the textbook
    loop assumes, but names differ in length, so the token counts do not."""
    w, sizes = padded(range(len(CORPUS))), [48] * 4
    tokens = token_counts(w, sizes)
    assert len(set(tokens)) == 4
    bound = token_bound(0, range(len(CORPUS)), [w], 4)
    full = gradients(0, CE, w.x, w.y)
    assert gap(gradients(0, CE, w.x, w.y, sizes=sizes), full, bound) <= 1.0
    assert gap(gradients(0, CE, w.x, w.y, sizes=sizes, normalize="micro_batch_mean"), full,
               bound) > FAR


THREE = text.padded_windows([w for w in text.names_corpus(seed=1) if len(w) == 3][:64], VOCAB,
                            CONTEXT)


@given(seed=seeds, m=st.sampled_from([1, 2, 4, 8]), k=st.sampled_from([1, 2, 4, 8]))
def test_equal_power_of_two_token_counts_make_the_textbook_mean_exact(seed, m, k):
    """Names of 3 letters hold 4 tokens each, so k micro-batches of m names hold 4m each.
    With 4m and k powers of two every division is exact, and scaling by a power of two
    commutes with every rounding: the textbook mean equals ``"items"`` on the same split to
    the bit (``==``)."""
    x, y = THREE.x[:m * k], THREE.y[:m * k]
    items = gradients(seed, CE, x, y, micro_batch_size=m)
    textbook = gradients(seed, CE, x, y, micro_batch_size=m, normalize="micro_batch_mean")
    assert all(np.array_equal(textbook[name], items[name]) for name in items)


def spread_and_error(seed, windows, sizes):
    """``(spread, error)`` of the textbook rule on one split of ``windows``' rows: the
    spread of the micro-batches' token counts (max - min) and its normwise relative error
    max|g_textbook - g_full| / max|g_full| over every parameter."""
    tokens = token_counts(windows, sizes)
    full = gradients(seed, CE, windows.x, windows.y)
    textbook = gradients(seed, CE, windows.x, windows.y, sizes=sizes,
                         normalize="micro_batch_mean")
    error = max(float(np.max(np.abs(textbook[n] - full[n]))) for n in full)
    return max(tokens) - min(tokens), error / max(float(np.max(np.abs(g))) for g in full.values())


def matched(count):
    """``count`` CORPUS indices, then for each one another index of a name of the same
    length: two halves that hold the same number of tokens."""
    first, second, free = [], [], list(range(len(CORPUS)))
    for i in range(len(CORPUS)):
        if i not in free:
            continue
        partner = next((j for j in free if j != i and len(CORPUS[j]) == len(CORPUS[i])), None)
        if partner is not None:
            first.append(i)
            second.append(partner)
            free = [j for j in free if j not in (i, partner)]
        if len(first) == count:
            return first + second
    raise AssertionError("not enough names of matching lengths")


SHIFTS = (0, 1, 2, 4, 8, 16)


def test_the_textbook_error_is_rounding_at_zero_spread():
    """Two halves of 24 names of the same lengths, then ``s`` names moved from the first
    micro-batch to the second: the spread grows with s, and at s = 0 (equal token counts,
    different names) the textbook mean is full-batch training up to rounding. How the error
    grows with the spread is measured, not asserted."""
    chosen = matched(24)
    w = padded(chosen)
    pairs = [spread_and_error(1, w, [24 - s, 24 + s]) for s in SHIFTS]
    spreads = [spread for spread, _ in pairs]
    assert spreads[0] == 0 and spreads == sorted(set(spreads))
    full = gradients(1, CE, w.x, w.y)
    textbook = gradients(1, CE, w.x, w.y, sizes=[24, 24], normalize="micro_batch_mean")
    assert gap(textbook, full, token_bound(1, chosen, [w], 2)) <= 1.0


# ----- per-sequence averaging: another objective, exact under its own normaliser ----------------
SEQ = text.SequenceMeanLoss()


def test_per_sequence_averaging_is_another_objective():
    """Short names weigh more per token than in the token mean: the gradients differ far
    beyond rounding. Where every name has the same length n the weights are all 1/n and the
    two objectives coincide (within the bound): a check that could have failed."""
    for chosen, same in ((list(range(64)), False),
                         ([i for i, word in enumerate(CORPUS) if len(word) == 6], True)):
        w = padded(chosen)
        per_token = gradients(0, CE, w.x, w.y)
        per_sequence = gradients(0, SEQ, w.x, w.sequence_targets())
        bounds = (token_bound(0, chosen, [w]), token_bound(0, chosen, [w], per_sequence=True))
        bound = {name: np.maximum(*(b[name] for b in bounds)) for name in bounds[0]}
        ratio = gap(per_sequence, per_token, bound)
        assert ratio <= 1.0 if same else ratio > FAR


def test_the_per_sequence_loss_by_hand():
    """Uniform logits: every token's loss is log V, so both means are log V; with one
    token's logits raised on its target, only the sequence weighs that token differently."""
    w = text.padded_windows(["ab", "b"], text.vocabulary(["ab", "b"]), context=2)
    logits = np.zeros((2, 3, 3))
    logits[1, 2, 0] = np.log(4.0)  # "b" of the name "b": p = 4/6 for its target
    per_token = text.SequenceMeanLoss(reduction="none")(Tensor(logits), w.sequence_targets())
    ce = nn.functional.cross_entropy(Tensor(logits.transpose(0, 2, 1).reshape(-1, 3)),
                                     w.y.reshape(-1), "none").numpy().reshape(2, 3)
    weights = np.array([[1 / 3, 1 / 3, 1 / 3], [1 / 2, 1 / 2, 0.0]])
    np.testing.assert_allclose(per_token.numpy(), ce * weights, rtol=1e-15)
    expected = (ce[0].mean() + ce[1, :2].mean()) / 2
    assert SEQ(Tensor(logits), w.sequence_targets()).item() == pytest.approx(expected,
                                                                                rel=1e-15)


@given(seed=seeds, chosen=subsets, packing=st.sampled_from([None, 12, 30]), data=st.data())
def test_per_sequence_accumulation_is_exact_under_its_own_normaliser(seed, chosen, packing,
                                                                      data):
    """Items = sequences (``SequenceMeanLoss.num_items``): any split of the rows, padded or
    packed, gives the full batch's per-sequence gradient within the bound. The textbook
    mean of it is right when every micro-batch holds the same number of sequences."""
    w = padded(chosen) if packing is None else packed(chosen, packing)
    sizes = data.draw(partitions(w.x.shape[0]), label="rows per micro-batch")
    edges = np.cumsum([0, *sizes])
    sequences = [len(set(w.sequence[a:b].ravel()) - {-1}) for a, b in zip(edges, edges[1:])]
    note(f"sequences per micro-batch: {sequences}")
    y = w.sequence_targets()
    full = gradients(seed, SEQ, w.x, y)
    bound = token_bound(seed, chosen, [w], len(sizes), per_sequence=True)
    assert gap(gradients(seed, SEQ, w.x, y, sizes=sizes), full, bound) <= 1.0
    textbook = gradients(seed, SEQ, w.x, y, sizes=sizes, normalize="micro_batch_mean")
    ratio = gap(textbook, full, bound)
    assert ratio <= 1.0 if len(set(sequences)) == 1 else ratio > FAR


# ----- a skipped non-finite micro-batch is not counted ------------------------------------------
class PoisonOnCall(nn.CrossEntropyLoss):
    """Cross-entropy whose ``bad``-th call is NaN (a micro-batch that overflowed)."""

    def __init__(self, bad):
        super().__init__()
        self.bad, self.calls = bad, 0

    def forward(self, logits, target, reduction=None):
        self.calls += 1
        out = super().forward(logits, target, reduction)
        return out * float("nan") if self.calls == self.bad else out


def test_a_skipped_nonfinite_micro_batch_is_not_counted():
    """With ``on_nonfinite="skip"`` a non-finite micro-batch drops its whole window (all or
    nothing), so neither its tokens nor those before it reach a divisor: the next window,
    C then D, divides by C's and D's tokens alone and is their full-batch gradient."""
    w = padded(range(20))
    parts = [slice(0, 5), slice(5, 9), slice(9, 16), slice(16, 20)]  # A, B (NaN), C, D
    model = make_model(0)
    acc = Accumulator(model, PoisonOnCall(bad=2), None, on_nonfinite="skip")
    assert acc.add(w.x[parts[0]], w.y[parts[0]]) is not None
    assert acc.add(w.x[parts[1]], w.y[parts[1]]) is None  # B: dropped, with A
    assert (acc.skipped_updates, acc.pending_items, acc.pending_num_micro_batches) == (1, 0, 0)
    for part in parts[2:]:
        acc.add(w.x[part], w.y[part])
    assert acc.pending_items == w.num_tokens - token_counts(w, [9])[0]
    accumulated = dict(zip((n for n, _ in model.named_parameters()), acc.gradients()))
    full = gradients(0, CE, w.x[9:], w.y[9:])
    assert gap(accumulated, full, token_bound(0, range(9, 20), [w], 2)) <= 1.0
    # step(): the same window, all or nothing: nothing is updated, nothing is counted
    opt = SGD(model.parameters(), lr=0.1)
    before = [p.data.copy() for p in model.parameters()]
    loss = step(model, PoisonOnCall(bad=2), opt, w.x, w.y, sizes=[5, 4, 7, 4],
                on_nonfinite="skip")
    assert np.isnan(loss) and opt.step_count == 0
    assert all(np.array_equal(p.data, b) for p, b in zip(model.parameters(), before))


# ----- mutants of the count: each fails, far outside the bound -----------------------------------
class PaddingCounted(nn.CrossEntropyLoss):
    """Counts every position, padding too, as an item."""

    def num_items(self, target):
        return int(np.size(target))


class LocalMean(nn.CrossEntropyLoss):
    """Divides by its own micro-batch's tokens and says it holds one item (a loop that calls
    ``.mean()`` on each micro-batch, or a rank that divides by its local count)."""

    def forward(self, logits, target, reduction=None):
        return super().forward(logits, target, "sum") / super().num_items(target)

    def num_items(self, target):
        return 1


def padding_counted(seed, w, sizes):
    return gradients(seed, PaddingCounted(), w.x, w.y, sizes=sizes)


def local_mean(seed, w, sizes):
    return gradients(seed, LocalMean(), w.x, w.y, sizes=sizes)


def counted_per_micro_batch(seed, w, sizes):
    """The count read inside the loop: the window's sum over k times the LAST micro-batch's
    tokens."""
    summed = gradients(seed, CE, w.x, w.y, sizes=sizes, normalize="sum")
    divisor = len(sizes) * token_counts(w, sizes)[-1]
    return {name: g / divisor for name, g in summed.items()}


@pytest.mark.parametrize("mutant", [padding_counted, local_mean, counted_per_micro_batch])
@pytest.mark.parametrize("packing", [None, 20])
def test_mutants_of_the_count_fail(mutant, packing):
    """64 names split unevenly, padded or packed: each mutant is far outside the bound, and
    the rule it mutates passes on the same data (so the check could tell them apart)."""
    chosen = range(64)
    w = padded(chosen) if packing is None else packed(chosen, packing)
    sizes = [5, w.x.shape[0] // 2 - 5, w.x.shape[0] - w.x.shape[0] // 2]
    assert len(set(token_counts(w, sizes))) == 3
    full = gradients(0, CE, padded(chosen).x, padded(chosen).y)
    bound = token_bound(0, chosen, [padded(chosen), w], len(sizes))
    assert gap(gradients(0, CE, w.x, w.y, sizes=sizes), full, bound) <= 1.0
    assert gap(mutant(0, w, sizes), full, bound) > FAR
