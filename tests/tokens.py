"""The character-level language model the token-level tests share: the Census names, the
model ``nn.CharMLP``, their layouts, and the rounding bound of two runs over the same tokens
(``token_bound``). Test modules import these from here, never from each other.

The bound. tanh and the softmax round, so "equal" means within the bound of
``minigrad.analysis.bounds``, written per token: with a_t the gradient of token t's loss
(times its weight 1/n_s for the per-sequence objective) both runs compute
g = (1/items) sum_t a_t, and

    |g_acc - g_full| <= 2 gamma_{M+1} S + 2 gamma_m S_norm,   S = (1/items) sum_t |a_t|,
                                                              S_norm = (1/items) sum_t max|a_t|

* M counts the terms an element of g is summed from: a Linear layer's gradient is one product
  over the rows x positions of a layout (padding adds exact zeros), the embedding's a sum over
  the rows x positions x C context slots that picked its row; an accumulated run adds the k
  partial sums on top (micro-batches, ranks, or the shards of one row's positions: each is
  a product over fewer terms, the partial sums then added). M = the largest layout's R L C,
  plus k.
* m = ``per_item_roundings([C D, H, V])`` + 4: the roundings along one token's forward and
  backward pass (two Linear layers of width <= max(C D, H, V), tanh, a log-sum-exp over V),
  plus a token's weight, a micro-batch's 1/n_j and the final 1/k. kappa = 1: no normalisation
  and no MSE residual (``condition_number`` is 1 for this model).

|a_t| is measured by one backward pass per token (``per_token``, cached per model: a token's
gradient does not depend on the other rows).
"""

import functools

import numpy as np
from bounds import bound_ratio, gamma

from minigrad import nn
from minigrad.accumulate import accumulated_gradients
from minigrad.analysis.bounds import per_item_roundings
from minigrad.studies import text

CONTEXT = 3
VOCAB = text.vocabulary(text.names_corpus())
CORPUS = text.names_corpus(seed=0)[:192]
CONFIGS = {0: (4, 16), 1: (8, 32), 2: (6, 24)}  # seed -> (embedding_dim, hidden)
CE = nn.CrossEntropyLoss(ignore_index=text.IGNORE_INDEX)
FAR = 1e6  # "well outside the bound": a rule's gap is at least this many bounds


def make_model(seed):
    dim, hidden = CONFIGS[seed]
    return nn.CharMLP(len(VOCAB), CONTEXT, dim, hidden, seed=seed)


def padded(chosen):
    return text.padded_windows([CORPUS[i] for i in chosen], VOCAB, CONTEXT)


def packed(chosen, row_length, reset=True):
    return text.packed_windows([CORPUS[i] for i in chosen], VOCAB, CONTEXT, row_length,
                               reset=reset)


@functools.cache
def per_token(seed):
    """|a_t| of every real token of CORPUS (rows: ``padded_windows(CORPUS).tokens()``), one
    backward pass each, and the CORPUS index of each token's word."""
    model, tokens = make_model(seed), text.padded_windows(CORPUS, VOCAB, CONTEXT).tokens()
    grads = {name: [] for name, _ in model.named_parameters()}
    for t in range(tokens.y.shape[0]):
        model.zero_grad()
        CE(model(tokens.x[t:t + 1]), tokens.y[t:t + 1], reduction="sum").backward()
        for name, p in model.named_parameters():
            grads[name].append(np.abs(p.grad))
    return {name: np.stack(g) for name, g in grads.items()}, tokens.sequence


def token_bound(seed, chosen, layouts, splits=1, per_sequence=False):
    """Name -> the elementwise bound on the gap of two runs over the words ``chosen`` (CORPUS
    indices) in ``layouts`` (their ``Windows``), one of them in ``splits`` micro-batches
    (module docstring). ``per_sequence``: tokens weigh 1/n_s and the items are sequences."""
    grads, owner = per_token(seed)
    mine = np.isin(owner, list(chosen))
    lengths = np.array([len(CORPUS[i]) + 1 for i in owner[mine]], dtype=np.float64)
    weight = 1.0 / lengths if per_sequence else np.ones_like(lengths)
    items = len(chosen) if per_sequence else int(mine.sum())
    largest = np.max(np.stack([g[mine].reshape(int(mine.sum()), -1).max(axis=1)
                               for g in grads.values()]), axis=0)
    dim, hidden = CONFIGS[seed]
    m = per_item_roundings([CONTEXT * dim, hidden, len(VOCAB)]) + 4
    terms = max(w.x.size for w in layouts) + splits
    per_item = 2 * gamma(m) * float(weight @ largest)
    return {name: (2 * gamma(terms + 1) * np.tensordot(weight, g[mine], axes=1) + per_item)
            / items for name, g in grads.items()}


def gradients(seed, loss, x, y, **split):
    """The gradient ``step`` would use: a fresh model of ``seed``, ``accumulated_gradients``."""
    return accumulated_gradients(make_model(seed), loss, x, y, **split)


def gap(g, h, bound):
    """max |g - h| / bound over every element of every parameter."""
    return max(bound_ratio(np.abs(g[name] - h[name]), bound[name]) for name in bound)


def token_counts(windows, sizes):
    """The real tokens of each micro-batch of a split of ``windows``' rows."""
    edges = np.cumsum([0, *sizes])
    return [int(np.sum(windows.y[a:b] != text.IGNORE_INDEX)) for a, b in zip(edges, edges[1:])]
