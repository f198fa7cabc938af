"""torch itself as the oracle, where it is installed: SGD, Adam and AdamW trajectories,
clipping and StepLR against ``torch.optim``."""

import numpy as np
import pytest
from optim_oracle import U64

from minigrad import optim
from minigrad.engine.tensor import Parameter


@pytest.mark.parametrize("name, kwargs", [
    ("SGD", {"lr": 0.1, "momentum": 0.9, "dampening": 0.1, "weight_decay": 0.01}),
    ("SGD", {"lr": 0.1, "momentum": 0.9, "nesterov": True}),
    ("Adam", {"lr": 0.01, "weight_decay": 0.1}),
    ("AdamW", {"lr": 0.01, "weight_decay": 0.1}),
    # dampening without momentum does nothing (torch keeps no buffer); a weight decay of
    # exactly 1 is applied like any other (a rule that tested `!= 1` would skip it)
    ("SGD", {"lr": 0.1, "momentum": 0.0, "dampening": 0.5}),
    ("SGD", {"lr": 0.1, "momentum": 0.5, "dampening": 1.0, "weight_decay": 1.0}),
    ("Adam", {"lr": 0.01, "weight_decay": 1.0}),
    ("AdamW", {"lr": 0.01, "weight_decay": 1.0}),
])
def test_optimizers_match_torch(name, kwargs):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    p0, grads = rng.normal(size=(3, 2)), rng.normal(size=(5, 3, 2))
    theirs = torch.tensor(p0, requires_grad=True)
    their_opt = getattr(torch.optim, name)([theirs], foreach=False, **kwargs)
    ours = Parameter(p0.copy())
    our_opt = getattr(optim, name)([ours], **kwargs)
    for g in grads:
        theirs.grad = torch.tensor(g)
        their_opt.step()
        ours.grad = g.copy()
        our_opt.step()
    # torch may fuse a * b + c (FMA) and writes m's update as a lerp, so each of the ~10
    # operations of a step may round differently (<= 1 ulp of values of size <= 2 here);
    # errors add up over the 5 steps: 10 * 5 * 2 ulps of 1.
    np.testing.assert_allclose(ours.data, theirs.detach().numpy(), rtol=0, atol=200 * U64)


def test_clip_and_step_lr_match_torch():
    torch = pytest.importorskip("torch")
    grads = [np.array([3.0, -1.0]), np.array([[4.0, 2.0]])]
    tensors = [torch.zeros(g.shape, dtype=torch.float64, requires_grad=True) for g in grads]
    for t, g in zip(tensors, grads):
        t.grad = torch.tensor(g)
    total = torch.nn.utils.clip_grad_norm_(tensors, 1.0)
    clipped, ours = optim.clip_by_global_norm(grads, 1.0)
    assert ours == pytest.approx(float(total), rel=8 * U64)
    for c, t in zip(clipped, tensors):
        np.testing.assert_allclose(c, t.grad.numpy(), rtol=16 * U64, atol=0)
    opt = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=1.0)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=3, gamma=0.1)
    theirs = []
    for _ in range(10):
        theirs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    assert [optim.step_decay(1.0, 3, 0.1)(t) for t in range(10)] == theirs
