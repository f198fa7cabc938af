"""Functions on Tensors (PyTorch semantics), built from the engine's primitives.

Three end in a fused primitive of the engine (``minigrad.engine.primitives``), so that
logits of +-1e4 give finite values and gradients: ``sigmoid``, ``log_softmax`` and
``cross_entropy`` (one node for the loss of a batch, where the composite of log_softmax, a
gather, a mask and the reduction takes eight). Everything else needs no backward code.
"""

import math
from dataclasses import dataclass

from minigrad.engine import backend, validate
from minigrad.engine.primitives import elementwise
from minigrad.engine.primitives import softmax as fused  # not this module's softmax()
from minigrad.engine.tensor import Tensor, lift

REDUCTIONS = ("mean", "sum", "none")


def _tensor(x):
    return x if isinstance(x, Tensor) else Tensor(x)


def as_input(x, owner, like=None):
    """``x`` as a Tensor of real floating point (or exact Fractions), of ``like``'s dtype
    when given: layers and losses refuse integer input and mixed precision, as PyTorch does
    ("mat1 and mat2 must have the same dtype"), instead of promoting silently."""
    x = _tensor(x)
    if not backend.is_differentiable(x.xp, x.data):
        raise TypeError(f"{owner} needs floating-point input, got dtype {x.dtype}; convert "
                        "it, e.g. with xp.astype(x, xp.float64)")
    if like is not None:
        backend.get_namespace(x.data, like.data)  # "cannot mix": the namespace comes first
    if like is not None and x.dtype != like.dtype:
        raise TypeError(f"{owner} has {like.dtype} parameters but got {x.dtype} input; "
                        f"convert the input or the module (module.to(dtype=...))")
    return x


def relu(x):
    """max(x, 0), with relu'(0) = 0."""
    return _tensor(x).relu()


def tanh(x):
    """tanh(x) elementwise; backward g * (1 - tanh(x)**2)."""
    return _tensor(x).tanh()


def sigmoid(x):
    """1 / (1 + exp(-x)), as one primitive: finite and accurate at both ends
    (``minigrad.engine.primitives.elementwise.sigmoid``)."""
    return elementwise.sigmoid(_tensor(x))


def gelu(x):
    """GELU, tanh approximation: x/2 * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3))).

    This is ``torch.nn.GELU(approximate="tanh")``. The exact form needs erf, which the
    array API does not have.
    """
    x = _tensor(x)
    inner = (x + x**3 * 0.044715) * math.sqrt(2.0 / math.pi)
    return x * 0.5 * (inner.tanh() + 1.0)


def log_softmax(x, axis=-1):
    """x - logsumexp(x) along ``axis``, as one primitive, stable at logits of +-1e4
    (``minigrad.engine.primitives.softmax.log_softmax``)."""
    return fused.log_softmax(_tensor(x), axis=axis)


def softmax(x, axis=-1):
    """exp(x) / sum(exp(x)) along ``axis``."""
    return log_softmax(x, axis=axis).exp()


def _reduce(loss, reduction, count):
    if reduction == "none":
        return loss
    total = loss.sum()
    if reduction == "sum":
        return total
    if count == 0:
        # PyTorch: a mean over zero items (all targets ignored) is NaN, 0 / 0, but its
        # gradient is 0, since no item contributes (torch's nll_loss backward writes only
        # non-ignored targets). total * 0.0 carries that zero gradient; NaN is a constant.
        return total * 0.0 + float("nan")
    return total / count


def _check_reduction(reduction):
    validate.choice("reduction", reduction, REDUCTIONS)


@dataclass(frozen=True)
class Labels:
    """What ONE read of a whole batch's targets says (``label_counts``): the smallest and
    largest label that is not ignored (both None when every target is), and whether any
    target is ignored. ``cross_entropy(..., labels=...)`` checks a part of that batch against
    its class count with it, without reading the part's targets again."""

    low: int | None
    high: int | None
    ignored: bool


def label_counts(target, ignore_index=-100):
    """``(Labels, counts)`` of a batch of class-index targets with ONE read from the device:
    ``counts[i]`` (a host NumPy int64 array) is the number of targets of sample ``i`` that
    are not ``ignore_index`` (its items), as the accumulation layer needs per micro-batch.

    >>> import numpy as np
    >>> labels, counts = label_counts(np.array([[2, -100], [0, 1]]))
    >>> labels, counts.tolist()
    (Labels(low=0, high=2, ignored=True), [1, 2])
    """
    ignore_index = validate.integer("ignore_index", ignore_index)
    target = target.data if isinstance(target, Tensor) else target
    xp = backend.get_namespace(target)
    if not backend.is_integral(xp, target) or target.ndim == 0:
        raise TypeError(f"target must be an integer array with a sample axis, got "
                        f"{getattr(target, 'dtype', type(target).__name__)}")
    n = target.shape[0]
    if backend.on_host(target):  # NumPy: no transfer to save, the ufuncs' own reductions
        return _label_counts_on_host(target, ignore_index)
    labels = xp.reshape(xp.astype(target, xp.int64), (n, -1))
    kept = labels != ignore_index
    low, high = 2**63 - 1, -2**63  # int64's ends: no kept label is beyond them
    edges = xp.stack([xp.min(xp.where(kept, labels, low)), xp.max(xp.where(kept, labels, high))])
    per_sample = xp.sum(xp.astype(kept, xp.int64), axis=1)
    host = backend.to_numpy(xp.concat([per_sample, edges]))  # the one read
    counts, (first, last) = host[:n], (int(v) for v in host[n:])
    total = int(counts.sum())
    return Labels(first if total else None, last if total else None,
                  total < labels.shape[0] * labels.shape[1]), counts


def _label_counts_on_host(target, ignore_index):
    """``label_counts`` of a NumPy ``target``, with its own (cheaper) calls."""
    labels = target.reshape(target.shape[0], -1)
    kept = labels != ignore_index
    counts = kept.sum(axis=1)
    total = int(counts.sum())
    if total == 0:
        return Labels(None, None, True), counts
    if total == labels.size:  # nothing ignored: the range of all labels
        return Labels(int(labels.min()), int(labels.max()), False), counts
    values = labels[kept]
    return Labels(int(values.min()), int(values.max()), True), counts


def cross_entropy(logits, target, reduction="mean", ignore_index=-100, *, labels=None):
    """-log softmax(logits)[target] per sample; ``"mean"`` divides by the non-ignored count.

    logits: (N, C) floats, or (N, C, d1, ...) with target (N, d1, ...), or (C,) with a 0-d
    target, as in PyTorch; target: integer class indices in [0, C) or ``ignore_index``.
    Ignored samples contribute 0 (and 0 gradient). A ``"mean"`` over a batch whose targets
    are all ignored is NaN, with a zero gradient, as in PyTorch.

    ``labels``: the ``label_counts`` of a batch that ``target`` is a part of; the labels are
    then checked against C from it, with no read of ``target`` (on a GPU each read waits for
    the device). The results are the same to the last bit.
    """
    _check_reduction(reduction)
    ignore_index = validate.integer("ignore_index", ignore_index)
    logits = as_input(logits, "cross_entropy")
    if backend.is_exact(logits.data):
        raise TypeError("cross_entropy needs exp and log, which are not exact: exact "
                        "(Fraction) mode supports mse_loss")
    xp = logits.xp
    target = target.data if isinstance(target, Tensor) else target
    if not backend.is_array(target):
        target = xp.asarray(target, device=logits.device)
    backend.get_namespace(logits.data, target)
    if not backend.is_integral(xp, target):
        raise TypeError(f"target must hold integer class indices, got dtype {target.dtype}")
    if logits.ndim == 0:
        raise ValueError("logits must have shape (C,), (N, C) or (N, C, d1, ...), got ()")
    if (logits.shape[1] if logits.ndim > 1 else logits.shape[0]) == 0:
        raise ValueError(f"logits of shape {logits.shape} have no class (C = 0)")
    expected = logits.shape[:1] + logits.shape[2:] if logits.ndim > 1 else ()
    if tuple(target.shape) != expected:
        raise ValueError(f"target has shape {tuple(target.shape)}, expected {expected} for "
                         f"logits of shape {logits.shape}")
    n_classes = logits.shape[1] if logits.ndim > 1 else logits.shape[0]
    kept = _kept(xp, target, n_classes, ignore_index) if labels is None else \
        _kept_by(labels, target, n_classes, ignore_index)
    # Classes on the last axis, everything else flattened to rows: (rows, C).
    if logits.ndim != 2:
        axes = (0,) + tuple(range(2, logits.ndim)) + (1,) if logits.ndim > 1 else (0,)
        logits = logits.transpose(axes).reshape(-1, n_classes)
    shape = tuple(target.shape)
    # The labels as int64 (torch's own target dtype) in an array of our own: a copy, so that
    # the backward never reads a label the caller has changed since, and class numbers up
    # to C fit (a uint8 label array would wrap them).
    labels = xp.reshape(xp.astype(target, xp.int64), (-1, 1))
    if kept is None:  # every target counts
        return fused.cross_entropy_rows(logits, labels, None, reduction, logits.shape[0], shape)
    rows_kept = xp.reshape(kept, (-1,))
    safe = xp.where(xp.reshape(rows_kept, (-1, 1)), labels, xp.zeros_like(labels))
    count = int(xp.sum(xp.astype(rows_kept, xp.int64))) if reduction == "mean" else None
    return fused.cross_entropy_rows(logits, safe, rows_kept, reduction, count, shape)


def _kept(xp, target, n_classes, ignore_index):
    """The mask of the targets that count (those not equal to ``ignore_index``), or None
    when all of them do; ``ValueError`` for a label outside [0, C) that is not ignored.

    The usual batch (labels in [0, C), ignore_index outside their range) is settled by its
    minimum and maximum, without the masks.
    """
    if backend.size(target):
        low, high = backend.int_range(xp, target)
        if 0 <= low and high < n_classes and not low <= ignore_index <= high:
            return None
    kept = target != ignore_index
    if bool(xp.any(kept & ((target < 0) | (target >= n_classes)))):
        raise ValueError(f"target labels must lie in [0, {n_classes}) or equal "
                         f"ignore_index={ignore_index}")
    return kept


def _kept_by(labels, target, n_classes, ignore_index):
    """``_kept`` from what a read of the whole batch said (``Labels``): the mask when any
    target of the batch is ignored (where all of this part's count, it selects every row,
    the same values as no mask), else None."""
    if labels.low is not None and (labels.low < 0 or labels.high >= n_classes):
        raise ValueError(f"target labels must lie in [0, {n_classes}) or equal "
                         f"ignore_index={ignore_index}")
    return target != ignore_index if labels.ignored else None


def mse_loss(input, target, reduction="mean"):
    """(input - target)^2 elementwise; ``"mean"`` divides by the number of elements."""
    _check_reduction(reduction)
    input = as_input(input, "mse_loss")
    try:
        target = lift(target, like=input)
    except TypeError as err:
        raise TypeError(f"target of mse_loss: {err}") from None
    if input.shape != target.shape:
        raise ValueError(f"input shape {input.shape} and target shape {target.shape} differ")
    diff = input - target
    return _reduce(diff * diff, reduction, input.size)


def check_sample_index(index, x):
    """``index`` (a Tensor's data taken) checked as the global positions of the samples of
    the array ``x``: an integer array of shape ``(N,)``, one position per sample, in ``x``'s
    namespace. What keys each sample's dropout mask."""
    index = index.data if isinstance(index, Tensor) else index
    n = x.shape[0]
    if not backend.is_array(index) or not backend.get_namespace(index).isdtype(index.dtype,
                                                                               "integral"):
        raise TypeError(f"sample_index must be an integer array of shape ({n},), got "
                        f"{getattr(index, 'dtype', type(index).__name__)}")
    backend.get_namespace(x, index)
    if tuple(index.shape) != (n,):
        raise ValueError(f"sample_index must hold one index per sample, shape ({n},); "
                         f"got shape {tuple(index.shape)}")
    return index


def dropout(x, p=0.5, training=True, *, seed=0, step=0, sample_index=None):
    """Zero each element with probability ``p`` and scale the rest by 1 / (1 - p).

    The mask of sample ``i`` comes from a counter-based generator keyed by
    ``(seed, step, sample_index[i], feature)``: the same sample at the same step gets the
    same mask however the batch is split. ``sample_index`` defaults to ``0..N-1``.
    """
    p = validate.probability("p", p)
    training = validate.boolean("training", training)
    seed = validate.integer("seed", seed, low=0, high=2**63 - 1)
    step = validate.integer("step", step, low=0)
    x = _tensor(x)
    if not training or p == 0.0:
        return x
    if p == 1.0:
        return x * 0.0
    if x.ndim == 0:  # one sample of one value
        return dropout(x.reshape(1), p, training, seed=seed, step=step,
                       sample_index=sample_index).reshape(())
    xp = x.xp
    n = x.shape[0]
    if sample_index is None:
        sample_index = xp.arange(n, device=x.device)
    else:
        sample_index = check_sample_index(sample_index, x.data)
    width = x.size // n if n else 0
    u = backend.counter_uniform(xp, seed, step, sample_index, width, device=x.device)
    keep = xp.reshape(u >= p, x.shape)
    scale = xp.astype(keep, x.dtype) * (1.0 / (1.0 - p))
    return x * Tensor(scale)
