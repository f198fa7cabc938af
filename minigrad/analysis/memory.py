"""Measured memory of one accumulated update, and the theory of where it goes.

``peak_bytes(fn)`` is the peak of the memory newly allocated while ``fn`` runs, as
``tracemalloc`` sees it: NumPy reports every array buffer to it, and Python objects are
traced too. ``update_memory`` measures one ``accumulate.step`` on a copy of the model and
the optimizer, splits the peak into parameters, gradients, optimizer state and the rest,
and sets beside it ``theoretical_peak``, derived from minigrad's own code for a ReLU MLP.

NumPy arrays are measured with ``tracemalloc``; CuPy arrays, which never reach it, with a
hook on CuPy's memory pool that counts the bytes of the blocks handed out and given back
(blocks the pool caches do not count, as with ``torch.cuda.max_memory_allocated``). The
CuPy path runs only where a GPU is present (its tests skip elsewhere); other namespaces
raise ``NotImplementedError``. BLAS workspace is invisible to both.

>>> import numpy as np
>>> _, peak = peak_bytes(np.ones, 1000)  # 1000 float64: 8000 bytes and an array object
>>> 8000 <= peak < 8000 + 1024
True
"""

import copy
import gc
import tracemalloc
import types

import numpy as np

from minigrad import nn, optim
from minigrad.accumulate import as_loss, step
from minigrad.accumulate.guard import as_batch, check_optimizer
from minigrad.accumulate.split import check_sizes, resolve
from minigrad.engine import Tensor, backend

# Arrays of one parameter's size alive at once while the optimizer updates it (t), and
# those that stay (r: the new parameter and state), in the order minigrad.optim evaluates:
# SGD lr*g, p - lr*g; momentum mu*b, (1-tau)*g, b, then lr*b and the new p beside b;
# Nesterov also g + mu*b; Adam (its NumPy and CuPy path) m, v, one temporary and the denominator,
# which becomes the new p.
_UPDATE_ARRAYS = {"sgd": (2, 1), "momentum": (3, 2), "nesterov": (4, 2), "adam": (4, 3)}
# Arrays of n x C alive at once in the loss's backward, beside the hidden layers':
# cross-entropy (one fused node) keeps the logits and their shifted copy while its backward
# makes p * s, p * s - s and the gradient (the one-hot mask is boolean); MSE keeps the
# logits, -y, the residual and its square while its backward makes g * r twice and their sum.
_HEAD_ARRAYS = {nn.CrossEntropyLoss: 5, nn.MSELoss: 7}
PYTHON_OBJECTS = 15 * 1024
"""Bytes allowed for the Python objects of one step (Tensors, closures, the walk's lists),
which ``theoretical_peak`` neglects: measured at up to about 15 KiB for the MLPs of the
tests. The theory also neglects boolean temporaries (one byte a value, such as ReLU's
``out > 0``), so a measured peak may exceed it by more than this on wide layers."""


def peak_bytes(fn, *args, **kwargs):
    """``(fn(*args, **kwargs), peak)``: the peak of the memory newly allocated while it ran.

    peak = max over the run of (traced bytes - traced bytes at the start). A full garbage
    collection runs first: it empties CPython's free lists, whose blocks tracemalloc counts
    as allocated, so every run starts alike and what a run refills counts as new. If
    ``tracemalloc`` was already tracing, it keeps tracing afterwards (its peak is reset).
    Arrays among the arguments (bare, in Tensors, in Modules) must be NumPy arrays, or all
    CuPy arrays: then the same peak is counted on CuPy's memory pool (``_pool_peak``).
    """
    result, peak, _ = peak_and_held(fn, *args, **kwargs)
    return result, peak


def peak_and_held(fn, *args, **kwargs):
    """``(fn(*args, **kwargs), peak, held)``: ``peak_bytes``'s peak, and ``held``, the
    memory newly allocated that is still allocated when ``fn`` has returned (both >= 0)."""
    if check_measured(*args, *kwargs.values()) == "cupy":
        return _pool_peak(fn, args, kwargs)
    gc.collect()
    started = not tracemalloc.is_tracing()
    if started:
        tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        result = fn(*args, **kwargs)
        current, peak = tracemalloc.get_traced_memory()
    finally:
        if started:
            tracemalloc.stop()
    return result, max(peak - base, 0), max(current - base, 0)


def _pool_peak(fn, args, kwargs):
    """``peak_and_held`` for CuPy: a memory hook on the pool adds each block it hands out
    and subtracts each block given back; the peak of that running sum is the peak, its end
    what is held."""
    import cupy
    from cupy.cuda import memory_hook

    class PoolPeak(memory_hook.MemoryHook):
        name = "minigrad.analysis.memory.PoolPeak"

        def __init__(self):
            self.now = self.peak = 0

        def malloc_postprocess(self, device_id, size, mem_size, mem_ptr, pmem_id):
            self.now += mem_size
            self.peak = max(self.peak, self.now)

        def free_postprocess(self, device_id, mem_size, mem_ptr, pmem_id):
            self.now -= mem_size

    gc.collect()
    stream = cupy.cuda.get_current_stream()
    stream.synchronize()
    hook = PoolPeak()
    with hook:
        result = fn(*args, **kwargs)
        stream.synchronize()
    return result, hook.peak, max(hook.now, 0)


def check_measured(*values):
    """``"numpy"`` or ``"cupy"``: the namespace of the arrays among ``values`` (bare, in a
    Tensor or in a Module's parameters), which must be all NumPy or all CuPy arrays;
    ``NotImplementedError`` for any other namespace or a mix."""
    names = set(_namespace_names(values))
    if names - {"numpy", "cupy"} or len(names) > 1:
        raise NotImplementedError(
            f"memory is measured for NumPy arrays (tracemalloc) or CuPy arrays (a hook on "
            f"its memory pool), one of them at a time; got arrays of {sorted(names)}")
    return names.pop() if names else "numpy"


def _namespace_names(values):
    """The namespace name of each array among ``values``: bare, in a Tensor, or a Module's
    parameters."""
    for value in values:
        if isinstance(value, nn.Module):
            yield from _namespace_names(value.parameters())
            continue
        array = value.data if isinstance(value, Tensor) else value
        if backend.is_array(array):
            yield backend.namespace_name(backend.get_namespace(array))


def check_numpy(*values):
    """``NotImplementedError`` unless every array among ``values`` (bare, in a Tensor or in a
    Module's parameters) is a NumPy array."""
    for name in _namespace_names(values):
        if name != "numpy":
            raise NotImplementedError(
                f"this measurement uses tracemalloc, which sees NumPy's buffers only; got "
                f"a {name} array (peak_bytes and update_memory measure CuPy through its "
                f"memory pool)")


def check_update(model, optimizer, x, y):
    """``(x, y)`` checked for measuring an update of ``model`` by ``optimizer`` (NumPy or
    CuPy, see ``check_measured``)."""
    x, y = as_batch(x, y)
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be an nn.Module, got {type(model).__name__}")
    if optimizer is None:
        raise TypeError("optimizer must be a minigrad optimizer (optim.SGD, ...), got None")
    check_optimizer(optimizer, model.parameters())
    check_measured(model, x, y)
    return x, y


def update_memory(model, loss_fn, optimizer, x, y, *, micro_batch_size=None,
                  num_micro_batches=None, sizes=None, normalize="items", strategy="micro"):
    """The peak extra memory of ONE ``accumulate.step(model, loss_fn, optimizer, x, y, ...)``.

    The step runs on ``copy.deepcopy((model, optimizer))``, one copy, so the copied
    optimizer holds the copied parameters; the caller's model is untouched. In bytes:
    ``peak``; ``parameters`` and ``gradients`` (their nbytes); ``optimizer_state`` (the
    state's arrays after the step); ``activations``, the rest of the peak, never below 0
    (saved activations, and the update's temporaries); ``theory``, ``theoretical_peak``
    where it covers the model and loss (else None).

    >>> model = nn.MLP([4, 8, 2], seed=0)
    >>> opt = optim.Adam(model.parameters())
    >>> x, y = np.zeros((6, 4)), np.arange(6) % 2
    >>> report = update_memory(model, nn.CrossEntropyLoss(), opt, x, y, micro_batch_size=2)
    >>> report["parameters"], report["optimizer_state"]  # 58 float64; Adam's m and v
    (464, 928)
    """
    x, y = check_update(model, optimizer, x, y)
    model_copy, optimizer_copy = copy_update(model, optimizer)
    split = dict(micro_batch_size=micro_batch_size, num_micro_batches=num_micro_batches,
                 sizes=sizes, normalize=normalize, strategy=strategy)
    _, peak = peak_bytes(step, model_copy, loss_fn, optimizer_copy, x, y, **split)
    parameters = sum(p.data.nbytes for p in model.parameters())
    state = sum(a.nbytes for record in optimizer_copy.state for field in record
                if isinstance(field, tuple) for a in field if backend.is_array(a))
    sizes = resolve(x.shape[0], micro_batch_size=micro_batch_size,
                    num_micro_batches=num_micro_batches, sizes=sizes)
    covered = _not_covered(model, loss_fn, optimizer) is None and strategy == "micro"
    return {"peak": peak, "parameters": parameters, "gradients": parameters,
            "optimizer_state": state, "activations": max(0, peak - 2 * parameters - state),
            "theory": theoretical_peak(model, loss_fn, optimizer, x, sizes) if covered
            else None}


def copy_update(model, optimizer):
    """``copy.deepcopy((model, optimizer))``, one copy, so the copied optimizer holds the
    copied parameters; modules (array namespaces, update rules) are code, shared by the
    copy, not copied."""
    holders = (*model.parameters(), *(m for _, m in model.named_modules()), optimizer)
    shared = {id(v): v for obj in holders for v in vars(obj).values()
              if isinstance(v, types.ModuleType)}
    return copy.deepcopy((model, optimizer), shared)


def theoretical_peak(model, loss_fn, optimizer, x, sizes):
    """The peak extra bytes of one ``accumulate.step`` on micro-batches of ``sizes``, derived
    from minigrad's code for a ReLU MLP (Linear, ReLU, ..., Linear, with biases) trained
    with cross-entropy or MSE and SGD, Adam or AdamW.

    s bytes per value; widths d_0..d_L (hidden d_1..d_{L-1}, C = d_L); n samples in a
    micro-batch; P bytes of parameters, so of one set of gradients. Arrays are replaced,
    never written into, so each term below counts whole new arrays.

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
    * End of the walk: P new gradients, and from the second micro-batch on 3P: the
      accumulator's all-or-nothing snapshot keeps the old sum alive while grad + g is made.
    * The update: the sum (kept by the snapshot) and the sum / items, 2P; then parameter by
      parameter in the optimizer's order t arrays of its size alive at once, r of which
      stay (new p and state): SGD t, r = 2, 1; momentum 3, 2; Nesterov 4, 2; Adam and
      AdamW 4, 3 (its NumPy and CuPy path writes m, v, one temporary and the denominator, which
      becomes the new p); weight decay one more. Every gradient has its parameter's
      row-major layout (the engine's matmul follows PyTorch's layout rule), so no
      elementwise op mixes layouts, which NumPy would run through a buffer.

    * Recomputed runs of whole hidden layers (``Sequential.recompute_segments``, such as
      ``MLP.blocks`` gives): a run keeps only its output, d_last values
      per sample, and its other layers nothing. When the walk reaches the run, its forward
      runs again and its layers keep 2 d_l each again while the walk goes through them, and
      beside them stay the run's first output and, below its last ReLU, the gradient that
      arrived at the run: d_last more at that ReLU, 2 d_last below it. So recomputing a run
      lowers the moments above it and raises its own; the sums above use, layer by layer,
      what is alive at that moment (``_kept``, ``_held``).

    The peak is the largest moment. Neglected: Python objects (Tensors, closures, the
    walk's lists: at most ``PYTHON_OBJECTS`` bytes per step, measured), the int64 sample
    indices and targets
    (16 n bytes) and boolean temporaries; so the theory is close (within a few per cent)
    only once the arrays outweigh those objects.

    >>> model = nn.MLP([4, 8, 2], seed=0)
    >>> opt = optim.SGD(model.parameters(), lr=0.1)
    >>> theoretical_peak(model, nn.CrossEntropyLoss(), opt, np.zeros((2, 4)), [1, 1])
    1504
    >>> P = 8 * (4 * 8 + 8 + 8 * 2 + 2)  # float64 parameters
    >>> 2 * P + 8 * (4 * 8 + 8) + 2 * 8 * (8 * 2)  # at W_2: new W_1, b_1; lr g, the new W_2
    1504
    """
    reason = _not_covered(model, loss_fn, optimizer)
    if reason is not None:
        raise ValueError(f"theoretical_peak covers ReLU MLPs with cross-entropy or MSE and "
                         f"SGD, Adam or AdamW: {reason}")
    sizes = check_sizes(sizes, x.shape[0])
    return peak_of_micro_batches(model, loss_fn, optimizer, x.dtype,
                                 {(n, j > 0) for j, n in enumerate(sizes)})


def peak_of_micro_batches(model, loss_fn, optimizer, dtype, micro_batches):
    """``theoretical_peak`` for arguments it covers, unchecked, from the micro-batches as a
    set of ``(size, later)`` pairs (``later``: not the window's first, so the sum so far
    is alive beside it) and the data's ``dtype``: what the planner evaluates thousands of
    times, once per split and choice of recomputed runs."""
    linears = list(model)[::2]
    hidden = [layer.out_features for layer in linears[:-1]]
    widths = hidden + [linears[-1].out_features]
    classes = widths[-1]
    s = np.result_type(dtype, linears[0].weight.dtype).itemsize
    grads = [layer.weight.data.nbytes + layer.bias.data.nbytes for layer in linears]
    total = sum(grads)
    head = _HEAD_ARRAYS[type(as_loss(loss_fn))]
    segment = _recomputed(model)
    peak = _update_peak(optimizer, total)
    for n, later in micro_batches:
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
        end = (3 * total if later else total) + n * s * classes
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
    """2P + max over the optimizer's parameters i of (r sum_{j<i} q_j + t q_i)."""
    h = optimizer.hyperparams
    kind = "adam"
    if isinstance(optimizer, optim.SGD):
        kind = "sgd" if h["momentum"] == 0 else "nesterov" if h["nesterov"] else "momentum"
    t, r = _UPDATE_ARRAYS[kind]
    decay = h["weight_decay"] != 0
    t += decay  # g + lambda p (AdamW: the decayed copy of p) lives through the update
    done = worst = 0
    for p in optimizer.params:
        worst = max(worst, done + t * p.data.nbytes)
        done += r * p.data.nbytes
    return 2 * total + worst


def _not_covered(model, loss_fn, optimizer):
    """Why the theory does not cover these arguments, or None if it does."""
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
    if type(loss) not in _HEAD_ARRAYS:
        return f"the loss is {type(loss).__name__}"
    if type(optimizer) not in (optim.SGD, optim.Adam, optim.AdamW):
        return f"the optimizer is {type(optimizer).__name__}"
    return None
