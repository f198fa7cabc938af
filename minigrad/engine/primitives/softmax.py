"""The softmax primitives, fused so that logits of +-1e4 give finite values and gradients:
``log_softmax`` and ``cross_entropy_rows`` (the loss of a batch as one node, where the
composite of log_softmax, a gather, a mask and the reduction takes eight).

Each derivative is written right under its forward.

>>> from minigrad.engine import Tensor
>>> z = Tensor([[0.0, 0.0]], requires_grad=True)
>>> log_softmax(z).sum().backward()  # g - softmax(z) * sum(g) = 1 - 0.5 * 2
>>> z.grad
array([[0., 0.]])
"""

from minigrad.engine import backend
from minigrad.engine.tensor import primitive


def log_softmax(x, axis=-1):
    """x - logsumexp(x), shifted by the (constant) max for stability.

    Backward: g - softmax(x) * sum(g) along ``axis``.
    """
    xp = x.xp
    shifted = x.data - xp.max(x.data, axis=axis, keepdims=True)
    out = shifted - xp.log(xp.sum(xp.exp(shifted), axis=axis, keepdims=True))

    def backward(g):
        return g - xp.exp(out) * xp.sum(g, axis=axis, keepdims=True)

    return primitive(out, (x,), backward, name="log_softmax")


def cross_entropy_rows(logits, safe, kept, reduction, count, shape):
    """Cross-entropy of (rows, C) logits as ONE primitive, named ``cross_entropy``, as
    torch's fused kernels do; ``minigrad.nn.functional.cross_entropy`` checks the labels,
    lays the classes out on the last axis and ends here.

    ``safe``: the (rows, 1) int64 labels, 0 where ignored; ``kept``: the rows whose target
    counts, or None when all do (then no mask is applied at all).

    Forward, per row r with target t_r, shift c_r = max_j z_rj and lse_r =
    log sum_j exp(z_rj - c_r):  loss_r = -((z_rt - c_r) - lse_r), which is
    -log_softmax(z)_rt in torch's order (so a zero loss is -0.0 as there); 0 where the
    target is ignored; then the reduction (``"mean"`` divides the sum by ``count``, the kept
    rows; over none it is NaN with a zero gradient, as in torch).

    Backward, with s_r the gradient reaching loss_r (g, or g / count for the mean) and
    p = softmax(z) = exp(z - c - lse):  dz_rj = p_rj s_r - [j = t_r] s_r, the classic
    "softmax minus one-hot". It is evaluated as torch evaluates the chain of its two
    kernels: nll_loss's backward writes G = -s at each kept row's target and 0 elsewhere,
    log_softmax's backward returns G - p * (the row sums of G). So the values are those of
    the composite ``take_along_axis(log_softmax(z), t)`` with its reshapes, negation, mask
    and reduction (tests/nn check ``==``), and the signs of zeros are torch's; one node
    instead of eight.
    """
    xp, z = logits.xp, logits.data
    device = backend.device(z)
    shifted = z - xp.max(z, axis=1, keepdims=True)
    lse = xp.log(xp.sum(xp.exp(shifted), axis=1, keepdims=True))
    losses = -xp.reshape(backend.take_along_rows(xp, shifted, safe) - lse, (-1,))
    if kept is not None:
        losses = xp.where(kept, losses, xp.zeros_like(losses))
    if reduction == "none":
        out = xp.reshape(losses, shape)
    elif reduction == "sum":
        out = xp.sum(losses)
    elif count:
        total = xp.asarray(count, dtype=z.dtype, device=device)
        out = xp.sum(losses) / total
    else:
        out = xp.sum(losses) * 0.0 + float("nan")

    def backward(g):
        if reduction == "none":
            s = xp.reshape(g, (-1, 1))
        elif reduction == "sum":
            s = g
        else:
            s = g / total if count else g * 0.0
        target = safe == xp.arange(z.shape[1], dtype=safe.dtype, device=device)
        if kept is not None:
            target = target & xp.reshape(kept, (-1, 1))
        nll = xp.where(target, -s, xp.zeros((), dtype=z.dtype, device=device))
        return nll - xp.exp(shifted - lse) * xp.sum(nll, axis=1, keepdims=True)

    return primitive(out, (logits,), backward, name="cross_entropy")


__all__ = ["cross_entropy_rows", "log_softmax"]
