"""``Precision``: the strategy that runs one window in low precision, with float32 master
weights, and keeps the gradient sums in a chosen buffer.

Each micro-batch j of the window (of N items in all) gives a gradient SUM g_j; the buffer
``b`` adds them in one of three ways (``accumulate``)::

    "param"    b <- fl(b + g_j)                   in the gradients' dtype (float16, ...)
    "float32"  b <- fl32(b + g_j)                 float32 "main grads"
    "kahan"    y = fl(g_j - c); t = fl(b + y);    compensated (Kahan), in the
               c = fl(fl(t - b) - y); b = t       gradients' dtype

and divides by N once at the end (``order="sum_then_divide"``, the accumulation rule) or
adds fl(g_j / N) (``"divide_then_sum"``, what a loop over per-micro-batch means does when
the loss is normalised up front; small g_j / N underflow in float16).

**Emulated low precision.** The engine computes in float32; a ``compute_dtype`` of
``"float16"`` or ``"bfloat16"`` is emulated by rounding float32 results to that dtype at
storage points (kept in float32 arrays holding representable values):

* the parameters' compute copy fl(w) (the float32 master ``w`` is put back afterwards);
* the micro-batch input, and every activation between the children of an
  ``nn.Sequential`` (the model's output only, for other models), forward; the gradient
  reaching each of them, backward (the loss itself is computed in float32, as autocast does);
* each micro-batch's parameter gradient g_j (or g_j / N), and the buffer after each add.

Products and sums inside a layer are float32 (as tensor cores accumulate); an elementwise
``fl(a op b)`` is the correctly rounded low-precision result, since float32 carries more
than 2p + 2 bits for p = 11 (float16) and p = 8 (bfloat16). Overflow gives inf, as in
hardware. float16 exists in NumPy, PyTorch and CuPy (not in ``array_api_strict``); bfloat16
only on NumPy, through ``ml_dtypes``; elsewhere ``check`` refuses it.

With a ``GradScaler`` every micro-batch's loss is multiplied by the same S; the window's sum
is unscaled once (before the division and the clipping); a non-finite gradient on any
process skips the window (nothing changes, the optimizer's count and the schedule
included) and the scale is updated once per window.

>>> import numpy as np
>>> from minigrad import nn, optim
>>> from minigrad.accumulate import step
>>> model = nn.MLP([2, 4, 1], seed=0, dtype="float32")
>>> opt = optim.SGD(model.parameters(), lr=0.1)
>>> x, y = np.ones((8, 2), np.float32), np.zeros((8, 1), np.float32)
>>> run = Precision(accumulate="float32", compute_dtype="bfloat16")
>>> loss = step(model, nn.MSELoss(), opt, x, y, micro_batch_size=2, strategy=run)
>>> opt.step_count, model.parameters()[0].dtype
(1, dtype('float32'))
"""

from minigrad import nn
from minigrad.accumulate.micro import items_of, keys
from minigrad.engine import Tensor, backend, validate
from minigrad.engine.tensor import primitive
from minigrad.nn.layers import run_layers

ACCUMULATE = ("param", "float32", "kahan")
ORDER = ("sum_then_divide", "divide_then_sum")
COMPUTE_DTYPES = ("float16", "bfloat16")


def round_to(a, dtype):
    """``a`` rounded to the nearest ``dtype`` value (``"float16"``, ``"bfloat16"`` or None:
    unchanged), kept in ``a``'s own dtype; beyond the largest finite value: inf."""
    if dtype is None:
        return a
    xp = backend.get_namespace(a)
    if dtype == "float16":
        return xp.astype(xp.astype(a, xp.float16), a.dtype)
    import ml_dtypes  # bfloat16 for NumPy; check() made sure the arrays are NumPy's
    import numpy as np

    with np.errstate(over="ignore"):
        return a.astype(ml_dtypes.bfloat16).astype(a.dtype)


def add_to(b, c, g, accumulate, dtype):
    """The buffer ``b`` and Kahan's carry ``c`` (``None`` before the first term) after adding
    the term ``g`` (a ``dtype`` value) as ``accumulate`` says; see the module docstring."""
    xp = backend.get_namespace(g)
    if accumulate == "float32":
        g = xp.astype(g, xp.float32)
        return (g if b is None else b + g), None
    if b is None:
        return g, xp.zeros_like(g)
    if accumulate == "param":
        return round_to(b + g, dtype), None
    y = round_to(g - c, dtype)
    t = round_to(b + y, dtype)
    return t, round_to(round_to(t - b, dtype) - y, dtype)


def rounded(t, dtype):
    """A storage point: the Tensor ``t`` rounded to ``dtype``; its gradient rounded too."""
    return primitive(round_to(t.data, dtype), (t,), lambda g: round_to(g, dtype), name="rounded")


class Precision:
    """One window with gradient sums kept in ``accumulate`` ("param", "float32", "kahan"),
    divided in ``order``, computed in ``compute_dtype`` (None: the parameters' own dtype),
    optionally with a ``GradScaler`` ``scaler`` (see the module docstring)."""

    name, kind, label = "precision", "precision", "mixed precision"

    def __init__(self, accumulate="float32", order="sum_then_divide", compute_dtype=None,
                 scaler=None):
        self.accumulate = validate.choice("accumulate", accumulate, ACCUMULATE)
        self.order = validate.choice("order", order, ORDER)
        self.compute_dtype = validate.optional(validate.choice, "compute_dtype",
                                               compute_dtype, COMPUTE_DTYPES)
        if scaler is not None and not all(callable(getattr(scaler, m, None))
                                          for m in ("scale", "unscale", "update")):
            raise TypeError(f"scaler must be an optim.GradScaler or None, got "
                            f"{type(scaler).__name__}")
        self.scaler = scaler

    @property
    def divided(self):
        """With ``order="divide_then_sum"`` the sums arrive divided by the window's items
        (the strategy protocol's ``divided``): the update divides them no more."""
        return self.order == "divide_then_sum"

    def __repr__(self):
        return (f"Precision(accumulate={self.accumulate!r}, order={self.order!r}, "
                f"compute_dtype={self.compute_dtype!r}, scaler={self.scaler!r})")

    def check(self, acc):
        """Item-weighted windows (``normalize="items"``) of floating parameters; float32
        master weights under a ``compute_dtype``, in a namespace that has it."""
        if acc.normalize != "items":
            raise ValueError(f"strategy 'precision' divides by the window's items itself: "
                             f"normalize must be 'items', got {acc.normalize!r}")
        for p in acc.params:
            if backend.is_exact(p.data):
                raise TypeError("strategy 'precision' needs floating parameters, got exact "
                                "(Fraction) ones")
            if self.compute_dtype is not None and p.dtype != p.xp.float32:
                raise TypeError(f"compute_dtype={self.compute_dtype!r} keeps float32 master "
                                f"weights: the parameters must be float32, got {p.dtype}")
            name = backend.namespace_name(p.xp)
            if self.compute_dtype == "float16" and not hasattr(p.xp, "float16"):
                raise TypeError(f"compute_dtype='float16': {name} has no float16 (NumPy, "
                                "PyTorch and CuPy have it)")
            if self.compute_dtype == "bfloat16" and type(p.data).__module__ != "numpy":
                raise TypeError(f"compute_dtype='bfloat16' is emulated with ml_dtypes on "
                                f"NumPy only, got {name} arrays")

    def snapshot(self):
        """The scaler's state (the scale moves once per window), for the driver to put
        back if the window raises; ``None`` without a scaler."""
        if self.scaler is None:
            return None
        return {k: v.copy() if isinstance(v, (dict, set)) else v
                for k, v in vars(self.scaler).items()}

    def restore(self, state):
        vars(self.scaler).update(state)

    def run(self, acc, micro_batches, reduction):
        dtype, masters = self.compute_dtype, [p.data for p in acc.params]
        items = sum(items_of(acc, mb) for mb in micro_batches)
        total = sum(reduction.gather("precision: items of the window", items))
        if total == 0:
            return acc.refuse("the window holds no items (every target is ignore_index)")
        buffers, carries = [None] * len(masters), [None] * len(masters)
        for mb in micro_batches:
            for p, w in zip(acc.params, masters):
                p.data, p.grad = round_to(w, dtype), None  # the compute copy
            if self._add(acc, mb) is None:
                return None  # a non-finite loss dropped the window (on_nonfinite="skip")
            for i, p in enumerate(acc.params):
                if p.grad is not None:
                    g = p.grad / total if self.order == "divide_then_sum" else p.grad
                    buffers[i], carries[i] = add_to(buffers[i], carries[i],
                                                    round_to(g, dtype), self.accumulate, dtype)
        for p, w in zip(acc.params, masters):
            p.data = w
        sums = [None if b is None else p.xp.astype(b, p.dtype)
                for p, b in zip(acc.params, buffers)]
        found_inf = False
        if self.scaler is not None:
            present = [s for s in sums if s is not None]
            unscaled, inf_here = self.scaler.unscale(present)
            found_inf = any(reduction.gather("precision: a non-finite gradient", inf_here))
            it = iter(unscaled)
            sums = [None if s is None else next(it) for s in sums]
        if found_inf and acc.optimizer is not None:  # (without one: gradients only, inf)
            acc.discard()  # no non-finite .grad left behind, whatever interrupts the driver
            self.scaler.update(found_inf=True)
            return None  # skipped: the driver puts everything back
        acc.load_sums(sums, acc.window)
        if self.scaler is not None and acc.optimizer is not None:
            scaler = self.scaler  # the scale moves once per window, with the update's commit
            acc.on_commit.append(lambda: scaler.update(found_inf=False))
        return reduction.update(acc)

    def _add(self, acc, mb):
        """Forward and backward of one micro-batch through the storage points; counts it
        and returns its (unscaled) loss sum, or ``None`` when it was not finite."""
        dtype = self.compute_dtype
        with keys(acc, mb):
            h = Tensor(round_to(mb.x, dtype)) if backend.is_floating(
                backend.get_namespace(mb.x), mb.x) else mb.x
            whole = isinstance(acc.model, nn.Sequential)
            h = run_layers(list(acc.model) if whole else [acc.model], h,
                           acc.model.recompute_segments if whole else (), _storing(dtype))
        loss_sum = acc.loss(h, mb.y, reduction="sum")
        value = loss_sum.item()
        if not backend.all_finite([loss_sum.data]):
            return acc.refuse(f"loss of a micro-batch is {value}")
        (self.scaler.scale(loss_sum) if self.scaler is not None else loss_sum).backward()
        acc.record(items_of(acc, mb), mb.x.shape[0], value)
        return value


def _storing(dtype):
    """``run_layers``' way to apply a layer: its output rounded to ``dtype`` (a storage
    point), or as it is without one."""
    def apply(i, layer, h):
        h = layer(h)
        return rounded(h, dtype) if dtype is not None else h
    return apply
