"""Loss modules that also know how many items their mean divides by.

``num_items(target)`` is what the accumulation layer needs for the item-weighted rule:
the number of non-ignored targets for cross-entropy, the number of elements for MSE.
"""

from minigrad.engine import backend, validate
from minigrad.engine.tensor import Tensor
from minigrad.nn import functional as F
from minigrad.nn.module import Module


class CrossEntropyLoss(Module):
    """``functional.cross_entropy`` as a module; ``"mean"`` divides by ``num_items``.

    With all logits equal every target has probability 1/C, so each item's loss is
    log C (log 4 = 1.386294...); the ignored target (-100) counts neither in the sum nor
    in the mean's denominator:

    >>> import numpy as np
    >>> from minigrad import Tensor
    >>> loss, target = CrossEntropyLoss(), np.array([0, 1, -100])
    >>> loss.num_items(target), f"{loss(Tensor(np.zeros((3, 4))), target).item():.6f}"
    (2, '1.386294')
    """

    def __init__(self, reduction="mean", ignore_index=-100):
        super().__init__()
        F._check_reduction(reduction)
        self.reduction = reduction
        self.ignore_index = validate.integer("ignore_index", ignore_index)

    def forward(self, logits, target, reduction=None):
        reduction = self.reduction if reduction is None else reduction
        return F.cross_entropy(logits, target, reduction, self.ignore_index)

    def num_items(self, target):
        target = target.data if isinstance(target, Tensor) else target
        xp = backend.get_namespace(target)
        return int(xp.sum(xp.astype(target != self.ignore_index, xp.int64)))

    def for_batch(self, target):
        """``(loss, counts)`` for the parts of one batch: its labels read once, here
        (``functional.label_counts``), and this loss checking each part from that read;
        ``counts[i]``: the items of sample ``i``, a host array. What accumulation uses so
        that a window reads its targets once, not once per micro-batch."""
        if type(self).forward is not CrossEntropyLoss.forward or \
                type(self).num_items is not CrossEntropyLoss.num_items:
            return self, None  # a subclass's own forward or count: read per part, as before
        labels, counts = F.label_counts(target, self.ignore_index)
        return _LabelsRead(self, labels), counts


class _LabelsRead:
    """A ``CrossEntropyLoss`` whose batch's labels were read once (``for_batch``)."""

    def __init__(self, loss, labels):
        self.loss, self.labels = loss, labels

    def __call__(self, logits, target, reduction=None):
        reduction = self.loss.reduction if reduction is None else reduction
        return F.cross_entropy(logits, target, reduction, self.loss.ignore_index,
                               labels=self.labels)

    def num_items(self, target):
        return self.loss.num_items(target)

    def __getattr__(self, name):  # ignore_index, reduction, ...: the loss's own
        return getattr(self.loss, name)


class MSELoss(Module):
    """``functional.mse_loss`` as a module; ``"mean"`` divides by the element count."""

    def __init__(self, reduction="mean"):
        super().__init__()
        F._check_reduction(reduction)
        self.reduction = reduction

    def forward(self, input, target, reduction=None):
        return F.mse_loss(input, target, self.reduction if reduction is None else reduction)

    def num_items(self, target):
        target = target.data if isinstance(target, Tensor) else target
        return backend.size(target)

    def for_batch(self, target):
        """``(self, counts)``: every element is an item, so sample ``i`` holds the elements
        of ``target[i]`` (``counts``, a list of ints; nothing is read from the device)."""
        if type(self).num_items is not MSELoss.num_items:
            return self, None  # a subclass's own count: per part, as before
        target = target.data if isinstance(target, Tensor) else target
        n = target.shape[0]
        return self, [backend.size(target) // n if n else 0] * n
