"""Importing plugin code: ``plugins:`` entries (modules and files) and installed entry points.

This module owns :func:`load_plugins` (a scenario's or ``--plugin``'s modules and ``.py``
files, each failure a one-line :class:`~kvsim.plugins.failures.PluginError`),
:func:`load_entry_points` (the ``kvsim.policies`` group, once per process, failures kept
aside), how a ``plugins:`` entry is kept (:func:`canonical`, :func:`is_file_spec`), the
scenario in scope while one is validated (:func:`scope`), and the command line's notice
before plugin code runs (:data:`on_import`).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import importlib.metadata
import importlib.util
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from kvsim.errors import InputError
from kvsim.files import check_regular, read_bytes
from kvsim.interrupts import interrupted, signals
from kvsim.plugins.failures import (
    PluginError,
    RegistrationError,
    _files,
    at,
    describe,
    place_of,
    show,
)
from kvsim.plugins.registry import (
    _Import,
    _loading,
    _resolve_pending,
    _scope,
    _skipped,
    add,
    disabled,
)

ENTRY_POINT_GROUP = "kvsim.policies"

_entry_points_loaded = False
# entry points that could not be loaded: (entry point name, how messages name it, why)
_entry_point_failures: list[tuple[str, str, str]] = []

# the command line prints a line before it imports plugin code (None: say nothing)
on_import: Callable[[str], None] | None = None


def entry_point_failures() -> list[tuple[str, str, str]]:
    """The entry points that could not be loaded: (name, how messages name it, why)."""
    return _entry_point_failures


def _notice(what: str) -> None:
    if on_import is not None:
        on_import(what)


def load_entry_points() -> None:
    """Import what installed packages offer under ``kvsim.policies`` (once per process).
    An entry point names a policy class (registered under the entry point's name) or a
    module (which registers its own). One that cannot be loaded is kept aside: it is
    reported only when a scenario names a policy that no plugin offers."""
    global _entry_points_loaded
    if _entry_points_loaded or disabled():
        return
    _entry_points_loaded = True
    try:
        eps = list(importlib.metadata.entry_points(group=ENTRY_POINT_GROUP))
    except Exception:  # some package's metadata is broken: no entry points
        return
    for ep in eps:
        where = f"entry point {ep.name} = {ep.value}"
        _notice(where)
        _loading.append(_Import(where, None))
        before = signals()
        try:
            obj = ep.load()
            if isinstance(obj, type):
                add(ep.name, obj)
            _resolve_pending()
            module = sys.modules.get(obj.__module__) if isinstance(obj, type) else obj
            file = getattr(module, "__file__", None)
            if isinstance(file, str):
                _files.setdefault(file, where)
        except BaseException as e:  # SystemExit, KeyboardInterrupt too
            if interrupted(e, before):
                raise
            place = None if isinstance(e, RegistrationError) else place_of(e)
            _entry_point_failures.append((ep.name, where, _failure(e) + at(place)))
        finally:
            _loading.pop()


def _failure(e: BaseException) -> str:
    if isinstance(e, RegistrationError):  # (it names the places)
        return describe(e, 1000).removeprefix("RegistrationError: ")
    if isinstance(e, ImportError | SyntaxError | FileNotFoundError):
        return f"cannot import it ({describe(e)})"
    return f"failed while loading ({describe(e)})"


def is_file_spec(spec: str) -> bool:
    return spec.endswith(".py") or "/" in spec or os.sep in spec


def canonical(spec: str) -> str:
    """A plugins: entry as kvsim keeps it: a .py file by its absolute path (symlinks
    resolved where they can be: a loop or a bad name is left as it is, and refused when
    the file is imported)."""
    if not is_file_spec(spec):
        return spec
    try:
        return os.path.realpath(os.path.expanduser(spec))
    except (OSError, ValueError, RuntimeError):
        return os.path.abspath(spec)


@contextlib.contextmanager
def scope(specs: Sequence[Any]) -> Iterator[None]:
    """Validate a scenario that lists these plugins (see :func:`_visible`)."""
    token = _scope.set(frozenset(canonical(s) for s in specs if isinstance(s, str)))
    try:
        yield
    finally:
        _scope.reset(token)


def load_plugins(specs: Sequence[str], where: str | None = None) -> None:
    """Import each plugin (a module name importable from the current folder or
    ``sys.path``, or a ``.py`` file path) so that its policies are registered; an import
    that fails (whatever it raises, SystemExit and KeyboardInterrupt included) is a
    :class:`PluginError` naming the plugin (after ``where``) and the place. Under
    :func:`no_plugins`, nothing is imported."""
    for spec in specs:
        if not isinstance(spec, str) or not spec.strip():
            raise PluginError(
                f"a plugin is a module name or a .py path, got {show(spec)}", where=where
            )
        here = f"plugin {spec}" if where is None else f"{where}: plugin {spec}"
        if disabled():
            if spec not in _skipped:
                _skipped.append(spec)
            continue
        key = canonical(spec)
        _loading.append(_Import(spec, key))
        before = signals()
        try:
            if is_file_spec(spec):
                _import_file(key)
            else:
                _import_module(spec)
        except _Unreadable as e:  # missing, a folder, a FIFO, a symlink loop, no permission
            raise PluginError(f"cannot import it ({e}: {key})", where=here) from None
        except BaseException as e:  # SystemExit, KeyboardInterrupt too
            if type(e) is PluginError or interrupted(e, before):
                raise  # (a plugin it imports, itself a failure)
            place = None if isinstance(e, RegistrationError) else place_of(e, [key])
            raise PluginError(_failure(e) + at(place), where=here) from e
        finally:
            _loading.pop()


def _import_module(name: str) -> None:
    if name in sys.modules:
        return
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.append(cwd)  # `kvsim` (a console script) has no cwd on its path
    origin = None
    if "." not in name:  # (finding a submodule would import its package first)
        spec = importlib.util.find_spec(name)
        if spec is None:
            raise ModuleNotFoundError(f"No module named {name!r}")
        origin = spec.origin
    _notice(f"{name} ({origin})" if origin else name)
    module = importlib.import_module(name)
    try:
        _resolve_pending()
    except RegistrationError:
        sys.modules.pop(name, None)  # imported again (and refused again) next time
        raise
    file = getattr(module, "__file__", None)
    if isinstance(file, str):
        _files.setdefault(file, name)


PLUGIN_MAX_BYTES = 1 << 24  # a plugin file kvsim reads (16 MiB)


class _Unreadable(Exception):
    """A plugin file that cannot be read (the reason)."""


def _import_file(path: str) -> None:
    """Import a plugin file (its absolute path) under a name of its own, once."""
    digest = hashlib.sha1(path.encode("utf-8", "surrogateescape")).hexdigest()[:10]
    name = f"kvsim_plugin_{Path(path).stem}_{digest}"
    if name in sys.modules:
        return
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"not a Python module: {path}")
    try:
        check_regular(path, what="plugin file")  # before the notice: nothing runs yet
        _notice(path)
        # read as kvsim reads any input (a FIFO put in its place is refused, not waited on)
        source = read_bytes(path, what="plugin file", max_bytes=PLUGIN_MAX_BYTES)
    except InputError as e:
        reason = "no such file" if e.reason.endswith("not found") else e.reason
        raise _Unreadable(reason) from None
    code = compile(source, path, "exec", dont_inherit=True)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    _files[path] = path
    try:
        exec(code, module.__dict__)  # a plugin is code the user chose to run
        _resolve_pending()
    except BaseException:
        sys.modules.pop(name, None)
        raise
