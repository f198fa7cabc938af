"""Running forward and backward on one micro-batch, and ``Micro``: the plain strategy.

``forward`` and ``add_loss`` are the pieces every strategy builds on: the model's output
with the micro-batch's dropout masks, then its per-item loss SUM back-propagated into
``.grad`` and counted in the accumulator (``acc.record``). ``Micro`` runs each micro-batch
alone, as every framework's accumulation loop does; it is the default strategy.
"""

from minigrad import nn
from minigrad.accumulate.guard import all_finite


def forward(acc, mb):
    """The model's output on ``mb`` (a ``split.MicroBatch``), its dropout masks keyed by the
    update count and the samples' global positions, so they do not depend on the split."""
    with nn.dropout_keys(acc.update_count, mb.index):
        return acc.model(mb.x)


def add_loss(acc, mb, out):
    """Back-propagate the loss SUM of output ``out`` against ``mb.y`` into ``.grad`` and count
    it; returns the loss sum, or ``None`` if it is not finite and the window was dropped
    (``on_nonfinite="skip"``; with ``"raise"``: ``FloatingPointError``)."""
    loss_sum = acc.loss(out, mb.y, reduction="sum")
    items = acc.loss.num_items(mb.y)
    value = loss_sum.item()
    if not all_finite([loss_sum.data]):
        return acc.refuse(f"loss of a micro-batch is {value}")
    objective = loss_sum
    if acc.normalize == "micro_batches":
        # The textbook loop: this micro-batch's mean. When all its targets are ignored,
        # torch's mean is NaN with a zero gradient: the micro-batch adds nothing.
        objective = loss_sum / items if items else loss_sum * 0.0
    objective.backward()
    acc.record(items, mb.x.shape[0], value)
    return value


def add_micro_batch(acc, mb):
    """``forward`` then ``add_loss``: one micro-batch added to the window."""
    return add_loss(acc, mb, forward(acc, mb))


class Micro:
    """Each micro-batch alone: forward, backward, add; then ONE reduced update.

    Exactly full-batch training (up to rounding) for every model whose samples do not
    interact: BatchNorm in training mode uses each micro-batch's statistics instead.
    """

    name = "micro"

    def check(self, acc):
        """Every model and every ``normalize`` can be run this way."""

    def run(self, acc, micro_batches, reduction):
        for mb in micro_batches:
            if add_micro_batch(acc, mb) is None:
                return None  # a non-finite loss dropped the window (on_nonfinite="skip")
        return reduction.update(acc)
