"""The rounding bound on a token-level gradient of ``nn.CharMLP``: how far an accumulated
gradient may be from the full-batch one when the items are tokens.

With a_t the gradient of token t's loss and w_t its weight (1 for the token mean, 1/n_s for
per-sequence averaging, n_s the tokens of t's sequence), both runs compute
g = (1/items) sum_t w_t a_t, and (``tests/studies/test_token_losses.py`` derives it, as
``minigrad.analysis.bounds`` does for samples)

    |g_acc - g_full| <= 2 gamma_{M+1} S + 2 gamma_m S_norm
    S = (1/items) sum_t w_t |a_t|  (elementwise),   S_norm = (1/items) sum_t w_t max|a_t|

* M counts the terms an element of g is summed from: the layout's rows x positions x context
  slots (padding adds exact zeros), plus the k partial sums of an accumulated run;
* m = ``per_item_roundings([C D, H, V]) + 4``: the roundings along one token's forward and
  backward pass, plus its weight, a micro-batch's 1/n_j and the final 1/k.

The per-token gradients are never formed one by one. Token t's gradient of a Linear layer is
the outer product delta_t x_t^T of the gradient at the layer's output and its input, so
sum_t w_t |a_t| = (w |Delta|)^T |X| is one matrix product and max|a_t| = max|delta_t| max|x_t|.
An embedding row v receives the sum of the gradients at the context slots that hold v; the
sum of their absolute values bounds it, so there S and S_norm are bounded from above and the
bound stays a bound.

>>> from minigrad import nn
>>> from minigrad.studies import text
>>> vocab = text.vocabulary(["emma", "ava"])
>>> w = text.padded_windows(["emma", "ava"], vocab, context=3)
>>> model = nn.CharMLP(len(vocab), 3, 2, 4, seed=0)
>>> b = gradient_bound(model, nn.CrossEntropyLoss(), w.x, w.y, splits=2)
>>> sorted(b) == sorted(name for name, _ in model.named_parameters())
True
>>> bool(0 < max(float(v.max()) for v in b.values()) < 1e-13)
True
"""

import numpy as np

from minigrad import nn
from minigrad.analysis.bounds import gamma, per_item_roundings
from minigrad.engine import backend, no_grad
from minigrad.studies import text


def tokens(loss, x, y):
    """The real tokens of a layout ``x`` (..., C), ``y`` (...) or, for
    ``text.SequenceMeanLoss``, (..., 2): their contexts (T, C), targets (T,), weights w_t
    (T,) and the loss's items (tokens, or sequences), as NumPy arrays."""
    x, y = backend.to_numpy(x), backend.to_numpy(y)
    per_sequence = isinstance(loss, text.SequenceMeanLoss)
    if not per_sequence and not isinstance(loss, nn.CrossEntropyLoss):
        raise TypeError(f"loss must be nn.CrossEntropyLoss or text.SequenceMeanLoss, got "
                        f"{type(loss).__name__}")
    target = y[..., 0] if per_sequence else y
    kept = target != loss.ignore_index
    contexts, targets = x[kept].reshape(-1, x.shape[-1]), target[kept]
    if not per_sequence:
        return contexts, targets, np.ones(targets.shape[0]), int(targets.shape[0])
    _, where, counts = np.unique(y[..., 1][kept], return_inverse=True, return_counts=True)
    return contexts, targets, 1.0 / counts[where], int(counts.size)


def magnitudes(model, loss, x, y):
    """``(S_sum, S_norm_sum, items)``: name -> sum_t w_t |a_t| (elementwise), the number
    sum_t w_t max|a_t| and the items, from one forward pass of the real tokens (module
    docstring)."""
    contexts, targets, w, items = tokens(loss, x, y)
    t = contexts.shape[0]
    with no_grad():
        e = model.embedding(contexts)
        z = model.hidden(e.reshape(t, -1))
        h = nn.functional.tanh(z)
        logits = model.output(h)
    e, h, logits = (np.asarray(backend.to_numpy(a.data), dtype=np.float64).reshape(t, -1)
                    for a in (e, h, logits))
    w_out, w_hidden = (np.asarray(backend.to_numpy(layer.weight.data), dtype=np.float64)
                       for layer in (model.output, model.hidden))
    p = np.exp(logits - logits.max(axis=1, keepdims=True))
    d_out = p / p.sum(axis=1, keepdims=True)  # d(CE_t)/d(logits_t) = softmax - one-hot
    d_out[np.arange(t), targets] -= 1.0
    d_z = (d_out @ w_out) * (1.0 - h * h)
    d_e = np.abs(d_z @ w_hidden).reshape(t, model.context, -1)
    d_out, d_z, e, h = (np.abs(a) for a in (d_out, d_z, e, h))
    table = np.zeros(tuple(model.embedding.weight.shape))
    for c in range(model.context):
        np.add.at(table, contexts[:, c], w[:, None] * d_e[:, c])
    sums = {"embedding.weight": table, "hidden.weight": (w[:, None] * d_z).T @ e,
            "hidden.bias": w @ d_z, "output.weight": (w[:, None] * d_out).T @ h,
            "output.bias": w @ d_out}
    largest = np.max(np.stack([d_out.max(1) * h.max(1), d_out.max(1), d_z.max(1) * e.max(1),
                               d_z.max(1), d_e.sum(1).max(1)]), axis=0)
    return {name: sums[name] for name, _ in model.named_parameters()}, float(w @ largest), items


def roundings(model):
    """m: the roundings along one token's pass, and its weight and divisions (module
    docstring)."""
    dims = (model.context * model.embedding.embedding_dim, model.hidden.out_features,
            model.embedding.num_embeddings)
    return per_item_roundings(list(dims)) + 4


def gradient_bound(model, loss, x, y, splits=1, *, terms=None):
    """Name -> the elementwise bound on |g_acc - g_full| of the layout ``x``, ``y`` when one
    run splits it into ``splits`` micro-batches (module docstring), as NumPy float64.
    ``terms`` is M, by default the layout's rows x positions x slots plus ``splits``; two
    layouts of the same tokens (padded and packed) take the larger of theirs."""
    sums, s_norm, items = magnitudes(model, loss, x, y)
    terms = int(np.prod(np.shape(x))) + splits if terms is None else terms
    per_item = 2 * gamma(roundings(model)) * s_norm
    return {name: (2 * gamma(terms + 1) * s + per_item) / items for name, s in sums.items()}


__all__ = ["gradient_bound", "magnitudes", "roundings", "tokens"]
