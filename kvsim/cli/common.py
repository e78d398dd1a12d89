"""What several ``kvsim`` commands share: ``--plugin``/``--no-plugins`` handling, signals
as interrupts, the plugin-import notice, plot-path checks and JSON numbers."""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import signal
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

from kvsim.errors import InputError, clean
from kvsim.interrupts import on_signal
from kvsim.plugins.failures import PluginError
from kvsim.plugins.loading import canonical, load_plugins
from kvsim.plugins.registry import disabled, no_plugins
from kvsim.results.writers import check_writable


def _plugins_as_overrides(args: argparse.Namespace) -> None:
    """``--plugin`` values: imported now (a broken one is refused before any work), and
    added to the scenario's ``plugins`` so that they travel to every worker."""
    specs = [canonical(s) for s in getattr(args, "plugins", None) or []]
    if not specs:
        return
    for given, spec in zip(args.plugins, specs, strict=True):
        try:
            load_plugins([spec])
        except InputError as e:  # named as typed (the message has the path in full)
            raise PluginError(e.reason, where=f"--plugin {given}") from e
    args.plugins = specs
    if hasattr(args, "overrides"):
        args.overrides.append("plugins=" + json.dumps(specs))


def _say_import(what: str) -> None:
    """Before plugin code is imported: say which (a scenario's plugins: run as code)."""
    print(f"kvsim: importing plugin code: {clean(what)}", file=sys.stderr)


# commands that run no policy: with --no-plugins they accept (and list) plugin names
_INSPECTING = ("validate", "trace", "costmodel", "plugins")


@contextlib.contextmanager
def _plugin_mode(args: argparse.Namespace) -> Iterator[None]:
    """``--no-plugins`` (or KVSIM_NO_PLUGINS=1): no plugin code runs in this command (nor
    in its local workers)."""
    if not getattr(args, "no_plugins", False) and not disabled():
        yield
        return

    if getattr(args, "plugins", None):
        raise InputError("--plugin runs plugin code, --no-plugins runs none: give one")
    if getattr(args, "scheduler", None):
        raise InputError(
            "Dask workers cannot be kept from importing a scenario's plugins: use local "
            "workers (no --scheduler)",
            where="--no-plugins",
        )
    with no_plugins(inspect=args.command in _INSPECTING):
        yield


@contextlib.contextmanager
def signals_as_interrupt() -> Iterator[None]:
    """SIGTERM and SIGHUP handled like Ctrl-C (KeyboardInterrupt) while a command runs, so
    a terminated command stops its workers, keeps what finished and leaves no partial
    output, exactly as on an interrupt (the main thread only: Python's rule). The handler
    (SIGINT's too, unless it is ignored) counts the signals, so that a KeyboardInterrupt
    raised by plugin code is told from a real one (kvsim.interrupts.interrupted)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    signals = [signal.SIGTERM, *([signal.SIGHUP] if hasattr(signal, "SIGHUP") else [])]
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signals.append(signal.SIGINT)
    old = {sig: signal.signal(sig, on_signal) for sig in signals}
    try:
        yield
    finally:
        for sig, previous in old.items():
            signal.signal(sig, previous)


def _check_plot_path(path_text: str) -> None:
    out = Path(path_text)
    if out.suffix.lower() not in (".png", ".svg", ".pdf"):
        raise InputError("expected a .png, .svg or .pdf file name", where=f"--plot {path_text}")
    if not out.parent.is_dir():
        raise InputError("folder does not exist", where=f"--plot {path_text}")
    check_writable(path_text, folder=False, flag="--plot")


def _json_number(value: float) -> float | None:
    """A number for JSON: NaN (no interval) as null."""
    return value if math.isfinite(value) else None
