"""What keeps and what breaks the accumulation contract of test_equivalence.py: dropout
with masks keyed by (seed, step, global sample index) is full-batch training, within the
bounds; and, with fixed seeds, the counter-examples and by how much they break it (masks
numbered per micro-batch, textbook normalisation, clipping each micro-batch, BatchNorm in
training mode), beside the remedies that stay within the bounds (BatchNorm in eval mode)."""

import numpy as np
from bounds import (
    bound_ratio,
    condition_number,
    factory,
    flat,
    gradient_bound,
    make_batches,
    make_data,
    mlp_configs,
    partitions,
    per_item_gradients,
)
from equivalence_checks import TrajectoryBound, check_gradients, replay_with_bound
from hypothesis import given
from hypothesis import strategies as st

from minigrad import optim
from minigrad.accumulate import Accumulator, accumulated_gradients
from minigrad.analysis.equivalence import gradient_report, trajectory_report
from minigrad.engine.tensor import no_grad


# ----- dropout: masks keyed by (seed, step, global sample index) ---------------------------------
@given(config=mlp_configs(dropout=(0.5,)), data=st.data())
def test_dropout_accumulation_is_full_batch_training(xp, config, data):
    """p = 0.5: gradients and a 2-step SGD trajectory within the bounds, since sample i draws
    the same mask at update t however the batch is split."""
    n = data.draw(st.integers(2, 8), label="batch size")
    sizes = data.draw(partitions(n), label="micro-batch sizes")
    batches, loss = make_batches(xp, config, 2, n, data.draw(st.integers(0, 2**31)))
    make = factory(xp, config)
    x, y = batches[0]
    _, worst = check_gradients(make, loss, x, y, sizes)
    assert worst <= 1.0
    spec = {"kind": "sgd", "hyper": {"lr": 0.1, "momentum": 0.9, "nesterov": False,
                                     "weight_decay": 0.0},
            "schedule": "cosine", "max_grad_norm": 1.0}
    _, worst = replay_with_bound(make, spec, loss, batches, sizes)
    assert worst <= 1.0


# ----- counter-examples: what breaks equivalence, and by how much (fixed seeds) ------------------
def fixed_case(xp, loss="mse", n=8, norm=None, dropout=0.0, classes=2):
    """A 3-8-C tanh MLP (seed 0) and n samples (seed 0); gradients are of size ~0.3."""
    config = {"sizes": [3, 8, classes], "activation": "tanh", "norm": norm, "dropout": dropout,
              "loss": loss, "seed": 0}
    x, y, loss = make_data(xp, config, n, 0)
    return factory(xp, config), loss, x, y


def test_dropout_with_masks_numbered_per_micro_batch_is_not_full_batch_training(xp):
    """Numbering each micro-batch's samples from 0 gives samples 4..7 the masks of 0..3."""
    make, loss, x, y = fixed_case(xp, dropout=0.5)
    full = flat(accumulated_gradients(make(), loss, x, y).values())
    acc = Accumulator(make(), loss, None)
    for a, b in ((0, 4), (4, 8)):
        acc.add(x[a:b, ...], y[a:b, ...], sample_index=xp.arange(b - a))
    assert np.max(np.abs(flat(acc.gradients()) - full)) > 0.5 * 0.4143  # observed: 0.4143
    _, worst = check_gradients(make, loss, x, y, [4, 4])  # global indices, the default
    assert worst <= 1.0


def test_textbook_normalisation_is_wrong_for_uneven_splits(xp):
    """Each micro-batch mean divided by k weighs the 3 samples of [7, 3] like the 7; it is
    right for an even split, and item weighting is right for both."""
    make, loss, x, y = fixed_case(xp, n=10)
    gap, _ = check_gradients(make, loss, x, y, [7, 3], normalize="micro_batch_mean")
    assert gap > 0.5 * 0.2694  # observed: 0.2694
    for sizes, normalize in (([7, 3], "items"), ([5, 5], "micro_batch_mean")):
        _, worst = check_gradients(make, loss, x, y, sizes, normalize=normalize)
        assert worst <= 1.0, (sizes, normalize)


def test_textbook_normalisation_is_wrong_with_ignored_targets(xp):
    """An even split [4, 4] holding 1 and 4 kept targets: the mean of the two means is not
    the mean over the 5 kept targets."""
    make, loss, x, _ = fixed_case(xp, loss="cross_entropy", classes=3)
    y = xp.asarray([0, -100, -100, -100, 1, 2, 0, 1])
    gap, _ = check_gradients(make, loss, x, y, [4, 4], normalize="micro_batch_mean")
    assert gap > 0.5 * 0.2383  # observed: 0.2383
    _, worst = check_gradients(make, loss, x, y, [4, 4])
    assert worst <= 1.0


def test_clipping_each_micro_batch_is_not_clipping_the_update(xp):
    """Clip each micro-batch's gradient (norms 0.95 and 1.01) to 0.1, then average: not the
    clipped full-batch gradient (norm 0.70). Clipping the accumulated gradient once is."""
    make, loss, x, y = fixed_case(xp)
    max_norm = 0.1
    clipped = []
    for a, b in ((0, 4), (4, 8)):
        g = accumulated_gradients(make(), loss, x[a:b, ...], y[a:b, ...])
        clipped.append(flat(optim.clip_by_global_norm(list(g.values()), max_norm)[0]))
    clip = TrajectoryBound("sgd", {}, max_grad_norm=max_norm).clip
    full = flat(accumulated_gradients(make(), loss, x, y).values())
    clipped_full, _ = clip(full, np.zeros_like(full))
    gap = np.max(np.abs((clipped[0] + clipped[1]) / 2 - clipped_full))
    assert gap > 0.5 * 0.01568  # observed: 0.01568, for clipped gradients of size ~0.06
    model = make()
    acc = accumulated_gradients(model, loss, x, y, sizes=[4, 4])
    clipped_acc = flat(optim.clip_by_global_norm(list(acc.values()), max_norm)[0])
    rounding = gradient_bound(per_item_gradients(model, loss, x, y), loss.num_items(y),
                              model.sizes, condition_number(model, loss, x, y))
    _, bound = clip(full, flat(rounding.values()))
    assert bound_ratio(np.abs(clipped_acc - clipped_full), bound) <= 1.0


def test_batch_norm_in_training_mode_is_not_full_batch_training(xp):
    """Statistics per micro-batch change the gradient, and the running statistics move
    twice per update (from each half's statistics) instead of once."""
    make, loss, x, y = fixed_case(xp, norm="batch")
    gap = gradient_report(make, loss, x, y, sizes=[4, 4])["params"]["all"]["max_abs"]
    assert gap > 0.5 * 0.1277  # observed: 0.1277 (cosine with the full gradient: 0.27)
    report = trajectory_report(make, lambda params: optim.SGD(params, lr=0.1), loss, [(x, y)],
                               sizes=[4, 4])["final"]
    assert report["1.running_mean"]["max_abs"] > 0.5 * 0.04372  # observed: 0.04372
    assert report["1.running_var"]["max_abs"] > 0.5 * 0.07629  # observed: 0.07629


def test_batch_norm_in_eval_mode_is_full_batch_training(xp):
    """With running statistics (here warmed up on other data) BatchNorm acts per sample."""
    make_train, loss, x, y = fixed_case(xp, norm="batch")
    warm_up = xp.asarray(np.random.default_rng(1).normal(1.0, 2.0, size=(32, 3)))

    def make():
        model = make_train()
        with no_grad():
            for _ in range(5):
                model(warm_up)
        return model.eval()

    assert float(xp.max(xp.abs(make()[1].running_mean))) > 0.1
    _, worst = check_gradients(make, loss, x, y, [1, 5, 2])
    assert worst <= 1.0
    spec = {"kind": "adam", "hyper": {"lr": 0.01, "weight_decay": 0.0}, "schedule": "constant",
            "max_grad_norm": None}
    reversed_batch = (xp.flip(x, axis=0), xp.flip(y, axis=0))
    _, worst = replay_with_bound(make, spec, loss, [(x, y), reversed_batch], [1, 5, 2])
    assert worst <= 1.0
