"""What every study shares before it runs: this module owns :func:`find_folder`, where a
study's scenario files are, and :func:`check_files`, their check before its first run."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

from kvsim import api
from kvsim.errors import InputError


def check_files(paths: Iterable[Path]) -> None:
    """Load (and so check) every scenario file a study will run, before its first run: a
    typo in the last one is refused at once, by file and line, not after minutes of the
    others' runs. Each study's ``scenario_files(folder)`` lists its files; ``kvsim
    reproduce all`` checks every study's before any runs."""
    for p in paths:
        api.load(p)


def find_folder(
    folder: str | Path | None, rel: str, needed: Sequence[str] = ("base.yaml",)
) -> Path:
    """A study's scenario folder: ``folder`` when given, else ``rel`` under the working
    directory, else under the checkout; the first holding every file of ``needed``."""
    sub = Path(rel)
    candidates = (
        [Path(folder)] if folder else [Path.cwd() / sub, Path(__file__).resolve().parents[2] / sub]
    )
    for c in candidates:
        if all((c / name).is_file() for name in needed):
            return c
    raise InputError(
        f"no {rel}/ folder with {', '.join(needed)} here; run from the kvsim checkout or "
        "pass --scenarios DIR",
        where=str(candidates[0]),
    )
