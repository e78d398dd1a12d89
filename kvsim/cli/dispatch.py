"""The ``kvsim`` command's entry point: this module owns :func:`main` (parse, run one
command, turn every failure into its exit code and one-line message) and :data:`COMMANDS`,
the table from each command to the module and function that run it.

A command's module is imported by name when that command runs (``importlib``), so
``kvsim --help`` and the light commands never load the simulator, the experiments or
matplotlib; each command module imports what it needs at its top.

Exit codes: 0 ok; 2 bad input (one line naming file, line or field); 1 internal error.
"""

from __future__ import annotations

import importlib
import sys
import traceback
from collections.abc import Sequence

from kvsim import interrupts
from kvsim.cli.common import _plugin_mode, _plugins_as_overrides, _say_import, signals_as_interrupt
from kvsim.cli.parser import _parser
from kvsim.errors import InputError, clean
from kvsim.plugins import loading
from kvsim.plugins.failures import from_plugin

#: command -> (module that runs it, its function taking the parsed arguments)
COMMANDS: dict[str, tuple[str, str]] = {
    "run": ("kvsim.cli.run", "_cmd_run"),
    "validate": ("kvsim.cli.validate", "_cmd_validate"),
    "trace": ("kvsim.cli.trace", "_cmd_trace"),
    "profiles": ("kvsim.cli.profiles", "_cmd_profiles"),
    "plugins": ("kvsim.cli.plugins", "_cmd_plugins"),
    "costmodel": ("kvsim.cli.costmodel", "_cmd_costmodel"),
    "reproduce": ("kvsim.cli.reproduce", "_cmd_reproduce"),
    "sweep": ("kvsim.cli.sweep", "_cmd_sweep"),
    "capacity": ("kvsim.cli.capacity", "_cmd_capacity"),
    "sensitivity": ("kvsim.cli.sensitivity", "_cmd_sensitivity"),
    "calibrate": ("kvsim.cli.calibrate", "_cmd_calibrate"),
    "plot": ("kvsim.cli.plot", "_cmd_plot"),
    "baseline": ("kvsim.cli.gate", "_cmd_baseline"),
    "check": ("kvsim.cli.gate", "_cmd_check"),
}


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``kvsim`` console script."""
    args = _parser().parse_args(argv)
    module, function = COMMANDS[args.command]
    debug = getattr(args, "debug", False)
    start = interrupts.signals()
    notice = loading.on_import
    loading.on_import = _say_import
    try:
        with signals_as_interrupt(), _plugin_mode(args):
            # the command's module, loaded before any plugin code; its function looked up
            # now (a test may replace it)
            handler = getattr(importlib.import_module(module), function)
            _plugins_as_overrides(args)
            return handler(args)
    except InputError as e:
        return _refused(e, debug)
    except KeyboardInterrupt as e:
        # plugin code's own KeyboardInterrupt (no signal came) is a plugin failure
        failure = from_plugin(e) if interrupts.signals() == start else None
        if failure is not None:
            return _refused(failure, debug, e)
        print("kvsim: interrupted", file=sys.stderr)
        return 130
    except MemoryError:  # e.g. a workload too large for this machine: one line, no traceback
        print(
            f"kvsim: error: {args.command}: out of memory (lower workload.requests, a trace's "
            "limit, or the sweep's grid)",
            file=sys.stderr,
        )
        return 2
    except BrokenPipeError:  # e.g. `kvsim run ... | head`
        return 0
    except BaseException as e:  # SystemExit, GeneratorExit...: plugin code's, if no guard saw it
        failure = from_plugin(e)
        if failure is None:
            raise
        return _refused(failure, debug, e)
    finally:
        loading.on_import = notice


def _refused(e: InputError, debug: bool, cause: BaseException | None = None) -> int:
    """Exit 2 with the one-line message (``--debug``: the traceback first, a plugin's
    code included)."""
    if debug:
        traceback.print_exception(cause if cause is not None else e, file=sys.stderr)
    print(f"kvsim: error: {clean(str(e))}", file=sys.stderr)
    return 2
