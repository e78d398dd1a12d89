"""What a sweep file asks for: the file's record (:class:`SweepSpec`), its expansion into
runs in order (:class:`RunSpec`, each with its run id) and the loaded :class:`Sweep`, and
everything refused before any run (keys, repeated values, the run count, the reference
configuration, a policy name no plugin registers). A swept load scales the run's warm-up
and time limit with it; :func:`fixed_count_note` warns of a swept rate at a fixed count.
"""

from __future__ import annotations

import itertools
import json
import math
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field

from kvsim.api import load
from kvsim.config.dump import scenario_identity
from kvsim.config.loader import load_record
from kvsim.config.schema import ClosedArrivals, PosInt, Record, Scenario, SyntheticWorkload
from kvsim.errors import InputError, clean
from kvsim.experiments.replicate import replication_overrides, scaled_windows
from kvsim.experiments.slo import check_slo, parse_slo
from kvsim.experiments.sweep.fields import check_key, policy_and_its_parts
from kvsim.experiments.sweep.files import absolute_paths, config_files, digest
from kvsim.files import check_regular
from kvsim.plugins.failures import PluginError
from kvsim.plugins.registry import LABELS

MAX_RUNS = 100_000  # a sweep of more runs is refused before it is expanded
Seed = Annotated[int, Field(ge=0, strict=True)]


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """``n`` and the noun, singular or plural as ``n`` asks ("1 run", "2 runs", "1 entry",
    "3 entries", "1,000 runs")."""
    if n == 1:
        return f"1 {noun}"
    if plural is None:
        plural = (
            noun[:-1] + "ies" if noun.endswith("y") and noun[-2:-1] not in "aeiou" else noun + "s"
        )
    return f"{n:,} {plural}"


class SweepSpec(Record):
    """A sweep file."""

    name: str = Field("", description="sweep name (default: the file's stem)")
    base: str = Field(description="base scenario, relative to the sweep file")
    grid: dict[str, list[Any]] = Field({}, description="field path -> values; all combinations")
    zip: dict[str, list[Any]] = Field({}, description="field path -> values; advanced together")
    set: dict[str, Any] = Field({}, description="overrides applied to every run")
    seeds: list[Seed] | None = Field(None, min_length=1, description="seeds of every configuration")
    replications: PosInt | None = Field(None, description="or: seeds base, base+1, ...")
    reference: dict[str, Any] | None = Field(
        None,
        description="the configuration the others are compared with (paired differences "
        "per seed): swept field -> value, matching exactly one configuration; default: the "
        "first",
    )
    slo: str | None = Field(
        None,
        description="judge every run against an SLO, e.g. 'ttft_p99<=2s,tpot_p99<=50ms' "
        "(kvsim sweep --slo wins): columns slo_met, slo_met_<metric> per term, goodput_rps",
    )


@dataclass(frozen=True)
class RunSpec:
    """One run of a sweep: what a worker needs (picklable)."""

    index: int
    run_id: str
    base: str  # absolute path of the base scenario
    params: tuple[tuple[str, Any], ...]  # the swept values, in column order
    # the sweep's `set`, plus what its seeds and a swept load imply (a trace resampled
    # per seed; warm-up and time limit shrunk with the load)
    fixed: tuple[tuple[str, Any], ...]
    seed: int
    # keys of ``fixed`` applied after the swept values (what seeds and load imply), so that
    # a swept mapping holding one (a whole `workload`) does not undo it
    last: tuple[str, ...] = ()
    # how an error names each override (the sweep file's section); `--set` otherwise
    labels: tuple[tuple[str, str], ...] = ()
    slo: str | None = None  # the SLO each run is judged against (goodput_rps), if any

    def overrides(self) -> dict[str, Any]:
        fixed = dict(self.fixed)
        out = {**fixed, **dict(self.params)}
        for k in self.last:
            out.pop(k)
            out[k] = fixed[k]
        return out


@dataclass
class Sweep:
    """A loaded sweep file: its runs, in expansion order."""

    name: str
    path: Path
    columns: list[str]  # swept field paths
    runs: list[RunSpec]
    set: dict[str, Any]  # the sweep's `set` (paths made absolute)
    # configurations refused before any run (:func:`~.executor.run_sweep` raises the first):
    # a policy name none of its plugins registers, a plugin that cannot be imported (a command that
    # adds plugins of its own, `capacity --sweep --plugin`, loads each configuration again)
    refused: list[InputError] = field(default_factory=list)
    # the swept values of the configuration the others are compared with (the sweep
    # file's `reference:`); () for the first configuration
    reference: tuple[tuple[str, Any], ...] = ()

    def configurations(self) -> list[dict[str, Any]]:
        """The distinct parameter combinations (seeds folded), in order."""
        seen: dict[str, dict[str, Any]] = {}
        for r in self.runs:
            seen.setdefault(_params_key(r.params), dict(r.params))
        return list(seen.values())

    def configuration_of(self) -> dict[str, int]:
        """Each run's configuration (its position in :meth:`configurations`), by run id."""
        seen: dict[str, int] = {}
        return {r.run_id: seen.setdefault(_params_key(r.params), len(seen)) for r in self.runs}

    def reference_index(self) -> int:
        """Position, in :meth:`configurations`, of the configuration the others are
        compared with: the sweep file's ``reference:``, or the first."""
        if not self.reference:
            return 0
        keys = list(dict.fromkeys(_params_key(r.params) for r in self.runs))
        key = _params_key(self.reference)
        return keys.index(key) if key in keys else 0


def _params_key(params: tuple[tuple[str, Any], ...]) -> str:
    """A configuration's swept values as a dictionary key (a value may be a mapping)."""
    return json.dumps(params, sort_keys=True, default=str)


def load_sweep(
    path: str | os.PathLike[str], plugins: Sequence[str] = (), slo: str | None = None
) -> Sweep:
    """Read and expand a sweep file (InputError on a malformed one); ``plugins`` (from
    ``--plugin``) are added to every run's; ``slo`` (from ``--slo``) replaces the file's.

    Everything that does not depend on a run is checked before any run exists: the keys
    (scenario fields, not ``seed`` or a result column), the values (no empty list, no value
    twice), and the number of runs (at most :data:`MAX_RUNS`, counted before expanding)."""
    p = Path(path)
    where = str(p)
    spec = load_record(SweepSpec, p, "sweep")
    slo_text = slo if slo is not None else spec.slo
    judged = None
    if slo_text is not None:  # refused before any run
        judged = parse_slo(slo_text, None if slo is not None else f"{where}: slo {slo_text}")
    lengths = {len(v) for v in spec.zip.values()}
    if len(lengths) > 1:
        raise InputError(
            "zip: every list needs the same length; lengths: "
            + ", ".join(f"{k}: {len(v)}" for k, v in spec.zip.items()),
            where=where,
        )
    for section, values_of in (("grid", spec.grid), ("zip", spec.zip)):
        for key, values in values_of.items():
            if not values:
                raise InputError(f"{section}.{key}: needs at least one value", where=where)
            if section == "grid":
                _no_repeats(f"grid.{key}", values, where)
    for section in ("grid", "zip", "set"):
        for key in getattr(spec, section):
            check_key(section, key, where)
    if spec.zip:
        _no_repeats("zip", list(zip(*spec.zip.values(), strict=True)), where)
    overlap = (set(spec.grid) & set(spec.zip)) | ((set(spec.grid) | set(spec.zip)) & set(spec.set))
    if overlap:
        raise InputError(
            f"{sorted(overlap)[0]}: swept twice (grid, zip and set must not share fields)",
            where=where,
        )
    keys = sorted({*spec.grid, *spec.zip, *spec.set})
    for a, b in itertools.pairwise(keys):
        # sorted: a field and one inside it are neighbours. A policy's bare name in `set:`
        # and its params swept (or set) are one field given in two parts, as two --set
        if b.startswith(a + ".") and not policy_and_its_parts(a, b, spec.set):
            raise InputError(
                f"{b}: set twice ({a} already sets the whole of {a}; give one of them)",
                where=where,
            )
    if spec.seeds is not None and spec.replications is not None:
        raise InputError("give seeds or replications, not both", where=where)
    if spec.seeds is not None:
        _no_repeats("seeds", spec.seeds, where)
    n_seeds = len(spec.seeds) if spec.seeds is not None else (spec.replications or 1)
    n_zip = len(next(iter(spec.zip.values()))) if spec.zip else 1
    count = math.prod(len(v) for v in spec.grid.values()) * n_zip * n_seeds
    if count > MAX_RUNS:
        sizes = " x ".join(
            [f"{counted(len(v), 'value')} of {k}" for k, v in spec.grid.items()]
            + ([counted(n_zip, "zip row")] if spec.zip else [])
            + [counted(n_seeds, "seed")]
        )
        raise InputError(
            f"{counted(count, 'run')} ({sizes}); kvsim runs at most {MAX_RUNS:,} per sweep: "
            "split it into several sweep files",
            where=where,
        )
    base = (p.parent / spec.base).resolve()
    try:
        check_regular(base, what="scenario")
    except InputError as e:
        raise InputError(
            f"base: scenario {spec.base!r}: {e.reason} (looked for {base})", where=where
        ) from None
    # file names in values are relative to the sweep file (as `base` is), never to the
    # current folder: made absolute here, so that the run ids follow the files used
    folder = p.parent.resolve()
    fixed_set = absolute_paths(spec.set, folder)
    # how an error names each override: the sweep file's section, not `--set`
    labels = {k: f"{where}: set " for k in spec.set}
    if plugins:
        fixed_set["plugins"] = [*fixed_set.get("plugins", []), *plugins]
        labels.setdefault("plugins", "--plugin ")
    grid = {k: [absolute_paths({k: v}, folder)[k] for v in vs] for k, vs in spec.grid.items()}
    zipped = {k: [absolute_paths({k: v}, folder)[k] for v in vs] for k, vs in spec.zip.items()}
    labels.update({k: f"{where}: grid " for k in grid})
    labels.update({k: f"{where}: zip " for k in zipped})
    # the base with the sweep's `set`; it may need a swept value to be valid (a router that
    # a swept plugin registers), so its error is kept until every configuration is known
    set_error: InputError | None = None
    try:
        sc0: Scenario | None = _load_labelled(base, fixed_set, labels)
    except InputError as e:
        sc0, set_error = None, e
    grid_keys = list(grid)
    zip_keys = list(zipped)
    zip_rows = list(zip(*zipped.values(), strict=True)) if zip_keys else [()]
    # every configuration resolved before any run: the files it reads (hashed into its run
    # ids), its load, and the policy names it uses (a name no plugin of it registers is
    # refused now, not in each run); another bad swept value fails only its runs
    configs: list[tuple[tuple[tuple[str, Any], ...], Scenario | None]] = []
    refused: list[InputError] = []
    for g, z in itertools.product(itertools.product(*grid.values()), zip_rows):
        params = tuple(zip(grid_keys, g, strict=True)) + tuple(zip(zip_keys, z, strict=True))
        config = sc0
        if params:
            try:
                config = _load_labelled(base, {**fixed_set, **dict(params)}, labels)
            except InputError as e:
                if _refused_before_runs(e):
                    refused.append(e)
                config = None
        configs.append((params, config))
    reference = _reference(spec.reference, [p for p, _ in configs], folder, where)
    loaded = [c for _, c in configs if c is not None]
    if sc0 is None and not loaded:
        assert set_error is not None
        raise set_error
    ref = sc0 if sc0 is not None else loaded[0]  # the load the scenario's windows fit
    if judged is not None:  # a term no run can have (tpot of a prefill-mode run)
        for sc in loaded:
            check_slo(judged, sc)
    seeds = spec.seeds or [ref.seed + i for i in range(n_seeds)]
    # a base that is not valid alone: each run is identified by its resolved scenario
    base_hash = digest(scenario_identity(sc0)) if sc0 is not None else digest(str(base))
    given = [*fixed_set, *grid_keys, *zip_keys]  # what the sweep sets itself
    fixed = tuple(fixed_set.items())
    labelled = tuple(labels.items())
    runs: list[RunSpec] = []
    for params, config in configs:
        # after the swept values: several seeds of a trace replay resample it
        # (kvsim.experiments.capacity), and a swept load (an arrival rate, a time scale, or
        # a whole arrivals or workload mapping) shrinks the warm-up and time limit with it,
        # as a capacity search does, unless the sweep sets them itself
        after = dict(replication_overrides(config or ref, len(seeds)))
        factor = _load_factor(ref, config, [k for k, _ in params])
        if factor:
            windows = scaled_windows(ref, factor)
            after.update({k: v for k, v in windows.items() if not _covered(k, given)})
        both = fixed + tuple(after.items())
        files = config_files(config, sc0, params, folder, whole=sc0 is None)
        for seed in seeds:
            key: dict[str, Any] = {"base": base_hash, "set": both, "params": params, "seed": seed}
            if files:  # (a sweep that reads no file keeps the run ids it had)
                key["files"] = files
            if slo_text is not None:  # (a sweep without an SLO keeps the run ids it had)
                key["slo"] = slo_text
            runs.append(
                RunSpec(
                    len(runs),
                    digest(key),
                    str(base),
                    params,
                    both,
                    seed,
                    tuple(after),
                    labelled,
                    slo_text,
                )
            )
    return Sweep(spec.name or p.stem, p, grid_keys + zip_keys, runs, fixed_set, refused, reference)


def _reference(
    given: dict[str, Any] | None,
    configs: list[tuple[tuple[str, Any], ...]],
    folder: Path,
    where: str,
) -> tuple[tuple[str, Any], ...]:
    """The swept values of the configuration a sweep file's ``reference:`` names: its keys
    must be swept fields, and its values must match exactly one configuration (numbers
    compared as numbers: 1 is 1.0); () without one (the first configuration)."""
    if given is None:
        return ()
    swept = [k for k, _ in configs[0]] if configs else []
    if not given:
        raise InputError("reference: name the configuration, e.g. {field: value}", where=where)
    for key in given:
        if key not in swept:
            shown = ", ".join(swept) if swept else "none: a sweep of one configuration"
            raise InputError(
                f"reference.{json.dumps(key)[1:-1][:80]}: not a swept field (swept: {shown})",
                where=where,
            )
    want = {k: _plain_value(absolute_paths({k: v}, folder)[k]) for k, v in given.items()}
    found = [c for c in configs if all(_plain_value(dict(c)[k]) == v for k, v in want.items())]
    if len(found) != 1:
        shown = json.dumps(given, sort_keys=True, default=str)[:120]
        many = "no configuration" if not found else f"{len(found)} configurations"
        raise InputError(
            f"reference: {shown} matches {many}; it must match exactly one (give a value "
            "of each swept field that tells them apart)",
            where=where,
        )
    return found[0]


def _plain_value(value: Any) -> str:
    """A value as compared with a ``reference:`` value: JSON, numbers as floats."""

    def norm(v: Any) -> Any:
        if isinstance(v, bool) or v is None or isinstance(v, str):
            return v
        if isinstance(v, (int, float)):
            return float(v)
        if isinstance(v, dict):
            return {str(k): norm(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [norm(x) for x in v]
        return str(v)

    return json.dumps(norm(value), sort_keys=True)


# the fields through which a sweep changes a run's load (a swept mapping above one counts)
LOAD_FIELDS = ("workload.arrivals.rate", "workload.time_scale")


def _covered(path: str, keys: Iterable[str]) -> bool:
    """Whether one of ``keys`` sets the field ``path``: itself or a mapping holding it."""
    return any(path == k or path.startswith(k + ".") for k in keys)


def _load_factor(ref: Scenario, config: Scenario | None, swept: list[str]) -> float | None:
    """By how much a configuration's swept values scale the offered load of ``ref`` (the
    base with the sweep's set), read from the two resolved scenarios, so that a swept
    arrival rate, time scale, ``arrivals`` or whole ``workload`` mapping all count; None
    when nothing swept touches the load, or the two loads cannot be compared (another
    kind of workload)."""
    if config is None or not any(_covered(f, swept) for f in LOAD_FIELDS):
        return None
    a, b = ref.workload, config.workload
    if a.kind != b.kind:
        return None
    factor = a.time_scale / b.time_scale
    if isinstance(a, SyntheticWorkload) and isinstance(b, SyntheticWorkload):
        ra, rb = a.arrivals, b.arrivals
        if isinstance(ra, ClosedArrivals) or isinstance(rb, ClosedArrivals):
            return None  # (closed-loop arrivals have no rate: their load is the concurrency)
        factor *= rb.rate / ra.rate
    return factor if math.isfinite(factor) and factor > 0 else None


def _load_labelled(base: Path, overrides: dict[str, Any], labels: dict[str, str]) -> Scenario:
    """The base scenario with ``overrides``; an error names the override by the section
    of the sweep file that gave it (``s.yaml: grid cluster.router=x``), not ``--set``."""
    try:
        return load(base, overrides or None)
    except InputError as e:
        raise relabel(e, overrides, labels) from None


def relabel(e: InputError, overrides: dict[str, Any], labels: dict[str, str]) -> InputError:
    """``e`` with an override it names as ``--set KEY=...`` named by ``labels[KEY]``."""
    if e.where is None or not e.where.startswith("--set "):
        return e
    for k in overrides:
        if k in labels and e.where.startswith(clean(f"--set {k}=", 500)):
            return type(e)(e.reason, where=labels[k] + e.where[len("--set ") :])
    return e


def _refused_before_runs(e: InputError) -> bool:
    """A swept value refused before any run: a plugin that cannot be imported, or a
    policy name no plugin of the configuration registers (every run of it would fail the
    same way, as a command line's --set of it is refused at once)."""
    if isinstance(e, PluginError):
        return True
    reason = e.reason
    return "comes from plugin" in reason or any(
        f"unknown {label} '" in reason for label in LABELS.values()
    )


def _no_repeats(what: str, values: list[Any], where: str) -> None:
    seen: set[str] = set()
    for v in values:
        k = json.dumps(v, sort_keys=True, default=str)
        if k in seen:
            raise InputError(
                f"{what}: {k[:80]} is listed twice (each run would be the same run)",
                where=where,
            )
        seen.add(k)


RATE_PATH = "workload.arrivals.rate"


#: swept fields that change the arrival rate (a sweep of any leaves run lengths unequal)
RATE_FIELDS = frozenset({RATE_PATH, "workload.arrivals", "workload.time_scale"})


def fixed_count_note(sweep: Sweep) -> str | None:
    """A warning for a sweep that varies the arrival rate (``workload.arrivals.rate``)
    while the request count stays fixed: a run at a higher rate then spans less time, so
    its fill (warm-up, caches, sessions) is a larger share of it and the grid compares
    runs of different lengths as well as different rates (p95 falling as the rate rises).
    Any swept field that sets the rate counts (:data:`RATE_FIELDS`: the rate, the
    arrivals mapping that holds it, a trace's time scale). None when the count is swept
    too, or the workload has no count (a trace)."""
    swept = [c for c in sweep.columns if c in RATE_FIELDS]
    if not swept or "workload.requests" in sweep.columns or not sweep.runs:
        return None
    run = sweep.runs[0]
    try:
        sc = load(run.base, run.overrides())
    except InputError:  # (its runs fail with their own message)
        return None
    requests = getattr(sc.workload, "requests", None)
    if not isinstance(requests, int):
        return None
    return (
        f"the sweep varies {swept[0]} but leaves workload.requests fixed at {requests:,}: "
        "a run at a higher rate spans less time, so its warm-up and filling caches weigh "
        "more in it and the rows differ in run length as well as rate; sweep "
        "workload.requests in proportion (or compare loads with kvsim capacity)"
    )
