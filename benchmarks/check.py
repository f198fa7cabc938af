"""Before anything is timed: every implementation computes minigrad's step.

From the same data and initial weights each implementation takes one step; we compare
(1) the gradients the update used and (2) the parameters after the update with minigrad's.

**Gradients.** The measure is norm-wise over all parameters at once,
e = ||g - g_minigrad||_2 / ||g_minigrad||_2, and it must be at most

    tol = 2 * P * K_max * u

* u is the unit roundoff, 2^-24 for float32 and 2^-53 for float64.
* K_max is the longest inner dimension of the step's matrix products: the batch N for the
  weight gradients dz.T @ a, the widths for the forward a @ W.T and the backward dz @ W.
  (With micro-batches of m, a weight gradient is k sums of m terms added up: m + k <= N.)
  A K-term dot product summed in any order, as BLAS blocks it or as another library's
  kernels do, is off by at most gamma_K = K u / (1 - K u) ~ K u times the sum of the
  absolute values of its terms (Higham, *Accuracy and Stability of Numerical Algorithms*,
  sec. 3.1). That bound is relative to the sum of |terms|, and the sums here cancel
  (weights and dz have both signs). Rounding errors in practice behave like independent
  random variables: about sqrt(K) u times the sum of |terms| (Higham and Mary, SIAM J.
  Sci. Comput. 2019), while a sum of K terms of random sign is about 1/sqrt(K) of the sum
  of their absolute values; so K u is the scale of the error relative to the result too.
* P = 2L is the number of products on the longest path to a gradient, for L layers: L
  forward products to the logits, L - 1 backward products dz @ W and one weight gradient.
  To first order their errors add: with this initialisation (uniform, +-1/sqrt(fan-in))
  the layers neither blow up nor shrink what passes through them. The elementwise steps
  (bias, ReLU, exp, log, a softmax over 10 classes, the division by N) add a few u each,
  nothing beside K u.
* 2: two computations, each within P K_max u of the exact gradient.

So tol is 2.9e-3 for float32 at LARGE (L = 3, N = 4096) and 3.7e-4 at SMALL (L = 2,
K_max = 784), 5.5e-12 and 7.0e-13 for float64. It is a bound, not an estimate: the gaps
run.py prints beside it are far smaller, while a real mistake (a missing bias gradient, a
micro-batch divided by its own size, a wrong transpose) is off by 1e-2 or more.

One effect is outside the first-order argument: ReLU's derivative jumps at 0, so a
pre-activation within rounding of 0 can be active in one computation and not in the other.
That moves the gradient of every layer below it by one sample's term for one unit, about
1 / sqrt(active units) of the norm: 7e-4 at LARGE (2e6 active units). How many? Those
whose |pre-activation| is below the two computations' forward difference, ~1e-7 at LARGE
for float32: with 4e6 pre-activations per layer at a density ~0.7 near 0, about one per
run when the two use different matrix-product kernels (none when they share NumPy's). The
bound leaves room for (2.9e-3 / 7e-4)^2 ~ 17 such switches, which add in quadrature. A
switch shows as a gap in the layers below one layer and none in the last layer
(``grad_gap_by_param``, printed if the check fails).

**Parameters after one update.** At t = 1 Adam's update is exactly
s(g) = lr * g / (|g| + eps) (m_hat = g, sqrt(v_hat) = |g|), so for every entry

    |p - p_minigrad| <= |s(g) - s(g_minigrad)| + u (|p| + |p_minigrad|) + 24 u lr + 8 u64 lr

The first term is what the two gradients' difference allows, evaluated in float64 from
the gradients themselves; a plain tolerance cannot stand in for it, since s(g) ~ lr
sign(g) when |g| >> eps: an entry whose gradient is 0 up to rounding may step by +lr in
one implementation and -lr in the other (we count these, ``sign_flips``). The rest is
rounding. Computing s in the dtype takes 10.5 roundings to first order, relative to
|s| <= lr: the constants 1 - b1, 1 - b2, the step size and sqrt(1 - b2^t) rounded to the
dtype, four products, a quotient, a square root (half of v's error plus its own), a sum
with eps; we allow 12 per implementation, 24 u lr for the two. p - s rounds once more,
u |p| each. Evaluating s(g) - s(g_minigrad) in float64 rounds 7 times (3 per s, one
difference), 8 u64 lr: nothing for float32, a quarter of the allowance for float64.
``param_rounding_used`` is the largest (|p - p_minigrad| - |s(g) - s(g_minigrad)|) as a
fraction of the rounding allowance; the check needs it <= 1.

**The language model** (shape LM, ``language.py``): rows of L positions, each a context of
C token ids, through an embedding table (V, D), a tanh layer (C D -> H) and the logits
(H -> V); the loss is the mean over the T real tokens (padding positions are ignored). The
same argument with:

* P = 2L + 1 = 5 (L = 2 layers): the L forward products, dz @ W of the logits and of the
  hidden layer, then the embedding's gradient, one more sum: a row of the table adds the
  gradients of every context slot that holds its token.
* K_max = the largest of the positions (rows x L, the inner dimension of the weight
  gradients), C D, H, V and the count of the most frequent token among the context slots
  of the real positions: a padding position's gradient is exactly 0 (its target is
  ignored), and adding an exact 0 rounds nothing.
* tanh is smooth: no switch like ReLU's.

At LM, K_max is the boundary token's count, 8,708 (256 names, context 8): tol = 5.2e-3 for
float32, 9.7e-12 for float64. The mistakes this check is for are far larger: a mean over
the positions instead of the tokens scales the gradient by 1794 / 2816 (a gap of 0.36); a
scatter that keeps one of a token's gradients instead of their sum is off by O(1).

**The loss** (the language model's steps report it): the relative gap of the two losses
must be at most 2 (L + 1) K u, K = max(T, C D, H, V): the L forward products and the
mean's sum of T terms, each computation within (L + 1) K u of the exact loss to first
order (the log-softmax over V classes adds a few u). 6.4e-4 for float32 at LM, 1.2e-12 for
float64.
"""

import numpy as np

from minigrad.nn.windows import IGNORE_INDEX

from common import ADAM, unit_roundoff

ADAM_ROUNDINGS = 12  # per update, relative to lr
S_ROUNDINGS = 8  # of the float64 s(g) - s(g_minigrad), relative to lr
U64 = unit_roundoff("float64")


def flat(arrays):
    return np.concatenate([np.asarray(a, dtype=np.float64).ravel() for a in arrays])


def gradient_bound(problem):
    """``(tol, parts)``: the norm-wise tolerance derived in the module docstring."""
    shape, u = problem.shape, unit_roundoff(problem.dtype)
    if shape.kind == "charlm":
        products = 2 * 2 + 1
        real = problem.y != IGNORE_INDEX
        k_max = max(problem.y.size, *problem.weights[1].shape, len(problem.weights[0]),
                    int(np.bincount(problem.x[real].ravel()).max()))
    else:
        products = 2 * (len(shape.sizes) - 1)
        k_max = max(shape.batch, *shape.sizes)
    return 2 * products * k_max * u, {"P": products, "K_max": k_max, "u": u}


def loss_bound(problem):
    """``(tol, parts)``: the relative tolerance of the language model's loss (docstring)."""
    u = unit_roundoff(problem.dtype)
    k = max(int((problem.y != IGNORE_INDEX).sum()), *problem.weights[1].shape,
            len(problem.weights[0]))
    sums = 2 + 1
    return 2 * sums * k * u, {"P": sums, "K": k, "u": u}


def first_adam_step(grads):
    """s(g) = lr g / (|g| + eps): Adam's first update of parameter entries, in float64."""
    g = flat(grads)
    return ADAM["lr"] * g / (np.abs(g) + ADAM["eps"])


def compare(problem, minigrad, other, reference=None):
    """A record of how ``other`` (an implementation after one step) agrees with ``minigrad``;
    ``reference``: float64 gradients of the same step, to show each one's own rounding."""
    dtype = problem.dtype
    tol, parts = gradient_bound(problem)
    u = unit_roundoff(dtype)
    g_mg, g = minigrad.gradients(), other.gradients()
    p_mg, p = minigrad.parameters(), other.parameters()
    dtypes = sorted({str(a.dtype) for a in g + p})
    shapes_ok = [a.shape for a in g + p] == [np.shape(w) for w in problem.weights * 2]
    grad_gap = _relative(flat(g), flat(g_mg))
    p0, p1_mg, p1 = flat(problem.weights), flat(p_mg), flat(p)
    s, s_mg = first_adam_step(g), first_adam_step(g_mg)
    rounding = u * (np.abs(p1) + np.abs(p1_mg)) + (2 * ADAM_ROUNDINGS * u
                                                   + S_ROUNDINGS * U64) * ADAM["lr"]
    used = float(np.max((np.abs(p1 - p1_mg) - np.abs(s - s_mg)) / rounding))
    record = {
        "dtypes": dtypes,
        "grad_gap": grad_gap,
        "grad_tol": tol,
        "grad_tol_parts": parts,
        "param_rounding_used": used,
        "param_gap_of_update": _relative(p1 - p0, p1_mg - p0),
        "sign_flips": int(np.sum(np.sign(s) != np.sign(s_mg))),
        "grad_gap_float64": None if reference is None else _relative(flat(g), reference),
        "grad_gap_by_param": {name: _relative(flat([a]), flat([b]))
                              for name, a, b in zip(problem.names, g, g_mg)},
    }
    loss_ok = True
    if problem.shape.kind == "charlm":
        loss_tol, loss_parts = loss_bound(problem)
        loss_gap = _relative(np.array([other.loss_value()]), np.array([minigrad.loss_value()]))
        record |= {"loss": other.loss_value(), "loss_gap": loss_gap, "loss_tol": loss_tol,
                   "loss_tol_parts": loss_parts}
        loss_ok = loss_gap <= loss_tol
    record["ok"] = bool(dtypes == [dtype] and shapes_ok and grad_gap <= tol and used <= 1
                        and loss_ok)
    return record


def _relative(a, b):
    norm = np.linalg.norm(b)
    return float(np.linalg.norm(a - b) / norm) if norm else float(np.linalg.norm(a))


def describe_failure(name, problem, record):
    """One paragraph saying what disagreed, by how much, against which bound."""
    parts = record["grad_tol_parts"]
    lines = [f"{name} disagrees with minigrad on {problem.shape.name.upper()} "
             f"{problem.dtype}; nothing was timed."]
    if record["dtypes"] != [problem.dtype]:
        lines.append(f"  its gradients and parameters have dtypes {record['dtypes']}, "
                     f"expected {problem.dtype} only")
    lines.append(f"  gradient gap {record['grad_gap']:.2e} (bound {record['grad_tol']:.2e} = "
                 f"2 * P={parts['P']} * K_max={parts['K_max']} * u={parts['u']:.2e})")
    if record["grad_gap_float64"] is not None:
        lines.append(f"  its gap to a float64 computation of the step: "
                     f"{record['grad_gap_float64']:.2e}")
    if "loss_gap" in record:
        lines.append(f"  loss {record['loss']:.9g}: relative gap {record['loss_gap']:.2e} (bound "
                     f"{record['loss_tol']:.2e})")
    lines.append("  by parameter: " + ", ".join(f"{k} {v:.1e}" for k, v in
                                              record["grad_gap_by_param"].items()))
    lines.append(f"  parameters after one Adam step: beyond what the gradients' difference "
                 f"explains, up to {record['param_rounding_used']:.2f} of the rounding "
                 f"allowance (must be <= 1); {record['sign_flips']} entries stepped the "
                 "other way")
    return "\n".join(lines)
