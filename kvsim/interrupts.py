"""Interrupts while kvsim runs code it does not trust: counting signals, holding them.

This module owns the command line's signal handler (:func:`on_signal`: SIGINT, SIGTERM and
SIGHUP counted, then raised as KeyboardInterrupt), the count it keeps (:func:`signals`; the
hot paths that call plugin code read ``_signals`` directly), :func:`held_interrupts` for
code where Python cannot let an exception through (forking workers), and
:func:`interrupted`, which tells a real interrupt from a KeyboardInterrupt that plugin code
raised itself. It imports nothing of kvsim.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator

_signals = 0  # interrupts (SIGINT, SIGTERM, SIGHUP) that on_signal has seen

_held = False  # inside held_interrupts(): a signal is counted, and raised at its end
_pending = False  # a signal arrived while held


def on_signal(signum: int, frame: object) -> None:
    """A signal handler that counts the signal, then raises KeyboardInterrupt (the command
    line's, for SIGINT, SIGTERM and SIGHUP). Plugin code may raise KeyboardInterrupt too:
    one is an interrupt only if a signal arrived meanwhile (:func:`interrupted`). Inside
    :func:`held_interrupts` the KeyboardInterrupt waits for the block's end."""
    global _signals, _pending
    _signals += 1
    if _held:
        _pending = True
        return
    raise KeyboardInterrupt


@contextlib.contextmanager
def held_interrupts() -> Iterator[None]:
    """Hold a signal's KeyboardInterrupt until the block ends, then raise it there. For
    code where Python cannot let an exception through: forking worker processes runs the
    at-fork hooks (logging's lock release), where a KeyboardInterrupt is only printed
    ("Exception ignored ...", with a traceback) and dropped, so that Ctrl-C or SIGTERM at
    that moment neither stopped the command nor left it quiet."""
    global _held, _pending
    outer = _held
    _held = True
    try:
        yield
    finally:
        _held = outer
        if not outer and _pending:
            _pending = False
            raise KeyboardInterrupt


def signals() -> int:
    """The interrupts seen so far (take it before calling plugin code)."""
    return _signals


def interrupted(e: BaseException, before: int) -> bool:
    """Is ``e``, out of plugin code called when :func:`signals` was ``before``, an interrupt
    to let through rather than a plugin failure? Yes if a signal arrived meanwhile. A
    KeyboardInterrupt otherwise is the plugin's own where no signal can have raised it: in
    a thread other than the main one, where SIGINT is ignored (a sweep worker), or where
    :func:`on_signal` handles SIGINT (and did not count one). Elsewhere (another handler,
    Python's default) a real Ctrl-C cannot be told from it: it is let through."""
    if _signals != before:
        return True
    if not isinstance(e, KeyboardInterrupt):
        return False
    if threading.current_thread() is not threading.main_thread():
        return False
    try:
        handler = signal.getsignal(signal.SIGINT)
    except (ValueError, OSError):  # pragma: no cover - no SIGINT here
        return True
    return not (handler is on_signal or handler == signal.SIG_IGN)
