"""Names drawn from a trained ``nn.CharMLP``, character by character (notebook 13).

Each name starts from a context of boundary tokens; the next token is drawn from the softmax
of the model's logits, by inverse transform of one uniform number of a seeded NumPy
generator, and the context shifts by one; the name ends at the boundary token. All names are
drawn together, one position at a time.

>>> from minigrad import nn
>>> from minigrad.studies import text
>>> vocab = text.vocabulary(["emma", "ava"])
>>> names = sample_names(nn.CharMLP(len(vocab), 3, 2, 4, seed=0), vocab, 3, seed=0)
>>> len(names), all(set(name) <= set("emva") for name in names)
(3, True)
"""

import numpy as np

from minigrad.engine import backend, no_grad, validate


def sample_names(model, vocab, count, *, seed, max_length=20):
    """``count`` names drawn from ``model`` (module docstring) with the NumPy generator
    ``seed``; a name that reaches ``max_length`` characters is cut there."""
    count = validate.positive_int("count", count)
    max_length = validate.positive_int("max_length", max_length)
    generator = backend.rng(seed)
    context = np.zeros((count, model.context), dtype=np.int64)
    drawn = np.zeros((count, max_length), dtype=np.int64)
    running = np.ones(count, dtype=bool)
    with no_grad():
        for t in range(max_length):
            logits = np.asarray(backend.to_numpy(model(context).data), dtype=np.float64)
            p = np.exp(logits - logits.max(axis=1, keepdims=True))
            cumulative = np.cumsum(p / p.sum(axis=1, keepdims=True), axis=1)
            u = generator.random(count)[:, None]
            token = np.minimum(np.sum(cumulative < u, axis=1), len(vocab) - 1)
            drawn[:, t] = np.where(running, token, 0)
            running &= token != 0
            if not running.any():
                break
            context = np.concatenate([context[:, 1:], drawn[:, t:t + 1]], axis=1)
    names = []
    for row in drawn:
        ends = np.flatnonzero(row == 0)
        names.append(vocab.decode((row[:ends[0]] if ends.size else row).tolist()))
    return names


__all__ = ["sample_names"]
