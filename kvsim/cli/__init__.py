"""The ``kvsim`` command line: argument parsing, progress, printing and writing files.

This package's ``main`` dispatches to one module per command (``kvsim.cli.run``,
``kvsim.cli.sweep``, ...); the argparse tree is ``kvsim.cli.parser``, what several commands
share ``kvsim.cli.common``.

Exit codes: 0 ok; 2 bad input (one line naming file, line or field); 1 internal error.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from kvsim.cli import (
    capacity,
    costmodel,
    gate,
    plot,
    profiles,
    reproduce,
    run,
    sensitivity,
    sweep,
    trace,
    validate,
)
from kvsim.cli import plugins as plugins_cmd
from kvsim.cli.common import _plugin_mode, _plugins_as_overrides, _say_import, signals_as_interrupt
from kvsim.cli.parser import _parser
from kvsim.errors import InputError, clean

__all__ = ["main", "signals_as_interrupt"]


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``kvsim`` console script."""
    args = _parser().parse_args(argv)
    handlers = {  # looked up now: a test may replace a command's function
        "run": run._cmd_run,
        "validate": validate._cmd_validate,
        "trace": trace._cmd_trace,
        "profiles": profiles._cmd_profiles,
        "plugins": plugins_cmd._cmd_plugins,
        "costmodel": costmodel._cmd_costmodel,
        "reproduce": reproduce._cmd_reproduce,
        "sweep": sweep._cmd_sweep,
        "capacity": capacity._cmd_capacity,
        "sensitivity": sensitivity._cmd_sensitivity,
        "plot": plot._cmd_plot,
        "baseline": gate._cmd_baseline,
        "check": gate._cmd_check,
    }
    from kvsim import plugins

    debug = getattr(args, "debug", False)
    start = plugins.signals()
    notice = plugins.on_import
    plugins.on_import = _say_import
    try:
        with signals_as_interrupt(), _plugin_mode(args):
            _plugins_as_overrides(args)
            return handlers[args.command](args)
    except InputError as e:
        return _refused(e, debug)
    except KeyboardInterrupt as e:
        # plugin code's own KeyboardInterrupt (no signal came) is a plugin failure
        failure = plugins.from_plugin(e) if plugins.signals() == start else None
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
        failure = plugins.from_plugin(e)
        if failure is None:
            raise
        return _refused(failure, debug, e)
    finally:
        plugins.on_import = notice


def _refused(e: InputError, debug: bool, cause: BaseException | None = None) -> int:
    """Exit 2 with the one-line message (``--debug``: the traceback first, a plugin's
    code included)."""
    if debug:
        import traceback

        traceback.print_exception(cause if cause is not None else e, file=sys.stderr)
    print(f"kvsim: error: {clean(str(e))}", file=sys.stderr)
    return 2
