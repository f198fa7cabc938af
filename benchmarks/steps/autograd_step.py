"""HIPS autograd: ``autograd.grad`` of the loss written in ``autograd.numpy``, then the
same in-place NumPy Adam as the hand-written step.

With micro-batches, the gradient of each micro-batch's loss sum / N is added up (N: the
whole batch), then one update.
"""

import autograd
import autograd.numpy as anp
import numpy as np

from common import ADAM, InPlaceAdam


def loss_sum(params, x, y):
    """Sum over the samples of -log softmax(z)[y], z the MLP's logits."""
    a = x
    for i in range(0, len(params), 2):
        a = anp.dot(a, params[i].T) + params[i + 1]
        if i + 2 < len(params):
            a = anp.where(a > 0, a, 0.0)  # relu'(0) = 0 (anp.maximum would give 1/2)
    shifted = a - anp.max(a, axis=1, keepdims=True)
    log_p = shifted - anp.log(anp.sum(anp.exp(shifted), axis=1, keepdims=True))
    return -anp.sum(log_p[np.arange(x.shape[0]), y])


class AutogradStep:
    name = "autograd"
    device = "cpu"

    def __init__(self, problem):
        self.params = [np.array(w, copy=True) for w in problem.weights]
        self.x, self.y = problem.x, problem.y
        self.splits = problem.shape.micro_batches
        self.scale = problem.x.dtype.type(1.0 / problem.shape.batch)
        self.grad = autograd.grad(lambda params, x, y: loss_sum(params, x, y) * self.scale)
        self.adam = InPlaceAdam(np, self.params, **ADAM)
        self.grads = None

    def step(self):
        grads = None
        for lo, hi in self.splits:
            g = self.grad(self.params, self.x[lo:hi], self.y[lo:hi])
            if grads is None:
                grads = g
            else:
                for total, part in zip(grads, g):
                    total += part
        self.grads = grads
        self.adam.step(self.params, grads)

    def gradients(self):
        return [np.array(g, copy=True) for g in self.grads]

    def parameters(self):
        return [np.array(p, copy=True) for p in self.params]
