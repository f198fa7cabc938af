"""Accumulation strategies: how ONE window is run. The protocol, in one place.

A strategy is any object with a ``name``, a ``check`` and a ``run``::

    class Strategy:
        name = "micro"                     # how calls and errors name it

        def check(self, acc):              # refuse what it cannot run (TypeError,
            ...                            # ValueError), before anything runs

        def run(self, acc, micro_batches, reduction):
            ...                            # add the window's sums, then
            return reduction.update(acc)   # the mean loss, or None if skipped

A strategy that keeps state across updates (``contrastive.Bank``, a memory bank) says so
with ``stateful = True``: ``as_strategy`` then refuses its name, since each call would make a
new, empty one, and the caller passes one object to every step. A strategy whose sums arrive
divided by the window's item count already (it divides as it adds, as
``Precision(order="divide_then_sum")`` does) says so with ``divided = True``: the update then
divides them by 1 (``Accumulator(divided=...)``, which the driver passes); without the
attribute they arrive undivided and the update divides them as ``normalize`` says.

``accumulate.step`` (and ``distributed.step``, the same function with the MPI reduction)
checks the batch and the split once, makes a fresh ``Accumulator`` ``acc``, and calls
``run`` with:

* ``micro_batches``: the window's ``split.MicroBatch`` records ``(x, y, index)``, checked,
  ``index`` the samples' global positions (what keys the dropout masks);
* ``reduction``: where the sums meet (``minigrad.accumulate.reduction``).
  ``reduction.gather(what, payload)`` returns every process's payload in process order
  (one process: ``[payload]``) for statistics a strategy needs from the whole global batch;
  ``reduction.update(acc)`` adds the window's sums and counts over the processes and makes
  the ONE update.

``run`` adds the window's per-item gradient SUMS into ``.grad`` and counts them: with
``micro.add_micro_batch(acc, mb)``, or, for its own forward, ``micro.add_loss(acc, mb,
out)``, or with its own backward and ``acc.record(items, samples, loss_sum)``. It returns
``reduction.update(acc)``, which is ``None`` when the window was not finite and was
dropped (finiteness is decided once per window, from the sums; a strategy that reads a
loss itself may also return ``acc.refuse(reason)`` early). Whatever must change together
with the update (a memory bank, a loss scale) is handed to ``acc.on_commit``: callables
run inside the update's commit, after the parameters are written, where nothing may fail.
It may
raise at any point: the driver took ``acc.snapshot()`` before and restores it, so the
parameters, gradients, buffers, optimizer and schedule are as they were; a strategy only
has to keep its own helpers off the model (pass them as arguments, as ``exact_batchnorm``
passes its statistics). A strategy that keeps state from window to window (a memory bank of
past representations, a loss scale) also has ``snapshot()`` and ``restore(state)``: the
driver takes the one before ``run`` and calls the other if ``run`` raises, so that state is
all-or-nothing too (a dropped window keeps what ``run`` decided, such as a lower scale).
The smallest complete example, micro-batches in reverse order::

    from minigrad.accumulate.micro import add_micro_batch

    class Reversed:
        name = "reversed"

        def check(self, acc):
            pass

        def run(self, acc, micro_batches, reduction):
            for mb in reversed(micro_batches):
                add_micro_batch(acc, mb)
            return reduction.update(acc)

    step(model, loss, opt, x, y, micro_batch_size=4, strategy=Reversed())
"""

from minigrad.accumulate.contrastive import Bank, GradCache, Naive
from minigrad.accumulate.exact_batchnorm import ExactBatchNorm
from minigrad.accumulate.micro import Micro
from minigrad.accumulate.precision import Precision
from minigrad.engine import validate

STRATEGIES = {cls.name: cls for cls in (Micro, ExactBatchNorm, Naive, GradCache, Bank,
                                        Precision)}
"""The strategies that have a name, the one registry of them (the command line, the checks
and the explorers read it): ``"micro"`` (each micro-batch alone; the default),
``"exact_batchnorm"`` (the full-batch BatchNorm gradient by extra passes) and, for losses
with in-batch negatives (``minigrad.accumulate.contrastive``), ``"naive"``, ``"gradcache"``
(exact) and ``"bank"`` (memory banks; a stateful strategy, passed as one ``Bank`` object) and
``"precision"`` (low-precision compute and gradient buffers, ``Precision(...)``). Each class
says its ``kind`` (``KINDS``) and its ``label``, how figures and explorers name it."""
KINDS = ("plain", "contrastive", "precision")
"""What a named strategy is for: ``"plain"``, a loss that is a mean over items (what
``minigrad check`` compares); ``"contrastive"``, a loss with in-batch negatives
(``minigrad check --loss contrastive``); ``"precision"``, low-precision compute."""


def names(kind):
    """The names of the strategies of ``kind`` (one of ``KINDS``), in ``STRATEGIES``' order.

    >>> names("contrastive")
    ('naive', 'gradcache', 'bank')
    """
    kind = validate.choice("kind", kind, KINDS)
    return tuple(name for name, cls in STRATEGIES.items() if cls.kind == kind)


def as_strategy(strategy):
    """A strategy object for ``strategy``: a name of ``STRATEGIES`` or an object that has
    ``name``, ``check`` and ``run``."""
    if isinstance(strategy, str):
        if strategy not in STRATEGIES:
            raise ValueError(f"strategy must be one of {sorted(STRATEGIES)} or a strategy "
                             f"object, got {strategy!r}")
        if getattr(STRATEGIES[strategy], "stateful", False):  # a name would start afresh
            raise ValueError(f"strategy={strategy!r} keeps a memory across updates: make one "
                             f"object, {STRATEGIES[strategy].__name__}(...), and pass it to "
                             f"every step")
        return STRATEGIES[strategy]()
    missing = [m for m in ("check", "run") if not callable(getattr(strategy, m, None))]
    if isinstance(strategy, type) or missing or not isinstance(getattr(strategy, "name", None),
                                                               str):
        raise TypeError(f"strategy must be one of {sorted(STRATEGIES)} or an object with a str "
                        f"name and check() and run() methods (see minigrad.accumulate.strategy),"
                        f" got {strategy!r}")
    return strategy
