"""A CI gate for TTFT curves: record a baseline, re-run, fail when a curve moves.

A suite file lists entries - a scenario, or every configuration of a sweep file - each
run at some load points (multiples of the scenario's own load) with a fixed set of seeds::

    name: kvsim-ci
    seeds: [0, 1, 2]
    metrics:                               # optional: these are the defaults
      ttft_p99_s: {rel: 0.10, abs: 0.02}
    entries:
      - scenario: ../scenarios/quickstart.yaml
        set: {workload.requests: 1500}
        loads: [0.5, 1.0, 2.0]
      - sweep: ../scenarios/sweeps/load-policy.yaml
        loads: [1.0]

``kvsim baseline`` stores, per entry and load point, each metric's mean over the seeds
with a 95% Student-t interval (a bootstrap percentile interval is too narrow with the
3-5 replications a CI job can afford), plus the kvsim version and a hash of each resolved
scenario. ``kvsim check`` re-runs and compares: a metric fails when the gap between the
new interval and the baseline's (0 when they overlap) exceeds its tolerance,
max(rel x |baseline mean|, abs). Same seeds give identical numbers, so an unchanged model
passes exactly. A baseline whose entries, load points or seeds differ from the suite's is
bad input; a changed scenario hash is reported (and is bad input with ``strict``).
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from xml.sax.saxutils import escape, quoteattr

from pydantic import Field

from kvsim import __version__
from kvsim.config.dump import scenario_to_dict
from kvsim.config.loader import load_record
from kvsim.config.schema import Record
from kvsim.errors import InputError
from kvsim.experiments.capacity import load_overrides
from kvsim.experiments.sweep import RunSpec, execute, load_sweep
from kvsim.results.metrics import NUMERIC, mean_ci95

BASELINE = "baseline.json"


class Tolerance(Record):
    rel: float = Field(0.05, ge=0, description="relative floor, of the baseline mean")
    abs: float = Field(0.0, ge=0, description="absolute floor, in the metric's unit")


DEFAULT_METRICS: dict[str, Tolerance] = {
    "ttft_p50_s": Tolerance(rel=0.05, abs=0.005),
    "ttft_p90_s": Tolerance(rel=0.05, abs=0.01),
    "ttft_p99_s": Tolerance(rel=0.10, abs=0.02),
    "gpu_busy_frac": Tolerance(rel=0.05, abs=0.005),
    "hit_ratio": Tolerance(rel=0.02, abs=0.005),
}


class EntrySpec(Record):
    scenario: str | None = Field(None, description="scenario file (relative to the suite)")
    sweep: str | None = Field(None, description="or a sweep file: one entry per configuration")
    name: str | None = Field(None, description="entry name (default: the scenario's)")
    set: dict[str, Any] = Field({}, description="overrides")
    loads: list[float] = Field([1.0], min_length=1, description="load multipliers")


class SuiteSpec(Record):
    name: str = ""
    seeds: list[int] = Field([0, 1, 2], min_length=1)
    metrics: dict[str, Tolerance] = Field(default_factory=lambda: dict(DEFAULT_METRICS))
    entries: list[EntrySpec] = Field(min_length=1)


@dataclass(frozen=True)
class Entry:
    """One curve: a scenario (with overrides) at several load points."""

    id: str
    scenario: str  # the scenario's own name
    path: str  # absolute scenario path
    overrides: tuple[tuple[str, Any], ...]
    loads: tuple[float, ...]
    digest: str  # hash of the resolved scenario


@dataclass
class Suite:
    name: str
    path: Path
    seeds: list[int]
    metrics: dict[str, Tolerance]
    entries: list[Entry]


def load_suite(path: str | os.PathLike[str], extra: dict[str, Any] | None = None) -> Suite:
    """Read a suite file; ``extra`` overrides apply to every entry (``kvsim check --set``)."""
    from kvsim import api

    p = Path(path)
    spec = load_record(SuiteSpec, p)
    for m in spec.metrics:
        if m not in NUMERIC:
            raise InputError(
                f"metrics.{m}: not a numeric summary metric; choose from {', '.join(NUMERIC)}",
                where=str(p),
            )
    entries: list[Entry] = []
    for i, e in enumerate(spec.entries):
        where = f"{p}: entries[{i}]"
        if (e.scenario is None) == (e.sweep is None):
            raise InputError("give scenario or sweep (one of them)", where=where)
        configs: list[tuple[str, dict[str, Any], str]] = []
        if e.scenario is not None:
            sp = (p.parent / e.scenario).resolve()
            configs.append((str(sp), dict(e.set), e.name or ""))
        else:
            sw = load_sweep(p.parent / e.sweep)  # type: ignore[operator]
            fixed = dict(sw.runs[0].fixed)
            for cfg in sw.configurations():
                label = ",".join(f"{k}={v}" for k, v in cfg.items())
                configs.append(
                    (sw.runs[0].base, {**fixed, **cfg, **e.set}, f"{e.name or sw.name}[{label}]")
                )
        for spath, overrides, label in configs:
            merged = {**overrides, **(extra or {})}
            sc = api.load(spath, merged)
            entries.append(
                Entry(
                    label or sc.name,
                    sc.name,
                    spath,
                    tuple(merged.items()),
                    tuple(e.loads),
                    _digest(_portable(scenario_to_dict(sc), p.parent)),
                )
            )
    ids = [e.id for e in entries]
    dup = next((x for x in ids if ids.count(x) > 1), None)
    if dup:
        raise InputError(f"two entries are named {dup!r}; give them names", where=str(p))
    return Suite(spec.name or p.stem, p, list(spec.seeds), dict(spec.metrics), entries)


def _portable(d: dict[str, Any], root: Path) -> dict[str, Any]:
    """A resolved scenario with its file paths relative to ``root`` (the suite's folder),
    so that a checkout elsewhere hashes the same scenario to the same digest."""
    d = copy.deepcopy(d)
    w = d.get("workload", {})
    for holder, key in ((w, "path"), (d, "profile")):
        value = holder.get(key)
        if isinstance(value, str) and os.path.isabs(value):
            holder[key] = Path(os.path.relpath(value, root)).as_posix()
    return d


def _digest(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:16]


def measure(
    suite: Suite, *, workers: int = 1, log: Callable[[str], None] = lambda _m: None
) -> dict[str, Any]:
    """Run every entry at every load with every seed; return the baseline document."""
    from kvsim import api

    specs: list[RunSpec] = []
    where: list[tuple[int, int]] = []  # (entry, load) of each run
    for ei, e in enumerate(suite.entries):
        sc = api.load(e.path, dict(e.overrides))
        for li, load in enumerate(e.loads):
            fixed = (*e.overrides, *load_overrides(sc, load).items())
            for seed in suite.seeds:
                specs.append(RunSpec(len(specs), f"{ei}.{li}.{seed}", e.path, (), fixed, seed))
                where.append((ei, li))
    log(f"{len(specs)} runs: {len(suite.entries)} entries x loads x {len(suite.seeds)} seeds")
    values: dict[tuple[int, int], list[dict[str, Any]]] = {}
    for row in execute(specs, workers, None):
        if row["status"] != "ok":
            e = suite.entries[where[row["run"]][0]]
            raise InputError(f"entry {e.id!r}: {row['error']}")
        values.setdefault(where[row["run"]], []).append(row)
    doc_entries = []
    for ei, e in enumerate(suite.entries):
        points = []
        for li, load in enumerate(e.loads):
            rows = sorted(values[(ei, li)], key=lambda r: r["seed"])
            metrics = {}
            for m in suite.metrics:
                vals = [float(r[m]) for r in rows]
                mean, half = mean_ci95(vals)
                metrics[m] = {"mean": mean, "lo": mean - half, "hi": mean + half, "values": vals}
            points.append({"load": load, "metrics": metrics})
        doc_entries.append(
            {
                "id": e.id,
                "scenario": e.scenario,
                "hash": e.digest,
                "overrides": dict(e.overrides),
                "points": points,
            }
        )
    return {
        "suite": suite.name,
        "kvsim_version": __version__,
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "seeds": suite.seeds,
        "interval": "95% Student-t over seeds",
        "entries": doc_entries,
    }


def write_baseline(doc: dict[str, Any], out_dir: str | os.PathLike[str]) -> Path:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    final = out / BASELINE
    tmp = out / f".{BASELINE}.tmp-{os.getpid()}"
    try:
        tmp.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
        os.replace(tmp, final)
    finally:
        tmp.unlink(missing_ok=True)
    return final


def read_baseline(path: str | os.PathLike[str]) -> dict[str, Any]:
    p = Path(path)
    f = p / BASELINE if p.is_dir() else p
    try:
        doc = json.loads(f.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError(
            "no baseline.json here (make one with `kvsim baseline`)", where=str(p)
        ) from None
    except json.JSONDecodeError as e:
        raise InputError(f"not a baseline: {e.msg} at line {e.lineno}", where=str(f)) from None
    if not isinstance(doc, dict) or "entries" not in doc:
        raise InputError("not a kvsim baseline", where=str(f))
    return doc


@dataclass
class Comparison:
    """One metric at one load point of one entry."""

    entry: str
    load: float
    metric: str
    base: dict[str, float]
    new: dict[str, float]
    tolerance: float

    @property
    def gap(self) -> float:
        """Distance between the two intervals (0 when they overlap)."""
        return max(self.new["lo"] - self.base["hi"], self.base["lo"] - self.new["hi"], 0.0)

    @property
    def failed(self) -> bool:
        return self.gap > self.tolerance

    @property
    def change(self) -> float:
        b = self.base["mean"]
        return (
            (self.new["mean"] - b) / abs(b) if b else (0.0 if self.new["mean"] == b else math.inf)
        )

    def line(self) -> str:
        """One line a person can act on."""
        unit = " s" if self.metric.endswith("_s") else ""
        return (
            f"{self.entry} @ {self.load:g}x load: {self.metric} {self.base['mean']:.4g}{unit}"
            f" -> {self.new['mean']:.4g}{unit} ({self.change:+.1%}); baseline 95% CI "
            f"[{self.base['lo']:.4g}, {self.base['hi']:.4g}], new [{self.new['lo']:.4g}, "
            f"{self.new['hi']:.4g}], gap {self.gap:.3g} > tolerance {self.tolerance:.3g}"
        )


@dataclass
class CheckResult:
    comparisons: list[Comparison]
    notes: list[str]

    @property
    def failures(self) -> list[Comparison]:
        return [c for c in self.comparisons if c.failed]


def compare(
    suite: Suite, baseline: dict[str, Any], new: dict[str, Any], *, strict: bool = False
) -> CheckResult:
    """Match the suite's entries to the baseline's and compare every metric."""
    notes = []
    base_entries = {e["id"]: e for e in baseline["entries"]}
    if baseline.get("seeds") != new["seeds"]:
        raise InputError(
            f"the baseline used seeds {baseline.get('seeds')}, the suite "
            f"{new['seeds']}; make a new baseline",
            where="--baseline",
        )
    if baseline.get("kvsim_version") != __version__:
        notes.append(
            f"baseline made by kvsim {baseline.get('kvsim_version')}, this is {__version__}"
        )
    comparisons = []
    for e in new["entries"]:
        b = base_entries.get(e["id"])
        if b is None:
            raise InputError(
                f"entry {e['id']!r} is not in the baseline (its entries: "
                f"{', '.join(base_entries)}); was it made from another suite?",
                where="--baseline",
            )
        if b["scenario"] != e["scenario"]:
            raise InputError(
                f"entry {e['id']!r}: the baseline was made from scenario "
                f"{b['scenario']!r}, the suite runs {e['scenario']!r}",
                where="--baseline",
            )
        if b["hash"] != e["hash"]:
            msg = (
                f"entry {e['id']!r}: scenario {e['scenario']!r} differs from the "
                f"baseline's (hash {b['hash']} -> {e['hash']})"
            )
            if strict:
                raise InputError(msg, where="--baseline")
            notes.append(msg)
        bpoints = {p["load"]: p for p in b["points"]}
        for p in e["points"]:
            bp = bpoints.get(p["load"])
            if bp is None:
                raise InputError(
                    f"entry {e['id']!r}: the baseline has no {p['load']:g}x load "
                    f"point (it has {sorted(bpoints)})",
                    where="--baseline",
                )
            for m, tol in suite.metrics.items():
                if m not in bp["metrics"]:
                    raise InputError(f"the baseline has no metric {m!r}", where="--baseline")
                base = bp["metrics"][m]
                tolerance = max(tol.rel * abs(base["mean"]), tol.abs)
                comparisons.append(
                    Comparison(e["id"], p["load"], m, base, p["metrics"][m], tolerance)
                )
    return CheckResult(comparisons, notes)


# ---- reports ---------------------------------------------------------------------------


def terminal_table(result: CheckResult, metrics: Sequence[str]) -> str:
    """Entry x load rows, a column per metric with its change and a mark."""
    rows: dict[tuple[str, float], dict[str, Comparison]] = {}
    for c in result.comparisons:
        rows.setdefault((c.entry, c.load), {})[c.metric] = c
    head = ["entry", "load", *metrics]
    body = []
    for (entry, load), cs in rows.items():
        cells = [entry, f"{load:g}x"]
        for m in metrics:
            c = cs[m]
            cells.append(f"{'FAIL' if c.failed else 'ok'} {c.change:+.1%}")
        body.append(cells)
    widths = [max(len(r[i]) for r in [head, *body]) for i in range(len(head))]
    lines = ["  ".join(x.ljust(w) for x, w in zip(r, widths, strict=True)) for r in [head, *body]]
    return "\n".join(lines)


def markdown_report(result: CheckResult, suite: Suite) -> str:
    status = "FAILED" if result.failures else "passed"
    lines = [
        f"# kvsim check: {suite.name} {status}",
        "",
        f"{len(result.comparisons)} comparisons, {len(result.failures)} regressions; "
        f"seeds {suite.seeds}; 95% Student-t intervals over seeds.",
        "",
    ]
    if result.notes:
        lines += ["Notes:", ""] + [f"- {n}" for n in result.notes] + [""]
    if result.failures:
        lines += ["## Regressions", ""] + [f"- {c.line()}" for c in result.failures] + [""]
    lines += [
        "## All comparisons",
        "",
        "| entry | load | metric | baseline | new | change | gap | tolerance | |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for c in result.comparisons:
        lines.append(
            f"| {c.entry} | {c.load:g}x | {c.metric} | {c.base['mean']:.4g} | "
            f"{c.new['mean']:.4g} | {c.change:+.1%} | {c.gap:.3g} | "
            f"{c.tolerance:.3g} | {'FAIL' if c.failed else 'ok'} |"
        )
    return "\n".join(lines) + "\n"


def junit_report(result: CheckResult, suite: Suite) -> str:
    """JUnit XML: a testsuite per entry, a testcase per load point and metric."""
    by_entry: dict[str, list[Comparison]] = {}
    for c in result.comparisons:
        by_entry.setdefault(c.entry, []).append(c)
    out = [
        '<?xml version="1.0" encoding="UTF-8"?>',
        f"<testsuites name={quoteattr('kvsim check ' + suite.name)} "
        f'tests="{len(result.comparisons)}" failures="{len(result.failures)}">',
    ]
    for entry, cs in by_entry.items():
        fails = sum(c.failed for c in cs)
        out.append(
            f'  <testsuite name={quoteattr(entry)} tests="{len(cs)}" '
            f'failures="{fails}" errors="0" skipped="0">'
        )
        for c in cs:
            name = quoteattr(f"{c.metric} @ {c.load:g}x load")
            out.append(f'    <testcase classname={quoteattr(entry)} name={name} time="0">')
            if c.failed:
                out.append(
                    f"      <failure message={quoteattr(c.line())} "
                    f'type="regression">{escape(c.line())}</failure>'
                )
            out.append("    </testcase>")
        out.append("  </testsuite>")
    out.append("</testsuites>")
    return "\n".join(out) + "\n"


def write_reports(result: CheckResult, suite: Suite, out_dir: str | os.PathLike[str]) -> list[Path]:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    md = out / "kvsim-check.md"
    xml = out / "kvsim-check.xml"
    md.write_text(markdown_report(result, suite), encoding="utf-8")
    xml.write_text(junit_report(result, suite), encoding="utf-8")
    return [md, xml]
