"""How precise is a window's gradient sum? The buffers of ``accumulate.precision`` measured
against the exact (Fraction) sum, next to their derived bounds.

Terms. ``terms(K, dtype)`` draws K micro-batch gradient SUMS t_j of ``ENTRIES`` gradient
entries, each a sum over ``ITEMS`` items: entry e has a magnitude s_e, log-uniform over
[2^-16, 1], and t_je = ITEMS s_e xi_je with xi standard normal (random signs, mean zero),
rounded to the compute ``dtype``. The window's mean gradient is s = sum_j t_j / N,
N = K * ITEMS. ``measure`` runs the strategy's own arithmetic (``accumulate.precision.
add_to``, ``round_to``) on them, with the loss scale S (a power of two) applied as the
strategy applies it, and compares with s computed in Fractions.

Worst case (Higham, *Accuracy and Stability*, 4.2; u the unit roundoff of the buffer,
gamma_m = m u / (1 - m u)). Recursive summation of K terms errs by at most
gamma_{K-1} sum_j |t_j|. With sum then divide (one float32 division at the end)::

    |s_hat - s| <= (gamma_{K-1} (1 + u32) + u32) sum_j |t_j| / N

With divide then sum, each fl(t_j S / N) adds a relative u_c (the compute dtype) or, below
the normal range, an absolute eta (half the smallest subnormal), then is summed::

    |s_hat - s| <= ((1 + gamma_{K-1})(u_c + K eta / A) + gamma_{K-1}) A,   A = sum_j|t_j|/N

(eta / S after unscaling). Both hold with underflow (adding subnormals is exact) and fail
only with overflow, which ``measure`` reports as ``None``. Scaling by S = 2^k and unscaling
are exact unless a value overflows or enters the subnormal range.

Statistical model (what "grows like sqrt(K)" means). If every rounding of the running sum
is an independent relative error, mean zero, uniform on [-u, u] (variance u^2 / 3), and the
terms are independent with mean zero and variance sigma^2, then the partial sums have
variance j sigma^2 and the error's variance is (u^2 / 3) sigma^2 sum_j j ~ u^2 sigma^2 K^2 / 6:
relative to the sum's own size (sigma sqrt(K)), the rms error is about u sqrt(K / 6). It
assumes no error cancels systematically and no overflow or underflow; the worst case grows
like K u instead. Kahan's compensated sum errs by 2u sum|t_j| to first order
(Higham 4.3), flat in K while K u is small.
"""

from fractions import Fraction
from functools import lru_cache

import numpy as np

from minigrad.accumulate.precision import ACCUMULATE, ORDER, add_to, round_to

DTYPES = ("float16", "bfloat16", "float32")
KS = (1, 4, 16, 64, 256, 1024)
SCALES = (1.0, 2.0**8)
ENTRIES = 64
ITEMS = 32
U32 = 2.0**-24
UNIT_ROUNDOFF = {"float16": 2.0**-11, "bfloat16": 2.0**-8, "float32": U32}
ETA = {"float16": 2.0**-25, "bfloat16": 2.0**-134, "float32": 2.0**-150}
"""Half the smallest subnormal: the largest error of rounding a value below the normal
range."""


def compute(dtype):
    """The strategy's ``compute_dtype`` for a table ``dtype`` (``"float32"``: None)."""
    return None if dtype == "float32" else dtype


def gamma(m, u):
    """gamma_m = m u / (1 - m u); inf when m u >= 1 (no bound)."""
    return m * u / (1 - m * u) if m * u < 1 else float("inf")


def terms(k, dtype, seed=0):
    """(k, ENTRIES) float32 array of micro-batch gradient sums, rounded to ``dtype``."""
    rng = np.random.default_rng([seed, k])
    size = 2.0 ** rng.uniform(-16, 0, size=ENTRIES)
    t = (ITEMS * size * rng.standard_normal((k, ENTRIES))).astype(np.float32)
    return round_to(t, compute(dtype))


def exact_mean(t):
    """sum_j t_j / N per entry, in Fractions (N = K * ITEMS)."""
    n = t.shape[0] * ITEMS
    return [sum(map(Fraction, t[:, e].tolist()), Fraction(0)) / n for e in range(t.shape[1])]


@lru_cache(maxsize=64)
def _exact(k, dtype, seed):
    return exact_mean(terms(k, dtype, seed))  # the same for every accumulator and order


def window_sum(t, accumulate, order, dtype, scale=1.0):
    """The window's mean gradient as ``Precision(accumulate, order, compute(dtype))`` with a
    loss scale ``scale`` computes it from the sums ``t``: a float32 array."""
    c, n = compute(dtype), t.shape[0] * ITEMS
    with np.errstate(over="ignore", invalid="ignore"):
        b = carry = None
        for tj in t:
            g = round_to(tj * np.float32(scale), c)  # the scaled backward's sum
            if order == "divide_then_sum":
                g = round_to(g / np.float32(n), c)
            b, carry = add_to(b, carry, g, accumulate, c)
        b = b.astype(np.float32) * np.float32(1.0 / scale)  # unscale once
        return b / np.float32(n) if order == "sum_then_divide" else b


def bound(t, accumulate, order, dtype, scale=1.0):
    """The worst-case bound on |s_hat - s| per entry (module docstring); for Kahan its first
    order 2u only. inf where there is none (K u >= 1)."""
    k, n = t.shape[0], t.shape[0] * ITEMS
    u = U32 if accumulate == "float32" else UNIT_ROUNDOFF[dtype]
    g = 2 * u if accumulate == "kahan" else gamma(k - 1, u)
    a = np.sum(np.abs(t.astype(np.float64)), axis=0) / n
    if order == "sum_then_divide":
        return (g * (1 + U32) + U32) * a
    uc, eta = UNIT_ROUNDOFF[dtype], ETA[dtype] / scale
    return (1 + g) * (uc * a + k * eta) + g * a


def measure(k, accumulate, order, dtype, scale=1.0, seed=0):
    """One row of the table: the rms error relative to the rms exact mean, the largest
    error over its bound (``None`` without a bound), the fraction of nonzero terms that
    divide-then-sum flushes to zero, and the statistical model (``model``). Errors are
    ``None`` after an overflow."""
    t = terms(k, dtype, seed)
    exact = _exact(k, dtype, seed)
    got = window_sum(t, accumulate, order, dtype, scale)
    row = {"dtype": dtype, "accumulate": accumulate, "order": order, "scale": scale, "k": k,
           "flushed": flushed(t, dtype, scale) if order == "divide_then_sum" else 0.0,
           "model": model(k, accumulate, dtype)}
    if not np.all(np.isfinite(got)):
        return {**row, "relative_error": None, "bound_ratio": None}
    err = np.array([float(Fraction(float(v)) - e) for v, e in zip(got.tolist(), exact)])
    size = np.sqrt(np.mean(np.array([float(e) for e in exact]) ** 2))
    limit = bound(t, accumulate, order, dtype, scale)
    ratio = float(np.max(np.abs(err) / limit)) if np.all(np.isfinite(limit)) else None
    return {**row, "relative_error": float(np.sqrt(np.mean(err**2)) / size),
            "bound_ratio": ratio}


def model(k, accumulate, dtype):
    """The statistical model's relative rms error u sqrt(K / 6), u of the buffer; ``None``
    for Kahan (whose error the model does not describe)."""
    if accumulate == "kahan":
        return None
    return (U32 if accumulate == "float32" else UNIT_ROUNDOFF[dtype]) * float(np.sqrt(k / 6))


def flushed(t, dtype, scale=1.0):
    """The fraction of nonzero terms t_j S / N that round to zero in ``dtype``."""
    n = t.shape[0] * ITEMS
    scaled = round_to(t * np.float32(scale), compute(dtype))
    small = round_to(scaled / np.float32(n), compute(dtype))
    nonzero = scaled != 0
    return float(np.sum((small == 0) & nonzero) / max(int(np.sum(nonzero)), 1))


def table(dtypes=DTYPES, ks=KS, scales=SCALES, seed=0):
    """Every row: dtype x accumulator x order x scale x K (``minigrad precision``)."""
    return [measure(k, accumulate, order, dtype, scale, seed)
            for dtype in dtypes for accumulate in ACCUMULATE for order in ORDER
            for scale in scales for k in ks]
