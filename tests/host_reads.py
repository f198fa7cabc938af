"""Counting device-to-host reads: each conversion of a device array to a Python number or a
NumPy array, and the place in minigrad that asked for it.

On a GPU every such read waits for the device to finish its queue, then copies. The counter
wraps, on the array class of the namespace under test, every door to the host:

* array-api-strict (each of its arrays stands for a device array): ``__bool__``,
  ``__int__``, ``__float__``, ``__index__``, ``__complex__``, ``__array__`` and
  ``__buffer__`` (``np.asarray``), ``__dlpack__`` (``np.from_dlpack``), ``__reduce__``
  (pickling, as mpi4py's ``allgather`` does), ``__repr__``, ``__str__``, ``__format__``;
* PyTorch tensors: the same, with ``__reduce_ex__`` for pickling, and ``item``, ``tolist``,
  ``numpy``.

minigrad's own doors, ``backend.to_numpy`` and ``Tensor.item`` / ``Tensor.numpy``, open a
scope: a conversion counts ONCE however many of the wrapped methods it passes through
(``Tensor.item`` calls ``float``; ``to_numpy`` may try DLPack, then ``__array__``), and not
at all when nothing in it touched a device array (``to_numpy`` of a NumPy array).

Limits: an operation whose output shape depends on the data (boolean-mask indexing,
``nonzero``, ``unique_*``) also makes a GPU wait, but converts nothing, so it is not
counted; nor is an internal read of the namespace itself that bypasses the wrapped methods
(array-api-strict reading its own ``_array``). A DLPack export to another device array
would count as a read (minigrad makes none).
"""

import contextlib
import functools
import os
import sys
from collections import Counter
from dataclasses import dataclass

import minigrad
from minigrad.engine import backend
from minigrad.engine.tensor import Tensor

PACKAGE = os.path.dirname(os.path.abspath(minigrad.__file__))
ROOT = os.path.dirname(PACKAGE)
HERE = os.path.abspath(__file__)

DOORS = {
    "array_api_strict": ("__bool__", "__int__", "__float__", "__index__", "__complex__",
                         "__array__", "__buffer__", "__dlpack__", "__reduce__", "__repr__",
                         "__str__", "__format__"),
    "torch": ("__bool__", "__int__", "__float__", "__index__", "__complex__", "__array__",
              "__dlpack__", "__reduce_ex__", "__repr__", "__format__", "item", "tolist",
              "numpy"),
}
"""The methods of each namespace's array class that bring values to the host."""


@dataclass(frozen=True)
class Read:
    """One conversion: the door it went through, and the minigrad frames that asked
    (innermost first, ``path:line (function)``), after the first other frame (``via``)."""

    door: str
    frames: tuple
    via: str | None

    def __str__(self):
        where = " <- ".join(self.frames) or "(no minigrad frame)"
        return f"{self.door} at {where}" + (f" [via {self.via}]" if self.via else "")


class HostReads:
    """The reads made inside ``with reads.counting():``, a list of ``Read``."""

    def __init__(self, depth=3):
        self.depth = depth  # minigrad frames kept per read
        self.reads = []
        self._on = False
        self._level = 0
        self._scope = None

    @contextlib.contextmanager
    def counting(self):
        """Count the reads of the ``with`` body (the reads before it are the test's own)."""
        self.reads, self._on = [], True
        try:
            yield self
        finally:
            self._on = False

    def __len__(self):
        return len(self.reads)

    def summary(self):
        """The reads grouped by place, most frequent first, one line per place."""
        counts = Counter(str(r) for r in self.reads)
        return "\n".join(f"{n:4d} x {place}" for place, n in counts.most_common())

    def report(self, limit):
        return (f"{len(self)} device-to-host reads in one update (at most {limit} allowed):\n"
                f"{self.summary()}")

    # ----- the wrappers ------------------------------------------------------------------
    def wrap(self, function, door, device):
        """``function`` counted as ``door``; ``device``: it converts a device array (the
        array class's methods), else it only opens a scope (minigrad's own doors)."""

        @functools.wraps(function)
        def counted(*args, **kwargs):
            if self._level == 0:
                self._scope = [door, False, *self._place()] if self._on else None
            self._level += 1
            if device and self._scope is not None:
                self._scope[1] = True
            try:
                return function(*args, **kwargs)
            finally:
                self._level -= 1
                if self._level == 0 and self._scope is not None and self._scope[1]:
                    self.reads.append(Read(self._scope[0], *self._scope[2:]))

        return counted

    def _place(self):
        """``(frames, via)``: the innermost minigrad frames of the caller, and the first
        frame outside this file when it is not one of them (a library's internals)."""
        frame, via, frames = sys._getframe(2), None, []
        while frame is not None and len(frames) < self.depth:
            path = os.path.abspath(frame.f_code.co_filename)
            where = f"{_short(path)}:{frame.f_lineno} ({frame.f_code.co_name})"
            if path.startswith(PACKAGE + os.sep):
                frames.append(where)
            elif path != HERE and via is None and not frames:
                via = where
            frame = frame.f_back
        return tuple(frames), via


def _short(path):
    """``path`` from the repository root, or from ``site-packages`` for an installed library."""
    if "site-packages" + os.sep in path:
        return path.split("site-packages" + os.sep, 1)[1]
    return os.path.relpath(path, ROOT) if path.startswith(ROOT + os.sep) else path


def install(monkeypatch, xp):
    """A ``HostReads`` for namespace ``xp`` (array-api-strict or torch), its wrappers set
    with ``monkeypatch`` (undone after the test)."""
    name = backend.namespace_name(xp)
    if name not in DOORS:
        raise ValueError(f"no host doors known for namespace {name}")
    cls = type(xp.zeros(1))
    reads = HostReads()
    for door in DOORS[name]:
        monkeypatch.setattr(cls, door, reads.wrap(getattr(cls, door), door, device=True))
    to_numpy = reads.wrap(backend.to_numpy, "backend.to_numpy", device=False)
    # the name every layer calls, and the one its own module calls (in move and int_range)
    for module in (backend, backend.transfer):
        monkeypatch.setattr(module, "to_numpy", to_numpy)
    for door in ("item", "numpy"):
        monkeypatch.setattr(Tensor, door,
                            reads.wrap(getattr(Tensor, door), f"Tensor.{door}", device=False))
    return reads
