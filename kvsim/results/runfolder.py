"""A run's output folder: this module owns :func:`write_results`, what ``kvsim run --out``
writes (summary.json, requests and timeseries tables, scenario.yaml, accesses.parquet),
and :func:`of_results`, a run's time series as that folder holds it. The folder is
written all or nothing by :func:`kvsim.results.writers.write_folder`."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Literal

import pandas as pd
import yaml

from kvsim.config.dump import scenario_to_dict
from kvsim.results.accesses import FILE as ACCESSES_FILE
from kvsim.results.accesses import write as write_accesses
from kvsim.results.records import Results, in_prompt_range, json_ready
from kvsim.results.timeseries import timeseries
from kvsim.results.writers import RUN_FILES, Writer, write_folder

Format = Literal["parquet", "csv"]


def write_results(
    results: Results, out_dir: str | os.PathLike[str], fmt: Format = "parquet"
) -> list[Path]:
    """Write summary.json, requests.<fmt>, timeseries.<fmt> (one row per
    ``run.timeseries_window`` of arrivals: :func:`kvsim.results.timeseries.timeseries`),
    scenario.yaml and, when the run recorded it, accesses.parquet (always Parquet:
    :mod:`kvsim.results.accesses`) as the folder ``out_dir`` (all or nothing; a folder
    holding anything else, figures of an earlier run included, is refused); return the
    paths. The time series is computed before anything is written, so a window it refuses
    (too many rows) leaves no folder."""
    series = of_results(results)
    files: dict[str, Writer] = {
        "summary.json": lambda p: p.write_text(
            json.dumps(json_ready(results.summary), indent=2) + "\n", encoding="utf-8"
        ),
        f"requests.{fmt}": lambda p: _write_table(results.requests, p, fmt),
        f"timeseries.{fmt}": lambda p: _write_table(series, p, fmt),
        "scenario.yaml": lambda p: p.write_text(
            yaml.safe_dump(scenario_to_dict(results.scenario), sort_keys=False),
            encoding="utf-8",
        ),
    }
    accesses = results.accesses
    if accesses is not None:
        files[ACCESSES_FILE] = lambda p: write_accesses(accesses, p)
    return write_folder(out_dir, files, flag="--out", owned=RUN_FILES)


def of_results(results: Results) -> pd.DataFrame:
    """A run's time series in its scenario's ``run.timeseries_window`` (what ``kvsim run
    --out`` writes as timeseries.parquet): :func:`kvsim.results.timeseries.timeseries` of
    the requests the summary measures."""
    sc = results.scenario
    df = results.requests
    return timeseries(
        df,
        results.activity,
        sc.run.timeseries_window,
        sc.cluster.engines,
        keep=in_prompt_range(df, sc).to_numpy() if sc.run.prompt_range is not None else None,
    )


def _write_table(df: pd.DataFrame, path: Path, fmt: Format) -> None:
    if fmt == "parquet":
        df.to_parquet(path, index=False)
    elif fmt == "csv":
        df.to_csv(path, index=False)
    else:  # pragma: no cover - the CLI restricts the choice
        raise ValueError(f"unknown format {fmt!r}")
