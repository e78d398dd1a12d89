"""Writers: a run's summary and per-request table to a folder, all or nothing.

Every file is written under a temporary name and renamed into place only when all of them
are written, so a folder never holds a half-written result that looks complete; a table
left by an earlier run in the other format is removed, so the folder holds one run.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Literal

import yaml

from kvsim.config.dump import scenario_to_dict
from kvsim.errors import InputError
from kvsim.results.records import Results, json_ready

Format = Literal["parquet", "csv"]


def check_writable(path: str | os.PathLike[str], *, folder: bool, flag: str) -> Path:
    """Refuse, before any work is done, an output path that cannot be written: a folder
    that is a file (or under one), a file that is a folder, or no permission."""
    p = Path(path)
    if str(path).endswith(os.sep) and not folder:
        raise InputError("expected a file name, got a folder", where=f"{flag} {path}")
    if p.exists() and p.is_dir() != folder:
        what = "not a folder" if folder else "a folder"
        raise InputError(f"exists and is {what}", where=f"{flag} {path}")
    parent = p if folder else p.parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        raise InputError(f"{parent} is a file, not a folder", where=f"{flag} {path}")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise InputError(f"no permission to write in {parent}", where=f"{flag} {path}")
    return p


def write_results(
    results: Results, out_dir: str | os.PathLike[str], fmt: Format = "parquet"
) -> list[Path]:
    """Write summary.json, requests.<fmt> and scenario.yaml; return the paths written."""
    out = check_writable(out_dir, folder=True, flag="--out")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise InputError(e.strerror or str(e), where=f"--out {out_dir}") from None
    targets = {
        "summary.json": lambda p: p.write_text(
            json.dumps(json_ready(results.summary), indent=2) + "\n", encoding="utf-8"
        ),
        f"requests.{fmt}": lambda p: _write_table(results, p, fmt),
        "scenario.yaml": lambda p: p.write_text(
            yaml.safe_dump(scenario_to_dict(results.scenario), sort_keys=False),
            encoding="utf-8",
        ),
    }
    temps: list[tuple[Path, Path]] = []
    try:
        for name, write in targets.items():
            final = out / name
            tmp = out / f".{name}.tmp-{os.getpid()}"
            temps.append((tmp, final))
            write(tmp)
        for tmp, final in temps:
            os.replace(tmp, final)
        stale = out / f"requests.{'csv' if fmt == 'parquet' else 'parquet'}"
        stale.unlink(missing_ok=True)  # an older run's table in the other format
    except OSError as e:
        raise InputError(
            f"cannot write results: {e.strerror or e}", where=f"--out {out_dir}"
        ) from None
    finally:
        for tmp, _ in temps:
            tmp.unlink(missing_ok=True)
    return [final for _, final in temps]


def _write_table(results: Results, path: Path, fmt: Format) -> None:
    df = results.requests
    if fmt == "parquet":
        df.to_parquet(path, index=False)
    elif fmt == "csv":
        df.to_csv(path, index=False)
    else:  # pragma: no cover - the CLI restricts the choice
        raise ValueError(f"unknown format {fmt!r}")
