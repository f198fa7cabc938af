"""The numbers behind the token explorer (the token-losses page): a global batch of 16 names
whose lengths spread around 6 letters, split by rows into micro-batches of m names; for each
m, spread and rule, each micro-batch's names, tokens and share of the accumulated gradient,
and the rule's measured gradient error beside the most rounding may give.

>>> shares = token_shares([7, 3, 10], [1, 1, 2])
>>> [str(s) for s in shares["items"]], [str(s) for s in shares["per_sequence"]]
(['7/20', '3/20', '1/2'], ['1/4', '1/4', '1/2'])
"""

from fractions import Fraction

import numpy as np

from minigrad import nn
from minigrad.accumulate import accumulated_gradients, split_sizes
from minigrad.analysis.bounds import flat
from minigrad.engine import backend, validate
from minigrad.studies import text
from minigrad.studies.explorers import control, key, positive_ints
from minigrad.studies.tokens.bound import gradient_bound
from minigrad.studies.tokens.training import LOSSES, RULES, targets, token_counts

NAMES = 16
"""The explorer's global batch: names, one per row."""
CENTRE = 6
"""The middle of the batch's name lengths (letters)."""
CONTEXT = 3
"""The model's context: the tokens it sees before the one it predicts."""
RULE_KEYS = {"items": "item-weighted", "textbook": "textbook", "per_sequence": "per-sequence"}
"""The explorer's key of each rule -> its name in ``training.RULES``."""


def token_shares(tokens, sequences):
    """Each micro-batch's share of the accumulated gradient, from its tokens n_j and names
    S_j: the item-weighted rule gives n_j / n, the textbook rule 1 / k, per-sequence
    averaging S_j / S (Fractions); the gradient is sum_j share_j times micro-batch j's own
    mean under the rule's objective. ``"tokens"`` is the item-weighted share again: what the
    token mean of the whole batch gives each micro-batch."""
    tokens = [validate.integer(f"tokens[{j}]", n, low=1) for j, n in enumerate(tokens)]
    sequences = [validate.integer(f"sequences[{j}]", s, low=1) for j, s in enumerate(sequences)]
    if len(tokens) != len(sequences):
        raise ValueError(f"tokens and sequences must have one entry per micro-batch, got "
                         f"{len(tokens)} and {len(sequences)}")
    k, n, s = len(tokens), sum(tokens), sum(sequences)
    items = [Fraction(t, n) for t in tokens]
    return {"tokens": items, "items": items, "textbook": [Fraction(1, k)] * k,
            "per_sequence": [Fraction(m, s) for m in sequences]}


def batch_names(spread, count=NAMES, centre=CENTRE, seed=0):
    """``count`` distinct names whose lengths run evenly from centre - spread / 2 to
    centre + spread / 2 (rounded), taken in the order of ``names_corpus(seed=seed)`` and
    then shuffled by ``seed``, so micro-batches of rows mix the lengths."""
    spread = validate.integer("spread", spread, low=0, high=2 * (centre - 2))
    lengths = np.round(np.linspace(centre - spread / 2, centre + spread / 2, count))
    pool = {}
    for word in text.names_corpus(seed=seed):
        pool.setdefault(len(word), []).append(word)
    picked = [pool[int(n)].pop() for n in lengths]
    return [picked[i] for i in backend.rng(seed).permutation(count)]


def tokens_setup(spread, seed=0):
    """The explorer's model factory (``nn.CharMLP`` over the corpus' characters, context 3,
    embeddings of 8, 32 hidden units) and the padded windows of ``batch_names(spread)``."""
    vocab = text.vocabulary(text.names_corpus())
    windows = text.padded_windows(batch_names(spread, seed=seed), vocab, CONTEXT)
    return {"make": lambda: nn.CharMLP(len(vocab), CONTEXT, 8, 32, seed=1),
            "windows": windows}


def _share(share):
    return {"value": float(share), "text": str(share)}


def tokens_explorer(micro_batch_sizes=(1, 2, 3, 4, 5, 8, 16), spreads=(0, 2, 4, 6, 8),
                    seed=0):
    """Per micro-batch size m (names, ``split_sizes``: the last micro-batch may be shorter),
    spread of name lengths (``tokens_setup``) and rule: the sizes, tokens and names of each
    micro-batch, the shares of ``token_shares``, and ``max_rel``, the rule's gradient
    error max|g - g_full| / max|g_full| against the full-batch token mean; ``own_max_rel``
    the same against the full batch of the rule's own objective, and ``limit`` the most
    rounding alone may give there (max of ``bound.gradient_bound`` / max|g_full|)."""
    controls = [control("micro", "micro-batch size m (names)",
                        positive_ints("micro_batch_sizes", micro_batch_sizes)),
                control("spread", "spread of name lengths (letters)", spreads,
                        [f"{CENTRE - s / 2:g} to {CENTRE + s / 2:g} letters" if s else
                         f"all {CENTRE} letters" for s in spreads]),
                control("rule", "rule", list(RULE_KEYS),
                        ["item-weighted", "textbook", "per-sequence averaging"])]
    cases = {}
    for j, spread in enumerate(spreads):
        setup = tokens_setup(spread, seed)
        make, windows = setup["make"], setup["windows"]
        full = {objective: flat(accumulated_gradients(make(), loss, windows.x,
                                                      targets(windows, objective)).values())
                for objective, loss in LOSSES.items()}
        for i, m in enumerate(micro_batch_sizes):
            sizes = split_sizes(NAMES, micro_batch_size=min(m, NAMES))
            tokens = token_counts(windows, sizes)
            shares = token_shares(tokens, sizes)  # one name per row: S_j = rows
            for r, rule in enumerate(RULE_KEYS):
                objective, normalize = RULES[RULE_KEYS[rule]]
                loss, y = LOSSES[objective], targets(windows, objective)
                g = flat(accumulated_gradients(make(), loss, windows.x, y, sizes=sizes,
                                               normalize=normalize).values())
                bound = flat(gradient_bound(make(), loss, windows.x, y, len(sizes)).values())
                own = full[objective]
                reference = full["token mean"]
                cases[key(i, j, r)] = {
                    "sizes": sizes, "tokens": tokens,
                    "max_rel": float(np.max(np.abs(g - reference)) / np.max(np.abs(reference))),
                    "own_max_rel": float(np.max(np.abs(g - own)) / np.max(np.abs(own))),
                    "limit": float(np.max(bound) / np.max(np.abs(own))),
                    "shares": {"tokens": [_share(s) for s in shares["tokens"]],
                               "rule": [_share(s) for s in shares[rule]]}}
    return {"controls": controls, "cases": cases}


__all__ = ["CENTRE", "CONTEXT", "NAMES", "RULE_KEYS", "batch_names", "token_shares",
           "tokens_explorer", "tokens_setup"]
