"""How far one run's parameters may drift from another's through one optimizer update, in
floating point: ``TrajectoryBound``, which ``trajectory``'s replay carries update by update.

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
profile: 0.08. Nothing here depends on which run split the batch, so the same replay judges
another array library (``libraries``) or MPI ranks (``minigrad mpi-demo``) against NumPy in
one process; in float32 everything is written in its u (``bounds``, "float32").
"""

import math

import numpy as np

from minigrad import optim
from minigrad.analysis.bounds import U64, flat, gamma


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
