"""A CI gate for TTFT curves: record a baseline, re-run, fail when a curve moves.

A suite file lists entries - a scenario, or every configuration of a sweep file - each
run at some load points (multiples of the scenario's own load) with a fixed set of seeds::

    name: kvsim-ci
    seeds: [0, 1, 2]
    metrics:                               # optional: these are the defaults
      ttft_p99_s: {rel: 0.10, abs: 0.02}   # direction: lower (by name; see below)
    entries:
      - scenario: ../scenarios/quickstart.yaml
        set: {workload.requests: 1500}
        loads: [0.5, 1.0, 2.0]
        prompt_range: 0..32k               # optional: only these prompts are measured
      - sweep: ../scenarios/sweeps/load-policy.yaml
        loads: [1.0]

``kvsim baseline`` stores, per entry and load point, each metric's value on every seed
(``values``), their mean and 95% Student-t interval, plus the kvsim version, a hash of
each resolved scenario and a digest of the content of each file it reads by name (a
trace, plugin files: :func:`kvsim.experiments.sweep.scenario_files`), and the
``provenance`` of the code that measured (:func:`kvsim.results.provenance.environment`:
commit, core, Python and package versions), which ``kvsim check`` notes when it differs
from its own (never a failure).

``kvsim check`` re-runs the suite on the same seeds, hence the same workload draws
(common random numbers), and compares **paired** runs: per seed, d_i = new_i - base_i,
their mean ``delta`` and its 95% Student-t interval over the seeds
(:func:`kvsim.results.uncertainty.paired_interval`). A metric's tolerance is
max(rel x |baseline mean|, abs); its ``direction`` says which way is better
(:func:`default_direction`). A change is *significant* when |delta| exceeds the
tolerance and the interval excludes 0 (differences identical on every seed are exact:
beyond the tolerance suffices). A significant change is a REGRESSION (fails) in the
worse direction, IMPROVED (passes, said) in the better one, CHANGED (fails) for a
metric with no better direction. A move beyond the tolerance whose interval includes 0
passes as noise, said in a note with its minimum detectable change
(:func:`kvsim.results.uncertainty.detectable_change`: the true change the rule flags
with 80% power). Same seeds give identical numbers, so an unchanged model passes
exactly. A baseline whose entries, load points or seeds differ from the suite's is bad
input; a changed scenario hash or file is reported (and is bad input with ``strict``).

With fewer than :data:`MIN_SEEDS` seeds there is no usable interval (a two-seed baseline
once passed a +146% change in p99): both commands say so, and the gate compares the means
against the tolerance alone (direction-aware). A baseline without per-seed values (made
by an older kvsim) cannot be paired: the gap between the two intervals is compared, and
a note says so. ``kvsim baseline`` warns when a gated metric's minimum detectable change
is above :data:`POWER_LIMIT` of its mean (:func:`power_warnings`).

A metric with no value (NaN: no measured request, e.g. every request dropped) fails the
gate whatever its tolerance, and ``kvsim baseline`` refuses to record one: a baseline
holds finite numbers only. ``kvsim check`` reads and checks the whole baseline (every
field, and that it matches the suite) before it runs anything.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import hashlib
import json
import math
import os
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, Literal
from xml.sax.saxutils import escape, quoteattr

from pydantic import Field

from kvsim import __version__
from kvsim.config.dump import scenario_identity
from kvsim.config.loader import load_record, with_sets
from kvsim.config.schema import Record, prompt_bounds
from kvsim.errors import InputError, clean
from kvsim.experiments.capacity import OUTCOMES
from kvsim.experiments.replicate import PAIRED, load_overrides, replication_overrides
from kvsim.experiments.sweep import (
    MAX_RUNS,
    RunSpec,
    Seed,
    absolute_paths,
    counted,
    execute,
    load_sweep,
    run_one,
    scenario_files,
)
from kvsim.files import MAX_TABLE_BYTES, read_text
from kvsim.results.provenance import differences, environment
from kvsim.results.uncertainty import (
    IDENTICAL,
    Interval,
    bound_keys,
    detectable_change,
    mean_interval,
    paired_interval,
)

BASELINE = "baseline.json"
# fewer seeds than this give no usable 95% interval over seeds (Student-t with 1 degree of
# freedom is 12.7 standard errors wide): the gate then compares means, against the
# tolerance alone, and says so
MIN_SEEDS = 3
MAX_MAGNITUDE = 1e300  # a baseline number larger than this is damage, not a measurement
# `kvsim baseline` warns when a gated metric's minimum detectable change (80% power) is
# above this share of its mean: the suite's seeds cannot tell a change that size from noise
POWER_LIMIT = 0.10
# at baseline time there are no pairs: the differences' standard deviation is estimated by
# the seeds' own, which holds when a seed's runs before and after a change correlate at
# least 0.5 (Var(d) = 2 s^2 (1 - rho) <= s^2)
ESTIMATE = (
    "estimated from the seeds' standard deviation, which assumes that a seed's runs "
    "before and after a change correlate at least 0.5 (Var(d) = 2 s^2 (1 - rho))"
)
Direction = Literal["lower", "higher", "both"]


class Tolerance(Record):
    rel: float = Field(
        0.05, ge=0, allow_inf_nan=False, description="relative floor, of the baseline mean"
    )
    abs: float = Field(
        0.0, ge=0, allow_inf_nan=False, description="absolute floor, in the metric's unit"
    )
    direction: Direction | None = Field(
        None,
        description="which way is better: lower (a rise is a regression), higher (a fall "
        "is), both (any significant change fails); default by the metric's name",
    )


# higher is better for these; lower for times, costs and lost work (default_direction)
_HIGHER = ("hit_ratio", "requests_per_s", "tokens_per_s")
_LOWER = ("dropped", "recompute", "unfinished", "stalled", "timeouts", "blocked")
_EITHER = ("duration_s", "warmup_s")  # a run's own span: no better way


def default_direction(metric: str) -> Direction:
    """Which way a metric is better when the suite does not say: higher for the hit ratio
    and rates (``requests_per_s``, ``*tokens_per_s``); lower for times (``_s``), costs
    (``usd_*``) and lost work (dropped, recomputed, unfinished, stalled, timed out,
    blocked); otherwise both (a significant change either way fails: ``gpu_busy_frac``
    moves both ways for good reasons)."""
    if metric.endswith(_HIGHER):
        return "higher"
    if metric in _EITHER:
        return "both"
    if metric.endswith("_s") or metric.startswith("usd_") or any(w in metric for w in _LOWER):
        return "lower"
    return "both"


Load = Annotated[float, Field(gt=0, allow_inf_nan=False)]


DEFAULT_METRICS: dict[str, Tolerance] = {
    "ttft_p50_s": Tolerance(rel=0.05, abs=0.005),
    "ttft_p90_s": Tolerance(rel=0.05, abs=0.01),
    # between p90's and p99's: a higher percentile rests on fewer requests of the tail, so
    # it moves more between seeds (a judgement, like the others, not a measurement)
    "ttft_p95_s": Tolerance(rel=0.075, abs=0.015),
    "ttft_p99_s": Tolerance(rel=0.10, abs=0.02),
    "gpu_busy_frac": Tolerance(rel=0.05, abs=0.005),
    "hit_ratio": Tolerance(rel=0.02, abs=0.005),
}


class EntrySpec(Record):
    scenario: str | None = Field(None, description="scenario file (relative to the suite)")
    sweep: str | None = Field(None, description="or a sweep file: one entry per configuration")
    name: str | None = Field(None, description="entry name (default: the scenario's)")
    set: dict[str, Any] = Field({}, description="overrides")
    loads: list[Load] = Field([1.0], min_length=1, description="load multipliers (> 0)")
    prompt_range: str | None = Field(
        None,
        description="only measured requests whose prompt lies in LO..HI tokens count, e.g. "
        "0..32k (the override run.prompt_range)",
    )


class SuiteSpec(Record):
    name: str = ""
    seeds: list[Seed] = Field([0, 1, 2], min_length=1)
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
    # digest of the content of each file it reads by name (a trace, plugin files), by its
    # path relative to the suite's folder (kvsim.experiments.sweep.scenario_files)
    files: tuple[tuple[str, str], ...] = ()


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
    spec = load_record(SuiteSpec, p, "suite")
    for m in spec.metrics:
        if m not in OUTCOMES:
            raise InputError(
                f"metrics.{clean(m)}: not an outcome metric; choose from {', '.join(OUTCOMES)}",
                where=str(p),
            )
    if extra and "seed" in extra:
        raise InputError(
            "a suite runs every entry with each of its `seeds:`; the seed is not an "
            "override (change the suite's seeds and make a new baseline)",
            where=f"--set seed={clean(str(extra['seed']))}",
        )
    if len(set(spec.seeds)) < len(spec.seeds):
        raise InputError("seeds: a seed is listed twice", where=str(p))
    entries: list[Entry] = []
    runs = 0
    for i, e in enumerate(spec.entries):
        where = f"{p}: entries[{i}]"
        if (e.scenario is None) == (e.sweep is None):
            raise InputError("give scenario or sweep (one of them)", where=where)
        if "seed" in e.set:
            raise InputError(
                "set.seed: a suite runs every entry with each of its `seeds:`, not a seed of "
                "its own",
                where=where,
            )
        if len(set(e.loads)) < len(e.loads):
            raise InputError("loads: a load point is listed twice", where=where)
        configs: list[tuple[str, dict[str, Any], str]] = []
        # file names in `set` are relative to the suite file (as `scenario` is), never to
        # the current folder, so that a check run elsewhere runs (and hashes) the same files
        entry_set = absolute_paths(e.set, p.parent.resolve())
        if e.prompt_range is not None:
            if "run.prompt_range" in entry_set:
                raise InputError("give prompt_range or set run.prompt_range, not both", where=where)
            try:  # named here, at the suite's entry, not as a --set the user never gave
                prompt_bounds(e.prompt_range)
            except ValueError as bad:
                raise InputError(f"prompt_range: {bad}", where=where) from None
            entry_set["run.prompt_range"] = e.prompt_range
        if e.scenario is not None:
            sp = (p.parent / e.scenario).resolve()
            configs.append((str(sp), entry_set, e.name or ""))
        else:
            sw = load_sweep(p.parent / e.sweep)  # type: ignore[operator]
            fixed = dict(sw.set)
            for cfg in sw.configurations():
                label = ",".join(f"{k}={v}" for k, v in cfg.items())
                configs.append(
                    (
                        sw.runs[0].base,
                        {**fixed, **cfg, **entry_set},
                        f"{e.name or sw.name}[{label}]",
                    )
                )
        runs += len(configs) * len(e.loads) * len(spec.seeds)
        if runs > MAX_RUNS:  # counted before any scenario of the entry is loaded
            raise InputError(
                f"{runs:,} runs or more (entries x load points x seeds); kvsim runs at "
                f"most {MAX_RUNS:,} per suite",
                where=where,
            )
        for spath, overrides, label in configs:
            merged = with_sets(overrides, extra)  # --set over the entry's own
            sc = api.load(spath, merged)
            files = {_portable_path(f, p.parent): d for f, d in scenario_files(sc).items()}
            entries.append(
                Entry(
                    label or sc.name,
                    sc.name,
                    spath,
                    tuple(merged.items()),
                    tuple(e.loads),
                    _digest(_portable(scenario_identity(sc), p.parent)),
                    tuple(sorted(files.items())),
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
            holder[key] = _portable_path(value, root)
    if isinstance(d.get("plugins"), list):  # plugin files, by absolute path
        d["plugins"] = [_portable_path(v, root) if isinstance(v, str) else v for v in d["plugins"]]
    return d


def _portable_path(path: str, root: Path) -> str:
    """An absolute path relative to ``root`` (anything else as it is)."""
    if not os.path.isabs(path):
        return path
    try:
        return Path(os.path.relpath(path, root)).as_posix()
    except ValueError:  # another drive (Windows)
        return path


def _digest(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:16]


def measure(
    suite: Suite,
    *,
    workers: int = 1,
    log: Callable[[str], None] = lambda _m: None,
    require_finite: bool = False,
) -> dict[str, Any]:
    """Run every entry at every load with every seed; return the baseline document.

    A metric with no value (NaN: no measured request, e.g. every request dropped) is kept
    as NaN, which fails :func:`compare`; with ``require_finite`` (``kvsim baseline``) it is
    an InputError instead, so that a baseline never records NaN."""
    from kvsim import api

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
                specs.append(RunSpec(len(specs), f"{ei}.{li}.{seed}", e.path, (), fixed, seed))
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
            points.append(
                {"load": load, "metrics": metrics, "seconds": round(seconds[(ei, li)], 3)}
            )
        doc_entries.append(
            {
                "id": e.id,
                "scenario": e.scenario,
                "hash": e.digest,
                "files": dict(e.files),
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
        # the code that measured (the entries' files have their digests): kvsim check
        # notes what differs from its own
        "provenance": environment(),
        "entries": doc_entries,
    }


WALL = "_wall_s"  # a row's wall-clock seconds (timed_run), taken out of it by measure


def timed_run(spec: RunSpec) -> dict[str, Any]:
    """:func:`~kvsim.experiments.sweep.run_one`, with its wall-clock time in the row
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


def write_baseline(doc: dict[str, Any], out_dir: str | os.PathLike[str]) -> Path:
    """baseline.json as the folder ``out_dir``, all or nothing (kvsim.results.writers:
    staged beside it, swapped in when complete); NaN is refused here too."""
    from kvsim.results.writers import BASELINE_FILES, write_folder

    text = json.dumps(doc, indent=2, allow_nan=False) + "\n"  # ValueError: a kvsim bug
    (final,) = write_folder(
        out_dir,
        {BASELINE: lambda p: p.write_text(text, encoding="utf-8")},
        flag="--out",
        owned=BASELINE_FILES,
    )
    return final


def baseline_path(path: str | os.PathLike[str]) -> Path:
    """The baseline file of ``--baseline``: the folder's baseline.json, or the file."""
    p = Path(path)
    return p / BASELINE if p.is_dir() else p


def read_baseline(path: str | os.PathLike[str]) -> dict[str, Any]:
    """A baseline document, checked field by field (InputError naming the file and the
    field), so that ``kvsim check`` refuses a damaged one before running anything."""
    p = Path(path)
    f = baseline_path(p)
    if not os.path.lexists(f):
        raise InputError("no baseline.json here (make one with `kvsim baseline`)", where=str(p))
    text = read_text(f, what="baseline", max_bytes=MAX_TABLE_BYTES)
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise InputError(f"not a baseline: {e.msg}", where=f"{f}:{e.lineno}") from None
    except (ValueError, RecursionError) as e:
        reason = "nested too deeply" if isinstance(e, RecursionError) else str(e)
        raise InputError(f"not a baseline: {clean(reason)}", where=str(f)) from None
    check_baseline_doc(doc, str(f))
    return doc


def check_baseline_doc(doc: Any, where: str) -> None:
    """Every field :func:`compare` reads, with its type; finite numbers only."""

    def bad(field: str, what: str) -> None:
        raise InputError(f"{field}: {what}" if field else what, where=where)

    def kind(v: Any) -> str:
        names = {"str": "text", "dict": "an object", "list": "a list", "bool": "true/false"}
        return "null" if v is None else names.get(type(v).__name__, type(v).__name__)

    def need(obj: Any, key: str, typ: type | tuple[type, ...], field: str) -> Any:
        if not isinstance(obj, dict) or key not in obj:
            bad(field, "missing")
        v = obj[key]
        if isinstance(v, bool) or not isinstance(v, typ):
            names: dict[type, str] = {str: "text", list: "a list", dict: "an object"}
            want = names.get(typ, "a number") if isinstance(typ, type) else "a number"
            bad(field, f"expected {want}, got {kind(v)}")
        return v

    def finite(v: Any, field: str, positive: bool = False) -> float:
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            bad(field, f"expected a number, got {kind(v)}")
        try:
            x = float(v)
        except OverflowError:
            x = math.inf
        if not math.isfinite(x):
            bad(field, "not a finite number (a baseline never records NaN or infinity)")
        if abs(x) > MAX_MAGNITUDE:
            bad(field, f"{x:g} is out of range (a baseline number is within +-{MAX_MAGNITUDE:g})")
        if positive and x <= 0:
            bad(field, f"must be > 0, got {x:g}")
        return x

    if not isinstance(doc, dict):
        bad("", f"not a kvsim baseline (expected a JSON object, got {kind(doc)})")
    if "entries" not in doc:
        bad("", "not a kvsim baseline (no entries)")
    need(doc, "kvsim_version", str, "kvsim_version")
    if "provenance" in doc:  # (absent from a baseline made before kvsim recorded it)
        need(doc, "provenance", dict, "provenance")
    seeds = need(doc, "seeds", list, "seeds")
    for i, s in enumerate(seeds):
        if isinstance(s, bool) or not isinstance(s, int):
            bad(f"seeds[{i}]", f"expected an integer, got {kind(s)}")
    if "suite" in doc:
        need(doc, "suite", str, "suite")
    entries = need(doc, "entries", list, "entries")
    if not entries:
        bad("entries", "empty")
    ids: dict[str, int] = {}
    for i, e in enumerate(entries):
        fe = f"entries[{i}]"
        if not isinstance(e, dict):
            bad(fe, f"expected an object, got {kind(e)}")
        for key in ("id", "scenario", "hash"):
            need(e, key, str, f"{fe}.{key}")
        if "files" in e:  # (absent from a baseline made before kvsim recorded them)
            for name, digest in need(e, "files", dict, f"{fe}.files").items():
                if not isinstance(digest, str):
                    bad(f"{fe}.files.{clean(name, 80)}", f"expected text, got {kind(digest)}")
        if e["id"] in ids:
            bad(
                f"{fe}.id",
                f"entry {clean(e['id'], 80)!r} is listed twice (entries[{ids[e['id']]}])",
            )
        ids[e["id"]] = i
        points = need(e, "points", list, f"{fe}.points")
        loads: dict[float, int] = {}
        for j, pt in enumerate(points):
            fp = f"{fe}.points[{j}]"
            if not isinstance(pt, dict):
                bad(fp, f"expected an object, got {kind(pt)}")
            load = finite(need(pt, "load", (int, float), f"{fp}.load"), f"{fp}.load", positive=True)
            if load in loads:
                bad(
                    f"{fp}.load",
                    f"load point {load:g} is listed twice ({fe}.points[{loads[load]}])",
                )
            loads[load] = j
            metrics = need(pt, "metrics", dict, f"{fp}.metrics")
            for m, stats in metrics.items():
                fm = f"{fp}.metrics.{clean(m)}"
                if not isinstance(stats, dict):
                    bad(fm, f"expected an object, got {kind(stats)}")
                lo, mean, hi = (
                    finite(need(stats, k, (int, float), f"{fm}.{k}"), f"{fm}.{k}")
                    for k in ("lo", "mean", "hi")
                )
                if not lo <= mean <= hi:
                    bad(fm, f"expected lo <= mean <= hi, got {lo:g}, {mean:g}, {hi:g}")
                if "values" in stats:
                    vals = need(stats, "values", list, f"{fm}.values")
                    xs = [finite(v, f"{fm}.values[{k}]") for k, v in enumerate(vals)]
                    if len(xs) != len(seeds):
                        bad(
                            f"{fm}.values",
                            f"{len(xs)} values for {len(seeds)} seeds (one value per seed)",
                        )
                    avg = math.fsum(xs) / len(xs) if xs else mean
                    if not math.isclose(avg, mean, rel_tol=1e-9, abs_tol=1e-12):
                        bad(f"{fm}.mean", f"{mean:.17g} is not the mean of its values ({avg:.17g})")


def check_baseline(
    suite: Suite, baseline: dict[str, Any], *, strict: bool = False, where: str = "--baseline"
) -> list[str]:
    """Match the suite to a (checked) baseline before anything runs: the same seeds, every
    entry, scenario, load point and metric present. InputError on a mismatch; returns
    notes (a scenario whose hash changed, another kvsim version)."""
    notes = []
    if baseline.get("seeds") != list(suite.seeds):
        raise InputError(
            f"the baseline used seeds {clean(str(baseline.get('seeds')))}, the suite "
            f"{suite.seeds}; make a new baseline",
            where=where,
        )
    if "suite" in baseline and baseline["suite"] != suite.name:
        msg = (
            f"the baseline was made from suite {clean(str(baseline['suite']), 80)!r}, this "
            f"is suite {suite.name!r}"
        )
        if strict:
            raise InputError(msg + "; make a new baseline", where=where)
        notes.append(msg)
    if baseline.get("kvsim_version") != __version__:
        notes.append(
            f"baseline made by kvsim {clean(str(baseline.get('kvsim_version')))}, "
            f"this is {__version__}"
        )
    base_entries = {e["id"]: e for e in baseline["entries"]}
    for e in suite.entries:
        b = base_entries.get(e.id)
        if b is None:
            raise InputError(
                f"entry {e.id!r} is not in the baseline (its entries: "
                f"{clean(', '.join(base_entries), 200)}); was it made from another suite?",
                where=where,
            )
        if b["scenario"] != e.scenario:
            raise InputError(
                f"entry {e.id!r}: the baseline was made from scenario "
                f"{clean(b['scenario'])!r}, the suite runs {e.scenario!r}",
                where=where,
            )
        if b["hash"] != e.digest:
            msg = (
                f"entry {e.id!r}: scenario {e.scenario!r} differs from the "
                f"baseline's (hash {clean(b['hash'])} -> {e.digest})"
            )
            if strict:
                raise InputError(msg, where=where)
            notes.append(msg)
        for msg in _changed_files(e, b):
            if strict:
                raise InputError(msg, where=where)
            notes.append(msg)
        bpoints = {float(p["load"]): p for p in b["points"]}
        for load in e.loads:
            bp = bpoints.get(float(load))
            if bp is None:
                raise InputError(
                    f"entry {e.id!r}: the baseline has no {load:g}x load "
                    f"point (it has {clean(str(sorted(bpoints)), 120)})",
                    where=where,
                )
            for m in suite.metrics:
                if m not in bp["metrics"]:
                    raise InputError(
                        f"entry {e.id!r} @ {load:g}x load: the baseline has no metric {m!r}",
                        where=where,
                    )
    return notes


def _changed_files(e: Entry, b: dict[str, Any]) -> list[str]:
    """What differs between the files an entry reads now and those its baseline read (a
    trace or plugin file edited, added, gone), one message each."""
    now = dict(e.files)
    if "files" not in b:
        if not now:
            return []
        return [
            f"entry {e.id!r}: the baseline records no digests of the files it reads (made by "
            f"an older kvsim), so kvsim cannot tell whether {', '.join(sorted(now))} changed; "
            "make a new baseline"
        ]
    then = b["files"]
    out = []
    for name in sorted({*now, *then}):
        shown = clean(name, 200)
        if name not in then:
            out.append(f"entry {e.id!r}: reads {shown}, which the baseline's runs did not")
        elif name not in now:
            out.append(f"entry {e.id!r}: no longer reads {shown}, which the baseline's runs did")
        elif now[name] != then[name]:
            out.append(
                f"entry {e.id!r}: file {shown} changed since the baseline (content digest "
                f"{clean(then[name], 40)} -> {now[name]})"
            )
    return out


@dataclass
class Comparison:
    """One metric at one load point of one entry: the new runs against the baseline's.

    ``base`` and ``new`` hold the mean, the 95% interval (``lo``, ``hi``) and, from
    baselines that record them, the per-seed ``values``: with values on both sides the
    seeds are compared pair by pair (:attr:`paired`); without them (a baseline made by an
    older kvsim) the gap between the two intervals is."""

    entry: str
    load: float
    metric: str
    base: dict[str, Any]
    new: dict[str, Any]
    tolerance: float
    # fewer than MIN_SEEDS seeds: no usable interval, the means are compared
    means_only: bool = False
    # which way is better (Tolerance.direction); None: default_direction(metric)
    direction: Direction | None = None
    # wall-clock seconds of the check: its load point's new runs, shared by its metrics
    seconds: float = 0.0

    def __post_init__(self) -> None:
        if self.direction is None:
            self.direction = default_direction(self.metric)

    @property
    def missing(self) -> bool:
        """The new run gave this metric no value (NaN: e.g. every request was dropped)."""
        return not all(math.isfinite(self.new[k]) for k in ("mean", "lo", "hi"))

    @property
    def paired(self) -> bool:
        """Per-seed values on both sides, one per seed of the same seeds (common random
        numbers): the comparison is of per-seed differences."""
        b, n = self.base.get("values"), self.new.get("values")
        return (
            not self.means_only
            and isinstance(b, list)
            and isinstance(n, list)
            and len(b) == len(n) >= 2
        )

    @property
    def n(self) -> int:
        """Seeds paired (0 when the comparison is not paired)."""
        return len(self.base["values"]) if self.paired else 0

    @functools.cached_property
    def diff(self) -> Interval:
        """The per-seed differences new - base: their mean and 95% interval (paired), or
        the difference of the means with no interval."""
        if self.paired:
            return paired_interval(self.new["values"], self.base["values"])
        return Interval(self.new["mean"] - self.base["mean"], math.nan, math.nan, 0, "unpaired")

    @property
    def delta(self) -> float:
        """Mean change, new minus baseline, in the metric's unit."""
        return self.diff.mean

    @property
    def exact(self) -> bool:
        """Every seed moved by the same amount (a deterministic change, or a trace
        replayed as is): the difference is exact, it has no noise to allow for."""
        return self.paired and self.diff.note == IDENTICAL

    @property
    def sd(self) -> float:
        """Standard deviation of the per-seed differences (NaN unpaired)."""
        if not self.paired:
            return math.nan
        if self.exact:
            return 0.0
        d = [
            float(a) - float(b)
            for a, b in zip(self.new["values"], self.base["values"], strict=True)
        ]
        return statistics.stdev(d) if all(math.isfinite(x) for x in d) else math.nan

    @property
    def mdc_estimated(self) -> bool:
        """Nothing moved on any seed while the seeds differ: the differences say nothing
        of the noise a change would meet, so :attr:`mdc` comes from the baseline seeds'
        spread instead (:data:`ESTIMATE`)."""
        return self.exact and self.delta == 0 and len({float(v) for v in self.base["values"]}) > 1

    @property
    def mdc(self) -> float:
        """Minimum detectable change: the true change this comparison's rule flags with
        80% power (:func:`~kvsim.results.uncertainty.detectable_change`), in the metric's
        unit. The tolerance itself for exact differences; NaN when not paired (means
        compared with too few seeds, or a baseline without per-seed values)."""
        if not self.paired or self.missing:
            return math.nan
        sd = statistics.stdev(self.base["values"]) if self.mdc_estimated else self.sd
        return detectable_change(sd, self.n, self.tolerance)

    @property
    def mdc_rel(self) -> float:
        """:attr:`mdc` as a share of the baseline mean (NaN for a mean of 0)."""
        b = abs(self.base["mean"])
        return self.mdc / b if b else math.nan

    @property
    def gap(self) -> float:
        """Distance between the two intervals (0 when they overlap; inf with no value);
        between the two means with too few seeds for intervals. The rule of a baseline
        without per-seed values."""
        if self.missing:
            return math.inf
        if self.means_only:
            return abs(self.new["mean"] - self.base["mean"])
        return max(self.new["lo"] - self.base["hi"], self.base["lo"] - self.new["hi"], 0.0)

    @property
    def significant(self) -> bool:
        """A change the gate acts on: beyond the tolerance, and (paired) with a 95%
        interval that excludes 0; exact differences need only the tolerance, and so do
        means compared with too few seeds. Unpaired: the intervals' gap beyond it."""
        if self.missing:
            return True
        if not self.paired and not self.means_only:
            return not self.gap <= self.tolerance
        if not abs(self.delta) > self.tolerance:
            return False
        if self.means_only or self.exact:
            return True
        return self.diff.lo > 0 or self.diff.hi < 0

    @property
    def verdict(self) -> str:
        """``ok``, ``REGRESSION`` (worse), ``IMPROVED`` (better), ``CHANGED`` (a metric
        with no better direction) or ``no value``."""
        if self.missing:
            return "no value"
        if not self.significant:
            return "ok"
        if self.direction == "both":
            return "CHANGED"
        worse = self.delta > 0 if self.direction == "lower" else self.delta < 0
        return "REGRESSION" if worse else "IMPROVED"

    @property
    def failed(self) -> bool:
        return self.verdict in ("no value", "REGRESSION", "CHANGED")

    @property
    def improved(self) -> bool:
        return self.verdict == "IMPROVED"

    @property
    def within_noise(self) -> bool:
        """Passed although its mean moved beyond the tolerance: the paired interval
        includes 0 (or, unpaired, the seeds' intervals overlap): a change kvsim cannot
        tell from noise; reported, never silent."""
        return self.verdict == "ok" and not abs(self.delta) <= self.tolerance

    @property
    def change(self) -> float:
        b = self.base["mean"]
        return (
            (self.new["mean"] - b) / abs(b) if b else (0.0 if self.new["mean"] == b else math.inf)
        )

    def change_text(self) -> str:
        return "no value" if self.missing else f"{self.change:+.1%}"

    @property
    def unit(self) -> str:
        return " s" if self.metric.endswith("_s") else ""

    def interval_text(self) -> str:
        """The paired difference's 95% interval as the reports show it."""
        if self.missing:
            return "no value"
        if self.exact:
            return "exact"
        if self.paired:
            return f"[{self.diff.lo:+.3g}, {self.diff.hi:+.3g}]"
        return "none (too few seeds)" if self.means_only else "unpaired"

    def mdc_text(self) -> str:
        """The minimum detectable change, absolute and relative ("-" without one)."""
        if not math.isfinite(self.mdc):
            return "-"
        rel = f" ({self.mdc_rel:.0%})" if math.isfinite(self.mdc_rel) else ""
        return f"{self.mdc:.3g}{self.unit}{rel}{' est.' if self.mdc_estimated else ''}"

    def _head(self) -> str:
        return (
            f"{self.entry} @ {self.load:g}x load: {self.metric} {self.base['mean']:.4g}{self.unit}"
        )

    def line(self) -> str:
        """One line a person can act on."""
        head, unit = self._head(), self.unit
        if self.missing:
            return (
                f"{head} -> no value (NaN: no measured request, e.g. every request dropped "
                f"or unfinished); baseline 95% CI [{self.base['lo']:.4g}, {self.base['hi']:.4g}]"
            )
        moved = f"{head} -> {self.new['mean']:.4g}{unit} ({self.change:+.1%})"
        beyond = "beyond" if not abs(self.delta) <= self.tolerance else "within"
        if self.means_only:
            text = (
                f"{moved}; means compared (too few seeds for intervals), change "
                f"{self.delta:+.3g} {beyond} tolerance {self.tolerance:.3g}"
            )
        elif not self.paired:
            text = (
                f"{moved}; baseline 95% CI [{self.base['lo']:.4g}, {self.base['hi']:.4g}], new "
                f"[{self.new['lo']:.4g}, {self.new['hi']:.4g}], gap {self.gap:.3g} "
                f"{'>' if self.gap > self.tolerance else '<='} tolerance {self.tolerance:.3g} "
                "(unpaired: the baseline records no per-seed values)"
            )
        elif self.exact:
            text = (
                f"{moved}; paired difference {self.delta:+.4g}{unit} on each of {self.n} seeds "
                f"(exact), {beyond} tolerance {self.tolerance:.3g}"
            )
        else:
            text = (
                f"{moved}; paired difference {self.delta:+.4g}{unit}, 95% CI "
                f"[{self.diff.lo:+.4g}, {self.diff.hi:+.4g}] over {self.n} seeds, {beyond} "
                f"tolerance {self.tolerance:.3g}; minimum detectable change {self.mdc_text()}"
            )
        if self.improved:
            text += "; a new baseline would record it"
        elif self.verdict == "CHANGED":
            text += " (no better direction: set the metric's direction to gate one way)"
        return text

    def noise_line(self) -> str:
        """What a pass :attr:`within_noise` says."""
        head, unit = self._head(), self.unit
        moved = (
            f"{head} -> {self.new['mean']:.4g}{unit} ({self.change:+.1%}) moved beyond its "
            f"tolerance {self.tolerance:.3g}"
        )
        if not self.paired:
            return (
                f"{moved} but within the seeds' 95% intervals (baseline "
                f"[{self.base['lo']:.4g}, {self.base['hi']:.4g}], new [{self.new['lo']:.4g}, "
                f"{self.new['hi']:.4g}]): passed as noise; more seeds would tell"
            )
        return (
            f"{moved} but the paired difference's 95% interval [{self.diff.lo:+.4g}, "
            f"{self.diff.hi:+.4g}] includes 0: passed as noise (minimum detectable change with "
            f"{self.n} seeds: {self.mdc_text()}); more seeds would tell"
        )


@dataclass
class CheckResult:
    comparisons: list[Comparison]
    notes: list[str]
    # how the code that made the baseline differs from this one's (:func:`provenance_note`):
    # said, never a failure, and apart from the notes about the comparison itself
    provenance: list[str] = field(default_factory=list)

    @property
    def failures(self) -> list[Comparison]:
        return [c for c in self.comparisons if c.failed]

    @property
    def improvements(self) -> list[Comparison]:
        return [c for c in self.comparisons if c.improved]

    @property
    def paired(self) -> bool:
        """Whether any comparison is of per-seed pairs."""
        return any(c.paired for c in self.comparisons)


def compare(
    suite: Suite, baseline: dict[str, Any], new: dict[str, Any], *, strict: bool = False
) -> CheckResult:
    """Match the suite's entries to the baseline's and compare every metric, seed by seed
    (:class:`Comparison`). A metric the new runs gave no value (NaN) fails, whatever the
    tolerance."""
    check_baseline_doc(baseline, "--baseline")
    notes = check_baseline(suite, baseline, strict=strict)
    if baseline.get("seeds") != new["seeds"]:
        raise InputError(
            f"the baseline used seeds {baseline.get('seeds')}, the suite "
            f"{new['seeds']}; make a new baseline",
            where="--baseline",
        )
    base_entries = {e["id"]: e for e in baseline["entries"]}
    comparisons = []
    means_only = len(new["seeds"]) < MIN_SEEDS
    if means_only:
        notes.append(few_seeds_note(len(new["seeds"])))
    for e in new["entries"]:
        b = base_entries[e["id"]]
        bpoints = {float(p["load"]): p for p in b["points"]}
        for p in e["points"]:
            bp = bpoints[float(p["load"])]
            for m, tol in suite.metrics.items():
                base = bp["metrics"][m]
                tolerance = max(tol.rel * abs(base["mean"]), tol.abs)
                comparisons.append(
                    Comparison(
                        e["id"],
                        p["load"],
                        m,
                        base,
                        p["metrics"][m],
                        tolerance,
                        means_only,
                        tol.direction or default_direction(m),
                        float(p.get("seconds", 0.0)) / len(suite.metrics),
                    )
                )
    unpaired = sum(not c.paired for c in comparisons) if not means_only else 0
    if unpaired:
        notes.append(
            f"{counted(unpaired, 'comparison')} unpaired: the baseline records no per-seed "
            "values (made by an older kvsim), so the gap between the new and the baseline's "
            "95% intervals is compared; make a new baseline to compare seed by seed"
        )
    notes += [c.noise_line() for c in comparisons if c.within_noise]
    return CheckResult(comparisons, notes, provenance_note(baseline))


def provenance_note(baseline: dict[str, Any]) -> list[str]:
    """A note (a list of at most one) when the baseline's recorded provenance differs
    from this process's (:func:`kvsim.results.provenance.differences`: version, commit
    and uncommitted changes, core, Python, package versions): numbers may move for that
    reason alone. A baseline without provenance (an older kvsim's) gets none."""
    changed = differences(baseline.get("provenance"), environment())
    if not changed:
        return []
    return [
        "the baseline was made by other code than this check (provenance: "
        + "; ".join(changed)
        + "); differences may come from that"
    ]


def few_seeds_note(n: int) -> str:
    """What a suite of fewer than :data:`MIN_SEEDS` seeds says: it cannot gate on intervals."""
    return (
        f"{counted(n, 'seed')} per entry: too few for a 95% interval over seeds ({MIN_SEEDS} or "
        "more needed), so the gate cannot allow for noise between seeds: each metric's mean "
        "is compared with the baseline's against its tolerance alone (give 3 or more seeds "
        "and make a new baseline to gate on intervals)"
    )


def seeds_needed(sd: float, target: float, most: int = 100) -> int | None:
    """The fewest seeds whose minimum detectable change (tolerance 0) for differences of
    standard deviation ``sd`` is at most ``target``; None past ``most``."""
    for n in range(MIN_SEEDS, most + 1):
        if detectable_change(sd, n) <= target:
            return n
    return None


def power_warnings(doc: dict[str, Any], suite: Suite) -> list[str]:
    """What ``kvsim baseline`` warns about: one line per gated metric and load point whose
    minimum detectable change is above :data:`POWER_LIMIT` of its mean or above the
    metric's tolerance, saying how many seeds would bring it under each, then a count.

    There are no pairs yet: the differences' standard deviation is estimated by the seeds'
    own (:data:`ESTIMATE`). The change counted is the seeds' alone (tolerance 0): a
    tolerance is the suite's choice, the noise is what the seeds allow; a gate whose noise
    alone is above the tolerance decides by the noise, not by the tolerance. Nothing with
    fewer than :data:`MIN_SEEDS` seeds (no interval to have power; said elsewhere)."""
    n = len(doc["seeds"])
    if n < MIN_SEEDS:
        return []
    lines, total = [], 0
    for e in doc["entries"]:
        for pt in e["points"]:
            for m in suite.metrics:
                stats = pt["metrics"][m]
                vals = [float(v) for v in stats.get("values", [])]
                mean = float(stats["mean"])
                total += 1
                if len(vals) < 2 or mean == 0:
                    continue
                s = statistics.stdev(vals)
                mdc = detectable_change(s, n)
                unit = " s" if m.endswith("_s") else ""
                tol = suite.metrics[m]
                tolerance = max(tol.rel * abs(mean), tol.abs)
                over_limit = mdc > POWER_LIMIT * abs(mean)
                over_tol = mdc > tolerance
                if not (over_limit or over_tol):
                    continue
                tol_text = f"its tolerance {tolerance:.3g}{unit} ({tolerance / abs(mean):.0%})"
                above = " and ".join(
                    x for x, on in ((f"{POWER_LIMIT:.0%}", over_limit), (tol_text, over_tol)) if on
                )
                needs: dict[int | None, list[str]] = {}  # seeds -> what they bring it to
                for target, what, on in (
                    (tolerance, "under its tolerance", over_tol),
                    (POWER_LIMIT * abs(mean), f"to {POWER_LIMIT:.0%}", over_limit),
                ):
                    if on:
                        needs.setdefault(seeds_needed(s, target), []).append(what)
                more = [
                    f"about {need} seeds would bring it {' and '.join(what)}"
                    if need
                    else f"more than 100 seeds would be needed to bring it {' and '.join(what)}: "
                    "widen the entry (more requests) instead"
                    for need, what in needs.items()
                ]
                lines.append(
                    f"{e['id']} @ {float(pt['load']):g}x load: {m}: minimum detectable change "
                    f"{mdc:.3g}{unit} ({mdc / abs(mean):.0%} of the mean {mean:.4g}{unit}) "
                    f"with {n} seeds, above {above}: a smaller real change is caught "
                    f"less than 80% of the time ({ESTIMATE}); {'; '.join(more)}"
                )
    if lines:
        lines.append(
            f"{len(lines)} of {total} gated metrics (per entry and load point) cannot detect "
            f"a {POWER_LIMIT:.0%} change (or a change at their tolerance) with {n} seeds "
            "(minimum detectable change at 80% power above it; docs/ci-regression-gate.md "
            "says how many seeds to use)"
        )
    return lines


# ---- reports ---------------------------------------------------------------------------


def _mark(c: Comparison) -> str:
    if c.failed:
        return "FAIL"
    if c.improved:
        return "IMPR"
    return "noise" if c.within_noise else "ok"


def terminal_table(result: CheckResult, metrics: Sequence[str]) -> str:
    """Entry x load rows, a column per metric: a mark (ok, noise, IMPR, FAIL), the change
    of the mean and the minimum detectable change relative to the baseline mean."""
    rows: dict[tuple[str, float], dict[str, Comparison]] = {}
    for c in result.comparisons:
        rows.setdefault((c.entry, c.load), {})[c.metric] = c
    head = ["entry", "load", *metrics]
    body = []
    for (entry, load), cs in rows.items():
        cells = [entry, f"{load:g}x"]
        for m in metrics:
            c = cs[m]
            cell = f"{_mark(c)} {c.change_text()}"
            if not c.missing and math.isfinite(c.mdc_rel):
                cell += f" mdc {c.mdc_rel:.0%}"
            cells.append(cell)
        body.append(cells)
    widths = [max(len(r[i]) for r in [head, *body]) for i in range(len(head))]
    lines = ["  ".join(x.ljust(w) for x, w in zip(r, widths, strict=True)) for r in [head, *body]]
    if any(math.isfinite(c.mdc_rel) for c in result.comparisons):
        lines.append(
            "(change of the mean; mdc: minimum detectable change at 80% power, of the baseline "
            "mean; paired over the same seeds)"
        )
    return "\n".join(lines)


def report_lines(result: CheckResult) -> list[str]:
    """What ``kvsim check`` prints under its table: notes, one line per failure and per
    improvement, and the verdict."""
    out = [f"note: {n}" for n in (*result.provenance, *result.notes)]
    out += [
        f"{'REGRESSION' if c.verdict != 'CHANGED' else 'CHANGED'} {c.line()}"
        for c in result.failures
    ]
    out += [f"IMPROVED {c.line()}" for c in result.improvements]
    if result.paired:
        out.append(PAIRED)
    fails = len(result.failures)
    better = len(result.improvements)
    noise = sum(c.within_noise for c in result.comparisons)
    out.append(
        f"{'FAILED' if fails else 'passed'}: {fails} of "
        f"{counted(len(result.comparisons), 'comparison')} failed (a sure change beyond "
        "tolerance the worse way, or no value)"
        + (f"; {better} improved" if better else "")
        + (f"; {noise} moved beyond tolerance within noise (passed)" if noise else "")
    )
    return out


def _rule_text(suite: Suite) -> str:
    return (
        "A metric fails when its change is beyond its tolerance (max(rel x |baseline mean|, "
        "abs)) in its worse direction and the 95% interval of the paired differences "
        "excludes 0 (exact differences: beyond the tolerance suffices); the same in the "
        "better direction is an improvement (passes). MDC: minimum detectable change, the "
        "true change this rule flags with 80% power over "
        f"{counted(len(suite.seeds), 'seed')}."
    )


def markdown_report(result: CheckResult, suite: Suite) -> str:
    status = "FAILED" if result.failures else "passed"
    noise = sum(c.within_noise for c in result.comparisons)
    lines = [
        f"# kvsim check: {suite.name} {status}",
        "",
        f"{len(result.comparisons)} comparisons: {len(result.failures)} failed, "
        f"{len(result.improvements)} improved, {noise} moved within noise; seeds {suite.seeds}.",
        "",
    ]
    if result.paired:
        lines += [f"{PAIRED[0].upper()}{PAIRED[1:]}. {_rule_text(suite)}", ""]
    if result.notes or result.provenance:
        notes = [*result.provenance, *result.notes]
        lines += ["Notes:", ""] + [f"- {n}" for n in notes] + [""]
    if result.failures:
        lines += ["## Regressions", ""] + [f"- {c.verdict}: {c.line()}" for c in result.failures]
        lines += [""]
    if result.improvements:
        lines += [
            "## Improvements",
            "",
            "They pass; a new baseline (`kvsim baseline`) would record them.",
            "",
        ]
        lines += [f"- {c.line()}" for c in result.improvements] + [""]
    lines += [
        "## All comparisons",
        "",
        "| entry | load | metric | baseline | new | delta | 95% interval | MDC | tolerance "
        "| verdict |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for c in result.comparisons:
        verdict = "ok (within noise)" if c.within_noise else c.verdict
        new = "no value" if c.missing else f"{c.new['mean']:.4g}"
        delta = "" if c.missing else f"{c.delta:+.3g} ({c.change:+.1%})"
        lines.append(
            f"| {c.entry} | {c.load:g}x | {c.metric} | {c.base['mean']:.4g} | {new} | {delta} "
            f"| {c.interval_text()} | {c.mdc_text()} | {c.tolerance:.3g} | {verdict} |"
        )
    if any(c.mdc_estimated for c in result.comparisons):
        lines += ["", f"est.: nothing moved on any seed, so the MDC is {ESTIMATE}."]
    return "\n".join(lines) + "\n"


def _num(x: float) -> str:
    return repr(float(x)) if math.isfinite(x) else ""


def junit_report(result: CheckResult, suite: Suite) -> str:
    """JUnit XML: a testsuite per entry, a testcase per load point and metric, each with
    its figures as <properties> (delta, interval, MDC, tolerance, verdict); a failure
    message per regression, a <system-out> line per improvement or change within noise."""
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
            f'failures="{fails}" errors="0" skipped="0" '
            f'time="{sum(c.seconds for c in cs):.3f}">'
        )
        if result.paired:
            out += [
                "    <properties>",
                f'      <property name="comparison" value={quoteattr(PAIRED)}/>',
                "    </properties>",
            ]
        for c in cs:
            name = quoteattr(f"{c.metric} @ {c.load:g}x load")
            # the real time of the check: its point's runs (every seed), shared by its metrics
            out.append(
                f'    <testcase classname={quoteattr(entry)} name={name} time="{c.seconds:.3f}">'
            )
            props = {
                "verdict": "ok (within noise)" if c.within_noise else c.verdict,
                "baseline": _num(c.base["mean"]),
                "new": _num(c.new["mean"]),
                "delta": "" if c.missing else _num(c.delta),
                # its 95% interval as two numbers (empty without one; both the delta when
                # exact); the text form is the markdown report's
                **{
                    k: "" if v is None else _num(v)
                    for k, v in bound_keys("delta", None if c.missing else c.diff).items()
                },
                "mdc": _num(c.mdc),
                "mdc_rel": _num(c.mdc_rel),
                "tolerance": _num(c.tolerance),
                "direction": str(c.direction),
                "seeds": str(len(suite.seeds)),
            }
            out.append("      <properties>")
            out += [
                f"        <property name={quoteattr(k)} value={quoteattr(v)}/>"
                for k, v in props.items()
            ]
            out.append("      </properties>")
            if c.failed:
                kind = {"no value": "no-value", "CHANGED": "changed"}.get(c.verdict, "regression")
                out.append(
                    f"      <failure message={quoteattr(c.line())} "
                    f'type="{kind}">{escape(c.line())}</failure>'
                )
            elif c.improved or c.within_noise:
                text = f"IMPROVED {c.line()}" if c.improved else c.noise_line()
                out.append(f"      <system-out>{escape(text)}</system-out>")
            out.append("    </testcase>")
        out.append("  </testsuite>")
    out.append("</testsuites>")
    return "\n".join(out) + "\n"


def write_reports(result: CheckResult, suite: Suite, out_dir: str | os.PathLike[str]) -> list[Path]:
    from kvsim.results.writers import REPORT_FILES, write_folder

    md, xml = markdown_report(result, suite), junit_report(result, suite)
    return write_folder(
        out_dir,
        {
            "kvsim-check.md": lambda p: p.write_text(md, encoding="utf-8"),
            "kvsim-check.xml": lambda p: p.write_text(xml, encoding="utf-8"),
        },
        flag="--report",
        owned=REPORT_FILES,
    )
