"""The derived rounding bounds: how far accumulated training may be from full-batch training
in floating point, for one gradient (``gradient_bound``) and along a trajectory of updates
(``TrajectoryBound``, replayed by ``trajectory_bounds``). The equivalence tests and
``minigrad check`` judge the measured gap against them.

The gradient bound (``gradient_bound``)
=======================================
Let a_i be the gradient of sample i's loss (summed over its items), N the number of samples
and ``items`` the divisor (samples times outputs for MSE, kept targets for cross-entropy). In
exact arithmetic both runs compute g = (1/items) sum_i a_i. In floating point (unit roundoff
u of the dtype, ``unit_roundoff``; gamma_m = m u / (1 - m u)) they differ in two ways.

1. The sum over samples. Full batch: each element of g is one matrix product (or sum) over
   the N samples and one division, so (Higham, *Accuracy and Stability of Numerical
   Algorithms*, 3.1) its error is at most gamma_{N+1} sum_i |a_i| / items. Accumulated: a term
   of micro-batch j goes through at most n_j roundings inside its micro-batch's product and
   k - 1 in the running sum ``p.grad + g_j``; n_j + k - 1 <= N, so the same bound holds. For
   the two runs together: 2 gamma_{N+1} S, S = (1/items) sum_i |a_i| (elementwise).

2. The per-item terms themselves. BLAS picks its kernels by shape, so the same sample is
   rounded differently in a batch of n_j and in a batch of N. Each run computes a_i to within
   gamma_{m_item} kappa max|a_i| (first-order model), where
   * m_item = L (6W + 60) + 2C + 10 counts the roundings along the longest chain of one
     sample's forward and backward pass (``per_item_roundings``: per Linear layer of width
     <= W an inner product, a normalisation's two statistics and an activation, forward and
     backward; a log-sum-exp over C classes and its derivative; 4N more per layer for the
     batch sums of BatchNorm in training mode, used in ``tests/analysis/test_reference.py``);
   * kappa >= 1 (``condition_number``) is how much the network amplifies those roundings: a
     normalisation divides x - mean(x), whose error is relative to |W||h| + |b| + |mean|, by
     sigma = sqrt(var + eps); MSE's residual out - y likewise.
   This part is normwise (S_norm = (1/items) sum_i max|a_i|, the max over every element of
   every parameter): cancellation inside a sample's own computation makes a componentwise
   relative model false. A 2-feature LayerNorm of two distant values saturates (x_hat = +-1
   up to eps/d^2): the gradient through it (1e-6 to 1e-4 in the case we met) is a difference
   of much larger terms, and their roundings (1e-17) are what differs between the runs; the
   componentwise model was exceeded 45 times there.

        |g_acc - g_full| <= 2 gamma_{N+1} S + 2 gamma_{m_item} kappa S_norm

The first part is rigorous, the second a first-order model (about 1e-13 kappa S_norm for
these sizes in float64). What the model assumes: no pre-activation lies within its rounding
error of the ReLU kink (relu' would flip between the runs, an O(1) change of one sample's
gradient; for continuous random data the chance is ~1e-15 per unit in float64, and a
1-feature normalisation group, which gives exact zeros, gives them in both runs). Where
hypothesis' ``target()`` pushed hardest, the worst ratio error / bound seen in the long
profile (500 examples per namespace) was 0.013; without kappa one example
(``test_nearly_equal_values_in_a_layer_norm``) reached 4.5.

The trajectory bound (``TrajectoryBound``)
==========================================
First order in u, elementwise, one update at a time, for the gap theta_acc - theta_full:

* gradients: dg_t = bound_t + |grad_full(theta_acc) - grad_full(theta_full)|. The first term
  is the gradient bound at the accumulated run's parameters; the second, how the parameter
  gap so far changes the gradient (the curvature), is measured: both are full-batch
  computations, and the split enters only through theta_acc, whose gap was checked at the
  update before (so no Lipschitz constant has to be assumed).
* clipping, c = M / (|g| + 1e-6) when below 1: dc <= M dn / ((n + 1e-6)(n - dn + 1e-6)) with
  dn <= |dg|_2, and d(c g) <= c dg + dc |g|.
* SGD is linear in g: the momentum buffer carries db' = mu db + dd (dd = dg + wd dtheta), the
  step dtheta' = dtheta + lr ds (s = b, or d + mu b with Nesterov). Dampening tau only
  multiplies dd by 1 - tau <= 1, so the bound holds for it too.
* Adam: dm and dv follow the moments; d sqrt(v) <= min(sqrt(dv), dv / sqrt(v)); the update
  m / (sqrt(v_hat) + eps) moves by <= dm / low + |m| ddenom / (denom low), low = denom -
  ddenom. Division by sqrt(v_hat) + eps amplifies the gap of small-gradient coordinates by
  up to 1 / eps = 1e8: there the bound is loose (the actual gap is mostly 0), elsewhere the
  amplification is 1 / |g|. AdamW's decay multiplies the gap by 1 - lr wd <= 1.
* each run rounds its own update from different inputs: + 2 gamma_k (sum of |terms|) for
  every formula of k operations.

Errors compound through the momentum and moment buffers (tracked), the parameter gap
(carried) and the curvature (measured); nothing is tuned. Worst ratio seen in the long
profile: 0.08.

float32
=======
Everything above is written in u, and nothing else changes with the dtype: float32 has
u = 2^-24 (``numpy.finfo(numpy.float32).eps / 2``) where float64 has 2^-53, so every gamma_m,
and with them both bounds, grows by 2^29 (about 5e8): about 1e-4 kappa S_norm for the sizes
above instead of 1e-13. The model is first order, so it needs m u << 1 (``gamma`` is
infinite, no bound at all, once m u >= 1). The kink assumption is what float32 strains: a
pre-activation within rounding of 0 is 5e8 times likelier, and where one takes different
signs in a batch of n_j and a batch of N, relu' is 0 in one run and 1 in the other. That is
a real difference of the two computations, not rounding the bound should absorb, so it is
never widened for it: ``minigrad.analysis.check`` compares in the dtype asked, counts the
ReLU inputs that flip sign between the full-batch and the micro-batch forward passes, and
names a flip as the cause when the gap exceeds the bound.
"""

import contextlib
import math

import numpy as np

from minigrad import nn, optim
from minigrad.accumulate import accumulated_gradients, step
from minigrad.engine import Tensor, backend, no_grad

U64, U32 = 2.0**-53, 2.0**-24  # unit roundoff of float64 and float32


def unit_roundoff(dtype):
    """u of ``dtype`` ("float64", "float32", or a NumPy or array-namespace dtype)."""
    name = str(dtype).rsplit(".", 1)[-1].strip("'>")  # torch.float32, <class 'numpy.float32'>
    units = {"float64": U64, "float32": U32}
    if name not in units:
        raise ValueError(f"dtype must be float64 or float32, got {dtype!r}")
    return units[name]


def gamma(m, u=U64):
    """Higham's gamma_m = m u / (1 - m u): the relative error of m successive roundings
    (infinite where m u >= 1: no bound)."""
    return m * u / (1 - m * u) if m * u < 1 else math.inf


# ----- per-item gradients and the gradient bound ------------------------------------------------
class OneItem:
    """The loss of sample ``i`` alone, computed on the whole batch (other rows weigh 0)."""

    def __init__(self, loss, i):
        self.loss, self.i = loss, i

    def __call__(self, out, y, reduction="sum"):
        per_row = self.loss(out, y, reduction="none")
        mask = np.zeros((out.shape[0],) + (1,) * (per_row.ndim - 1))
        mask[self.i] = 1.0
        return (per_row * out.xp.asarray(mask, dtype=out.dtype, device=out.device)).sum()

    def num_items(self, y):
        return 1


def per_item_gradients(model, loss, x, y, step_index=0):
    """a_i for each sample i: the gradient of its loss (summed over its items), as NumPy
    float64.

    Computed on the whole batch, so BatchNorm in training mode couples the samples as it
    does in training, and dropout masks are keyed by (step_index, i) as ``step`` keys them.
    """
    return [{name: np.array(backend.to_numpy(g), dtype=np.float64)
             for name, g in accumulated_gradients(model, OneItem(loss, i), x, y,
                                                  normalize="sum",
                                                  step_index=step_index).items()}
            for i in range(x.shape[0])]


def per_item_roundings(sizes, batch_norm_samples=0):
    """m_item: roundings along the longest chain of one sample's forward and backward pass.

    Per Linear layer (fan-in and width <= W): forward 3W + 30 (the inner product, the two
    statistics of a normalisation, an activation), backward 3W + 30 (the same in reverse);
    the loss 2C + 10 (a log-sum-exp over C classes and its derivative). In training mode a
    BatchNorm layer also sums over the batch: 4 sums of ``batch_norm_samples`` terms.
    """
    layers, width, classes = len(sizes) - 1, max(sizes), sizes[-1]
    return layers * (6 * width + 60 + 4 * batch_norm_samples) + 2 * classes + 10


def condition_number(model, loss, x, y, step_index=0):
    """kappa >= 1: by how much the network amplifies the roundings of its intermediate values.

    A normalisation divides x - mean(x), whose rounding error is relative to the magnitude
    |W||h| + |b| of the Linear layer before it (plus |mean|), by sigma = sqrt(var + eps); so
    it multiplies the relative error of everything after it by
    kappa_l = max (|W||h| + |b| + |mean|) / sigma: about 2-5 for well-spread values, large
    when the values of a group nearly coincide. MSE's residual out - y does the same with
    max(|out| + |y|) / max|out - y|. kappa is the product.
    """
    xp = backend.get_namespace(x)
    h, magnitude, kappa = Tensor(x), np.abs(backend.to_numpy(x)), 1.0
    with no_grad(), nn.dropout_keys(step_index, xp.arange(x.shape[0])):
        for layer in model:
            z, h = backend.to_numpy(h.data), layer(h)
            if isinstance(layer, nn.Linear):
                w, b = (np.abs(backend.to_numpy(p.data)) for p in (layer.weight, layer.bias))
                magnitude = magnitude @ w.T + b
                continue
            if isinstance(layer, (nn.LayerNorm, nn.GroupNorm, nn.BatchNorm1d)):
                kappa *= max(1.0, _normalisation_kappa(layer, z, magnitude))
            magnitude = np.abs(backend.to_numpy(h.data))
    if isinstance(loss, nn.MSELoss):
        out, y = backend.to_numpy(h.data), backend.to_numpy(y)
        kappa *= max(1.0, float(np.max(np.abs(out) + np.abs(y)) / np.max(np.abs(out - y))))
    return kappa


def _normalisation_kappa(layer, z, magnitude):
    """max (magnitude + |mean|) / sigma over the groups the layer normalises."""
    if isinstance(layer, nn.BatchNorm1d) and not layer.training:
        mean = np.abs(backend.to_numpy(layer.running_mean))
        sigma = np.sqrt(backend.to_numpy(layer.running_var) + layer.eps)
        return float(np.max((magnitude + mean) / sigma))
    if isinstance(layer, nn.BatchNorm1d):  # each feature over the batch
        z, magnitude = z.T[:, None, :], magnitude.T[:, None, :]
    else:  # each sample over its group of features
        groups = layer.num_groups if isinstance(layer, nn.GroupNorm) else 1
        z = z.reshape(z.shape[0], groups, -1)
        magnitude = magnitude.reshape(z.shape)
    sigma = np.sqrt(np.var(z, axis=2, keepdims=True) + layer.eps)
    return float(np.max((magnitude + np.mean(magnitude, axis=2, keepdims=True)) / sigma))


def gradient_bound(per_item, num_items, sizes, kappa=1.0, batch_norm_samples=0, *, u=U64):
    """Name -> elementwise bound on |g_acc - g_full| (derived in the module docstring):

        2 gamma_{N+1} S + 2 gamma_{m_item} kappa S_norm
        S      = (1/items) sum_i |a_i|       elementwise
        S_norm = (1/items) sum_i max |a_i|   max over every element of every parameter
    """
    s_norm = sum(max(float(np.max(np.abs(g))) for g in a.values()) for a in per_item)
    per_item_term = 2 * gamma(per_item_roundings(sizes, batch_norm_samples), u) * kappa * s_norm
    summation = 2 * gamma(len(per_item) + 1, u)
    return {name: (summation * sum(np.abs(a[name]) for a in per_item) + per_item_term)
            / num_items for name in per_item[0]}


def bound_ratio(error, bound):
    """max error / bound over the elements (inf where the bound is 0 but the error is not)."""
    error, bound = np.asarray(error), np.asarray(bound)
    if np.any((bound == 0) & (error != 0)):
        return math.inf
    return float(np.max(error / np.where(bound > 0, bound, 1.0), initial=0.0))


def flat(arrays):
    """The arrays (of any namespace) as one flat NumPy float64 vector."""
    return np.concatenate([np.ravel(backend.to_numpy(a)).astype(np.float64) for a in arrays])


# ----- the trajectory bound -----------------------------------------------------------------------
class TrajectoryBound:
    """Bounds on |theta_acc - theta_full| after each update (derived in the module docstring).

    ``kind`` is "sgd", "adam" or "adamw" (``optimizer_kind``), ``hyper`` the optimizer's
    ``hyperparams``, ``u`` the unit roundoff. ``update(dg, theta, g, before, after, lr)`` takes
    the bound ``dg`` on the gap between the two runs' gradients and the full run's values:
    parameters, gradient (before clipping), optimizer state before and after the update
    (``optimizer_state``), learning rate. It returns the bound on the parameter gap after the
    update. Arrays are flat over all parameters.
    """

    def __init__(self, kind, hyper, max_grad_norm, u=U64):
        self.kind, self.hyper, self.max_grad_norm, self.u = kind, hyper, max_grad_norm, u
        self.dtheta = self.db = self.dm = self.dv = 0.0

    def gamma(self, m):
        return gamma(m, self.u)

    def clip(self, g, dg):
        """Clipping by the global norm: (clipped g, bound on the clipped gap)."""
        if self.max_grad_norm is None:
            return g, dg
        n = float(np.linalg.norm(g))
        dn = float(np.linalg.norm(dg)) + 2 * self.gamma(g.size + 3) * n
        c = self.max_grad_norm / (n + 1e-6)
        dc = (self.max_grad_norm * dn / ((n + 1e-6) * max(n - dn + 1e-6, 1e-300))
              + 2 * self.gamma(2) * c)
        if c - dc >= 1:  # neither run clips
            return g, dg
        c = min(c, 1.0)
        return c * g, c * dg + dc * (np.abs(g) + dg) + 2 * self.gamma(1) * c * np.abs(g)

    def update(self, dg, theta, g, before, after, lr):
        g, dg = self.clip(g, dg)
        rule = self._sgd if self.kind == "sgd" else self._adam
        return rule(dg, theta, g, before, after, lr)

    def _with_l2(self, dg, theta, g, wd):
        """d = g + wd * theta and its gap."""
        if wd == 0:
            return g, dg
        return (g + wd * theta,
                dg + wd * self.dtheta + 2 * self.gamma(2) * (np.abs(g) + wd * np.abs(theta)))

    def _sgd(self, dg, theta, g, before, after, lr):
        mu = self.hyper["momentum"]
        d, dd = self._with_l2(dg, theta, g, self.hyper["weight_decay"])
        s, ds = d, dd
        if mu != 0:
            b = after["mu"]
            if before["mu"] is None:  # the first buffer is a copy of d
                self.db = dd
            else:
                self.db = (mu * self.db + dd
                           + 2 * self.gamma(3) * (mu * np.abs(before["mu"]) + np.abs(d)))
            s, ds = b, self.db
            if self.hyper["nesterov"]:
                s = d + mu * b
                ds = dd + mu * self.db + 2 * self.gamma(2) * (np.abs(d) + mu * np.abs(b))
        self.dtheta = (self.dtheta + lr * ds
                       + 2 * self.gamma(2) * (np.abs(theta) + lr * np.abs(s)))
        return self.dtheta

    def _adam(self, dg, theta, g, before, after, lr):
        (b1, b2), eps, wd = self.hyper["betas"], self.hyper["eps"], self.hyper["weight_decay"]
        if self.kind == "adamw" and wd != 0:
            theta = theta * (1.0 - lr * wd)
            self.dtheta = (1.0 - lr * wd) * self.dtheta + 2 * self.gamma(1) * np.abs(theta)
            wd = 0.0
        d, dd = self._with_l2(dg, theta, g, wd)
        m_prev, v_prev, m, v = before["mu"], before["nu"], after["mu"], after["nu"]
        t = after["count"]
        self.dm = (b1 * self.dm + (1 - b1) * dd
                   + 2 * self.gamma(3) * (b1 * np.abs(m_prev) + (1 - b1) * np.abs(d)))
        self.dv = (b2 * self.dv + (1 - b2) * (2 * np.abs(d) * dd + dd * dd)
                   + 2 * self.gamma(4) * (b2 * v_prev + (1 - b2) * d * d))
        sv = np.sqrt(v)
        over_sv = np.divide(self.dv, sv, out=np.full_like(sv, np.inf), where=sv > 0)
        dsv = np.minimum(np.sqrt(self.dv), over_sv) + 2 * self.gamma(1) * sv
        bc2, step_size = math.sqrt(1 - b2**t), lr / (1 - b1**t)
        denom = sv / bc2 + eps
        ddenom = dsv / bc2 + 2 * self.gamma(2) * denom
        low = np.maximum(denom - ddenom, eps)  # both runs' denominators are >= eps
        r = m / denom
        dr = self.dm / low + np.abs(m) * ddenom / (denom * low) + 2 * self.gamma(2) * np.abs(r)
        self.dtheta = (self.dtheta + step_size * dr
                       + 2 * self.gamma(2) * (np.abs(theta) + step_size * np.abs(r)))
        return self.dtheta


def optimizer_kind(optimizer):
    """"sgd", "adam" or "adamw": the rule ``TrajectoryBound`` follows for ``optimizer``."""
    kinds = {optim.SGD: "sgd", optim.Adam: "adam", optim.AdamW: "adamw"}
    if type(optimizer) not in kinds:
        raise TypeError(f"the trajectory bound knows optim.SGD, optim.Adam and optim.AdamW, "
                        f"got {type(optimizer).__name__}")
    return kinds[type(optimizer)]


def optimizer_state(opt):
    """count, and mu (and nu) flat over all parameters (mu is None before SGD's first step)."""
    state = {"count": opt.state[0].count}
    for field in opt.state[0]._fields[1:]:
        values = [getattr(s, field) for s in opt.state]
        state[field] = None if values[0] is None else flat(v[0] for v in values)
    return state


class Diverged(FloatingPointError):
    """A run's loss or gradient stopped being finite: ``run`` ("full-batch" or
    "accumulated") at ``update`` (counted from 1), for ``reason``."""

    def __init__(self, run, update, reason):
        super().__init__(f"the {run} run stopped at update {update}: {reason}")
        self.run, self.update = run, update


@contextlib.contextmanager
def _run(name, t):
    try:
        yield
    except FloatingPointError as err:
        reason = str(err).split(";")[0].removeprefix("update refused: ")
        raise Diverged(name, t + 1, reason) from err


def trajectory_bounds(make, make_optimizer, loss, batches, sizes, *, max_grad_norm=None,
                      make_scheduler=None, normalize="items", batchnorm="micro", u=U64):
    """Full-batch and accumulated training side by side from the same start, one update per
    ``(x, y)`` of ``batches``, as ``trajectory_report`` runs them; the accumulated run splits
    each batch into micro-batches of ``sizes``.

    After each update yields ``(full, acc, bound)``: the two models and the elementwise
    bound on |theta_acc - theta_full| (flat over all parameters, ``flat`` order). A run whose
    loss or gradient stops being finite raises ``Diverged`` naming it.
    """
    full, acc = make(), make()
    opts = {"full": make_optimizer(full.parameters()), "acc": make_optimizer(acc.parameters())}
    scheds = {key: make_scheduler(opt) if make_scheduler else None for key, opt in opts.items()}
    tracker = TrajectoryBound(optimizer_kind(opts["full"]), opts["full"].hyperparams,
                              max_grad_norm, u)
    batch_norm = any(isinstance(layer, nn.BatchNorm1d) for layer in full)
    for t, (x, y) in enumerate(batches):
        # The measurements run training-mode forwards, which move BatchNorm's running
        # statistics: put them back before the real updates (buffers are replaced, never
        # written into, so keeping the references keeps the values).
        buffers = [dict(m.named_buffers()) for m in (full, acc)]
        with _run("full-batch", t):
            g_full = flat(accumulated_gradients(full, loss, x, y, step_index=t).values())
        with _run("accumulated", t):
            g_full_at_acc = flat(accumulated_gradients(acc, loss, x, y, step_index=t).values())
            rounding = gradient_bound(per_item_gradients(acc, loss, x, y, t), loss.num_items(y),
                                      acc.sizes, condition_number(acc, loss, x, y, t),
                                      x.shape[0] if batch_norm else 0, u=u)
        # the split's rounding (at theta_acc) + the effect of the parameter gap on the
        # full-batch gradient (measured: both terms are full-batch computations)
        dg = flat(rounding.values()) + np.abs(g_full_at_acc - g_full)
        theta, before, lr = flat(p.data for p in full.parameters()), \
            optimizer_state(opts["full"]), opts["full"].lr
        assert opts["acc"].lr == lr
        for model, saved in zip((full, acc), buffers):
            model.set_buffers(saved)
        with _run("full-batch", t):
            step(full, loss, opts["full"], x, y, max_grad_norm=max_grad_norm,
                 scheduler=scheds["full"])
        with _run("accumulated", t):
            step(acc, loss, opts["acc"], x, y, sizes=sizes, normalize=normalize,
                 batchnorm=batchnorm, max_grad_norm=max_grad_norm, scheduler=scheds["acc"])
        yield full, acc, tracker.update(dg, theta, g_full, before,
                                        optimizer_state(opts["full"]), lr)
