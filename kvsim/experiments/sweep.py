"""Sweeps: many runs of one base scenario over a grid of field values and seeds.

A sweep file::

    name: tiers-vs-policy
    base: ../scenarios/quickstart.yaml        # relative to the sweep file
    grid:                                     # every combination
      cluster.load_policy: [sync, async]
      remote.sharding: [none, per_rank]
    zip:                                      # advanced together (equal lengths)
      remote.servers: [1, 8]
      remote.capacity: ["8 TB", "1 TB"]
    set: {workload.requests: 2000}            # the same for every run
    replications: 2                           # seeds base, base+1 (or seeds: [...])

Each run is identified by a hash of the resolved base scenario, its overrides and its
seed. Finished runs (successful or not) are appended to ``runs.jsonl`` in the output
folder as they complete, so re-running the same command skips them: an interrupted sweep
resumes without duplicates. At the end ``results.parquet`` and ``results.csv`` hold one
row per run, in expansion order: the swept values, the seed, ``status`` and ``error``,
and every scalar summary metric. A failing run is recorded with its error and does not
stop the others. Runs execute on local worker processes, or on a Dask cluster given its
scheduler address; each run is deterministic, so the rows do not depend on either.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
from pydantic import Field

from kvsim.config.dump import scenario_to_dict
from kvsim.config.loader import load_record
from kvsim.config.schema import PosInt, Record
from kvsim.errors import InputError

RESULTS = "results.parquet"
JOURNAL = "runs.jsonl"


class SweepSpec(Record):
    """A sweep file."""

    name: str = Field("", description="sweep name (default: the file's stem)")
    base: str = Field(description="base scenario, relative to the sweep file")
    grid: dict[str, list[Any]] = Field({}, description="field path -> values; all combinations")
    zip: dict[str, list[Any]] = Field({}, description="field path -> values; advanced together")
    set: dict[str, Any] = Field({}, description="overrides applied to every run")
    seeds: list[int] | None = Field(None, description="seeds of every configuration")
    replications: PosInt | None = Field(None, description="or: seeds base, base+1, ...")


@dataclass(frozen=True)
class RunSpec:
    """One run of a sweep: what a worker needs (picklable)."""

    index: int
    run_id: str
    base: str  # absolute path of the base scenario
    params: tuple[tuple[str, Any], ...]  # the swept values, in column order
    fixed: tuple[tuple[str, Any], ...]  # the sweep's `set`
    seed: int

    def overrides(self) -> dict[str, Any]:
        return {**dict(self.fixed), **dict(self.params)}


@dataclass
class Sweep:
    """A loaded sweep file: its runs, in expansion order."""

    name: str
    path: Path
    columns: list[str]  # swept field paths
    runs: list[RunSpec]

    def configurations(self) -> list[dict[str, Any]]:
        """The distinct parameter combinations (seeds folded), in order."""
        seen: dict[tuple, dict[str, Any]] = {}
        for r in self.runs:
            seen.setdefault(r.params, dict(r.params))
        return list(seen.values())


def load_sweep(path: str | os.PathLike[str]) -> Sweep:
    """Read and expand a sweep file (InputError on a malformed one)."""
    from kvsim.api import load

    p = Path(path)
    spec = load_record(SweepSpec, p)
    lengths = {len(v) for v in spec.zip.values()}
    if len(lengths) > 1:
        raise InputError(
            "zip: every list needs the same length; lengths: "
            + ", ".join(f"{k}: {len(v)}" for k, v in spec.zip.items()),
            where=str(p),
        )
    for key, values in {**spec.grid, **spec.zip}.items():
        if not values:
            raise InputError(
                f"{key}: needs at least one value",
                where=str(p),
            )
    overlap = (set(spec.grid) & set(spec.zip)) | ((set(spec.grid) | set(spec.zip)) & set(spec.set))
    if overlap:
        raise InputError(
            f"{sorted(overlap)[0]}: swept twice (grid, zip and set must not share fields)",
            where=str(p),
        )
    base = (p.parent / spec.base).resolve()
    if not base.is_file():
        raise InputError(
            f"base: scenario {spec.base!r} not found (looked for {base})",
            where=str(p),
        )
    sc = load(base)  # the base itself must be valid; a bad swept value fails only its run
    base_hash = _digest(scenario_to_dict(sc))
    if spec.seeds is not None and spec.replications is not None:
        raise InputError("give seeds or replications, not both", where=str(p))
    seeds = spec.seeds or [sc.seed + i for i in range(spec.replications or 1)]
    grid_keys = list(spec.grid)
    zip_keys = list(spec.zip)
    zip_rows = list(zip(*spec.zip.values(), strict=True)) if zip_keys else [()]
    runs = []
    combos = itertools.product(itertools.product(*spec.grid.values()), zip_rows)
    for g, z in combos:
        params = tuple(zip(grid_keys, g, strict=True)) + tuple(zip(zip_keys, z, strict=True))
        for seed in seeds:
            fixed = tuple(spec.set.items())
            run_id = _digest({"base": base_hash, "set": fixed, "params": params, "seed": seed})
            runs.append(RunSpec(len(runs), run_id, str(base), params, fixed, seed))
    return Sweep(spec.name or p.stem, p, grid_keys + zip_keys, runs)


def _digest(obj: Any) -> str:
    text = json.dumps(obj, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def flat_summary(summary: dict[str, Any]) -> dict[str, Any]:
    """The scalar summary metrics, nested ones as ``parent.child`` (per-tier lists out)."""
    out: dict[str, Any] = {}
    for k, v in summary.items():
        if k == "tiers":
            continue
        if isinstance(v, dict):
            for k2, v2 in v.items():
                if not isinstance(v2, (dict, list)):
                    out[f"{k}.{k2}"] = v2
        elif not isinstance(v, list):
            out[k] = v
    return out


def run_one(spec: RunSpec) -> dict[str, Any]:
    """Run one sweep point; never raises: failures become the row's ``error``."""
    from kvsim import api

    row: dict[str, Any] = {
        "run": spec.index,
        "run_id": spec.run_id,
        **dict(spec.params),
        "seed": spec.seed,
        "status": "ok",
        "error": "",
    }
    try:
        res = api.run(spec.base, spec.overrides(), spec.seed)
        row.update(flat_summary(res.summary))
    except InputError as e:
        row.update(status="error", error=str(e))
    except Exception as e:  # a kvsim bug in one run must not stop the rest
        row.update(status="error", error=f"{type(e).__name__}: {e}")
    return row


def read_journal(out_dir: Path) -> dict[str, dict[str, Any]]:
    """Rows already finished, by run id (a torn last line from an interrupt is ignored)."""
    path = out_dir / JOURNAL
    done: dict[str, dict[str, Any]] = {}
    if not path.exists():
        return done
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue
            done[row["run_id"]] = row
    return done


def execute(todo: list[RunSpec], workers: int, scheduler: str | None) -> Iterator[dict[str, Any]]:
    """Rows as runs complete, on local processes or a Dask cluster."""
    if scheduler:
        try:
            from dask.distributed import Client, as_completed
        except ImportError:
            raise InputError(
                "Dask is not installed: pip install 'kvsim[cluster]'", where="--scheduler"
            ) from None
        _check_reachable(scheduler)
        try:
            client = Client(scheduler, timeout="10s")
        except OSError as e:
            raise InputError(
                f"cannot reach the Dask scheduler: {e}", where=f"--scheduler {scheduler}"
            ) from None
        try:
            futures = [
                client.submit(run_one, s, pure=False, key=f"kvsim-{s.run_id}-{s.index}")
                for s in todo
            ]
            for fut in as_completed(futures):
                yield fut.result()
        finally:
            client.close()
        return
    if workers <= 1:
        for s in todo:
            yield run_one(s)
        return
    with ProcessPoolExecutor(max_workers=workers) as pool:
        pending: set[Future] = {pool.submit(run_one, s) for s in todo}
        try:
            while pending:
                done, pending = wait(pending, return_when=FIRST_COMPLETED)
                for fut in done:
                    yield fut.result()
        finally:
            for fut in pending:
                fut.cancel()


def _check_reachable(address: str) -> None:
    """Fail fast (and clearly) when a tcp:// scheduler address refuses connections."""
    import socket
    from urllib.parse import urlsplit

    parts = urlsplit(address)
    if parts.scheme != "tcp" or not parts.hostname or not parts.port:
        return  # other protocols: let Dask judge
    try:
        socket.create_connection((parts.hostname, parts.port), timeout=5).close()
    except OSError as e:
        raise InputError(
            f"cannot reach the Dask scheduler: {e.strerror or e}", where=f"--scheduler {address}"
        ) from None


def run_sweep(
    sweep: Sweep,
    out_dir: str | os.PathLike[str],
    *,
    workers: int = 1,
    scheduler: str | None = None,
    retry_failed: bool = False,
    progress: Callable[[int, int], None] | None = None,
) -> pd.DataFrame:
    """Run the sweep's missing runs, journal each as it finishes, write the results table.

    ``progress(done, total)`` is called after each run. On KeyboardInterrupt the table of
    the runs finished so far is written before the interrupt propagates.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    done = read_journal(out)
    wanted = {r.run_id for r in sweep.runs}
    todo = [
        r
        for r in sweep.runs
        if r.run_id not in done or (retry_failed and done[r.run_id].get("status") != "ok")
    ]
    finished = len(sweep.runs) - len(todo)
    if progress:
        progress(finished, len(sweep.runs))
    try:
        with (out / JOURNAL).open("a", encoding="utf-8") as journal:
            for row in execute(todo, workers, scheduler):
                journal.write(json.dumps(row, default=str) + "\n")
                journal.flush()
                done[row["run_id"]] = row
                finished += 1
                if progress:
                    progress(finished, len(sweep.runs))
    finally:
        table = results_table(sweep, [done[i] for i in wanted if i in done])
        write_table(table, out)
    return table


def results_table(sweep: Sweep, rows: Iterable[dict[str, Any]]) -> pd.DataFrame:
    """Rows in expansion order; swept columns first, then the metrics."""
    df = pd.DataFrame(list(rows))
    if df.empty:
        return pd.DataFrame(columns=["run", "run_id", *sweep.columns, "seed", "status", "error"])
    index = {r.run_id: r.index for r in sweep.runs}
    df["run"] = df["run_id"].map(index)
    df = df.sort_values("run", kind="stable").reset_index(drop=True)
    first = ["run", "run_id", *sweep.columns, "seed", "status", "error"]
    rest = [c for c in df.columns if c not in first]
    df = df[[c for c in first if c in df.columns] + rest]
    for col in sweep.columns:  # one type per column, or Parquet refuses it
        values = df[col].dropna()
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
            df[col] = df[col].map(lambda v: v if isinstance(v, str) else json.dumps(v))
    return df


def write_table(df: pd.DataFrame, out: Path) -> None:
    """results.parquet and results.csv, each written whole then renamed into place."""
    for name, write in (
        (RESULTS, lambda p: df.to_parquet(p, index=False)),
        ("results.csv", lambda p: df.to_csv(p, index=False)),
    ):
        final = out / name
        tmp = out / f".{name}.tmp-{os.getpid()}"
        try:
            write(tmp)
            os.replace(tmp, final)
        finally:
            tmp.unlink(missing_ok=True)
