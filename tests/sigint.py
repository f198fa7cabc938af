"""Real Ctrl-C at every line: SIGINT sent to this thread at the k-th line event of a call.

``interrupt_each_line(make_state, call, snapshot)`` first runs ``call(make_state())`` under
``sys.settrace``, counting the line events in minigrad's files (n of them). Then, for each
k in 1..n, it runs ``call`` on a fresh ``make_state()`` with the trace function sending
SIGINT at the k-th line event. ``signal.pthread_kill`` runs the Python-level handler before
it returns (``os.kill`` may have the signal taken by another thread, pytest-xdist has some,
and handled some lines later), so with Python's default handler the ``KeyboardInterrupt`` comes out
right there, as a Ctrl-C landing just before that line; inside ``interrupts.deferred()``
the handler only records the signal, the line runs, and the interrupt is raised as the
block ends. After each run it demands

- that the ``KeyboardInterrupt`` came out of the call (a held signal is delivered, not lost);
- that SIGINT's handler is Python's default again and no ``deferred()`` block is left open;
- that ``snapshot(state)`` equals the snapshot before the call or after the uninterrupted
  call (``faults.host`` copies, compared by ``faults.difference``).

Unlike ``tests/faults.py``, which raises the exception itself from the trace function, this
is the signal: it shows what ``deferred()`` holds back.
"""

import os
import signal
import sys
import threading

from faults import MINIGRAD, difference, host

from minigrad.engine import interrupts


def interrupted(call, state, at=None):
    """``(lines, result, where)`` of ``call(state)``: ``lines[k - 1]`` is where the k-th line
    event in minigrad's files happened. With ``at = k`` SIGINT is sent at the k-th event;
    then ``result`` is the ``KeyboardInterrupt`` that came out of the call (or what the call
    returned, if none did) and ``where`` says ``file:line in function``."""
    seen, where = [], []

    def lines(frame, event, arg):
        if event == "line":
            seen.append((frame.f_code.co_filename, frame.f_lineno))
            if len(seen) == at:
                name = os.path.relpath(frame.f_code.co_filename)
                where.append(f"{name}:{frame.f_lineno} in {frame.f_code.co_name}")
                signal.pthread_kill(threading.get_ident(), signal.SIGINT)
        return lines

    def calls(frame, event, arg):  # a new frame: trace its lines if it is minigrad's
        return lines if frame.f_code.co_filename.startswith(MINIGRAD) else None

    previous = sys.gettrace()
    sys.settrace(calls)
    try:
        result = call(state)
    except KeyboardInterrupt as err:
        if not where:
            raise
        result = err
    finally:
        sys.settrace(previous)
    return seen, result, where[0] if where else None


def interrupt_each_line(make_state, call, snapshot):
    """SIGINT at every line event of ``call`` (see the module text); returns how many.

    The uninterrupted call must change the snapshot, or the check could not fail."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # xdist may ignore it
    try:
        call(make_state())  # once untraced: first-use imports and caches run no lines later
        state = make_state()
        before = host(snapshot(state))
        lines, _, _ = interrupted(call, state)
        after = host(snapshot(state))
        assert lines, "the call ran no line of minigrad"
        assert difference(before, after), "the call changes nothing: no verdict"
        failures = []
        for k in range(1, len(lines) + 1):
            problem, where = _interrupt(make_state, call, snapshot, k, before, after)
            if problem:
                failures.append(f"SIGINT at {where} (line event {k} of {len(lines)}): "
                                f"{problem}")
    finally:
        signal.signal(signal.SIGINT, previous)
    assert not failures, f"{len(failures)} of {len(lines)} interrupts went wrong:\n" + \
        "\n".join(failures[:10])
    return len(lines)


def _interrupt(make_state, call, snapshot, k, before, after):
    """``(problem, where)`` after SIGINT at line event k of ``call`` on a fresh state."""
    state = make_state()
    _, raised, where = interrupted(call, state, k)
    if where is None:
        return "the run ran fewer lines: make_state or the call is not deterministic", None
    if not isinstance(raised, KeyboardInterrupt):
        return f"no KeyboardInterrupt came out of the call (it returned {raised!r})", where
    if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        return f"SIGINT's handler is left as {signal.getsignal(signal.SIGINT)!r}", where
    if interrupts.deferring():
        return "a deferred() block is left open", where
    now = host(snapshot(state))
    if difference(now, before) is None or difference(now, after) is None:
        return None, where
    return (f"half done; unlike before: {difference(now, before)}; "
            f"unlike after: {difference(now, after)}"), where
