"""Contrastive learning with in-batch negatives: the InfoNCE loss (and CLIP's symmetric form)
and the dual encoder it trains.

N queries q_i and M >= N passages p_j (rows of representations); query i's positive is
passage i, and every other passage of the batch is one of its negatives. With logits
z_ij = q_i . p_j / T (temperature T), InfoNCE is the cross-entropy of each row of z with
the diagonal as targets:

    l_i = -log( exp(z_ii) / sum_j exp(z_ij) )

``symmetric=True`` adds the passages' direction, each passage against every query (the
columns of z, as CLIP does; it needs M = N), so the mean is over 2N terms. Built from
``@``, division and ``functional.cross_entropy``: no backward code of its own.

The loss couples every sample of the batch with every other: the loss of a batch is NOT
the sum of the losses of its parts. ``minigrad.accumulate.contrastive`` shows what that
does to accumulation, and what restores it.

Batch format for ``accumulate.step``: ``x`` of shape (N, 2, ...) holds both views of each
pair, ``x[:, 0]`` the query's and ``x[:, 1]`` the passage's; ``DualEncoder`` returns the two
towers' representations ``(q, p)``; ``y`` holds one label per pair, which the loss does not
read (a pair's positive is its own passage), only counts (``InfoNCELoss.num_items``).
"""

from minigrad.engine import backend, validate
from minigrad.engine.tensor import Tensor
from minigrad.nn import functional as F
from minigrad.nn.module import Module

REDUCTIONS = ("mean", "sum")


def info_nce(q, p, temperature=1.0, symmetric=False, reduction="mean"):
    """InfoNCE of queries ``q`` (N, d) against passages ``p`` (M, d), M >= N.

    Rows N..M-1 of ``p`` are extra negatives for every query (hard negatives, a memory
    bank). ``"mean"`` divides the sum by N (2N with ``symmetric``); it equals
    ``torch.nn.functional.cross_entropy(q @ p.T / T, arange(N))``, and, symmetric, the mean
    of that and the same of ``p @ q.T / T``.

    With every logit equal each query has probability 1/N, so the loss is log N:

    >>> import numpy as np
    >>> f"{info_nce(Tensor(np.zeros((4, 3))), Tensor(np.zeros((4, 3)))).item():.6f}"
    '1.386294'
    """
    validate.choice("reduction", reduction, REDUCTIONS)
    symmetric = validate.boolean("symmetric", symmetric)
    temperature = validate.real("temperature", temperature, strict_low=True)
    q = F.as_input(q, "info_nce")
    p = F.as_input(p, "info_nce", like=q)
    if q.ndim != 2 or p.ndim != 2 or q.shape[1] != p.shape[1] or p.shape[0] < q.shape[0]:
        raise ValueError(f"info_nce needs q of shape (N, d) and p of shape (M, d) with "
                         f"M >= N, got q {q.shape} and p {p.shape}")
    if symmetric and p.shape[0] != q.shape[0]:
        raise ValueError(f"symmetric info_nce needs as many passages as queries, got "
                         f"{q.shape[0]} queries and {p.shape[0]} passages")
    n = q.shape[0]
    logits = q @ p.T
    if temperature != 1:
        logits = logits / temperature
    target = q.xp.arange(n, device=q.device)
    total = F.cross_entropy(logits, target, reduction="sum")
    if symmetric:
        total = total + F.cross_entropy(logits.T, target, reduction="sum")
    if reduction == "sum":
        return total
    return total / (2 * n if symmetric else n)


class InfoNCELoss(Module):
    """``info_nce`` on a dual encoder's output ``(q, p)``, for ``accumulate.step``.

    ``target`` holds one label per pair; only their number is used. ``num_items(target)``
    is the number of terms the mean divides by: N, or 2N when ``symmetric``.

    ``in_batch_negatives = True`` tells the accumulation strategies of
    ``minigrad.accumulate.contrastive`` that the samples of a batch are coupled.
    """

    in_batch_negatives = True

    def __init__(self, temperature=1.0, symmetric=False, reduction="mean"):
        super().__init__()
        self.temperature = validate.real("temperature", temperature, strict_low=True)
        self.symmetric = validate.boolean("symmetric", symmetric)
        self.reduction = validate.choice("reduction", reduction, REDUCTIONS)

    def forward(self, out, target, reduction=None):
        q, p = representations(out)
        target = target.data if isinstance(target, Tensor) else target
        if not backend.is_array(target) or target.ndim < 1 or target.shape[0] != q.shape[0]:
            raise ValueError(f"InfoNCELoss needs one target per query ({q.shape[0]}), got "
                             f"{getattr(target, 'shape', type(target).__name__)}")
        return info_nce(q, p, self.temperature, self.symmetric,
                        self.reduction if reduction is None else reduction)

    def num_items(self, target):
        target = target.data if isinstance(target, Tensor) else target
        return (2 if self.symmetric else 1) * int(target.shape[0])

    def extra_repr(self):
        return f"temperature={self.temperature:g}, symmetric={self.symmetric}"


def representations(out):
    """``out`` checked as a pair ``(q, p)`` of Tensors: what a dual encoder returns."""
    if not (isinstance(out, (tuple, list)) and len(out) == 2
            and all(isinstance(t, Tensor) for t in out)):
        raise TypeError(f"a contrastive loss needs the model's output as a pair (queries, "
                        f"passages) of Tensors, such as nn.DualEncoder returns; got "
                        f"{type(out).__name__}")
    return tuple(out)


class DualEncoder(Module):
    """Two towers: ``x[:, 0]`` through ``query_tower``, ``x[:, 1]`` through ``passage_tower``.

    ``x``: (N, 2, ...) (``pairs`` builds it); returns ``(q, p)``, each (N, e). The towers
    see each sample alone (no BatchNorm in training mode), so a sample's representation
    does not depend on the rest of the batch; the loss alone couples the samples.

    >>> import numpy as np
    >>> from minigrad import nn
    >>> model = DualEncoder(nn.MLP([3, 5, 2], seed=0), nn.MLP([3, 5, 2], seed=1))
    >>> q, p = model(np.ones((4, 2, 3)))
    >>> q.shape, p.shape
    ((4, 2), (4, 2))
    """

    def __init__(self, query_tower, passage_tower):
        super().__init__()
        for name, tower in (("query_tower", query_tower), ("passage_tower", passage_tower)):
            if not isinstance(tower, Module):
                raise TypeError(f"{name} must be an nn.Module, got {type(tower).__name__}")
        self.query_tower, self.passage_tower = query_tower, passage_tower

    def forward(self, x):
        x = x.data if isinstance(x, Tensor) else x
        if not backend.is_array(x) or x.ndim < 2 or x.shape[1] != 2:
            raise ValueError(f"DualEncoder needs x of shape (N, 2, ...): x[:, 0] the queries, "
                             f"x[:, 1] the passages; got {getattr(x, 'shape', type(x).__name__)}")
        return self.query_tower(Tensor(x[:, 0, ...])), self.passage_tower(Tensor(x[:, 1, ...]))


def pairs(queries, passages):
    """The batch ``x`` of shape (N, 2, ...) that ``DualEncoder`` reads: the two views of
    each pair stacked on axis 1.

    >>> import numpy as np
    >>> pairs(np.zeros((5, 3)), np.ones((5, 3))).shape
    (5, 2, 3)
    """
    xp = backend.get_namespace(queries, passages)
    if tuple(queries.shape) != tuple(passages.shape):
        raise ValueError(f"queries and passages must have the same shape, got "
                         f"{tuple(queries.shape)} and {tuple(passages.shape)}")
    return xp.stack([queries, passages], axis=1)
