"""Running forward and backward on one micro-batch, and ``Micro``: the plain strategy.

``forward`` and ``add_loss`` are the pieces every strategy builds on: the model's output
with the micro-batch's dropout masks, then its per-item loss SUM back-propagated into
``.grad`` and counted in the accumulator (``acc.record``). ``Micro`` runs each micro-batch
alone, as every framework's accumulation loop does; it is the default strategy.
"""

from minigrad import nn
from minigrad.engine import backend


def keys(acc, mb):
    """``nn.dropout_keys`` for ``mb`` (a ``split.MicroBatch``): the update count and the
    samples' global positions, so that the masks do not depend on the split."""
    return nn.dropout_keys(acc.update_count, mb.index)


def forward(acc, mb):
    """The model's output on ``mb``, with its dropout masks (``keys``)."""
    with keys(acc, mb):
        return acc.model(mb.x)


def add_loss(acc, mb, out):
    """Back-propagate the loss SUM of output ``out`` against ``mb.y`` into ``.grad`` and count
    it; returns the loss sum as the window keeps it (see ``loss_value``).

    Nothing is read from the device here: whether the loss is finite is decided once for
    the whole window, from the gradient sums and the loss sum (``Accumulator.prepare``); a
    non-finite micro-batch makes them non-finite, and the window is refused there."""
    loss_sum = acc.loss(out, mb.y, reduction="sum")
    items = items_of(acc, mb)
    objective = loss_sum
    if acc.normalize == "micro_batch_mean":
        # The textbook loop: this micro-batch's mean. When all its targets are ignored,
        # torch's mean is NaN with a zero gradient: the micro-batch adds nothing.
        objective = loss_sum / items if items else loss_sum * 0.0
    objective.backward()
    value = loss_value(loss_sum)
    acc.record(items, mb.x.shape[0], value)
    return value


def items_of(acc, mb):
    """The items of micro-batch ``mb``: counted with the whole batch's (``mb.items``, no read)
    or by the loss's ``num_items``."""
    return mb.items if mb.items is not None else acc.loss.num_items(mb.y)


def loss_value(loss_sum):
    """A loss sum as a window adds it up: a 0-d float64 array on the loss's device (no read;
    float64, so the window's sum is the one Python floats would give), or, for NumPy, whose
    arrays are on the host already, the Python float (the exact ``Fraction`` in exact mode)."""
    data = loss_sum.data
    if backend.is_exact(data) or backend.on_host(data):  # NumPy: reading costs nothing
        return loss_sum.item()
    xp = backend.get_namespace(data)
    return xp.astype(data, xp.float64) if hasattr(xp, "float64") else data


def add_micro_batch(acc, mb):
    """``forward`` then ``add_loss``: one micro-batch added to the window."""
    return add_loss(acc, mb, forward(acc, mb))


class Micro:
    """Each micro-batch alone: forward, backward, add; then ONE reduced update.

    Exactly full-batch training (up to rounding) for every model whose samples do not
    interact: BatchNorm in training mode uses each micro-batch's statistics instead.
    """

    name, kind, label = "micro", "plain", "each micro-batch alone"

    def check(self, acc):
        """Every model and every ``normalize`` can be run this way."""

    def run(self, acc, micro_batches, reduction):
        for mb in micro_batches:
            add_micro_batch(acc, mb)
        return reduction.update(acc)  # None: a non-finite window was dropped
