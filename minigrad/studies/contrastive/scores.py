"""What a contrastive run is judged by besides its gradient: top-1 retrieval accuracy, and
the gradient norm of each tower."""

import numpy as np

from minigrad.analysis.contrastive_bound import encode
from minigrad.engine import backend


def retrieval_accuracy(model, x):
    """Top-1 retrieval: the share of queries whose highest logit is their own passage,
    among all N passages of ``x`` (the model in evaluation mode while it runs)."""
    training = model.training
    model.eval()
    try:
        q, p = (np.asarray(backend.to_numpy(a)) for a in encode(model, x))
    finally:
        model.train(training)
    return float(np.mean(np.argmax(q @ p.T, axis=1) == np.arange(len(q))))


def tower_norms(grads):
    """The gradient norm of each tower, from name -> gradient: {"query": .., "passage": ..}."""
    norms = {}
    for tower in ("query", "passage"):
        parts = [np.ravel(backend.to_numpy(g)) for name, g in grads.items()
                 if name.startswith(f"{tower}_tower.") and g is not None]
        norms[tower] = float(np.linalg.norm(np.concatenate(parts))) if parts else 0.0
    return norms
