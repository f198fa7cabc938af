"""Fault injection: an exception raised at sampled lines of minigrad's own code.

``check_all_or_nothing(make_state, call, snapshot)`` first runs ``call(make_state())`` under
``sys.settrace``, counting the line events in files under ``minigrad/`` (n of them). Then,
for each fault (``KeyboardInterrupt``, ``MemoryError``) and each sampled k in 1..n, it runs
``call`` on a fresh ``make_state()`` with the trace function raising the fault at the k-th
line event: what Ctrl-C (or a failed allocation) does when it lands just before that line.
After each fault it demands

- that the fault comes out of the call as itself (not re-wrapped, not swallowed, not lost);
- that the call left SIGINT's handler as it found it (or Ctrl-C would stay held);
- that ``snapshot(state)`` equals the snapshot before the call or the one after the
  uninjected call, exactly (arrays by ``np.array_equal`` on host copies, files by bytes);
- if it equals the one before: that a retry gives the uninjected result and state.

``make_state`` must build everything deterministically (model, optimizer, data, files), so
that every run executes the same lines; ``snapshot`` returns a tree that ``host`` can copy.
Adding a call is one line: ``check_all_or_nothing(make_state, lambda s: ..., snapshot)``.

The sampled events are the first at every distinct line (so that a line that runs once,
such as a rename, is never skipped) and ``MINIGRAD_FAULT_POINTS`` more, evenly spaced: 25 by
default, 250 under ``HYPOTHESIS_PROFILE=long``; ``MINIGRAD_FAULT_POINTS=all`` faults every
event. No threads are involved: ``sys.settrace`` traces the calling thread only, and the
previous tracer (coverage's, say) is put back in a ``finally``.

A fault is only injected where it can happen. While the call runs, SIGINT's handler is the
harness's own, which raises the fault; where another one is in place, SIGINT is *held*
(``minigrad.engine.interrupts.deferred()``: a commit's writes, and the lines of entering
and leaving one between its swaps of the handler). At a line where it is held

- a ``KeyboardInterrupt`` is a real SIGINT sent to this thread, not a raise: the holder
  says when it comes out (``deferred()``: after its block's last write), and then the
  harness's handler raises the very fault. The signal is taken before ``pthread_kill``
  returns and handled at the interpreter's next check point, so it comes out inside the
  call or, at the latest, at the harness's first call after it, still as the call's fault.
  One that never comes out is lost: the check fails, as for a swallowed fault;
- any other fault (a ``MemoryError``) is not injected: a held region is a commit, which
  allocates nothing, so nothing else can raise at its lines.

Off the main thread, where no handler can be set and ``deferred()`` holds nothing, nothing
is held. After every run the harness puts the handler it found back.
"""

import itertools
import os
import signal
import sys
import threading
import types
from fractions import Fraction
from typing import NamedTuple

import numpy as np

import minigrad
from minigrad import backend

MINIGRAD = os.path.dirname(os.path.abspath(minigrad.__file__)) + os.sep
FAULTS = (KeyboardInterrupt, MemoryError)
SCALARS = (type(None), bool, int, str, bytes, Fraction)


def default_points():
    """Evenly spaced fault points per call and fault, besides the first event at every
    distinct line: an int, or None for every line event."""
    value = os.environ.get("MINIGRAD_FAULT_POINTS")
    if value is None:
        return 250 if os.environ.get("HYPOTHESIS_PROFILE") == "long" else 25
    return None if value == "all" else int(value)


def sample(lines, points):
    """Line events (numbered from 1) to fault, given ``lines``, where each event happened.

    The first event at each distinct line (so that a line that runs once, such as the one
    that renames a file, is never skipped), and ``points`` more evenly spaced over all
    events, the last included; every event if ``points`` is None.
    """
    n = len(lines)
    if points is None or points >= n:
        return list(range(1, n + 1))
    first = {}
    for k, line in enumerate(lines, 1):
        first.setdefault(line, k)
    spaced = {n} if points == 1 else {1 + i * (n - 1) // (points - 1) for i in range(points)}
    return sorted(set(first.values()) | spaced)


# ----- running under the tracer -----------------------------------------------------------
class Run(NamedTuple):
    """What ``traced`` saw: ``lines[k - 1]`` is where the k-th line event happened (file
    name, line number); ``result`` what the call returned (or the fault that came out);
    ``where`` the injected fault's ``file:line in function``, or None; ``held`` the line
    events at which SIGINT was held (with a fault, only its own is asked about);
    ``sigint`` the SIGINT handler the call left in place of the harness's, or None."""
    lines: list
    result: object
    where: object
    held: list
    sigint: object


def traced(call, state, fault_at=None, fault=None, traces=None):
    """``Run`` of ``call(state)`` under the tracer, counting the line events in files that
    ``traces(file name)`` accepts (by default minigrad's own). With ``fault_at = k`` the
    k-th line event raises ``fault`` instead, or sends SIGINT if it is held there and the
    fault is a ``KeyboardInterrupt`` (see the module docstring)."""
    traces = traces or (lambda name: name.startswith(MINIGRAD))
    seen, where, held = [], [], []
    interrupt = fault if isinstance(fault, KeyboardInterrupt) else KeyboardInterrupt()

    def ours(signum, frame):  # the harness's SIGINT handler: the fault, as itself
        raise interrupt

    main = threading.current_thread() is threading.main_thread()

    def lines(frame, event, arg):
        if event == "line":
            seen.append((frame.f_code.co_filename, frame.f_lineno))
            # Asked only where it matters: getsignal at every event doubles the run time.
            holding = fault_at in (None, len(seen)) and main and \
                signal.getsignal(signal.SIGINT) is not ours
            if holding:
                held.append(len(seen))
            if len(seen) == fault_at:
                name = os.path.relpath(frame.f_code.co_filename)
                where.append(f"{name}:{frame.f_lineno} in {_function(frame)}")
                if not (holding and fault is interrupt):
                    raise fault
                where[-1] += " (SIGINT held: a real one sent)"
                # To this thread, not the process: taken before pthread_kill returns, where
                # os.kill may be taken by another thread (pytest-xdist has some) a bit later.
                signal.pthread_kill(threading.get_ident(), signal.SIGINT)
        return lines

    def calls(frame, event, arg):  # a new frame: trace its lines, or not
        return lines if traces(frame.f_code.co_filename) else None

    before = signal.signal(signal.SIGINT, ours) if main else None
    previous = sys.gettrace()
    sys.settrace(calls)
    left = ours
    try:
        try:
            result = call(state)
        finally:
            sys.settrace(previous)
            # A Python function: a check point, where a SIGINT sent and taken but not yet
            # handled comes out at the latest, still as the call's fault.
            left = signal.getsignal(signal.SIGINT) if main else ours
    except BaseException as err:
        if fault is None or not where:
            raise
        result = err
    finally:
        if main:
            signal.signal(signal.SIGINT, before)
    return Run(seen, result, where[0] if where else None, held,
               None if left is ours else left)


def _function(frame):
    """The qualified name of the frame's function (``no_grad.__exit__``); Python 3.10's code
    objects have no ``co_qualname``, so there it is made from ``self``'s class."""
    code = frame.f_code
    if hasattr(code, "co_qualname"):
        return code.co_qualname
    owner = frame.f_locals.get("self")
    return code.co_name if owner is None else f"{type(owner).__qualname__}.{code.co_name}"


# ----- comparable copies ------------------------------------------------------------------
def host(obj, _memo=None, _path="state"):
    """A copy of ``obj`` and of everything it holds, comparable across separately built
    objects: arrays as NumPy copies, objects as their type and attributes, functions as
    their name and closure; an object met again as the path where it was first met (so
    sharing is compared too, and cycles end). Containers become ``{label: copy}``."""
    memo = {} if _memo is None else _memo
    if isinstance(obj, SCALARS):
        return (type(obj).__name__, obj)
    if isinstance(obj, float):
        return ("float", repr(obj))  # exact, and nan equals nan
    if backend.is_array(obj) or isinstance(obj, np.generic):
        return ("array", type(obj).__module__, np.array(backend.to_numpy(obj), copy=True))
    if isinstance(obj, (types.ModuleType, type)):
        return (type(obj).__name__, obj.__name__)
    if id(obj) in memo:
        return ("seen at", memo[id(obj)][0])
    memo[id(obj)] = (_path, obj)  # holds obj, so that its id is not reused during the walk
    kind = type(obj).__qualname__
    if isinstance(obj, dict):
        items = {f"[{k!r}]": v for k, v in obj.items()}
    elif isinstance(obj, (list, tuple)):  # NamedTuple state records too
        items = {f"[{i}]": v for i, v in enumerate(obj)}
    elif isinstance(obj, types.FunctionType):
        kind = f"function {obj.__qualname__}"
        cells = zip(obj.__code__.co_freevars, obj.__closure__ or ())
        items = {f".<{name}>": cell.cell_contents for name, cell in cells}
    elif isinstance(obj, types.MethodType):
        kind, items = f"method {obj.__func__.__qualname__}", {".__self__": obj.__self__}
    elif hasattr(obj, "__dict__"):
        items = {f".{k}": v for k, v in vars(obj).items()}
    else:
        raise TypeError(f"host() cannot copy {kind} at {_path}: teach it, or leave the value "
                        "out of the snapshot")
    return {"<type>": kind, **{label: host(v, memo, _path + label) for label, v in items.items()}}


def _short(value, limit=160):
    text = repr(value).replace("\n", " ")
    return text if len(text) <= limit else text[:limit] + "..."


def difference(a, b, path="state", ignore=()):
    """Where two ``host`` copies first differ (the path and both values, shortened), or None;
    the paths in ``ignore`` (``"state['files']"``) are left out."""
    if isinstance(a, dict) and isinstance(b, dict):
        if list(a) != list(b):
            return f"{path}: entries {_short(list(a))} != {_short(list(b))}"
        for label in a:
            inner = path if label == "<type>" else path + label
            found = inner not in ignore and difference(a[label], b[label], inner, ignore)
            if found:
                return found
        return None
    if isinstance(a, tuple) and isinstance(b, tuple) and a[0] == b[0] == "array":
        x, y = a[2], b[2]
        if a[1] == b[1] and x.dtype == y.dtype and x.shape == y.shape and \
                np.array_equal(x, y, equal_nan=x.dtype.kind in "fc"):
            return None
        return f"{path}: {a[1]} {_short(x)} != {b[1]} {_short(y)}"
    if type(a) is not type(b) or a != b:
        return f"{path}: {_short(a)} != {_short(b)}"
    return None


# ----- the check ---------------------------------------------------------------------------
def check_all_or_nothing(make_state, call, snapshot, *, points=None, faults=FAULTS,
                         known=()):
    """Inject each fault at sampled line events of ``call``; returns how many were injected
    (where SIGINT is held, a ``KeyboardInterrupt`` only: see the module docstring).

    ``AssertionError`` lists every point where the call re-wraps or swallows the fault, the
    state after it is neither the state before the call nor the uninjected call's, or a
    retry goes wrong. ``known`` lists paths of the snapshot (``"state['grad_enabled']"``)
    where a change is a known, reported defect: a fault that changes nothing else is
    counted, not failed, and if no fault does so any longer, that is an error too (the
    defect is gone: drop it from ``known``).
    """
    points = default_points() if points is None else points
    call(make_state())  # once untraced: first-use imports and caches run no lines later
    state = make_state()
    before = host(snapshot(state))
    run = traced(call, state)
    lines, expected = run.lines, (before, host(snapshot(state)), host(run.result))
    assert lines, "the call ran no line of minigrad"
    assert run.sigint is None, f"the call left SIGINT to {run.sigint!r}"
    failures, injected, known_seen = [], 0, 0
    for fault in faults:
        held = () if issubclass(fault, KeyboardInterrupt) else set(run.held)
        for k in (k for k in sample(lines, points) if k not in held):
            err = fault(f"injected by tests/faults.py at line event {k} of {len(lines)}")
            where, problem = _inject(make_state, call, snapshot, k, err, expected, known)
            injected += 1
            known_seen += problem is KNOWN
            if problem and problem is not KNOWN:
                failures.append(f"{fault.__name__} at {where} (line event {k} of "
                                f"{len(lines)}): {problem}")
    if known and not known_seen:
        failures.append(f"no fault changes only {list(known)} any longer: drop known")
    assert not failures, f"{len(failures)} of {injected} faults went wrong:\n" + \
        "\n".join(failures)
    return injected


KNOWN = "a known defect"


def _inject(make_state, call, snapshot, k, fault, expected, known=()):
    """``(where, problem)`` after raising ``fault`` at line event k of ``call`` on a fresh
    state: ``problem`` is None if the state is as before (and a retry finishes the job) or
    as after, ``KNOWN`` if it is as before but for the ``known`` paths."""
    before, after, result = expected
    state = make_state()
    _, raised, where, _, sigint = traced(call, state, k, fault)
    if where is None:
        return None, "the run ran fewer lines: make_state or the call is not deterministic"
    if raised is not fault:
        return where, f"the call gave {raised!r}, not the fault itself"
    if sigint is not None:
        return where, f"SIGINT is left to {sigint!r}: Ctrl-C would not stop the program"
    now = host(snapshot(state))
    if difference(now, before) is None:
        retried = host(call(state))
        problem = difference(host(snapshot(state)), after) or difference(retried, result)
        return where, problem and f"the retry differs from the uninjected call: {problem}"
    if difference(now, after) is None:
        return where, None
    if known and difference(now, before, ignore=known) is None:
        return where, KNOWN
    return where, (f"half done; unlike before: {difference(now, before)}; "
                   f"unlike after: {difference(now, after)}")


def interrupt_each_entry_line(make, check):
    """``with make():`` with ``KeyboardInterrupt`` raised at each line event, in any file but
    the caller's and installed packages', that entering runs (making the manager,
    ``__enter__``), one fault per try; ``check()`` after each. Returns how many faults were
    raised."""
    here = sys._getframe(1).f_code.co_filename

    def enter(_):
        with make():
            sys.settrace(None)  # entered: the block and __exit__ run untraced

    for k in itertools.count(1):
        fault = KeyboardInterrupt(f"injected at line event {k} of entering")
        # Not third-party files: a garbage-collection callback (hypothesis registers one)
        # may run mid-entry and would swallow a fault raised in it.
        _, raised, where, _, _ = traced(enter, None, k, fault,
                                        lambda name: name != here and "site-packages" not in name)
        check()
        if where is None:  # no fault this time: every line of entering has had one
            return k - 1
        assert raised is fault, f"entering gave {raised!r}, not the fault itself"
