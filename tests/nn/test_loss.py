"""The loss modules: CrossEntropyLoss and MSELoss equal their functional forms, count their
items (``num_items``) and refuse an unknown reduction."""

import numpy as np
import pytest
from helpers import constant as _tensor

from minigrad import nn
from minigrad.engine.tensor import Tensor
from minigrad.nn import functional as F


def test_loss_modules(xp):
    logits = _tensor(xp, [[0.5, -1.0, 2.0], [1.0, 0.0, 3.0], [0.0, 0.0, 0.0]])
    target = xp.asarray([2, 9, 0])
    ce = nn.CrossEntropyLoss(ignore_index=9)
    assert ce(logits, target).item() == F.cross_entropy(logits, target, ignore_index=9).item()
    assert ce(logits, target, reduction="sum").item() == F.cross_entropy(
        logits, target, "sum", ignore_index=9).item()
    assert ce.num_items(target) == 2
    assert nn.CrossEntropyLoss().num_items(Tensor(xp.asarray([1, -100, -100]))) == 1
    mse = nn.MSELoss(reduction="sum")
    y = _tensor(xp, np.zeros((3, 3)))
    assert mse(logits, y).item() == F.mse_loss(logits, y, "sum").item()
    assert mse.num_items(y) == 9
    for cls in (nn.CrossEntropyLoss, nn.MSELoss):
        with pytest.raises(ValueError, match="reduction.*'avg'"):
            cls(reduction="avg")
