"""One gradient check for every primitive, against two independent oracles.

``check_op(spec, xp)`` draws float64 inputs from a NumPy generator seeded by the spec's
name, builds Tensors in namespace ``xp`` and takes the scalar ``L = sum(out * w)`` for a
fixed random weighting ``w`` (no weight is near 0, so every output element matters).
Since dL/dout = w, ``out.backward(w)`` computes grad L. It then checks

(a) each grad keeps the namespace, device, dtype and shape of its input;
(b) the forward value equals the same computation written with ``autograd.numpy``;
(c) the grad equals ``autograd.grad`` of that version (HIPS autograd, an independent engine);
(d) the grad equals central finite differences of minigrad's own forward.

``module_spec`` makes such a spec of a Module: its parameters become the checked inputs.
"""

import zlib
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass

import autograd
import autograd.numpy as anp
import numpy as np

from minigrad import backend
from minigrad.engine.tensor import Tensor, no_grad

EPS = np.finfo(np.float64).eps


def _grid(rng, shape, offset):
    return 0.25 * rng.integers(-8, 8, shape) + offset + rng.uniform(-0.05, 0.05, shape)


DOMAINS = {
    "real": lambda rng, shape: rng.uniform(-2.0, 2.0, shape),
    "positive": lambda rng, shape: rng.uniform(0.5, 2.0, shape),
    # |x| >= 0.2: relu and maximum(x, 0) have no kink within the finite-difference step
    "nonzero": lambda rng, shape: rng.choice([-1.0, 1.0], shape) * rng.uniform(0.2, 2.0, shape),
    # two interleaved grids: a "grid" and an "offgrid" value are >= 0.025 apart, so
    # maximum(grid, offgrid) has no ties and no kink within the step
    "grid": lambda rng, shape: _grid(rng, shape, 0.0),
    "offgrid": lambda rng, shape: _grid(rng, shape, 0.125),
}


@dataclass(frozen=True)
class OpSpec:
    """An op to check: ``fn`` on minigrad Tensors, ``ref`` the same on autograd.numpy arrays.

    Both are called with one float input per entry of ``shapes`` followed by ``extra``
    (integer NumPy arrays such as indices; ``fn`` gets them moved to the namespace).
    ``domain`` names the input distribution (see DOMAINS), one for all or one per input.
    """

    name: str
    fn: Callable
    ref: Callable
    shapes: tuple
    domain: str | tuple = "real"
    extra: tuple = ()


def check_op(spec, xp):
    """Assert (a)-(d) of the module docstring for ``spec`` on namespace ``xp``."""
    rng = np.random.default_rng(zlib.crc32(spec.name.encode()))
    domains = spec.domain if isinstance(spec.domain, tuple) else (spec.domain,) * len(spec.shapes)
    xs = [np.asarray(DOMAINS[d](rng, s), dtype=np.float64) for d, s in zip(domains, spec.shapes)]
    extra = [xp.asarray(e) for e in spec.extra]

    def forward(*arrays):
        return spec.fn(*(Tensor(xp.asarray(a), requires_grad=True) for a in arrays), *extra)

    ref_out = spec.ref(*xs, *spec.extra)
    w = rng.choice([-1.0, 1.0], np.shape(ref_out)) * rng.uniform(0.5, 1.5, np.shape(ref_out))
    inputs = [Tensor(xp.asarray(x), requires_grad=True) for x in xs]
    out = spec.fn(*inputs, *extra)

    # (b) Same formulas on the same float64 inputs: at most a few roundings apart.
    assert out.shape == np.shape(ref_out), f"{spec.name}: forward shape"
    _assert_close(out.numpy(), ref_out, 1e-12, f"{spec.name}: forward value")

    out.backward(xp.asarray(w))
    for i, (t, x) in enumerate(zip(inputs, xs)):
        # (a)
        assert backend.get_namespace(t.grad) is xp, f"{spec.name}: grad {i} namespace"
        assert backend.device(t.grad) == backend.device(t.data), f"{spec.name}: grad {i} device"
        assert t.grad.dtype == t.data.dtype, f"{spec.name}: grad {i} dtype"
        assert tuple(t.grad.shape) == x.shape, f"{spec.name}: grad {i} shape"
        g = backend.to_numpy(t.grad)

        # (c) autograd evaluates the same derivative formulas, associated differently (its
        # own unbroadcast sums, -g*x/y**2 for the quotient, np.add.at for gathers). Each grad
        # element is a sum of n <= ~100 products of a few roundings, so the two differ by
        # <= n*eps*sum|terms| ~ 1e-14 of the gradient's scale. 1e-12 leaves 100x headroom
        # for cancellation; a wrong rule is off by O(1).
        def loss(*arrays):
            return anp.sum(spec.ref(*arrays, *spec.extra) * w)

        g_ref = autograd.grad(loss, argnum=i)(*xs)
        _assert_close(g, g_ref, 1e-12, f"{spec.name}: grad {i} vs autograd")

        # (d)
        fd, tol = _central_differences(forward, xs, i, w)
        bad = np.abs(g - fd) > tol
        assert not bad.any(), (
            f"{spec.name}: grad {i} vs finite differences at {np.argwhere(bad)[:3].tolist()}: "
            f"grad {g[bad][:3]}, fd {fd[bad][:3]}, tolerance {tol[bad][:3]}"
        )


def _central_differences(forward, xs, i, w):
    """(L(x + h e_j) - L(x - h e_j)) / (2h) for every element j of input ``i``, and its tolerance.

    Error of the quotient, for L = sum_k w_k f_k and h_j = 1e-6 * max(1, |x_j|):
      truncation  h^2 |L'''| / 6.  On DOMAINS every term has |f'''| <= 100 (|f| + 1) (the worst
                  is x**-1 on [0.5, 2]: 6/x**4 <= 96), so |L'''| <= 100 S with
                  S = sum_k |w_k| (|f_k| + 1); h <= 2e-6 makes this <= 7e-11 S.
      rounding    each evaluation of L is off by <= c eps S, with c ~ 16 roundings per term
                  (a few in f, matmul's inner sum, the product with w, the final sum); the
                  quotient is off by <= c eps S / h <= 3.6e-9 S.
    The step is the exact difference of the two perturbed floats, so it adds no error.
    Whatever the sizes, the tolerance is ~4e-9 of S, while a wrong derivative is off by O(1).
    """
    x = xs[i]
    h = 1e-6 * np.maximum(1.0, np.abs(x))
    fd = np.empty_like(x)
    with no_grad():
        f = forward(*xs).numpy()
        for j in np.ndindex(x.shape):
            plus, minus = x.copy(), x.copy()
            plus[j] += h[j]
            minus[j] -= h[j]
            lo = [minus if k == i else a for k, a in enumerate(xs)]
            hi = [plus if k == i else a for k, a in enumerate(xs)]
            diff = np.sum(forward(*hi).numpy() * w) - np.sum(forward(*lo).numpy() * w)
            fd[j] = diff / (plus[j] - minus[j])
    scale = np.sum(np.abs(w) * (np.abs(f) + 1.0))
    tol = (16 * EPS / h + 100 * h**2 / 6) * scale
    return fd, tol


def _assert_close(actual, expected, rtol, what):
    """|actual - expected| <= rtol * max(1, max|expected|) elementwise (inputs are O(1))."""
    expected = np.asarray(expected, dtype=np.float64)
    assert np.shape(actual) == expected.shape, f"{what}: shape {np.shape(actual)}"
    scale = max(1.0, float(np.max(np.abs(expected), initial=0.0)))
    err = float(np.max(np.abs(actual - expected), initial=0.0))
    assert err <= rtol * scale, f"{what}: max error {err:.3g} > {rtol:g} * {scale:.3g}"


# ----- check_op over a module's parameters ----------------------------------------------------
@contextmanager
def _swapped(module, names, tensors):
    """Within the block ``module``'s parameters ``names`` are ``tensors`` (check_op's leaves),
    as ``torch.func.functional_call`` does: the gradients then land on check_op's inputs."""
    owners = dict(module.named_modules())
    saved = []
    for name, t in zip(names, tensors):
        prefix, _, attr = name.rpartition(".")
        table = owners[prefix]._parameters
        saved.append((table, attr, table[attr]))
        table[attr] = t
    try:
        yield
    finally:
        for table, attr, p in saved:
            table[attr] = p


def module_spec(name, module, ref, x_shape, extra=(), call=None):
    """An OpSpec over ``(x, *module.parameters(), *extra)``; ``call(module, x, *extra)``."""
    names = [n for n, _ in module.named_parameters()]
    shapes = [x_shape] + [p.shape for p in module.parameters()]
    call = call or (lambda m, x: m(x))

    def fn(x, *rest):
        params, more = rest[:len(names)], rest[len(names):]
        with _swapped(module, names, params):
            return call(module, x, *more)

    return OpSpec(name, fn, ref, shapes, extra=extra)
