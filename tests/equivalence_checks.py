"""The checks that the equivalence tests under tests/analysis/ share (test modules import
these from here, never from each other): ``check_gradients`` (an accumulated gradient
against ``gradient_bound``) and ``replay_with_bound`` (full-batch and accumulated training
side by side, against ``TrajectoryBound``).

Both bounds are derived in the docstrings of ``minigrad.analysis.bounds`` and
``minigrad.analysis.trajectory``, which also runs the replay (``trajectory_bounds``);
``TrajectoryBound`` is re-exported here. What stays here is the tests' own: the optimizer and
schedule a test's ``spec`` names, and the gaps and worst ratio a test asserts on.
"""

import numpy as np
from bounds import bound_ratio, condition_number, flat, gradient_bound, per_item_gradients
from helpers import to_np

from minigrad import backend, optim
from minigrad.accumulate import accumulated_gradients
from minigrad.analysis.equivalence import gradient_report
from minigrad.analysis.trajectory import TrajectoryBound, trajectory_bounds

__all__ = ["OPTIMIZERS", "TrajectoryBound", "check_gradients", "optimizer_factory",
           "replay_with_bound", "scheduler_factory"]


def check_gradients(make, loss, x, y, sizes, normalize="items"):
    """``gradient_report``'s worst gap over all parameters, and the worst ratio of the
    elementwise gap to the bound (also: the report's ``max_abs`` is that gap)."""
    full = to_np(accumulated_gradients(make(), loss, x, y))
    acc = to_np(accumulated_gradients(make(), loss, x, y, sizes=sizes, normalize=normalize))
    model = make()
    bound = gradient_bound(per_item_gradients(model, loss, x, y), loss.num_items(y),
                           model.sizes, condition_number(make(), loss, x, y))
    report = gradient_report(make, loss, x, y, sizes=sizes, normalize=normalize)["params"]
    worst = 0.0
    for name in full:
        error = np.abs(acc[name] - full[name])
        assert report[name]["max_abs"] == float(np.max(error))
        worst = max(worst, bound_ratio(error, bound[name]))
    return report["all"]["max_abs"], worst


OPTIMIZERS = {"sgd": optim.SGD, "adam": optim.Adam, "adamw": optim.AdamW}


def optimizer_factory(spec):
    return lambda params: OPTIMIZERS[spec["kind"]](params, **spec["hyper"])


def scheduler_factory(spec, steps):
    """None (constant lr), cosine decay over the K steps, or 2 warmup steps before it."""
    cosine = optim.cosine(spec["hyper"]["lr"], total_steps=steps)
    schedule = {"constant": None, "cosine": cosine,
                "warmup": optim.linear_warmup(cosine, warmup_steps=2)}[spec["schedule"]]
    return None if schedule is None else (lambda opt: optim.Scheduler(opt, schedule))


def params(model):
    return {name: backend.to_numpy(p.data) for name, p in model.named_parameters()}


def replay_with_bound(make, spec, loss, batches, sizes):
    """Full-batch and accumulated training side by side, as ``trajectory_report`` runs them.

    Returns, per update, name -> max |theta_acc - theta_full|, and the worst ratio of the
    elementwise gap to the bound over all updates.
    """
    gaps, worst = [], 0.0
    for full, acc, bound in trajectory_bounds(
            make, optimizer_factory(spec), loss, batches, sizes,
            max_grad_norm=spec["max_grad_norm"],
            make_scheduler=scheduler_factory(spec, len(batches))):
        after_full, after_acc = params(full), params(acc)
        worst = max(worst, bound_ratio(np.abs(flat(after_acc.values())
                                              - flat(after_full.values())), bound))
        gaps.append({k: float(np.max(np.abs(after_acc[k] - after_full[k]))) for k in after_full})
    return gaps, worst
