"""The token-level chapter (``minigrad.studies.tokens``): the batched token bound against one
backward pass per token, the replay of the trajectory bound, the experiments of notebook 13
on small cases, and the sampler.

``bound.magnitudes`` never forms a token's gradient; ``per_token`` forms each with its own
backward pass through the engine (as ``tests/studies/test_token_losses.py`` does), so the
two agree exactly in exact arithmetic: the Linear layers' sums to rounding, the embedding's
sums and the largest entries bounded from above (a row's gradient is a sum over the slots that
hold it, bounded by the sum of its absolute values).
"""

import numpy as np
import pytest

from minigrad import nn, optim
from minigrad.accumulate import accumulated_gradients
from minigrad.analysis.bounds import bound_ratio, flat
from minigrad.studies import text
from minigrad.studies.tokens import bound, sampling, training

CONTEXT = 3
CORPUS = text.names_corpus(seed=2)[:40]
VOCAB = text.vocabulary(text.names_corpus())
CE = training.LOSSES["token mean"]
SEQ = training.LOSSES["sequence mean"]
FAR = 1e6


def make():
    return nn.CharMLP(len(VOCAB), CONTEXT, 4, 16, seed=3)


def per_token(model, windows, weights):
    """name -> sum_t w_t |a_t| and sum_t w_t max|a_t|, one backward pass per real token."""
    tokens = windows.tokens()
    sums = {name: 0.0 for name, _ in model.named_parameters()}
    largest = 0.0
    for t in range(tokens.y.shape[0]):
        model.zero_grad()
        CE(model(tokens.x[t:t + 1]), tokens.y[t:t + 1], reduction="sum").backward()
        grads = {name: np.abs(p.grad) for name, p in model.named_parameters()}
        for name in sums:
            sums[name] = sums[name] + weights[t] * grads[name]
        largest += weights[t] * max(float(g.max()) for g in grads.values())
    return sums, largest


@pytest.mark.parametrize("loss", [CE, SEQ], ids=["token mean", "sequence mean"])
def test_magnitudes_are_the_per_token_gradients(loss):
    windows = text.padded_windows(CORPUS, VOCAB, CONTEXT)
    y = training.targets(windows, "token mean" if loss is CE else "sequence mean")
    model = make()
    sums, s_norm, items = bound.magnitudes(model, loss, windows.x, y)
    _, _, weights, _ = bound.tokens(loss, windows.x, y)
    expected, largest = per_token(model, windows, weights)
    assert items == (windows.num_tokens if loss is CE else len(CORPUS))
    for name in ("hidden.weight", "hidden.bias", "output.weight", "output.bias"):
        np.testing.assert_allclose(sums[name], expected[name], rtol=1e-12, atol=0)
    table = expected["embedding.weight"]
    assert np.all(sums["embedding.weight"] >= table * (1 - 1e-12))
    assert s_norm >= largest * (1 - 1e-12)


def test_per_sequence_weights_are_one_over_the_tokens_of_each_name():
    windows = text.padded_windows(["ab", "b", "abab"], text.vocabulary(["ab"]), 2)
    _, _, weights, items = bound.tokens(SEQ, windows.x, windows.sequence_targets())
    assert items == 3
    assert weights.tolist() == [1 / 3] * 3 + [1 / 2] * 2 + [1 / 5] * 5


def test_the_bound_judges_the_rules():
    """Micro-batches of rows with different token counts: the item-weighted rule within the
    bound, the textbook rule far outside; per-sequence averaging within its own."""
    windows = text.padded_windows(CORPUS, VOCAB, CONTEXT)
    sizes = [3, 17, 20]
    assert len(set(training.token_counts(windows, sizes))) == 3
    for rule, (objective, normalize) in training.RULES.items():
        loss, y = training.LOSSES[objective], training.targets(windows, objective)
        full = accumulated_gradients(make(), loss, windows.x, y)
        acc = accumulated_gradients(make(), loss, windows.x, y, sizes=sizes,
                                    normalize=normalize)
        b = bound.gradient_bound(make(), loss, windows.x, y, len(sizes))
        ratio = max(bound_ratio(np.abs(acc[k] - full[k]), b[k]) for k in b)
        assert ratio > FAR if rule == "textbook" else ratio <= 1.0, rule


def test_the_bound_refuses_other_losses():
    windows = text.padded_windows(CORPUS[:2], VOCAB, CONTEXT)
    with pytest.raises(TypeError, match="nn.CrossEntropyLoss or text.SequenceMeanLoss"):
        bound.gradient_bound(make(), nn.MSELoss(), windows.x, windows.y)


def test_side_by_side_keeps_the_item_weighted_run_within_its_bound():
    batches = [text.padded_windows(CORPUS[k * 12:(k + 1) * 12], VOCAB, CONTEXT)
               for k in range(3)]
    run = training.side_by_side(make, lambda ps: optim.SGD(ps, lr=0.5, momentum=0.9),
                                batches, [4, 4, 4])
    assert set(run["gap"]) == set(training.RULES)
    assert all(len(set(counts)) > 1 for counts in run["tokens"])
    for rule in ("item-weighted", "per-sequence"):
        assert np.all(run["gap"][rule] <= run["bound"][rule]), rule
    assert np.all(np.max(run["gap"]["textbook"] / run["bound"]["textbook"], axis=1) > 1)
    assert [len(v) for v in run["loss"].values()] == [3] * 5


def test_the_replay_wants_measure_then_observe_and_uses_the_token_bound():
    model = make()
    replay = training._replay(model, optim.SGD(model.parameters(), lr=0.1), CE, 2)
    with pytest.raises(RuntimeError, match="needs measure"):
        replay.observe(np.zeros(1))
    windows = text.padded_windows(CORPUS[:4], VOCAB, CONTEXT)
    other = make()
    replay.measure(other, windows.x, windows.y)
    expected = flat(bound.gradient_bound(other, CE, windows.x, windows.y, 2).values())
    assert np.array_equal(replay._measured["dg"], expected)  # same start: no curvature term
    with pytest.raises(RuntimeError, match="called twice"):
        replay.measure(make(), windows.x, windows.y)


def test_matched_halves_hold_the_same_tokens():
    chosen = training.matched_halves(CORPUS, 8)
    first, second = chosen[:8], chosen[8:]
    assert len(set(chosen)) == 16
    assert [len(CORPUS[i]) for i in first] == [len(CORPUS[i]) for i in second]
    with pytest.raises(ValueError, match="pairs of names of equal length"):
        training.matched_halves(["ab", "abc"], 1)


def test_spread_errors_at_zero_spread_and_beyond():
    out = training.spread_errors(make, CORPUS, VOCAB, CONTEXT, 6, (0, 2))
    assert out["spread"][0] == 0 < out["spread"][1]
    assert all(e <= b for e, b in zip(out["errors"]["item-weighted"],
                                      out["limits"]["item-weighted"]))
    assert out["errors"]["textbook"][0] <= out["limits"]["textbook"][0]
    assert out["errors"]["textbook"][1] > FAR * out["limits"]["textbook"][1]


def test_packing_keeps_the_gradient_only_with_the_reset():
    gaps = training.layout_gaps(make, CORPUS[:24], VOCAB, CONTEXT, row_length=24,
                                micro_batch_size=2)
    assert gaps["padded"]["ratio"] <= 1 and gaps["packed, context reset"]["ratio"] <= 1
    assert gaps["packed, no reset"]["ratio"] > FAR
    assert gaps["packed, context reset"]["tokens"] == gaps["padded"]["tokens"]
    assert gaps["packed, context reset"]["positions"] < gaps["padded"]["positions"]


def test_sampled_names_are_seeded_and_made_of_the_vocabulary():
    model = make()
    names = sampling.sample_names(model, VOCAB, 16, seed=4)
    assert names == sampling.sample_names(model, VOCAB, 16, seed=4)
    assert names != sampling.sample_names(model, VOCAB, 16, seed=5)
    assert all(set(name) <= set(VOCAB.tokens[1:]) for name in names)
    cut = sampling.sample_names(model, VOCAB, 16, seed=4, max_length=2)
    assert all(len(name) <= 2 for name in cut)
    assert [name[:2] for name in names] == cut  # the same draws, cut at two characters


def test_a_model_that_always_ends_draws_empty_names():
    model = make()
    model.output.bias.data[...] = 0.0
    model.output.bias.data[0] = 1e3  # the boundary token, always
    assert sampling.sample_names(model, VOCAB, 3, seed=0) == ["", "", ""]
