"""A gate's suite: the suite file's record (entries, seeds, metrics and their
tolerances, each metric's better direction) and the loaded :class:`Suite`, every entry
resolved (a sweep entry into one per configuration) and hashed the same from any checkout.
"""

from __future__ import annotations

import copy
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field

from kvsim import api
from kvsim.config.dump import scenario_identity
from kvsim.config.loader import load_record, with_sets
from kvsim.config.schema import Record, prompt_bounds
from kvsim.errors import InputError, clean
from kvsim.experiments.slo import DECODE, OUTCOMES, check_slo, parse_slo
from kvsim.experiments.sweep.files import absolute_paths, digest, scenario_files
from kvsim.experiments.sweep.spec import MAX_RUNS, Seed, counted, load_sweep

# fewer seeds than this give no usable 95% interval over seeds (Student-t with 1 degree of
# freedom is 12.7 standard errors wide): the gate then compares means, against the
# tolerance alone, and says so
MIN_SEEDS = 3


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
_HIGHER = ("hit_ratio", "requests_per_s", "tokens_per_s", "goodput_rps")


_LOWER = ("dropped", "recompute", "unfinished", "stalled", "timeouts", "blocked")


_EITHER = ("duration_s", "warmup_s")  # a run's own span: no better way


def default_direction(metric: str) -> Direction:
    """Which way a metric is better when the suite does not say: higher for the hit ratio
    and rates (``requests_per_s``, ``*tokens_per_s``, ``goodput_rps``); lower for times
    (``_s``), costs (``usd_*``) and lost work (dropped, recomputed, unfinished, stalled, timed out,
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
    slo: str | None = Field(
        None,
        description="an SLO its runs must meet, e.g. 'ttft_p99<=2s,tpot_p99<=50ms': kvsim "
        "check fails when the mean over seeds of a term misses it at a load point; its runs "
        "have goodput_rps (a metric the suite may gate)",
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
    # path relative to the suite's folder (kvsim.experiments.sweep.files.scenario_files)
    files: tuple[tuple[str, str], ...] = ()
    slo: str | None = None  # the SLO its runs must meet (kvsim check), if any


@dataclass
class Suite:
    name: str
    path: Path
    seeds: list[int]
    metrics: dict[str, Tolerance]
    entries: list[Entry]


def load_suite(path: str | os.PathLike[str], extra: dict[str, Any] | None = None) -> Suite:
    """Read a suite file; ``extra`` overrides apply to every entry (``kvsim check --set``)."""
    p = Path(path)
    spec = load_record(SuiteSpec, p, "suite")
    for m in spec.metrics:
        if m == "goodput_rps" and any(e.slo is None for e in spec.entries):
            raise InputError(
                "metrics.goodput_rps: every entry needs an slo: (goodput counts the requests "
                "within its bounds)",
                where=str(p),
            )
        if m not in OUTCOMES and m not in DECODE and m != "goodput_rps":
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
        slo = None if e.slo is None else parse_slo(e.slo, f"{where}.slo {e.slo}")
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
            if slo is not None:  # a term its runs cannot have: refused before any run
                check_slo(slo, sc)
            files = {_portable_path(f, p.parent): d for f, d in scenario_files(sc).items()}
            entries.append(
                Entry(
                    label or sc.name,
                    sc.name,
                    spath,
                    tuple(merged.items()),
                    tuple(e.loads),
                    digest(_portable(scenario_identity(sc), p.parent)),
                    tuple(sorted(files.items())),
                    e.slo,
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


def few_seeds_note(n: int) -> str:
    """What a suite of fewer than :data:`MIN_SEEDS` seeds says: it cannot gate on intervals."""
    return (
        f"{counted(n, 'seed')} per entry: too few for a 95% interval over seeds ({MIN_SEEDS} or "
        "more needed), so the gate cannot allow for noise between seeds: each metric's mean "
        "is compared with the baseline's against its tolerance alone (give 3 or more seeds "
        "and make a new baseline to gate on intervals)"
    )
