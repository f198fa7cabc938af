"""``interrupts.deferred()``: SIGINT held until the block ends, then delivered as the handler
before it would have (Python's default raises, a handler of one's own is called, ``SIG_IGN``
drops it, ``SIG_DFL`` ends the process); nested blocks; a no-op off the main thread. And a
real Ctrl-C at every line of ``backward()`` leaves every ``.grad`` as before or as after."""

import signal
import subprocess
import sys
import threading

import numpy as np
import pytest
from sigint import interrupt_each_line

from minigrad import Tensor, nn
from minigrad.engine import interrupts
from minigrad.nn import functional as F


def ctrl_c():
    signal.pthread_kill(threading.get_ident(), signal.SIGINT)


@pytest.fixture
def handler():
    """Python's default SIGINT handler during the test (a pytest-xdist worker may ignore
    SIGINT), the one before put back after."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def test_a_ctrl_c_inside_is_raised_after_the_last_line(handler):
    done = []
    with pytest.raises(KeyboardInterrupt):
        with interrupts.deferred():
            assert interrupts.deferring()
            ctrl_c()
            done.append("after the signal")
    assert done == ["after the signal"]
    assert not interrupts.deferring()
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_no_signal_no_interrupt_and_the_handler_put_back(handler):
    with interrupts.deferred():
        assert signal.getsignal(signal.SIGINT) is not signal.default_int_handler
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    with pytest.raises(ValueError, match="inside"), interrupts.deferred():
        raise ValueError("inside")
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_ctrl_c_during_an_error_comes_out_with_the_error_as_its_context(handler):
    with pytest.raises(KeyboardInterrupt) as raised, interrupts.deferred():
        ctrl_c()
        raise ValueError("inside")
    assert isinstance(raised.value.__context__, ValueError)


def test_nested_blocks_deliver_once_as_the_outermost_ends(handler):
    order = []
    with pytest.raises(KeyboardInterrupt):
        with interrupts.deferred():
            held = signal.getsignal(signal.SIGINT)
            with interrupts.deferred():
                assert signal.getsignal(signal.SIGINT) is held  # installed once
                ctrl_c()
                ctrl_c()  # a second Ctrl-C: still one interrupt
            order.append("inner ended, nothing raised")
            assert interrupts.deferring()
    assert order == ["inner ended, nothing raised"]
    assert not interrupts.deferring()
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_handler_of_ones_own_is_called_once_with_the_signal_and_put_back():
    calls = []

    def own(signum, frame):
        calls.append((signum, frame is not None))

    previous = signal.signal(signal.SIGINT, own)
    try:
        with interrupts.deferred():
            ctrl_c()
            ctrl_c()
            assert calls == []
        assert calls == [(signal.SIGINT, True)]
        assert signal.getsignal(signal.SIGINT) is own
    finally:
        signal.signal(signal.SIGINT, previous)


def test_an_ignored_sigint_stays_ignored():
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with interrupts.deferred():
            ctrl_c()
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, previous)


def test_sig_dfl_ends_the_process_after_the_block():
    code = ("import os, signal\n"
            "from minigrad.engine import interrupts\n"
            "signal.signal(signal.SIGINT, signal.SIG_DFL)\n"
            "with interrupts.deferred():\n"
            "    os.kill(os.getpid(), signal.SIGINT)\n"
            "    print('held', flush=True)\n"
            "print('not reached', flush=True)\n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60)
    assert run.returncode == -signal.SIGINT, run.stderr
    assert run.stdout == "held\n"


def test_off_the_main_thread_it_does_nothing(handler):
    seen = []

    def inside():
        with interrupts.deferred():
            seen.append((interrupts.deferring(), signal.getsignal(signal.SIGINT)))
        seen.append(interrupts.deferring())

    thread = threading.Thread(target=inside)
    thread.start()
    thread.join()
    assert seen == [(False, signal.default_int_handler), False]


def test_where_no_handler_can_be_set_it_does_nothing(handler, monkeypatch):
    def refuse(*args):
        raise ValueError("signal only works in main thread of the main interpreter")

    monkeypatch.setattr(interrupts, "_set", refuse)  # what deferred() sets handlers with
    with interrupts.deferred():
        assert not interrupts.deferring()
    assert not interrupts.deferring()


# ----- backward(): every .grad as before or as after ------------------------------------------
def trained():
    """A two-layer model after its forward pass; one layer has gradients already (added
    into), the other none (set)."""
    gen = np.random.default_rng(0)
    model = nn.Sequential(nn.Linear(3, 4, generator=gen), nn.Tanh(),
                          nn.Linear(4, 2, generator=gen))
    for p in model[0].parameters():
        p.grad = np.full(p.shape, 0.25)
    x, y = gen.normal(size=(5, 3)), np.array([0, 1, 1, 0, 1])
    return model, F.cross_entropy(model(Tensor(x)), y)


def test_a_ctrl_c_anywhere_in_backward_leaves_every_grad_as_before_or_after():
    n = interrupt_each_line(trained, lambda s: s[1].backward(),
                            lambda s: [p.grad for p in s[0].parameters()])
    assert n > 50  # the walk, the rules and the writes were all interrupted


def test_a_ctrl_c_at_any_line_of_entering_or_leaving_is_raised_once_the_block_ends():
    def call(done):
        with interrupts.deferred():
            done.append("first write")
            done.append("second write")

    # Interrupts land in interrupts.py's own lines (the block's lines are not minigrad's):
    # before the handler is swapped nothing is written, after it both writes are.
    assert interrupt_each_line(list, call, lambda done: done) > 10
