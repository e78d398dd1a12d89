"""The registry of plugin policies by kind and name, and the switch that refuses plugin code.

This module owns the built-in names of each kind (``BUILTIN``) and how messages name a
kind (``LABELS``), the registry itself (``_REGISTRY``: kind -> name -> the plugin that
registered it -> :class:`Entry`), the plugins being imported now (``_loading``), the
scenario in scope (``_scope``), registering (:func:`register`, :func:`add`,
:func:`registered`), and ``--no-plugins`` (:func:`no_plugins`, :func:`disabled`).
Importing plugin code is :mod:`kvsim.plugins.loading`; what a name means,
:mod:`kvsim.plugins.resolve`.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import sys
from collections.abc import Callable, Iterator
from typing import NamedTuple

from kvsim.plugins.api import INTERFACES
from kvsim.plugins.failures import RegistrationError, show
from kvsim.plugins.params import hints

# this package's folder: frames in it are not the code that registers a policy
_HERE = os.path.dirname(os.path.abspath(__file__)) + os.sep

# built-in names of each kind (a plugin may not take one)
BUILTIN: dict[str, tuple[str, ...]] = {
    "eviction": ("lru", "fifo"),
    "admission": ("all", "second_hit"),
    "router": ("round_robin", "least_loaded", "cache_affinity"),
    "scheduler": ("fcfs", "lpm", "sjf"),
    "load_policy": ("sync", "async", "recompute", "auto"),
    "prefetch": ("none", "best_effort", "wait_complete", "timeout"),
}


# how messages name each kind
LABELS: dict[str, str] = {
    "eviction": "eviction policy",
    "admission": "admission policy",
    "router": "router",
    "scheduler": "scheduler",
    "load_policy": "load policy",
    "prefetch": "prefetch policy",
}


class Entry(NamedTuple):
    cls: type
    plugin: str  # the module (or entry point) it came from, for messages
    spec: str | None  # the plugins: entry that loaded it (None: registered otherwise)
    place: str  # where it was registered (file:line), for messages


class _Import:
    """A plugin being imported now: its name in messages, its ``plugins:`` entry (None: an
    entry point, or the caller's own code), and the names it registered so far (a name
    registered twice by one plugin is an error naming both places)."""

    __slots__ = ("classes", "names", "plugin", "spec")

    def __init__(self, plugin: str, spec: str | None) -> None:
        self.plugin = plugin
        self.spec = spec
        self.names: dict[tuple[str, str], str] = {}
        # the classes it registered, with their places: their parameters' annotations are
        # resolved once the import is complete (:func:`_resolve_pending`; a forward
        # reference to a class defined further down the file is fine)
        self.classes: list[tuple[type, str, str]] = []


# kind -> name -> the plugin (its plugins: spec; None: registered by other code) -> entry
_REGISTRY: dict[str, dict[str, dict[str | None, Entry]]] = {kind: {} for kind in INTERFACES}
_loading: list[_Import] = []  # the plugins being imported now
# the plugins the scenario being validated lists (None: not validating one)
_scope: contextvars.ContextVar[frozenset[str] | None] = contextvars.ContextVar(
    "kvsim_plugin_scope", default=None
)


# ---- code that must not run: --no-plugins ------------------------------------------------

# set (to 1) by --no-plugins; worker processes started meanwhile inherit it
NO_PLUGINS_ENV = "KVSIM_NO_PLUGINS"
_inspect = False  # with no plugins: accept (and list) names that need plugin code
_unchecked: list[str] = []  # those names (inspection only)
_skipped: list[str] = []  # plugins not imported


def disabled() -> bool:
    """Is plugin code refused in this process (``--no-plugins``, or ``KVSIM_NO_PLUGINS``)?"""
    return os.environ.get(NO_PLUGINS_ENV, "") not in ("", "0")


@contextlib.contextmanager
def no_plugins(inspect: bool = False) -> Iterator[None]:
    """Import no plugin and load no entry point for a ``with`` block (and in the worker
    processes started meanwhile). A scenario's ``plugins:`` are then skipped, and a policy
    name that is not a built-in one is refused (it would need plugin code), or, with
    ``inspect`` (a command that runs no policy), accepted unchecked and listed by
    :func:`unchecked`."""
    global _inspect
    old_env, old_inspect = os.environ.get(NO_PLUGINS_ENV), _inspect
    os.environ[NO_PLUGINS_ENV] = "1"
    _inspect = inspect
    _unchecked.clear()
    _skipped.clear()
    try:
        yield
    finally:
        _inspect = old_inspect
        if old_env is None:
            os.environ.pop(NO_PLUGINS_ENV, None)
        else:
            os.environ[NO_PLUGINS_ENV] = old_env


def unchecked() -> list[str]:
    """Policy names that plugin code would have had to check (``no_plugins(inspect=True)``)."""
    return list(_unchecked)


def skipped() -> list[str]:
    """Plugins a scenario listed that were not imported (``no_plugins``)."""
    return list(_skipped)


def _caller_place() -> str:
    """``file:line`` of the code that called into this package (a ``@register`` line)."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename.startswith(_HERE):
        frame = frame.f_back  # type: ignore[assignment]
    return f"{frame.f_code.co_filename}:{frame.f_lineno}" if frame is not None else "?"


# ---- registering ------------------------------------------------------------------------


def _kind_of(cls: type) -> str:
    for base in cls.__mro__:
        kind = getattr(base, "kind", "")
        if isinstance(kind, str) and kind in INTERFACES:
            return kind
    raise RegistrationError(
        f"{cls.__name__} is not a kvsim policy: subclass one of "
        + ", ".join(c.__name__ for c in INTERFACES.values())
        + " from kvsim.plugins (or give it a kind attribute)"
    )


def register(name: str, kind: str | None = None) -> Callable[[type], type]:
    """Class decorator: register a policy class under ``name`` (its kind from its base
    class, or ``kind``). A name may not be a built-in one, nor taken by another class."""

    def deco(cls: type) -> type:
        add(name, cls, kind)
        return cls

    return deco


def add(name: str, cls: type, kind: str | None = None) -> None:
    """Register ``cls`` under ``name`` (what :func:`register` does). Two plugins may use
    one name (a scenario sees only its own plugins'); one plugin may not use it twice."""
    place = _caller_place()
    if not isinstance(name, str) or not name.strip() or not name.isprintable():
        raise RegistrationError(
            f"a policy name must be a non-empty printable string, got {show(name)}"
        )
    if not isinstance(cls, type):
        raise RegistrationError(f"a policy is a class, got {show(cls)}")
    if kind is not None and not isinstance(kind, str):
        raise RegistrationError(f"a policy kind is a string, got {show(kind)}")
    k = kind if kind is not None else _kind_of(cls)
    if k not in INTERFACES:
        raise RegistrationError(f"unknown policy kind {k!r}; choose one of {sorted(INTERFACES)}")
    if name in BUILTIN[k]:
        raise RegistrationError(f"{k} {name!r} is a built-in name; choose another (at {place})")
    base = INTERFACES[k]
    missing = [
        m
        for m in base.required  # "a|b": either will do
        if not any(
            callable(getattr(cls, alt, None)) and getattr(cls, alt) is not getattr(base, alt, None)
            for alt in m.split("|")
        )
    ]
    if missing:
        either = " or ".join(f"{alt}()" for alt in missing[0].split("|"))
        raise RegistrationError(
            f"{k} {name!r} ({cls.__name__}) does not define {either} (at {place})"
        )
    if _loading:
        imp = _loading[-1]
        plugin, spec = imp.plugin, imp.spec
        first = imp.names.get((k, name))
        if first is not None:
            raise RegistrationError(
                f"{k} {name!r} is registered twice by this plugin: at {first} and at {place}"
            )
        imp.names[(k, name)] = place
        imp.classes.append((cls, f"{k} {name!r}", place))
    else:
        plugin, spec = getattr(cls, "__module__", "?"), None
        hints(cls, f"{k} {name!r}", place)  # (a class complete as it is given)
    by_plugin = _REGISTRY[k].setdefault(name, {})
    old = by_plugin.get(spec)
    if old is not None and spec is None and not _same_class(old.cls, cls):
        raise RegistrationError(
            f"{k} {name!r} is already registered by {old.plugin} (at {old.place})"
        )
    # (a plugin imported again, after its first import failed, replaces itself)
    by_plugin[spec] = Entry(cls, plugin, spec, place)


def _same_class(a: type, b: type) -> bool:
    """The same class, or the same class from a module imported again."""
    return a is b or (a.__module__, a.__qualname__) == (b.__module__, b.__qualname__)


def _resolve_pending() -> None:
    """Resolve the parameter annotations of every class the plugin being imported
    registered (:func:`hints`): called when its import is complete."""
    imp = _loading[-1]
    pending, imp.classes = imp.classes, []
    for cls, what, place in pending:
        hints(cls, what, place)


@contextlib.contextmanager
def registered(name: str, cls: type, kind: str | None = None) -> Iterator[None]:
    """Register a policy for the duration of a ``with`` block (tests, notebooks)."""
    k = kind if kind is not None else _kind_of(cls)
    by_plugin = _REGISTRY[k].setdefault(name, {})
    old = by_plugin.pop(None, None)
    _loading.append(_Import(getattr(cls, "__module__", "?"), None))
    try:
        add(name, cls, k)
        _resolve_pending()
    finally:
        _loading.pop()
    try:
        yield
    finally:
        by_plugin.pop(None, None)
        if old is not None:
            by_plugin[None] = old
        if not by_plugin:
            _REGISTRY[k].pop(name, None)
