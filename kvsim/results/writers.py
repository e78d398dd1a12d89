"""Writers: a run's summary and per-request table to a folder, all or nothing.

Every file is written under a temporary name and renamed into place only when all of them
are written, so a folder never holds a half-written result that looks complete.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Literal

import yaml

from kvsim.results.records import Results, json_ready

Format = Literal["parquet", "csv"]


def write_results(
    results: Results, out_dir: str | os.PathLike[str], fmt: Format = "parquet"
) -> list[Path]:
    """Write summary.json, requests.<fmt> and scenario.yaml; return the paths written."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    targets = {
        "summary.json": lambda p: p.write_text(
            json.dumps(json_ready(results.summary), indent=2) + "\n", encoding="utf-8"
        ),
        f"requests.{fmt}": lambda p: _write_table(results, p, fmt),
        "scenario.yaml": lambda p: p.write_text(
            yaml.safe_dump(json_ready(results.scenario.model_dump()), sort_keys=False),
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
