"""PyTorch as the oracle: minigrad's ACCUMULATED training equals torch's FULL-BATCH training.

One test closes the loop of the whole design: the same MLP (weights copied), cross-entropy
with ignored targets, gradient clipping, a cosine schedule and SGD (Nesterov, weight decay)
/ Adam / AdamW, four updates. minigrad splits every batch into uneven micro-batches (and
uses the exact BatchNorm mode); torch takes each batch whole. Parameters, running
statistics and losses must agree. Skipped where torch is not installed (it is not a
dependency: `pip install torch==2.13.0` takes the CPU wheel).

Tolerance: both sides compute the same real numbers in float64 in different summation
orders, so each update differs by a few units of roundoff of the gradient's scale; Adam
divides by sqrt(v) + eps, which can magnify a coordinate's difference by |g| / sqrt(v) <= 1
per step at worst, and four steps with learning rates <= 0.05 keep the parameters' gap
below 1e-12 of their scale with a wide margin (seen here: <= 4e-15). The bias of a Linear
layer right before a BatchNorm has a mathematically zero gradient, i.e. rounding noise that
Adam would turn into lr-sized steps of random sign; the BatchNorm cases therefore use SGD.
"""

import numpy as np
import pytest

from minigrad import accumulate, nn, optim

torch = pytest.importorskip("torch", reason="torch is not installed (an optional oracle)")

CASES = [(None, "sgd"), (None, "adam"), (None, "adamw"), ("layer", "adam"),
         ("group", "adamw"), ("layer", "sgd"), ("batch", "sgd")]
HYPER = {"sgd": dict(lr=0.05, momentum=0.9, nesterov=True, weight_decay=1e-2),
         "adam": dict(lr=1e-2, weight_decay=1e-2), "adamw": dict(lr=1e-2, weight_decay=0.1)}


def torch_copy(model):
    layers = []
    for m in model:
        if isinstance(m, nn.Linear):
            layers.append(torch.nn.Linear(m.in_features, m.out_features, dtype=torch.float64))
        elif isinstance(m, nn.LayerNorm):
            layers.append(torch.nn.LayerNorm(m.normalized_shape, dtype=torch.float64))
        elif isinstance(m, nn.GroupNorm):
            layers.append(torch.nn.GroupNorm(m.num_groups, m.num_channels, dtype=torch.float64))
        elif isinstance(m, nn.BatchNorm1d):
            layers.append(torch.nn.BatchNorm1d(m.num_features, dtype=torch.float64))
        elif isinstance(m, nn.GELU):
            layers.append(torch.nn.GELU(approximate="tanh"))
        else:
            layers.append(torch.nn.Tanh())
    copy = torch.nn.Sequential(*layers)
    copy.load_state_dict({k: torch.tensor(np.asarray(v)) for k, v in model.state_dict().items()})
    return copy


@pytest.mark.parametrize(("norm", "name"), CASES)
def test_accumulated_minigrad_equals_full_batch_torch(norm, name):
    rng = np.random.default_rng(5)
    model = nn.MLP([6, 10, 8, 4], norm=norm, activation="tanh" if norm == "group" else "gelu",
                   seed=3)
    reference = torch_copy(model)
    ours = {"sgd": optim.SGD, "adam": optim.Adam, "adamw": optim.AdamW}[name]
    theirs = {"sgd": torch.optim.SGD, "adam": torch.optim.Adam, "adamw": torch.optim.AdamW}
    opt = ours(model.parameters(), **HYPER[name])
    topt = theirs[name](reference.parameters(), **HYPER[name])
    sched = optim.Scheduler(opt, optim.cosine(HYPER[name]["lr"], 4))
    tsched = torch.optim.lr_scheduler.CosineAnnealingLR(topt, T_max=4)
    for _ in range(4):
        x = rng.normal(size=(21, 6))
        y = rng.integers(0, 4, size=21)
        y[rng.choice(21, 3, replace=False)] = -100
        loss = accumulate.step(model, nn.CrossEntropyLoss(), opt, x, y, sizes=[3, 11, 7],
                               max_grad_norm=0.5, scheduler=sched, strategy="exact_batchnorm")
        topt.zero_grad()
        tloss = torch.nn.functional.cross_entropy(reference(torch.tensor(x)), torch.tensor(y))
        tloss.backward()
        torch.nn.utils.clip_grad_norm_(reference.parameters(), 0.5)
        topt.step()
        tsched.step()
        assert loss == pytest.approx(tloss.item(), rel=1e-12)
    ours_state, torch_state = model.state_dict(), reference.state_dict()
    assert ours_state.keys() == torch_state.keys()
    for key, value in ours_state.items():
        expected = torch_state[key].numpy()
        scale = max(1.0, float(np.max(np.abs(expected))))
        assert np.max(np.abs(np.asarray(value) - expected)) <= 1e-12 * scale, key
