"""Seeded random numbers: drawn with a NumPy ``Generator`` (the array API has no random
API) and moved to the target namespace with ``xp.asarray(..., device=...)``, or computed on
the device from a key (``counter_uniform``), so that a split batch draws what the whole
batch would."""

import numpy as np

from minigrad.engine import validate
from minigrad.engine.backend.dtypes import as_dtype


def rng(seed):
    """A seeded NumPy ``Generator`` (pass a ``Generator`` through unchanged)."""
    if isinstance(seed, np.random.Generator):
        return seed
    return np.random.default_rng(validate.integer("seed", seed, low=0))


def uniform(generator, low, high, shape, *, xp, dtype="float64", device=None):
    """Uniform(low, high) draws from a NumPy ``generator``, as an ``xp`` array.

    Draws are made in float64 and then cast, so float32 and float64 models built
    from the same seed hold the same numbers up to rounding.
    """
    draws = generator.uniform(low, high, size=shape)
    return xp.asarray(draws, dtype=as_dtype(xp, dtype), device=device)


def normal(generator, shape, *, xp, dtype="float64", device=None, scale=1.0):
    """Normal(0, scale^2) draws from a NumPy ``generator``, as an ``xp`` array."""
    draws = generator.normal(0.0, scale, size=shape)
    return xp.asarray(draws, dtype=as_dtype(xp, dtype), device=device)


def _int64(c):
    """The int64 with the same 64 bits as the unsigned constant ``c``."""
    return c - 2**64 if c >= 2**63 else c


_GOLDEN = _int64(0x9E3779B97F4A7C15)
_MIX1 = _int64(0xBF58476D1CE4E5B9)
_MIX2 = _int64(0x94D049BB133111EB)


def _shift_right(h, k):
    """Logical right shift of int64 bits: the arithmetic shift, sign copies masked off."""
    return (h >> k) & ((1 << (64 - k)) - 1)


def _mix64(h):
    """SplitMix64's finaliser: a bijection of 64-bit words that scrambles every input bit."""
    h = (h ^ _shift_right(h, 30)) * _MIX1
    h = (h ^ _shift_right(h, 27)) * _MIX2
    return h ^ _shift_right(h, 31)


def counter_uniform(xp, seed, step, sample_index, width, *, device=None):
    """Uniform [0, 1) numbers keyed by ``(seed, step, sample, feature)``, shape ``(N, width)``.

    A counter-based generator: the number for one sample depends only on its key, never on
    which other samples share the call, so a batch split into micro-batches draws exactly
    the numbers the whole batch would. SplitMix64 on 64-bit words held in int64 arrays:
    wrapping multiply, xor and shifts give the same bits as unsigned arithmetic, and every
    namespace has them (PyTorch has no uint64 multiply).
    """
    i64 = xp.int64

    def word(value):  # (1, 1) arrays, not 0-d ones: NumPy warns about wrap-around for scalars
        return xp.asarray([[_int64(int(value) % 2**64)]], dtype=i64, device=device)

    key = _mix64(word(seed) + _GOLDEN)
    key = _mix64(key ^ word(step))
    samples = xp.astype(xp.reshape(sample_index, (-1, 1)), i64)
    features = xp.reshape(xp.arange(width, dtype=i64, device=device), (1, -1))
    h = _mix64(key ^ _mix64(samples * _GOLDEN + features))
    # The top 53 bits as a float64 in [0, 1), as NumPy's Generator does it.
    return xp.astype(_shift_right(h, 11), xp.float64) * (1.0 / 2**53)
