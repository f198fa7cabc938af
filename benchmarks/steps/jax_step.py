"""JAX: one ``jax.jit``-compiled step (``jax.grad`` of the loss sum / N, then Adam in
``jax.numpy``), on JAX's default device. With micro-batches, ``lax.scan`` adds up their
gradients inside the compiled step, then one update. Compilation happens in the warm-up.
"""

import math

import jax
import jax.numpy as jnp
import numpy as np

from common import ADAM

DEVICE = "cpu" if jax.default_backend() == "cpu" else "gpu"
# float32 products in float32: on a GPU, JAX's default precision lets them round their
# inputs to TF32 (10-bit significands); on an H100 that put its SMALL float32 gradients
# 1.3e-2 from float64's, far outside the agreement bound (3.7e-4).
jax.config.update("jax_default_matmul_precision", "highest")


def loss_sum(params, x, y):
    """Sum over the samples of -log softmax(z)[y], z the MLP's logits."""
    a = x
    for i in range(0, len(params), 2):
        a = a @ params[i].T + params[i + 1]
        if i + 2 < len(params):
            a = jax.nn.relu(a)  # relu'(0) = 0
    log_p = jax.nn.log_softmax(a, axis=1)
    return -jnp.sum(jnp.take_along_axis(log_p, y[:, None], axis=1))


def make_step(n, micro_batch, lr, betas, eps):
    b1, b2 = betas

    def gradients(params, x, y):
        if micro_batch is None:
            return jax.grad(loss_sum)(params, x, y)
        xs = x.reshape(-1, micro_batch, x.shape[1])
        ys = y.reshape(-1, micro_batch)

        def add(total, batch):
            g = jax.grad(loss_sum)(params, *batch)
            return [t + gi for t, gi in zip(total, g)], None

        total, _ = jax.lax.scan(add, [jnp.zeros_like(p) for p in params], (xs, ys))
        return total

    @jax.jit
    def step(params, mu, nu, step_size, bias_correction2_sqrt, x, y):
        grads = [g / n for g in gradients(params, x, y)]
        mu = [b1 * m + (1 - b1) * g for m, g in zip(mu, grads)]
        nu = [b2 * v + (1 - b2) * g * g for v, g in zip(nu, grads)]
        params = [p - step_size * m / (jnp.sqrt(v) / bias_correction2_sqrt + eps)
                  for p, m, v in zip(params, mu, nu)]
        return params, mu, nu, grads

    return step


class JaxStep:
    name = "jax"
    device = DEVICE

    def __init__(self, problem):
        if problem.dtype == "float64":
            jax.config.update("jax_enable_x64", True)
        shape = problem.shape
        self.params = [jnp.asarray(w) for w in problem.weights]
        self.mu = [jnp.zeros_like(p) for p in self.params]
        self.nu = [jnp.zeros_like(p) for p in self.params]
        self.x, self.y = jnp.asarray(problem.x), jnp.asarray(problem.y)
        self.dtype = problem.x.dtype.type
        self.t = 0
        self.grads = None
        self._step = make_step(shape.batch, shape.micro_batch, **ADAM)

    def step(self):
        b1, b2 = ADAM["betas"]
        self.t += 1
        # The bias corrections in Python floats, as torch computes them.
        step_size = self.dtype(ADAM["lr"] / (1 - b1**self.t))
        bias_correction2_sqrt = self.dtype(math.sqrt(1 - b2**self.t))
        self.params, self.mu, self.nu, self.grads = self._step(
            self.params, self.mu, self.nu, step_size, bias_correction2_sqrt, self.x, self.y)
        jax.block_until_ready(self.params)

    def gradients(self):
        return [np.array(g) for g in self.grads]

    def parameters(self):
        return [np.array(p) for p in self.params]
