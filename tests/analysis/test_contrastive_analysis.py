"""The measurements of ``minigrad.analysis.contrastive_bound``: retrieval accuracy, the towers'
gradient norms, and the bound's refusal of towers it cannot walk (its proofs are in
tests/accumulate/test_contrastive.py)."""

import numpy as np
import pytest
from pairs import batch, dual

from minigrad import nn
from minigrad.analysis import bounds
from minigrad.analysis import contrastive_bound as contrastive
from minigrad.studies.contrastive import scores


def test_retrieval_accuracy_counts_the_queries_whose_own_passage_scores_highest():
    """Identity towers: q_i = p_i = x_i, so query i scores x_i . x_j. With x the rows of
    2 I plus one row equal to row 0, query 2 ties with passage 0 and argmax takes the first."""
    model = nn.DualEncoder(nn.Identity(), nn.Identity())
    views = np.array([[2.0, 0.0], [0.0, 2.0], [2.0, 0.0]])
    x = nn.pairs(views, views)
    assert scores.retrieval_accuracy(model, x) == pytest.approx(2 / 3)
    assert model.training  # put back as it was


def test_tower_norms_split_the_gradient_by_tower():
    grads = {"query_tower.0.weight": np.array([3.0, 4.0]), "passage_tower.0.weight":
             np.array([1.0]), "passage_tower.0.bias": np.array([0.0])}
    assert scores.tower_norms(grads) == {"query": 5.0, "passage": 1.0}


def test_the_bound_needs_sequential_towers():
    model = nn.DualEncoder(nn.Identity(), nn.Identity())
    with pytest.raises(TypeError, match="it needs Sequential towers .* got Identity"):
        contrastive.gradcache_bound(model, nn.InfoNCELoss(), *batch(4))


def test_the_bound_grows_with_the_logits_magnitude():
    """kappa = kappa_tower (1 + 2 Z): a lower temperature scales Z, and the bound with it."""
    x, y = batch(6)
    bounds = [contrastive.gradcache_bound(dual(), nn.InfoNCELoss(temperature=t), x, y)[1]
              for t in (1.0, 0.1)]
    assert bounds[1] > 5 * bounds[0]


def test_the_formula_alone_gives_the_bound_from_the_same_terms():
    """bound_from_terms on gradcache_bound's own ingredients (the terms divided by the items
    beforehand) gives its bound: the formula a PyTorch check can use is the derived one."""
    model, loss = dual(), nn.InfoNCELoss(temperature=0.5, symmetric=True)
    x, y = batch(6)
    bound, kappa = contrastive.gradcache_bound(model, loss, x, y)
    items = loss.num_items(y)
    terms = [{k: v / items for k, v in a.items()}
             for a in contrastive.sample_gradients(model, loss, x, y)]
    q, p = contrastive.encode(model, x)
    sizes = [contrastive.tower_sizes(t) for t in (model.query_tower, model.passage_tower)]
    again, kappa_again = contrastive.bound_from_terms(
        terms, q, p, temperature=0.5, symmetric=True,
        tower_roundings=max(bounds.per_item_roundings(s) for s in sizes),
        kappa_tower=kappa / (1 + 2 * float(np.max(np.abs(q) @ np.abs(p).T)) / 0.5))
    # The same formula; only where the division by the items happens moves the last bits
    # (a few ulps, far inside 1e-12).
    assert kappa_again == pytest.approx(kappa, rel=1e-12)
    for name in bound:
        np.testing.assert_allclose(again[name], bound[name], rtol=1e-12)
