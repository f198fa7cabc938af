"""minigrad's step, as a user writes it.

One batch: ``opt.zero_grad()``, ``loss_fn(model(x), y).backward()``, ``opt.step()``, with
``nn.MLP(sizes, dtype=...)``, ``nn.CrossEntropyLoss()`` and ``optim.Adam``. With
micro-batches: ``accumulate.step(model, loss_fn, opt, x, y, micro_batch_size=...)``, one
update from the whole batch. The language model's step is the one-batch step of
``nn.CharMLP`` on the padded windows (``MinigradLanguageStep``).
"""

import numpy as np

from minigrad import accumulate, nn, optim
from minigrad.engine import Tensor, backend

from common import ADAM


class RecordingAdam(optim.Adam):
    """``optim.Adam`` that keeps references to the gradient sums of its last update and
    their divisor (for the agreement check: ``accumulate.step`` drops them after the
    update, and the division happens in the update's commit). Costs one list."""

    def plan(self, scale=1, coef=None):
        self.seen = ([p.grad for p in self.params], scale)
        return super().plan(scale=scale, coef=coef)


class MinigradStep:
    name = "minigrad"
    device = "cpu"

    def __init__(self, problem, xp=None, device=None):
        shape = problem.shape
        self.model = self.build(problem, xp, device)
        self.model.load_state_dict(dict(zip(problem.names, problem.weights)))
        self.xp = backend.resolve_namespace(xp)
        self.loss_fn = nn.CrossEntropyLoss()
        self.opt = RecordingAdam(self.model.parameters(), **ADAM)
        self.x = backend.as_array(problem.x, xp=self.xp, device=device)
        self.y = backend.as_array(problem.y, xp=self.xp, device=device)
        # what the model is called on: a Tensor of x, or the language model's token ids
        self.inputs = Tensor(self.x) if shape.kind == "mlp" else self.x
        self.micro_batch = shape.micro_batch
        self.sync = None

    def build(self, problem, xp, device):
        return nn.MLP(list(problem.shape.sizes), dtype=problem.dtype, seed=0, xp=xp,
                      device=device)

    @classmethod
    def on_cupy(cls, problem):
        import cupy

        step = cls(problem, xp="cupy")
        step.name, step.device = "minigrad-cupy", "gpu"
        step.sync = cupy.cuda.get_current_stream().synchronize
        return step

    def step(self):
        if self.micro_batch is None:
            self.opt.zero_grad()
            loss = self.loss_fn(self.model(self.inputs), self.y)
            loss.backward()
            self.opt.step()
        else:
            accumulate.step(self.model, self.loss_fn, self.opt, self.x, self.y,
                            micro_batch_size=self.micro_batch)
        if self.sync is not None:
            self.sync()

    def gradients(self):
        grads, scale = self.opt.seen
        return [_numpy(g) / scale for g in grads]

    def parameters(self):
        return [_numpy(p.data) for p in self.model.parameters()]


class MinigradLanguageStep(MinigradStep):
    """``nn.CharMLP`` on the padded windows, as a user writes it: the model takes the token
    ids (rows, L, C) and gives logits (rows, V, L); ``nn.CrossEntropyLoss()`` (ignore_index
    -100) averages over the real tokens; ``optim.Adam``. It keeps the loss's value."""

    value = None  # the last step's loss

    def build(self, problem, xp, device):
        shape = problem.shape
        return nn.CharMLP(len(problem.weights[0]), shape.context, shape.embedding_dim,
                          shape.hidden, dtype=problem.dtype, seed=0, xp=xp, device=device)

    def step(self):
        self.opt.zero_grad()
        loss = self.loss_fn(self.model(self.inputs), self.y)
        loss.backward()
        self.opt.step()
        self.value = loss.data  # the number, not the graph

    def loss_value(self):
        return float(self.value)


def _numpy(a):
    return np.array(backend.to_numpy(a), copy=True)
