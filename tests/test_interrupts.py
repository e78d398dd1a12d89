"""kvsim.interrupts: signals counted by the command line's handler, held around code
that cannot let an exception through, and told apart from plugin code's own
KeyboardInterrupt."""

from __future__ import annotations

import signal
import threading

import pytest

from kvsim import interrupts


def test_on_signal_counts_then_raises():
    before = interrupts.signals()
    with pytest.raises(KeyboardInterrupt):
        interrupts.on_signal(signal.SIGTERM, None)
    assert interrupts.signals() == before + 1
    # a signal came meanwhile: whatever plugin code raised is an interrupt to let through
    assert interrupts.interrupted(ValueError("x"), before)


def test_held_interrupts_raises_at_the_end_of_the_block():
    reached = False
    with pytest.raises(KeyboardInterrupt), interrupts.held_interrupts():
        interrupts.on_signal(signal.SIGINT, None)  # counted, not raised here
        reached = True
    assert reached


def test_nested_holds_raise_once_at_the_outer_end():
    order = []
    with pytest.raises(KeyboardInterrupt), interrupts.held_interrupts():
        with interrupts.held_interrupts():
            interrupts.on_signal(signal.SIGINT, None)
        order.append("inner done")
    assert order == ["inner done"]


def test_a_plugins_own_keyboard_interrupt_is_not_an_interrupt_under_on_signal():
    old = signal.signal(signal.SIGINT, interrupts.on_signal)
    try:
        before = interrupts.signals()
        assert not interrupts.interrupted(KeyboardInterrupt(), before)
        assert not interrupts.interrupted(RuntimeError(), before)
    finally:
        signal.signal(signal.SIGINT, old)


def test_a_keyboard_interrupt_outside_the_main_thread_is_the_plugins():
    seen = []
    t = threading.Thread(
        target=lambda: seen.append(
            interrupts.interrupted(KeyboardInterrupt(), interrupts.signals())
        )
    )
    t.start()
    t.join()
    assert seen == [False]
