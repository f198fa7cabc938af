"""An optimizer update as *validate, then commit*.

``plan`` does everything that can fail (checks, the hyperparameters, the optimizer state an
in-place update needs, such as SGD's first momentum buffer) and writes nothing; ``commit``
then writes the parameters and the optimizer state IN PLACE, inside
``minigrad.engine.interrupts.deferred()``, where nothing can fail and nothing is allocated:

* NumPy and CuPy arrays (with at least one axis, writable; NumPy's in C order) are updated
  by each rule's ``write``: the rule's own kernels in its own order, with ``out=``, into
  the parameter, its moments and a ``Workspace`` of two scratch arrays (on NumPy at most
  ``CHUNK`` values long, the parameter taken in slices; on CuPy as long as the largest
  parameter), allocated once per parameter set and reused. The results have the bits of
  the pure ``update`` (tests/optim check ``==``).
* Any other array (array-api-strict, PyTorch tensors, exact ``Fraction`` object arrays,
  0-d arrays) has no ``out=``: ``plan`` computes the new arrays with the pure ``apply`` and
  ``commit`` only swaps references.

The gradient the rule sees may be the parameter's ``.grad`` divided by ``scale`` (the
window's item count) and multiplied by ``coef`` (a clipping coefficient, one 0-d array): that
is done in ``commit`` too, into the workspace, so ``.grad`` is never written and no copy of
the gradients is made. Dividing first, then multiplying, is the order in which
``Accumulator`` divided and ``clip_grad_norm_`` scaled when each made new arrays: the same
bits.
"""

import sys
from dataclasses import dataclass

import numpy as np

from minigrad.engine import backend, interrupts

CHUNK = 2**17
"""NumPy updates a parameter in slices of at most this many values (512 KiB in float32):
the rule's dozen elementwise passes then run over data that stays in the processor's caches,
and the workspace is two arrays of this size however large the model. Elementwise, so the
same bits. CuPy updates whole parameters (each slice would cost a dozen kernel launches)."""


def library(*arrays):
    """``numpy`` or ``cupy`` when every array is a writable, non-object array of that
    library with at least one axis (what ``out=`` kernels can update in place); else None."""
    kind = type(arrays[0])
    for a in arrays:
        if type(a) is not kind or not a.ndim:
            return None
    if kind is np.ndarray:  # C order, so that a slice of the flat array is a view
        for a in arrays:
            flags = a.flags
            if not (flags.writeable and flags.c_contiguous) or a.dtype.hasobject:
                return None
        return np
    if kind.__module__.startswith("cupy") and kind.__name__ == "ndarray":
        return sys.modules["cupy"]  # imported already: its arrays exist
    return None


class Workspace:
    """Two flat scratch arrays per (library, device, dtype), each as long as the largest
    parameter that uses them (on NumPy at most ``CHUNK`` values): allocated on the first
    update (or when a larger parameter appears) and reused by every later one. The views of
    each parameter's shape are kept too, so an update makes no array objects at all."""

    def __init__(self):
        self.buffers = {}  # (library name, device, dtype) -> (tmp, den), flat
        self._views = {}  # (library, device, dtype, shape) -> (tmp, den) of that shape

    def reserve(self, arrays):
        """Make room for every array of ``arrays`` (``(lib, p)`` pairs); may allocate."""
        if all(_key(lib, p) + (p.shape,) in self._views for lib, p in arrays):
            return  # every shape seen before, with its buffer: nothing to check
        need = {}
        for lib, p in arrays:
            key = _key(lib, p)
            size, _ = need.get(key, (0, None))
            need[key] = (max(size, min(p.size, CHUNK) if lib is np else p.size), p)
        for key, (size, p) in need.items():
            held = self.buffers.get(key)
            if held is None or held[0].size < size:
                if key[0] == "numpy":
                    self.buffers[key] = (np.empty(size, dtype=p.dtype),
                                         np.empty(size, dtype=p.dtype))
                else:
                    with p.device:  # CuPy: on the parameter's GPU, not the current one
                        lib = sys.modules[key[0]]
                        self.buffers[key] = (lib.empty(size, dtype=p.dtype),
                                             lib.empty(size, dtype=p.dtype))
                self._views = {k: v for k, v in self._views.items() if k[:3] != key}

    def views(self, lib, p):
        """The two scratch arrays shaped as ``p`` (views into the buffers, made once)."""
        key = _key(lib, p)
        shaped = key + (p.shape,)
        views = self._views.get(shaped)
        if views is None:
            tmp, den = self.buffers[key]
            views = self._views[shaped] = (tmp[:p.size].reshape(p.shape),
                                           den[:p.size].reshape(p.shape))
        return views


def _key(lib, p):
    """What a workspace buffer is shared by: the library (by name, so that an optimizer can
    be deep-copied), the device, the dtype. A device that cannot be a dict key (CuPy 14's
    ``cupy.cuda.Device`` is unhashable) is named by its ``id``, the GPU's number."""
    if lib is np:
        return ("numpy", None, p.dtype)
    device = backend.device(p)
    if getattr(type(device), "__hash__", None) is None:
        device = (type(device).__name__, device.id)
    return (lib.__name__, device, p.dtype)


@dataclass
class Plan:
    """One checked update: per active parameter, what ``commit`` writes."""

    rule: object
    writes: list  # (index, lib, grad, state) in place, or (index, None, new data, state)
    lr: object
    hyperparams: dict
    scale: object
    coef: list | None  # per write, in its gradient's dtype


def plan(optimizer, rule, active, grads, lr, hyperparams, *, scale=1, coef=None):
    """Everything ``commit`` needs, checked and allocated; nothing of ``optimizer`` written.

    ``grads[k]`` is the gradient of ``optimizer.params[active[k]]``; ``coef`` is None or
    one 0-d array, cast here to each gradient's dtype."""
    writes, in_place = [], []
    if coef is not None:
        coef = [backend.get_namespace(g).astype(coef, g.dtype) for g in grads]
    # Under np.seterr(... "raise" or "call") a floating-point error must come out before
    # anything is written: NumPy's arrays take the pure rule then (the commit, in place,
    # runs with NumPy's floating-point checks off: nothing in it may raise).
    strict = any(v in ("raise", "call") for v in np.geterr().values())
    for k, (i, g) in enumerate(zip(active, grads)):
        p, state = optimizer.params[i].data, optimizer.state[i]
        arrays = [g, p, *rule.moments(state)]
        lib = library(*arrays)
        if lib is np and strict:
            lib = None
        if lib is None:
            if scale != 1:
                g = g / scale
            if coef is not None:
                g = g * coef[k]
            (data,), new = rule.apply((g,), state, (p,), lr=lr, **hyperparams)
            writes.append((i, None, data, new))
        else:
            first = getattr(state, "mu", ()) is None
            writes.append((i, lib, g, (rule.reserve(lib, state, p, **hyperparams), first)))
            in_place.append((lib, p))
    optimizer.workspace.reserve(in_place)
    return Plan(rule, writes, lr, hyperparams, scale, coef)


def commit(optimizer, ready):
    """Write ``ready`` (a ``Plan``) into the parameters and state: in place, Ctrl-C held
    until the last write, nothing allocated on the fast path."""
    with interrupts.deferred():
        write(optimizer, ready)


def write(optimizer, ready):
    """``commit``'s writes, for a caller that holds ``interrupts.deferred()`` itself (an
    accumulator commits the schedule and its counters in the same block). NumPy's
    floating-point checks are off inside (an overflow gives inf, as IEEE says, never an
    exception half-way through the parameters): ``plan`` took the pure rule where they
    raise."""
    with np.errstate(all="ignore"):
        _write(optimizer, ready)


def _write(optimizer, ready):
    rule, h, scale, coef = ready.rule, ready.hyperparams, ready.scale, ready.coef
    for k, (i, lib, g, state) in enumerate(ready.writes):
        param = optimizer.params[i]
        param._version += 1  # a graph that used the old values now refuses its backward
        if lib is None:
            param.data, optimizer.state[i] = g, state
            continue
        state, first = state
        c = None if coef is None else coef[k]
        p, moments = param.data, rule.moments(state)
        if lib is np and p.size > CHUNK:  # in slices that stay in the caches, same bits
            flat = [a.reshape(-1) for a in (g, p, *moments)]
            for start in range(0, p.size, CHUNK):
                part = [a[start:start + CHUNK] for a in flat]
                _one(optimizer, rule, lib, part[0], part[1], part[2:], scale, c, state.count,
                     first, ready.lr, h)
        else:
            _one(optimizer, rule, lib, g, p, moments, scale, c, state.count, first, ready.lr, h)
        optimizer.state[i] = rule.advanced(state)
    optimizer.step_count += 1


def _one(optimizer, rule, lib, g, p, moments, scale, coef, count, first, lr, h):
    """One parameter (or a slice of one): the gradient divided by ``scale`` and multiplied
    by ``coef`` into the workspace, then the rule's in-place ``write``."""
    tmp, den = optimizer.workspace.views(lib, p)
    if scale != 1:
        lib.divide(g, scale, out=den)
        g = den
    if coef is not None:
        lib.multiply(g, coef, out=den)
        g = den
    rule.write(lib, g, p, moments, tmp, den, count=count, first=first, lr=lr, **h)
