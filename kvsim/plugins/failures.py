"""What may come out of plugin code, as one line: exceptions, places and values, safely.

This module owns the two plugin errors (:class:`PluginError`, exit 2; and
:class:`RegistrationError`), the code files of the plugins imported in this process
(``_files``, filled by :mod:`kvsim.plugins.loading`), and the helpers that turn what
plugin code raised or returned into a message: :func:`describe`, :func:`show`,
:func:`place_of`, :func:`code_place`, :func:`at`, :func:`from_plugin`. Each is careful
because ``str``, ``repr`` and tracebacks of plugin objects are plugin code too.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Sequence
from typing import Any

from kvsim.errors import InputError, shown

# kvsim's own source folder (a frame in it is not plugin code)
_KVSIM_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
# the code files of the plugins imported in this process -> the plugin (for messages)
_files: dict[str, str] = {}


class PluginError(InputError):
    """A plugin that cannot be loaded or broke a rule (exit 2, one line)."""


class RegistrationError(ValueError):
    """A policy that cannot be registered (its message names the places)."""


def describe(e: BaseException, limit: int = 300) -> str:
    """``Type: message`` of an exception out of plugin code, safely: its ``str`` is plugin
    code too (it may raise, or be huge)."""
    name = type(e).__name__
    try:
        text = str(e)
    except BaseException:  # whatever it raises, the line is still given
        text = "(its message cannot be shown)"
    text = " ".join(text.split())  # one line
    if len(text) > limit:
        text = text[: limit - 3] + "..."
    return f"{name}: {text}" if text else name


def show(value: Any) -> str:
    """A value a plugin gave, as a message quotes it (its ``repr`` is plugin code, and a
    huge int has none)."""
    try:
        return shown(value)
    except BaseException:
        if isinstance(value, int):
            return f"an int of about {int(value.bit_length() * 0.30103):,} digits"
        return f"a {type(value).__name__} that cannot be shown"


def place_of(e: BaseException, files: Sequence[str] = ()) -> str | None:
    """``file:line`` in plugin code where ``e`` was raised: the innermost frame of its
    traceback in one of ``files`` (the plugin's own), else the innermost one outside kvsim
    (a module the plugin calls); a syntax error's own place. None: none of these."""
    if isinstance(e, SyntaxError) and e.filename and e.lineno:
        return f"{e.filename}:{e.lineno}"
    mine = other = None
    tb = e.__traceback__
    while tb is not None:
        name = tb.tb_frame.f_code.co_filename
        if name in files or name in _files:
            mine = f"{name}:{tb.tb_lineno}"
        elif not name.startswith((_KVSIM_DIR, "<")):
            other = f"{name}:{tb.tb_lineno}"
        tb = tb.tb_next
    return mine or other


def code_place(obj: Any, method: str) -> str | None:
    """``file:line`` where a policy's method is defined (None: not Python code)."""
    try:
        code = getattr(inspect.getattr_static(type(obj), method), "__code__", None)
        return f"{code.co_filename}:{code.co_firstlineno}" if code is not None else None
    except BaseException:
        return None


def at(place: str | None) -> str:
    return f" (at {place})" if place else ""


def from_plugin(e: BaseException) -> PluginError | None:
    """An exception that escaped every guard, as a plugin failure if plugin code raised it
    (a frame of its traceback is in a plugin's file); None otherwise."""
    tb = e.__traceback__
    found = None
    while tb is not None:
        name = tb.tb_frame.f_code.co_filename
        if name in _files:
            found = (name, tb.tb_lineno)
        tb = tb.tb_next
    if found is None:
        return None
    return PluginError(f"raised {describe(e)} (at {found[0]}:{found[1]})", where=_files[found[0]])
