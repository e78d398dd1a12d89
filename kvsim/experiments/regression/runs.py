"""Measuring a suite: every entry at every load point with every seed, as the baseline
document (per metric its per-seed values, their mean and 95% interval) that ``kvsim
baseline`` records and ``kvsim check`` compares."""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from kvsim import api
from kvsim.errors import InputError
from kvsim.experiments.regression.suite import MIN_SEEDS, Suite, few_seeds_note
from kvsim.experiments.replicate import load_overrides, replication_overrides
from kvsim.experiments.slo import SLO, parse_slo
from kvsim.experiments.sweep.executor import execute, run_one
from kvsim.experiments.sweep.spec import RunSpec, counted
from kvsim.results.provenance import environment
from kvsim.results.uncertainty import mean_interval
from kvsim.version import __version__


def measure(
    suite: Suite,
    *,
    workers: int = 1,
    log: Callable[[str], None] = lambda _m: None,
    require_finite: bool = False,
) -> dict[str, Any]:
    """Run every entry at every load with every seed; return the baseline document.

    A metric with no value (NaN: no measured request, e.g. every request dropped) is kept
    as NaN, which fails :func:`~.comparison.compare`; with ``require_finite`` (``kvsim
    baseline``) it is an InputError instead, so that a baseline never records NaN."""
    specs: list[RunSpec] = []
    where: list[tuple[int, int]] = []  # (entry, load) of each run
    for ei, e in enumerate(suite.entries):
        sc = api.load(e.path, dict(e.overrides))
        for li, load in enumerate(e.loads):
            fixed = (
                *e.overrides,
                *load_overrides(sc, load).items(),
                *replication_overrides(sc, len(suite.seeds)).items(),
            )
            for seed in suite.seeds:
                specs.append(
                    RunSpec(len(specs), f"{ei}.{li}.{seed}", e.path, (), fixed, seed, slo=e.slo)
                )
                where.append((ei, li))
    points = sum(len(e.loads) for e in suite.entries)
    log(
        f"{counted(len(specs), 'run')}: {counted(points, 'load point')} "
        f"(of {counted(len(suite.entries), 'entry')}) "
        f"x {counted(len(suite.seeds), 'seed')}"
    )
    if len(suite.seeds) < MIN_SEEDS:
        log(f"note: {few_seeds_note(len(suite.seeds))}")
    values: dict[tuple[int, int], list[dict[str, Any]]] = {}
    rows = execute(specs, workers, None, runner=timed_run)
    seconds: dict[tuple[int, int], float] = {}  # wall time of each point's runs
    with contextlib.closing(rows):
        for row in rows:
            ei, li = where[row["run"]]
            e = suite.entries[ei]
            seconds[(ei, li)] = seconds.get((ei, li), 0.0) + float(row.pop(WALL, 0.0))
            if row["status"] != "ok":
                raise InputError(
                    f"entry {e.id!r} @ {e.loads[li]:g}x load: {row['error']}",
                    where=str(suite.path),
                )
            for m in suite.metrics:
                v = _number(row.get(m))
                if not row.get("requests"):  # a metric over no measured request has no value
                    v = math.nan
                if require_finite and not math.isfinite(v):
                    raise InputError(
                        f"entry {e.id!r} @ {e.loads[li]:g}x load, seed {row['seed']}: {m} has "
                        f"no value ({_why(row)}); a baseline never records NaN: change the "
                        "entry (load, warm-up, time limit) so that requests are measured",
                        where=str(suite.path),
                    )
                row[m] = v
            values.setdefault((ei, li), []).append(row)
    judged = {ei: parse_slo(e.slo) for ei, e in enumerate(suite.entries) if e.slo is not None}
    doc_entries = []
    for ei, e in enumerate(suite.entries):
        points = []
        for li, load in enumerate(e.loads):
            rows_here = sorted(values[(ei, li)], key=lambda r: r["seed"])
            metrics = {}
            for m in suite.metrics:
                vals = [float(r[m]) for r in rows_here]
                if all(math.isfinite(v) for v in vals):
                    # never below 0 (every metric is a time, ratio or rate); one seed has
                    # no interval: its bounds are its value
                    iv = mean_interval(vals)
                    mean = iv.mean
                    lo, hi = (iv.lo, iv.hi) if math.isfinite(iv.lo) else (mean, mean)
                else:
                    mean = lo = hi = math.nan
                metrics[m] = {"mean": mean, "lo": lo, "hi": hi, "values": vals}
            # (the time it took, for the reports: never compared)
            point = {"load": load, "metrics": metrics, "seconds": round(seconds[(ei, li)], 3)}
            if ei in judged:  # the entry's SLO on the means over seeds (kvsim check)
                point["slo"] = slo_point(judged[ei], rows_here)
            points.append(point)
        doc_entries.append(
            {
                "id": e.id,
                "scenario": e.scenario,
                "hash": e.digest,
                "files": dict(e.files),
                "overrides": dict(e.overrides),
                "points": points,
                **({"slo": e.slo} if e.slo is not None else {}),  # (kvsim check compares it)
            }
        )
    return {
        "suite": suite.name,
        "kvsim_version": __version__,
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "seeds": suite.seeds,
        "interval": "95% Student-t over seeds",
        # the code that measured (the entries' files have their digests): kvsim check
        # notes what differs from its own
        "provenance": environment(),
        "entries": doc_entries,
    }


def slo_point(slo: SLO, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """An entry's SLO at one load point: each term's metric as the mean over the seeds'
    runs (``values``), and whether every term holds on those means (``met``)."""
    means = {t.metric: sum(_number(t.value(r)) for r in rows) / len(rows) for t in slo.terms}
    return {"text": str(slo), "met": slo.met(means), "values": means}


WALL = "_wall_s"  # a row's wall-clock seconds (timed_run), taken out of it by measure


def timed_run(spec: RunSpec) -> dict[str, Any]:
    """:func:`~kvsim.experiments.sweep.executor.run_one`, with its wall-clock time in the row
    (:data:`WALL`): what the JUnit report gives as each check's time."""
    start = time.perf_counter()
    row = run_one(spec)
    row[WALL] = time.perf_counter() - start
    return row


def _number(value: Any) -> float:
    """A summary value as a float; NaN for a missing or non-numeric one."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return math.nan
    try:
        return float(value)
    except OverflowError:
        return math.inf


def _why(row: dict[str, Any]) -> str:
    if not row.get("requests"):
        return "no measured request: all dropped, unfinished or in the warm-up"
    return "NaN or infinite"
