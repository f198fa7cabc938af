"""Ctrl-C held back while a commit writes: ``deferred()``.

minigrad keeps every update all-or-nothing by *validating, then committing*: everything
that can fail is computed first, then a short commit writes parameters, optimizer state,
gradients and counters in place. Nothing in a commit can fail, but a ``KeyboardInterrupt``
can land between any two bytecodes; inside ``deferred()`` it waits until the block ends.

    with interrupts.deferred():
        ...                      # writes that must all happen, or none
    # a Ctrl-C that arrived inside is raised here, after the last write

How: on the main thread, entering the outermost ``deferred()`` installs a SIGINT handler
that only records the signal; leaving it puts the previous handler back and, if a signal
arrived, calls that handler (Python's default raises ``KeyboardInterrupt``; a handler of
your own is called with the signal and the frame, ``SIG_IGN`` drops it, ``SIG_DFL`` sends
the signal again to end the process). Blocks nest: only the outermost one touches the
handler. Off the main thread, or where Python cannot set signal handlers (an embedded
interpreter), ``deferred()`` does nothing: signals are only ever delivered to the main
thread, so no interrupt can land in such a block anyway. Only SIGINT is held back; a
``MemoryError`` cannot arise in a commit, which allocates nothing.

>>> with deferred():
...     deferring()
True
>>> deferring()
False
"""

import os
import signal
import threading

try:  # the C functions behind ``signal.signal``: the module's wrappers convert enums, ~6 us
    from _signal import SIGINT as _SIGINT
    from _signal import signal as _set
except ImportError:  # another Python than CPython
    _SIGINT, _set = signal.SIGINT, signal.signal

_depth = 0  # the deferred() blocks open now, on the main thread
_previous = None  # the SIGINT handler the outermost block replaced, or None: not installed
_pending = None  # (signum, frame) of a SIGINT that arrived inside


def deferring():
    """Whether a ``deferred()`` block is open (a SIGINT now waits for its end)."""
    return _depth > 0


def _hold(signum, frame):
    global _pending
    if _pending is None:
        _pending = (signum, frame)


class deferred:  # lower case: used like a function, as no_grad
    """Hold SIGINT until the block ends (see the module docstring). Re-entrant."""

    def __enter__(self):
        global _depth, _previous, _pending
        if threading.get_ident() != threading.main_thread().ident:
            return self
        if _depth == 0:
            _pending = None  # before the swap: a signal from now on is held, not lost
            try:
                _previous = _set(_SIGINT, _hold)  # looked up at each call: tests patch it
            except (ValueError, OSError, TypeError):  # cannot set handlers here: a no-op
                return self
        _depth += 1
        return self

    def __exit__(self, *exc_info):
        global _depth, _previous, _pending
        if threading.get_ident() != threading.main_thread().ident or _depth == 0:
            return False
        _depth -= 1
        if _depth:
            return False
        previous = _previous
        _set(_SIGINT, previous if previous is not None else signal.default_int_handler)
        # Read only now: a signal up to the swap was held, one after it is the previous
        # handler's already (Python's default raises it at once).
        pending, _previous, _pending = _pending, None, None
        if pending is not None:
            _deliver(previous, *pending)
        return False


def _deliver(handler, signum, frame):
    """What SIGINT would have done had it not waited (``handler``: as ``signal.signal``
    returned it; the C function gives ``SIG_IGN`` and ``SIG_DFL`` as plain ints)."""
    if not callable(handler):
        if handler == signal.SIG_IGN:
            return
        os.kill(os.getpid(), signum)  # SIG_DFL, or None (not set from Python): as the kernel
        return
    handler(signum, frame)
