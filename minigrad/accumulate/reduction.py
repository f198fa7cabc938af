"""Where a window's sums meet: one process (``OneProcess``), or MPI (``mpi.AllReduce``).

A strategy adds ONE process's per-item gradient sums and counts; the reduction adds them
over every process taking part, so that each strategy runs unchanged on one process and
over MPI. A reduction has these methods, called by ``accumulate.step``:

* ``start()``: a new call begins (resets what the reduction keeps about one call);
* ``check(acc)``: refuse what this reduction cannot carry (MPI: exact Fractions);
* ``begin(acc, samples, call)``: every process agrees on the call (``call`` names the
  strategy, the optimizer and the parameters' layout); returns the global position of this
  process's first sample;
* ``gather(what, payload)``: every process's ``payload``, in process order (for a
  strategy's global statistics; ``what`` names the step in errors);
* ``update(acc)``: add the window's gradient sums and counts over the processes, then
  ``acc.update()``: divide once, clip, step; returns the mean loss per item or ``None``;
* ``skip()``: this process dropped its window (a non-finite loss with
  ``on_nonfinite="skip"``), so every process drops it;
* ``abort(error)``: this process failed; tell the others (MPI raises ``RankFailed``).

A collective call that learns that another process dropped its window raises
``WindowSkipped``; the driver then restores everything and reports a skipped update.
"""

from minigrad.engine import interrupts


class WindowSkipped(Exception):
    """Another process dropped this window (non-finite, ``on_nonfinite="skip"``)."""


class OneProcess:
    """One process: its sums are the global sums, and there is nobody to tell."""

    def start(self):
        pass

    def check(self, acc):
        pass

    def begin(self, acc, samples, call):
        return 0

    def gather(self, what, payload):
        return [payload]

    def update(self, acc):
        return acc.update()

    def skip(self):
        pass

    def abort(self, error):
        pass


class Gradients(OneProcess):
    """One process, and no update: keeps the window's gradient, divided once as ``normalize``
    says, in ``grads``, and gives the parameters back their ``.grad`` of ``before``
    (``accumulated_gradients``). Done inside the driver's guard, so an interrupt leaves the
    state before the call or after it."""

    def __init__(self, before):
        self.before, self.grads = before, None

    def update(self, acc):
        finite, loss_sum = acc.decide()  # the window's one read
        if not finite:
            return acc.refuse_nonfinite(loss_sum)
        grads = acc.gradients()
        mean_loss = loss_sum / acc.pending_items if acc.pending_items else float("nan")
        with interrupts.deferred():  # this window's commit: all of it, Ctrl-C after it
            acc.close_commit()  # a memory bank moves on, as with an update
            for p, g in zip(acc.params, self.before):
                p.grad = g
            self.grads = grads
        return mean_loss


METHODS = ("start", "check", "begin", "gather", "update", "skip", "abort")


def check(reduction):
    """``reduction`` if it has every method of the protocol above, else ``TypeError``."""
    missing = [m for m in METHODS if not callable(getattr(reduction, m, None))]
    if missing or isinstance(reduction, type):
        raise TypeError(f"reduction must be an object with the methods {list(METHODS)} "
                        f"(reduction.OneProcess, mpi.AllReduce), got {reduction!r}")
    return reduction
