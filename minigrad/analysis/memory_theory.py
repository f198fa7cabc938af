"""The theory of where one accumulated update's memory goes: ``theoretical_peak``.

Derived from minigrad's own code for a ReLU MLP (Linear, ReLU, ..., Linear) trained with
cross-entropy or MSE and SGD, Adam or AdamW, with or without recomputed runs of hidden
layers; ``minigrad.analysis.memory`` measures the same update and sets the two side by
side. ``not_covered`` says why a model falls outside; ``peak_of_micro_batches`` is the
unchecked core that the planner evaluates for many splits and recomputation choices.
"""

import numpy as np

from minigrad import nn, optim
from minigrad.accumulate import as_loss
from minigrad.accumulate.split import check_sizes
from minigrad.optim import in_place

# An optimizer's in-place update: two scratch arrays (minigrad.optim.in_place.Workspace) of
# its largest parameter's size, at most in_place.CHUNK values on NumPy; made by its first
# update and kept.
WORKSPACE_ARRAYS = 2

# Arrays of n x C alive at once in the loss's backward, beside the hidden layers':
# cross-entropy (one fused node) keeps the logits and their shifted copy while its backward
# makes p * s, p * s - s and the gradient (the one-hot mask is boolean); MSE keeps the
# logits, -y, the residual and its square while its backward makes g * r twice and their sum.
HEAD_ARRAYS = {nn.CrossEntropyLoss: 5, nn.MSELoss: 7}


def theoretical_peak(model, loss_fn, optimizer, x, sizes):
    """The peak extra bytes of one ``accumulate.step`` on micro-batches of ``sizes``, derived
    from minigrad's code for a ReLU MLP (Linear, ReLU, ..., Linear, with biases) trained
    with cross-entropy or MSE and SGD, Adam or AdamW.

    s bytes per value; widths d_0..d_L (hidden d_1..d_{L-1}, C = d_L); n samples in a
    micro-batch; P bytes of parameters, so of one set of gradients; q the bytes of the
    largest parameter. The walk makes new arrays and frees them; the update writes in place.

    * Forward, hidden layer l keeps 2 n d_l values (y = h W^T + b, one ``linear`` node, and
      h = relu(y), whose backward makes its mask from h); the last layer the logits. The
      walk frees each node's arrays once its backward has run, so a micro-batch peaks at
      one of these moments (units of s):
        at the loss     2 n sum_l d_l + k n C (the loss's arrays and its backward's
                        temporaries: k = 5 for cross-entropy, 7 for MSE)
        at ReLU l       n (2 sum_{k<l} d_k + 4 d_l + C) + gradients of the layers above
                        (layer l's two arrays, g, and the mask, multiplied by g in place;
                        the caller keeps the logits)
        at Linear l+1   n (2 sum_{k<l} d_k + 3 d_l + 2 d_{l+1} + C) + the same gradients
                        (layer l's two arrays and g W; y and g of layer l+1)
      plus P from the second micro-batch on: the sum accumulated so far.
    * End of the walk: P new gradients, and from the second micro-batch on 2P + q: the old
      sums and the walk's gradients, while ``.grad + g`` is made parameter by parameter
      (each new sum replaces its addend; all are written at once, Ctrl-C held).
    * The update (validate, then commit in place): the sums P, the workspace of
      ``WORKSPACE_ARRAYS`` arrays of min(q, s ``in_place.CHUNK``) bytes if the optimizer has
      none yet (its first update; NumPy takes a parameter in slices of at most ``CHUNK``
      values), and SGD's momentum buffers, P, on its first update with momentum. Nothing
      else is allocated: parameters and moments are written in place, the division by the
      items and the weight decay happen in the workspace.

    * Recomputed runs of whole hidden layers (``Sequential.recompute_segments``, such as
      ``MLP.blocks`` gives): a run keeps only its output, d_last values
      per sample, and its other layers nothing. When the walk reaches the run, its forward
      runs again and its layers keep 2 d_l each again while the walk goes through them, and
      beside them stay the run's first output and, below its last ReLU, the gradient that
      arrived at the run: d_last more at that ReLU, 2 d_last below it. So recomputing a run
      lowers the moments above it and raises its own; the sums above use, layer by layer,
      what is alive at that moment (``_kept``, ``_held``).

    The peak is the largest moment. Neglected: Python objects (Tensors, closures, the
    walk's lists: at most ``memory.PYTHON_OBJECTS`` bytes per step, measured), the int64 sample
    indices and targets
    (16 n bytes) and boolean temporaries; so the theory is close (within a few per cent)
    only once the arrays outweigh those objects.

    >>> model = nn.MLP([4, 8, 2], seed=0)
    >>> opt = optim.SGD(model.parameters(), lr=0.1)
    >>> theoretical_peak(model, nn.CrossEntropyLoss(), opt, np.zeros((2, 4)), [1, 1])
    1200
    >>> P, q = 8 * (4 * 8 + 8 + 8 * 2 + 2), 8 * 4 * 8  # float64 parameters; W_1, the largest
    >>> 2 * P + q + 8 * 1 * 2  # the second walk's end: old sums, gradients, W_1's new sum; logits
    1200
    """
    reason = not_covered(model, loss_fn, optimizer)
    if reason is not None:
        raise ValueError(f"theoretical_peak covers ReLU MLPs with cross-entropy or MSE and "
                         f"SGD, Adam or AdamW: {reason}")
    sizes = check_sizes(sizes, x.shape[0])
    return peak_of_micro_batches(model, loss_fn, optimizer, x.dtype,
                                 {(n, j > 0) for j, n in enumerate(sizes)})


def peak_of_micro_batches(model, loss_fn, optimizer, dtype, pairs):
    """``theoretical_peak`` for arguments it covers, unchecked, from the micro-batches as a
    set of ``(size, later)`` ``pairs`` (``later``: not the window's first, so the sum so far
    is alive beside it) and the data's ``dtype``: what the planner evaluates thousands of
    times, once per split and choice of recomputed runs."""
    linears = list(model)[::2]
    hidden = [layer.out_features for layer in linears[:-1]]
    widths = hidden + [linears[-1].out_features]
    classes = widths[-1]
    s = np.result_type(dtype, linears[0].weight.dtype).itemsize
    grads = [layer.weight.data.nbytes + layer.bias.data.nbytes for layer in linears]
    grads_each = [a.data.nbytes for layer in linears for a in (layer.weight, layer.bias)]
    total = sum(grads)
    head = HEAD_ARRAYS[type(as_loss(loss_fn))]
    segment = _recomputed(model)
    peak = _update_peak(optimizer, total)
    for n, later in pairs:
        walk = [n * s * (sum(_kept(hidden, segment)) + head * classes)]
        for i, d in enumerate(hidden):
            above = sum(grads[i + 1:])
            # ReLU i: in its block's recomputation when recomputed (top: the block's last)
            alive = _kept(hidden, segment, segment[i])
            top = segment[i] is not None and i == segment[i][1]
            walk.append(n * s * (sum(alive[:i]) + 4 * d + classes
                                 + _held(hidden, segment[i], top)) + above)
            # Linear i + 1: in the recomputation of the block that holds layer i + 1
            outer = segment[i + 1] if i + 1 < len(hidden) else None
            alive = _kept(hidden, segment, outer)
            walk.append(n * s * (sum(alive[:i + 1]) + d + 2 * widths[i + 1] + classes
                                 + _held(hidden, outer, False)) + above)
        end = (2 * total + max(grads_each) if later else total) + n * s * classes
        peak = max(peak, (total if later else 0) + max(walk), end)
    return peak


def _recomputed(model):
    """For each hidden layer of the MLP, the ``(first, last)`` hidden layers of the
    recomputed run (``Sequential.recompute_segments``) that holds it, or None."""
    count = (len(model) - 1) // 2
    segment = [None] * count
    for start, stop in getattr(model, "recompute_segments", ()):
        for k in range(start // 2, stop // 2):
            segment[k] = (start // 2, stop // 2 - 1)
    return segment


def _kept(hidden, segment, now=None):
    """Values per sample that each hidden layer keeps for the backward: y and relu(y), 2 d;
    in a recomputed run only the run's output, d (its last layer) or 0; in the run ``now``
    being recomputed, 2 d again."""
    return [2 * d if segment[k] is None or segment[k] == now else
            d if k == segment[k][1] else 0 for k, d in enumerate(hidden)]


def _held(hidden, now, top):
    """Values per sample held beside the walk while the run ``now`` is recomputed: its first
    output (the outer node's), and, below its last ReLU, the gradient that arrived there."""
    if now is None:
        return 0
    return hidden[now[1]] * (1 if top else 2)


def _update_peak(optimizer, total):
    """P + the workspace the optimizer does not hold yet + the momentum buffers its first
    update makes."""
    by_dtype = {}
    for p in optimizer.params:
        key = str(p.data.dtype)
        size = min(p.data.size, in_place.CHUNK)  # NumPy: slices of at most CHUNK values
        by_dtype[key] = max(by_dtype.get(key, 0), size * p.data.itemsize)
    held = {str(key[2]): bufs[0].nbytes for key, bufs in optimizer.workspace.buffers.items()}
    workspace = sum(WORKSPACE_ARRAYS * q for key, q in by_dtype.items() if held.get(key, 0) < q)
    momentum = 0
    if isinstance(optimizer, optim.SGD) and optimizer.hyperparams["momentum"] != 0:
        momentum = sum(p.data.nbytes for p, state in zip(optimizer.params, optimizer.state)
                       if state.mu is None)
    return total + workspace + momentum


def not_covered(model, loss_fn, optimizer):
    """Why ``theoretical_peak`` does not cover these arguments (a sentence), or None if it
    does."""
    layers = list(model) if isinstance(model, nn.Sequential) else []
    shape = [nn.Linear if i % 2 == 0 else nn.ReLU for i in range(len(layers))]
    if len(layers) % 2 == 0 or any(type(m) is not k for m, k in zip(layers, shape)) or \
            any(m.bias is None for m in layers[::2]):
        return "the model is not a Sequential of Linear (with bias), ReLU, ..., Linear"
    runs = getattr(model, "recompute_segments", ())
    if any(start % 2 or stop % 2 for start, stop in runs):
        return (f"a recomputed run {runs} does not start and end at a hidden layer's "
                "Linear (runs of whole hidden layers, such as MLP.blocks gives)")
    try:
        loss = as_loss(loss_fn)
    except TypeError:
        loss = loss_fn
    if type(loss) not in HEAD_ARRAYS:
        return f"the loss is {type(loss).__name__}"
    if type(optimizer) not in (optim.SGD, optim.Adam, optim.AdamW):
        return f"the optimizer is {type(optimizer).__name__}"
    return None
