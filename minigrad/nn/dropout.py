"""Dropout whose masks do not depend on how a batch is split.

Each sample's mask is keyed by ``(seed, step, global sample index)`` (see
``functional.dropout``). Outside ``dropout_keys`` the step is the layer's own count of
training forward calls and the samples are numbered 0..N-1 within the call. The
accumulation layer sets the keys: the optimizer update count and each micro-batch's
global sample indices, so accumulated training draws the full batch's masks.
"""

from contextlib import ContextDecorator

from minigrad.engine import backend, validate
from minigrad.nn import functional as F
from minigrad.nn.module import Module

_keys = None


class dropout_keys(ContextDecorator):  # used like a function: with dropout_keys(step, index)
    """Within this block every ``Dropout`` keys its masks by ``step`` and ``sample_index``.

    ``step`` becomes an int when the object is made; ``__enter__`` only sets the keys, last,
    so Ctrl-C at any point leaves them as they were outside the block. Blocks nest: leaving
    one puts back the keys of the block around it.
    """

    def __init__(self, step, sample_index):
        self.keys = (int(step), sample_index)
        self._previous = []  # the keys before each entry still open, innermost last

    @classmethod
    def rows(cls, step, x, start=0):
        """The keys of the rows of the array ``x`` as the samples ``start, start + 1, ...`` of
        a batch: the masks they draw in that whole batch.

        >>> import numpy as np
        >>> dropout_keys.rows(3, np.zeros((2, 4)), start=5).keys
        (3, array([5, 6]))
        """
        return cls(step, positions(x, start))

    def __enter__(self):
        global _keys
        # One statement, the keys last: no interrupt falls between saving and setting them.
        self._previous, _keys = [*self._previous, _keys], self.keys

    def __exit__(self, *exc_info):
        global _keys
        _keys = self._previous.pop()


def positions(x, start=0):
    """The global positions ``start, start + 1, ...`` of the samples (rows) of the array
    ``x``, on ``x``'s device."""
    xp = backend.get_namespace(x)
    return xp.arange(start, start + x.shape[0], device=backend.device(x))


def current_keys():
    """The keys ``dropout_keys`` has set now (``None`` outside every block)."""
    return _keys


def set_keys(keys):
    """Put back what ``current_keys()`` returned (the all-or-nothing guards do, after an
    interrupt that landed between a block's last line and its ``__exit__``)."""
    global _keys
    _keys = keys


class Dropout(Module):
    """Zero each element with probability ``p`` in training, scale the rest by 1 / (1 - p)."""

    def __init__(self, p=0.5, *, seed=0):
        super().__init__()
        self.p = validate.probability("p", p)
        self.seed, self.calls = validate.integer("seed", seed, low=0, high=2**63 - 1), 0

    def forward(self, x):
        if not self.training or self.p == 0.0:
            return F.dropout(x, self.p, training=False)
        if _keys is None:
            step, sample_index = self.calls, None
            self.calls += 1
        else:
            step, sample_index = _keys
        return F.dropout(x, self.p, True, seed=self.seed, step=step, sample_index=sample_index)

    def extra_repr(self):
        return f"p={self.p}, seed={self.seed}"
