"""A real Ctrl-C at every line of a ``Module`` attribute assignment, a buffer registration
and a ``Dropout`` forward leaves the module as before or as after: an entry replaced is
never dropped first and set after (``Dropout.calls`` gone, the next forward failing)."""

import numpy as np
import pytest
from sigint import interrupt_each_line

from minigrad import Tensor, nn
from minigrad.engine.tensor import Parameter


class Holder(nn.Module):
    """One entry of each kind: a parameter, a buffer, a sub-module and a plain attribute."""

    def __init__(self):
        super().__init__()
        self.w = Parameter(np.ones(2))
        self.register_buffer("count", np.zeros(1))
        self.child = nn.Identity()
        self.plain = 1


# Each replaces an entry; before and after differ, so each check can fail.
CHANGES = {
    "plain by plain": lambda m: setattr(m, "plain", 2),
    "plain by parameter": lambda m: setattr(m, "plain", Parameter(np.zeros(2))),
    "plain by module": lambda m: setattr(m, "plain", nn.Tanh()),
    "parameter by parameter": lambda m: setattr(m, "w", Parameter(np.zeros(2))),
    "parameter by module": lambda m: setattr(m, "w", nn.Tanh()),
    "parameter by None": lambda m: setattr(m, "w", None),
    "module by plain": lambda m: setattr(m, "child", 3),
    "module by parameter": lambda m: setattr(m, "child", Parameter(np.zeros(2))),
    "module by module": lambda m: setattr(m, "child", nn.Tanh()),
    "buffer by array": lambda m: setattr(m, "count", np.ones(1)),
    "buffer registered again": lambda m: m.register_buffer("count", np.ones(1)),
    "plain registered as a buffer": lambda m: m.register_buffer("plain", np.ones(1)),
    "module registered as a buffer": lambda m: m.register_buffer("child", np.ones(1)),
}


@pytest.mark.parametrize("change", list(CHANGES))
def test_a_ctrl_c_anywhere_in_a_replacement_leaves_the_old_entry_or_the_new(change):
    # The snapshot is the module's __dict__, its tables and every entry in them.
    interrupt_each_line(Holder, CHANGES[change], lambda m: m)


def test_a_ctrl_c_anywhere_in_a_dropout_forward_keeps_its_call_count():
    def make():
        layer = nn.Dropout(0.5, seed=1)
        layer.calls = 4
        return layer

    def forward(layer):
        layer(Tensor(np.ones((3, 4))))

    interrupt_each_line(make, forward, lambda layer: layer)
    layer = make()
    forward(layer)
    assert layer.calls == 5
