"""What every study shares before it runs: this module owns :func:`check_files`, the
check of a study's scenario files before its first run."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from kvsim import api


def check_files(paths: Iterable[Path]) -> None:
    """Load (and so check) every scenario file a study will run, before its first run: a
    typo in the last one is refused at once, by file and line, not after minutes of the
    others' runs. Each study's ``scenario_files(folder)`` lists its files; ``kvsim
    reproduce all`` checks every study's before any runs."""
    for p in paths:
        api.load(p)
