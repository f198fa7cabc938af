"""The step written by hand in NumPy (or CuPy): the floor an engine could reach.

Every array is allocated once; each operation writes into its buffer in place.

Forward, per micro-batch (x_j, y_j) and layer l:  a_l = relu(a_{l-1} @ W_l.T + b_l)
(no relu on the logits z). Loss: mean over the N samples of the whole batch of
-log softmax(z)[y]. Backward: dz = (softmax(z) - onehot(y)) / N, dW_l = dz.T @ a_{l-1},
db_l = sum(dz), and da_{l-1} = (dz @ W_l) * (a_{l-1} > 0). With micro-batches the
gradients of each are added up, then one Adam update (``common.InPlaceAdam``).
"""

import numpy as np

from common import ADAM, InPlaceAdam


class HandWritten:
    name = "numpy"
    device = "cpu"

    def __init__(self, problem, xp=np):
        self.xp = xp
        shape = problem.shape
        self.splits = shape.micro_batches
        self.inv_n = 1.0 / shape.batch
        m = self.splits[0][1] - self.splits[0][0]
        widths = shape.sizes[1:]
        self.params = [xp.array(w, copy=True) for w in problem.weights]
        self.x = xp.asarray(problem.x)
        self.y = xp.asarray(problem.y)
        dtype = self.params[0].dtype
        self.acts = [xp.empty((m, n), dtype=dtype) for n in widths]
        self.deltas = [xp.empty((m, n), dtype=dtype) for n in widths[:-1]]
        self.masks = [xp.empty((m, n), dtype=bool) for n in widths[:-1]]
        self.grads = [xp.empty_like(p) for p in self.params]
        # The second and later micro-batches compute into these, then add.
        self.partial = [xp.empty_like(p) for p in self.params] if len(self.splits) > 1 else None
        self.row_max = xp.empty((m, 1), dtype=dtype)
        self.row_sum = xp.empty((m, 1), dtype=dtype)
        self.rows = xp.arange(m)
        self.adam = InPlaceAdam(xp, self.params, **ADAM)
        self.loss = None

    @classmethod
    def on_cupy(cls, problem):
        import cupy

        step = cls(problem, xp=cupy)
        step.name, step.device = "cupy", "gpu"
        return step

    def step(self):
        xp = self.xp
        loss = 0.0
        for j, (lo, hi) in enumerate(self.splits):
            loss = loss + self._forward_backward(self.x[lo:hi], self.y[lo:hi], j == 0)
        self.loss = loss
        self.adam.step(self.params, self.grads)
        if xp is not np:
            xp.cuda.get_current_stream().synchronize()

    def _forward_backward(self, x, y, first):
        """Add this micro-batch's gradient (of the loss sum / N) into ``self.grads``;
        returns its part of the mean loss."""
        xp = self.xp
        weights, biases = self.params[0::2], self.params[1::2]
        inputs = [x]
        for layer, (w, b, out) in enumerate(zip(weights, biases, self.acts)):
            xp.matmul(inputs[-1], w.T, out=out)
            out += b
            if layer < len(weights) - 1:
                xp.maximum(out, 0, out=out)
            inputs.append(out)
        z = inputs.pop()
        rows = self.rows[:z.shape[0]]
        xp.max(z, axis=1, keepdims=True, out=self.row_max)
        z -= self.row_max
        picked = z[rows, y]
        xp.exp(z, out=z)
        xp.sum(z, axis=1, keepdims=True, out=self.row_sum)
        loss = (xp.sum(xp.log(self.row_sum)) - xp.sum(picked)) * self.inv_n
        z /= self.row_sum
        z[rows, y] -= 1
        z *= self.inv_n
        dz = z
        for layer in range(len(weights) - 1, -1, -1):
            a = inputs[layer]
            target = self.grads if first else self.partial
            xp.matmul(dz.T, a, out=target[2 * layer])
            xp.sum(dz, axis=0, out=target[2 * layer + 1])
            if not first:
                self.grads[2 * layer] += self.partial[2 * layer]
                self.grads[2 * layer + 1] += self.partial[2 * layer + 1]
            if layer > 0:
                da = self.deltas[layer - 1]
                xp.matmul(dz, weights[layer], out=da)
                xp.greater(a, 0, out=self.masks[layer - 1])
                da *= self.masks[layer - 1]
                dz = da
        return loss

    def gradients(self):
        return [_numpy(self.xp, g) for g in self.grads]

    def parameters(self):
        return [_numpy(self.xp, p) for p in self.params]


def _numpy(xp, a):
    return np.array(a, copy=True) if xp is np else xp.asnumpy(a)
