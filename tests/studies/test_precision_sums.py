"""The proofs and measurements of ``minigrad.studies.precision.sums``.

1. A power-of-two loss scale is exact: (x 2^k) 2^-k == x, and a float32 sum of scaled
   terms unscaled equals the sum of the terms, bit for bit, when no scaled or unscaled
   value overflows or is subnormal (then every rounding commutes with the scaling).
2. Every buffer stays within its derived worst-case bound (Kahan: within its first-order
   bound 2u sum|t_j|; see the module docstring).
3. Low-precision buffers grow like sqrt(K), float32 and Kahan stay flat.
4. Divide-then-sum in float16 flushes small terms to zero; a loss scale brings them back.
"""

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from minigrad.accumulate.precision import round_to
from minigrad.studies.precision import sums as P

TINY32, MAX32 = np.finfo(np.float32).tiny, np.finfo(np.float32).max
normal32 = st.floats(-1e6, 1e6, width=32, allow_subnormal=False).filter(
    lambda v: v == 0 or abs(v) >= 1e-6)


@given(arrays(np.float32, st.integers(1, 40), elements=normal32), st.integers(-90, 90))
def test_a_power_of_two_scale_and_its_unscale_are_exact(x, k):
    s, inv = np.float32(2.0**k), np.float32(2.0**-k)
    scaled = x * s
    nonzero = np.abs(x[x != 0])
    # The condition: every scaled value (and the scaled sum) stays normal and finite.
    assume(np.all(nonzero * 2.0**k >= TINY32) and np.all(nonzero * 2.0**k <= MAX32 / 64))
    assert np.array_equal(scaled * inv, x)
    plain = np.float32(0)
    summed = np.float32(0)
    for v, w in zip(x, scaled):
        plain, summed = plain + v, summed + w
    assert summed * inv == plain


def test_the_condition_is_needed():
    x = np.array([1 + 2.0**-23], np.float32)  # 24 significant bits
    tiny = x * np.float32(2.0**-70) * np.float32(2.0**-70)  # subnormal: bits are lost
    assert tiny * np.float32(2.0**70) * np.float32(2.0**70) != x
    with np.errstate(over="ignore"):
        assert np.isinf(np.float32(2.0**100) * np.float32(2.0**100))  # overflow
    half = np.array([1 + 2.0**-10], np.float32)  # 11 bits: one float16 value
    assert round_to(half * np.float32(2.0**-20), "float16") * 2.0**20 != half


@given(st.integers(0, 10**6), st.sampled_from([1, 2, 3, 17, 100, 300]),
       st.sampled_from(P.DTYPES), st.sampled_from(["param", "float32", "kahan"]),
       st.sampled_from(["sum_then_divide", "divide_then_sum"]), st.sampled_from(P.SCALES))
def test_every_buffer_stays_within_its_bound(seed, k, dtype, accumulate, order, scale):
    row = P.measure(k, accumulate, order, dtype, scale, seed=seed)
    assume(row["bound_ratio"] is not None)  # an overflow, or K u >= 1 (no bound)
    assert row["bound_ratio"] <= 1.0


def errors(accumulate, dtype, ks=(16, 64, 256, 1024)):
    return [P.measure(k, accumulate, "sum_then_divide", dtype)["relative_error"] for k in ks]


def slope(accumulate, dtype, ks=(16, 64, 256, 1024)):
    found = errors(accumulate, dtype, ks)
    return np.polyfit(np.log(ks), np.log(found), 1)[0], found


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_low_precision_buffers_grow_like_sqrt_k(dtype):
    # The rms over 64 entries has a relative spread near 1/sqrt(128) ~ 9% per point, so the
    # fitted slope over K = 16..1024 has a spread near 0.03: 0.5 +- 0.15 is 5 of them.
    fitted, found = slope("param", dtype)
    assert abs(fitted - 0.5) < 0.15
    # and the model u sqrt(K / 6) predicts the size within a factor 2
    assert all(0.5 < e / (P.UNIT_ROUNDOFF[dtype] * np.sqrt(k / 6)) < 2
               for e, k in zip(found, (16, 64, 256, 1024)))


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_kahan_and_float32_buffers_stay_flat(dtype):
    fitted, kahan = slope("kahan", dtype)
    assert fitted < 0.15 and max(kahan) < 2 * P.UNIT_ROUNDOFF[dtype]
    main, low = errors("float32", dtype), errors("param", dtype)
    assert all(m < 1e-3 * lo for m, lo in zip(main, low))


def test_divide_then_sum_flushes_float16_terms_to_zero():
    # N = 2 * 32 items: 2^-20 / 64 = 2^-26 rounds to 0 (below half of 2^-24); 1 / 64 does not.
    t = np.array([[2.0**-20], [1.0]], np.float32)
    assert P.flushed(t, "float16") == 0.5 and P.flushed(t, "float16", scale=2.0**8) == 0.0
    rows = [P.measure(k, "float32", "divide_then_sum", "float16") for k in P.KS]
    flushed = [r["flushed"] for r in rows]
    assert flushed == sorted(flushed) and flushed[-1] > 0.05
    assert all(P.measure(k, "float32", "divide_then_sum", "bfloat16")["flushed"] == 0
               for k in P.KS)  # bfloat16 has float32's exponent range
    scaled = [P.measure(k, "float32", "divide_then_sum", "float16", 2.0**8)["flushed"]
              for k in P.KS]
    assert all(s <= f for s, f in zip(scaled, flushed)) and scaled[-1] < flushed[-1] / 10


def test_an_overflow_is_reported_not_hidden():
    row = P.measure(1024, "param", "sum_then_divide", "float16", 2.0**8)
    assert row["relative_error"] is None and row["bound_ratio"] is None
