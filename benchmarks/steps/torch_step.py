"""PyTorch eager: ``torch.nn.Linear`` layers holding minigrad's initial weights,
``F.cross_entropy``, ``torch.optim.Adam`` (its default code path for the device).

With micro-batches, the usual loop: per micro-batch, ``(loss sum / N).backward()`` adds
into ``.grad`` (N: the whole batch); then one ``optimizer.step()``.

The language model (``TorchLanguageStep``): ``torch.nn.Embedding``, ``Linear``, ``tanh``,
``Linear`` holding minigrad's ``nn.CharMLP`` weights, the logits flattened to (positions, V)
for ``F.cross_entropy(..., ignore_index=-100)``, as makemore and nanoGPT write it.
"""

import torch
import torch.nn.functional as F

from common import ADAM


class TorchStep:
    name = "torch"
    device = "cpu"

    def __init__(self, problem, device="cpu"):
        self.torch_device = torch.device(device)
        dtype = getattr(torch, problem.dtype)
        layers = []
        for w, b in zip(problem.weights[0::2], problem.weights[1::2]):
            linear = torch.nn.Linear(w.shape[1], w.shape[0], dtype=dtype, device=device)
            with torch.no_grad():
                linear.weight.copy_(torch.from_numpy(w))
                linear.bias.copy_(torch.from_numpy(b))
            layers += [linear, torch.nn.ReLU()]
        self.model = torch.nn.Sequential(*layers[:-1])
        self.opt = torch.optim.Adam(self.model.parameters(), **ADAM)
        self.x = torch.from_numpy(problem.x).to(device)
        self.y = torch.from_numpy(problem.y).to(device)
        self.splits = problem.shape.micro_batches
        self.n = problem.shape.batch

    @classmethod
    def on_cuda(cls, problem):
        step = cls(problem, device="cuda")
        step.name, step.device = "torch-cuda", "gpu"
        return step

    def step(self):
        self.opt.zero_grad(set_to_none=True)
        if len(self.splits) == 1:
            F.cross_entropy(self.model(self.x), self.y).backward()
        else:
            for lo, hi in self.splits:
                loss = F.cross_entropy(self.model(self.x[lo:hi]), self.y[lo:hi],
                                       reduction="sum")
                (loss / self.n).backward()
        self.opt.step()
        if self.torch_device.type == "cuda":
            torch.cuda.synchronize()

    def gradients(self):
        return [p.grad.detach().cpu().numpy().copy() for p in self.model.parameters()]

    def parameters(self):
        return [p.detach().cpu().numpy().copy() for p in self.model.parameters()]


class TorchLanguageStep:
    name = "torch"
    device = "cpu"

    def __init__(self, problem):
        shape, dtype = problem.shape, getattr(torch, problem.dtype)
        vocab = len(problem.weights[0])
        self.embedding = torch.nn.Embedding(vocab, shape.embedding_dim, dtype=dtype)
        self.hidden = torch.nn.Linear(shape.context * shape.embedding_dim, shape.hidden,
                                      dtype=dtype)
        self.output = torch.nn.Linear(shape.hidden, vocab, dtype=dtype)
        # minigrad's named_parameters order: the table, then W and b per layer
        self.params = [self.embedding.weight, self.hidden.weight, self.hidden.bias,
                       self.output.weight, self.output.bias]
        with torch.no_grad():
            for p, w in zip(self.params, problem.weights):
                p.copy_(torch.from_numpy(w))
        self.opt = torch.optim.Adam(self.params, **ADAM)
        self.x = torch.from_numpy(problem.x)
        self.y = torch.from_numpy(problem.y).reshape(-1)
        self.value = None

    def step(self):
        self.opt.zero_grad(set_to_none=True)
        e = self.embedding(self.x)  # (rows, L, C, D)
        h = torch.tanh(self.hidden(e.flatten(-2)))
        logits = self.output(h)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), self.y, ignore_index=-100)
        loss.backward()
        self.opt.step()
        self.value = loss.detach()

    def loss_value(self):
        return float(self.value)

    def gradients(self):
        return [p.grad.detach().numpy().copy() for p in self.params]

    def parameters(self):
        return [p.detach().numpy().copy() for p in self.params]
