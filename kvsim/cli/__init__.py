"""The ``kvsim`` command line: argument parsing, progress, printing and writing files.

This package owns one module per command (``kvsim.cli.run``, ``kvsim.cli.sweep``, ...),
the entry point that dispatches to them (:mod:`kvsim.cli.dispatch`, whose ``main`` is
re-exported here for the console script), the argparse tree (:mod:`kvsim.cli.parser`)
and what several commands share (:mod:`kvsim.cli.common`).

Exit codes: 0 ok; 2 bad input (one line naming file, line or field); 1 internal error.
"""

from kvsim.cli.dispatch import main

__all__ = ["main"]
