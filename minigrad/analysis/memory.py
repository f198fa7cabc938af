"""Measured memory of one accumulated update, and the theory of where it goes.

``peak_bytes(fn)`` is the peak of the memory newly allocated while ``fn`` runs, as
``tracemalloc`` sees it: NumPy reports every array buffer to it, and Python objects are
traced too. ``update_memory`` measures one ``accumulate.step`` on a copy of the model and
the optimizer, splits the peak into parameters, gradients, optimizer state and the rest,
and sets beside it ``theoretical_peak``, derived from minigrad's own code for a ReLU MLP
(``minigrad.analysis.memory_theory``, whose ``theoretical_peak`` is also this module's).

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

from minigrad import nn
from minigrad.accumulate import step
from minigrad.accumulate.guard import as_batch, check_optimizer
from minigrad.accumulate.split import sizes_for
from minigrad.analysis.memory_theory import not_covered, theoretical_peak
from minigrad.engine import Tensor, backend

__all__ = ["PYTHON_OBJECTS", "check_measured", "check_numpy", "check_update", "copy_update",
           "peak_and_held", "peak_bytes", "theoretical_peak", "update_memory"]

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

    >>> import numpy as np
    >>> from minigrad import optim
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
    sizes = sizes_for(x.shape[0], micro_batch_size=micro_batch_size,
                      num_micro_batches=num_micro_batches, sizes=sizes)
    covered = not_covered(model, loss_fn, optimizer) is None and strategy == "micro"
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
