"""GradCache's rounding bound: how far a contrastive window's accumulated gradient may be from
the full batch's (the strategies are in ``minigrad.accumulate.contrastive``; the contrastive
study, retrieval accuracy and the towers' norms, in ``minigrad.studies.contrastive``).

The bound on |g_gradcache - g_full| (``gradcache_bound``)
=========================================================
``minigrad.analysis.bounds`` bounds a sum of per-item gradients. A loss with in-batch
negatives has no per-item terms of its own, but its gradient still is a sum over samples
once the representations' gradient G = dL/dR (L the loss SUM, R = (q, p)) is fixed:

    g = sum_i a_i,    a_i = J_i^T G_i     (J_i: d r_i / d theta, r_i sample i's two rows)

Both runs compute G from the whole batch with the same operations, and GradCache's pass 2
back-propagates G_i through sample i's own tower graph, so they differ in three ways.

1. The sum over samples: one product over N rows, or per micro-batch (and process) plus a
   running sum: at most 2 gamma_{N+1} S, S = (1/items) sum_i |a_i|, as in ``bounds``.
2. The per-sample towers, forward and backward, rounded differently in a batch of n_j and
   one of N rows (BLAS picks kernels by shape): ``bounds``' per-item term, with m_tower
   roundings (``per_item_roundings`` of the tower's widths) and its kappa_tower.
3. G itself, computed from slightly different R. The logits z_ik = q_i . p_k / T then differ
   by at most eps = gamma_m Z, Z = max_ik sum_d |q_id| |p_kd| / T (the largest logit
   magnitude). With s_i = softmax(z_i), ds_ij = s_ij (dz_ij - sum_k s_ik dz_ik), so the
   residual s_i - e_i (the row's gradient direction, of l1 norm 2 (1 - s_ii)) moves by at
   most 4 eps (1 - s_ii) in l1: a relative change of 2 eps. The loss thus multiplies the
   relative error of everything before it by kappa_loss = 1 + 2 Z, and adds its own
   roundings: an inner product of width e and a log-sum-exp over N (2N + 10) per direction.

        |g_gc - g_full| <= 2 gamma_{N+1} S + 2 gamma_m kappa S_norm
        m = m_tower + e + (2N + 10) * directions,   kappa = kappa_tower * (1 + 2 Z)
        S_norm = (1/items) sum_i max |a_i|

Part 1 is rigorous; parts 2 and 3 are the first-order model of ``bounds`` (normwise, with
the same caveat about a ReLU input within rounding of its kink). Divided by ``items`` (the
loss' ``num_items``) as the update divides. ``bound_from_terms`` is the formula alone, for
terms a_i computed by another framework (notebook 09 checks PyTorch's GradCache with it).
"""

import numpy as np

from minigrad import nn
from minigrad.accumulate.contrastive import backpropagate, loss_on
from minigrad.analysis.bounds import U64, condition_number, gamma, per_item_roundings
from minigrad.engine import backend, no_grad
from minigrad.nn.contrastive import representations


def encode(model, x, step_index=0):
    """The dual encoder's ``(q, p)`` of ``x`` as arrays, without a graph, with the dropout
    masks ``accumulate.step`` draws at update ``step_index``."""
    with no_grad(), nn.dropout_keys.rows(step_index, x):
        q, p = representations(model(x))
    return q.data, p.data


def sample_gradients(model, loss, x, y, step_index=0):
    """a_i = J_i^T G_i for each sample i, as name -> NumPy float64 dicts: its share of the
    gradient of the loss SUM of the whole batch (G = dL/dR computed on all of it)."""
    q, p = encode(model, x, step_index)
    _, gq, gp = loss_on(loss, q, p, y)
    if gq is None:
        raise FloatingPointError("the loss of the batch is not finite")
    params = list(model.named_parameters())
    saved = [t.grad for _, t in params]
    out = []
    try:
        for i in range(x.shape[0]):
            for _, t in params:
                t.grad = None
            rows = slice(i, i + 1)
            with nn.dropout_keys.rows(step_index, x[rows, ...], start=i):
                backpropagate(representations(model(x[rows, ...])), gq[rows, ...],
                              gp[rows, ...])
            out.append({name: np.zeros(t.shape) if t.grad is None else
                        np.array(backend.to_numpy(t.grad), dtype=np.float64)
                        for name, t in params})
    finally:
        for (_, t), g in zip(params, saved):
            t.grad = g
    return out


def tower_sizes(tower):
    """The widths of a tower's Linear layers, input first (a Sequential of layers)."""
    if not isinstance(tower, nn.Sequential):
        raise TypeError(f"the bound walks each tower layer by layer: it needs Sequential "
                        f"towers (such as nn.MLP), got {type(tower).__name__}")
    linears = [m for m in tower if isinstance(m, nn.Linear)]
    return [linears[0].in_features, *(m.out_features for m in linears)]


def gradcache_bound(model, loss, x, y, step_index=0, *, u=U64):
    """Name -> elementwise bound on |g_gradcache - g_full| for the gradient ``accumulate``
    divides by ``loss.num_items(y)`` (derived in the module docstring), and the ``kappa``
    it used. ``model``: an ``nn.DualEncoder`` of Sequential towers (such as ``nn.MLP``)."""
    towers = (model.query_tower, model.passage_tower)
    roundings = max(per_item_roundings(tower_sizes(t)) for t in towers)  # Sequential towers
    per_item = sample_gradients(model, loss, x, y, step_index)
    q, p = (backend.to_numpy(a) for a in encode(model, x, step_index))
    kappa_tower = max(condition_number(tower, None, x[:, k, ...], None, step_index)
                      for k, tower in enumerate(towers))
    return bound_from_terms(per_item, q, p, temperature=getattr(loss, "temperature", 1.0),
                            symmetric=getattr(loss, "symmetric", False),
                            tower_roundings=roundings, kappa_tower=kappa_tower,
                            items=loss.num_items(y), u=u)


def bound_from_terms(per_item, q, p, *, temperature, symmetric, tower_roundings,
                     kappa_tower=1.0, items=1, u=U64):
    """``gradcache_bound``'s formula on terms computed anywhere (PyTorch's, for one): name ->
    elementwise bound, and kappa. ``per_item``: per sample, name -> its term a_i = J_i^T G_i
    of the gradient divided by ``items``; ``q``, ``p``: the batch's representations;
    ``tower_roundings``: ``per_item_roundings`` of the towers' widths; ``kappa_tower``: their
    ``condition_number`` (1 without a normalisation)."""
    per_item = [{k: np.asarray(v, dtype=np.float64) for k, v in a.items()} for a in per_item]
    q, p = (np.abs(np.asarray(a, dtype=np.float64)) for a in (q, p))
    kappa = kappa_tower * (1 + 2 * float(np.max(q @ p.T)) / float(temperature))
    n, width = q.shape
    m = tower_roundings + width + (2 * n + 10) * (2 if symmetric else 1)
    s_norm = sum(max(float(np.max(np.abs(g))) for g in a.values()) for a in per_item)
    summation = 2 * gamma(n + 1, u)
    bound = {name: (summation * sum(np.abs(a[name]) for a in per_item)
                    + 2 * gamma(m, u) * kappa * s_norm) / items for name in per_item[0]}
    return bound, kappa
