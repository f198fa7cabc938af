"""Could a check have failed? The idle run, and "no verdict".

``check`` and ``contrastive_check`` pass a set-up when the gap between accumulated and
full-batch training stays within the floating-point bound at every update. A pass says
something only if the same comparison would have failed a wrong accumulation rule.

Every accumulation rule, right or wrong (the textbook mean over uneven micro-batches, the
sum, each micro-batch's own statistics), changes only the gradient that the optimizer is
given: the learning rate, momentum and weight decay act alike on both runs. The plainest
wrong rule accumulates nothing: every gradient 0, the optimizer otherwise the same. Its run,
the *idle run*, differs from the full-batch run by everything the gradient did there. Judged
against the same bound (``idle_ratio``, its gap / bound), it decides whether the check could
tell training from not training:

* the measured gap beyond the bound at some update: NOT equivalent, whatever the idle run
  shows (a failure is evidence by itself);
* the gap within the bound at every update and the idle run beyond it at some update: IS
  equivalent (a rule as wrong as the idle one would have been caught);
* both within the bound at every update: no verdict (``equivalent`` is ``None``): the check
  cannot tell training from not training, so a wrong rule could pass as well as the right
  one.

The last case is what a comparison that cannot fail looks like, measured rather than read
from the configuration (which only names the cause, where it knows one):

* the full-batch gradient is exactly 0 at every update, as cross-entropy over one output
  class is (the log-softmax of a single logit is 0): every rule weighs per-item gradients
  that are all 0, so right and wrong rules give the same run, and the idle gap is exactly 0;
* a learning rate of 0: no run moves at all;
* a gradient that moves the parameters by less than the bound (a tiny learning rate):
  the idle run stays within rounding of the full-batch run, and so would a wrong rule whose
  error is smaller than what the gradient did.

``contrastive_check`` compares the gradients at the same parameters before each update, so
there the idle gap is |g_full| itself.
"""

NO_VERDICT = "no verdict (the comparison could not have failed)"
IDLE = "a run that accumulates nothing (every gradient 0)"


def could_fail(idle_ratios):
    """Whether the idle run went beyond the bound at some update (``None``: not finite).

    >>> could_fail([0.0, 0.4]), could_fail([0.0, 3.0]), could_fail([None])
    (False, True, True)
    """
    return any(r is None or r > 1 for r in idle_ratios)


def idle_step(optimizer):
    """One update of the idle run: every gradient of ``optimizer``'s parameters 0, then
    ``optimizer.step()`` (so weight decay alone moves them)."""
    for p in optimizer.params:
        p.grad = p.xp.zeros_like(p.data)
    optimizer.step()


def no_verdict(config, updates, still):
    """Why ``check``'s comparison could not have failed: the cause its ``config`` names, if
    any, then what the runs did (``updates`` rows with ``idle_ratio``; ``still``: the
    full-batch run never moved)."""
    causes = []
    if config["lr"] == 0:
        causes.append("lr is 0, so no update moves the parameters")
    elif config["loss"] == "cross-entropy" and config["sizes"] and config["sizes"][-1] == 1:
        causes.append("cross-entropy over one output class is identically 0 (the log-softmax "
                      "of a single logit), so every gradient is 0: give the model at least 2 "
                      "outputs")
    if still:
        return causes + ["the full-batch run never moved the parameters, so any accumulation "
                         "rule, even a wrong one, gives the same gap of 0"]
    idle = max(row["idle_ratio"] for row in updates)
    if idle == 0:
        return causes + [f"the full-batch run moved exactly as {IDLE}, so any accumulation "
                         f"rule, even a wrong one, gives the same gap"]
    return causes + [f"{IDLE} stays within the floating-point bound of the full-batch run at "
                     f"every update (gap / bound at most {idle:.3g}): the gradient moved the "
                     f"parameters by less than rounding may, so a wrong accumulation rule "
                     f"would pass too; a larger lr moves them further"]
