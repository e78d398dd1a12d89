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
    reference: {cluster.load_policy: sync}    # optional: compared with (default: the first)

Each run is identified by a hash of the resolved base scenario (its identity,
:func:`kvsim.config.dump.scenario_identity`: a new ``description`` alone resumes), its
overrides, its seed and the content of every file it reads by name (a trace, plugin
files and modules, a file a swept value names: :func:`scenario_files`), so that a changed
file is run again while an unchanged one keeps its runs. Every configuration is resolved
before any run: a swept load (an arrival rate, a time scale, a whole ``arrivals`` or
``workload`` mapping) scales the warm-up and time limit with it, and a policy name no
plugin of the configuration registers is refused then. Finished runs (successful or
not) are appended to ``runs.jsonl`` in the output folder as they complete, so re-running
the same command skips them: an interrupted sweep resumes without duplicates. At the end
``results.parquet`` and ``results.csv`` hold one row per run, in expansion order: the
swept values, the seed, ``status`` and ``error``, every scalar summary metric, the run's
own intervals (:data:`~kvsim.results.metrics.INTERVALS`, as numbers ``<value>_lo`` and
``<value>_hi``), and the
paired differences from the reference configuration (:func:`add_paired`: every
configuration runs the same seeds, so seed s of each saw the same workload draw). A
failing run is recorded with its error and does not stop the others. Runs execute on
local worker processes, or on a Dask cluster given its scheduler address
(``tcp://HOST:PORT``); each run is deterministic, so the rows do not depend on either.

What is refused before any run (exit 2): a key that is not a scenario field path, ``seed``
as a key (a sweep's seeds are ``seeds:`` or ``replications:``), a value listed twice, more
than :data:`MAX_RUNS` runs (counted, not expanded), a malformed or unreachable scheduler
address, a damaged journal line (named by file and line). A journal's torn last line (an
interrupted write) is cut off before new rows are appended; every row carries a checksum
of its content, so an edited row is refused too (delete its line to re-run that run).
Nothing is left before the first run finishes; the two tables are written whole, then
renamed, and only once every run has a row (an interrupted sweep keeps only its journal).
File names in ``set``/``grid``/``zip`` values are relative to the sweep file. One sweep
at a time writes a folder (a lock), and only a new, empty or sweep folder; the journal is
appended only to a regular file of that folder (never through a link). SIGTERM stops a
sweep like Ctrl-C, and worker processes exit when the sweep's process is gone, even after
SIGKILL.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import itertools
import json
import math
import os
import stat
import sys
import threading
from collections.abc import Callable, Generator, Iterable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, CancelledError, Future, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import pandas as pd
from pydantic import Field

from kvsim.config.dump import scenario_identity
from kvsim.config.loader import load_record
from kvsim.config.schema import REMOVED_FIELDS, PosInt, Record, Scenario, SyntheticWorkload
from kvsim.errors import InputError, clean
from kvsim.experiments.replicate import (
    replication_overrides,
    scaled_windows,
    stop_pool,
    worker_pool,
)
from kvsim.files import check_regular, is_regular, sha256_file, text_values
from kvsim.plugins import is_file_spec
from kvsim.results.metrics import INTERVALS, LEGACY_INTERVALS
from kvsim.results.writers import clean_leftovers

RESULTS = "results.parquet"
TABLES = (RESULTS, "results.csv")
JOURNAL = "runs.jsonl"
LOCK = ".kvsim-sweep.lock"  # held (flock) by the sweep writing the folder
#: what a sweep folder may hold (besides leftovers of interrupted writes): the journal, the
#: tables, what `kvsim plot` and `kvsim capacity --sweep --out` write there, and the lock
SWEEP_FILES = (
    JOURNAL,
    *TABLES,
    LOCK,
    "capacity.csv",
    *(f"{stem}.{ext}" for stem in ("ttft_vs_load", "capacity") for ext in ("png", "svg", "pdf")),
)
CHECK = "check"  # a journal row's checksum of its own content
MAX_RUNS = 100_000  # a sweep of more runs is refused before it is expanded
CONNECT_TIMEOUT = 10.0  # seconds for the Dask handshake (kvsim waits 1.5 times as long)
MAX_JOURNAL_LINE = 1 << 20  # bytes; a journal row is a few kB
# columns every row has; a swept field may not take one of these names
RESERVED = ("run", "run_id", "seed", "status", "error")
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
    # configurations refused before any run (:func:`run_sweep` raises the first): a policy
    # name none of its plugins registers, a plugin that cannot be imported (a command that
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


def load_sweep(path: str | os.PathLike[str], plugins: Sequence[str] = ()) -> Sweep:
    """Read and expand a sweep file (InputError on a malformed one); ``plugins`` (from
    ``--plugin``) are added to every run's.

    Everything that does not depend on a run is checked before any run exists: the keys
    (scenario fields, not ``seed`` or a result column), the values (no empty list, no value
    twice), and the number of runs (at most :data:`MAX_RUNS`, counted before expanding)."""
    p = Path(path)
    where = str(p)
    spec = load_record(SweepSpec, p, "sweep")
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
            _check_key(section, key, where)
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
        if b.startswith(a + ".") and not _policy_and_its_parts(a, b, spec.set):
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
    seeds = spec.seeds or [ref.seed + i for i in range(n_seeds)]
    # a base that is not valid alone: each run is identified by its resolved scenario
    base_hash = _digest(scenario_identity(sc0)) if sc0 is not None else _digest(str(base))
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
        files = _config_files(config, sc0, params, folder, whole=sc0 is None)
        for seed in seeds:
            key: dict[str, Any] = {"base": base_hash, "set": both, "params": params, "seed": seed}
            if files:  # (a sweep that reads no file keeps the run ids it had)
                key["files"] = files
            runs.append(
                RunSpec(
                    len(runs), _digest(key), str(base), params, both, seed, tuple(after), labelled
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
        factor *= b.arrivals.rate / a.arrivals.rate
    return factor if math.isfinite(factor) and factor > 0 else None


def _load_labelled(base: Path, overrides: dict[str, Any], labels: dict[str, str]) -> Scenario:
    """The base scenario with ``overrides``; an error names the override by the section
    of the sweep file that gave it (``s.yaml: grid cluster.router=x``), not ``--set``."""
    from kvsim.api import load

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
    from kvsim.plugins import LABELS, PluginError

    if isinstance(e, PluginError):
        return True
    reason = e.reason
    return "comes from plugin" in reason or any(
        f"unknown {label} '" in reason for label in LABELS.values()
    )


# ---- the files a run reads ---------------------------------------------------------------


def _config_files(
    config: Scenario | None,
    sc0: Scenario | None,
    params: tuple[tuple[str, Any], ...],
    folder: Path,
    *,
    whole: bool,
) -> dict[str, str]:
    """What identifies a configuration's runs beyond its overrides: the digests of the
    files it reads by name (:func:`scenario_files`), of any file a swept value names, and,
    when a swept value names one (whose content the loader takes in: a timing table, a
    profile) or the base is not valid alone (``whole``), of its resolved scenario."""
    files: dict[str, str] = {}
    scenario = config if config is not None else sc0
    if scenario is not None:
        files.update(scenario_files(scenario))
    named = {
        str(f): file_digest(f)
        for v in params
        for s in text_values(v[1])
        if (f := _file_named(s, folder)) is not None
    }
    files.update(named)
    if config is not None and (named or whole):
        files["(resolved scenario)"] = _digest(scenario_identity(config))
    return files


def scenario_files(sc: Scenario) -> dict[str, str]:
    """``{path: digest of its content}`` of every file a resolved scenario still reads by
    name: found generically, as every text value of the scenario (any field) that names an
    existing file (a trace, a plugin file, a profile file...), and the file of each plugin
    given as a module. (What the loader reads whole: ``extends`` bases, profiles, timing
    tables, is in the resolved scenario itself.) An unchanged file keeps its digest."""
    d = scenario_identity(sc)  # (a description names no file the run reads)
    root = Path(sc.source).parent if sc.source else Path.cwd()
    out: dict[str, str] = {}
    for s in text_values(d):
        f = _file_named(s, root)
        if f is not None:
            out[str(f)] = file_digest(f)
    for spec in d.get("plugins", []):
        if isinstance(spec, str) and not is_file_spec(spec):
            module = sys.modules.get(spec)
            origin = getattr(module, "__file__", None) if module is not None else None
            if isinstance(origin, str) and is_regular(origin):
                out[f"plugin module {spec}"] = file_digest(Path(origin))
    return out


def _file_named(text: str, root: Path) -> Path | None:
    """The existing regular file a text value names (relative to ``root``), if it looks
    like a file name (a folder separator or a suffix) and is one."""
    if not text or len(text) > 4096 or not text.isprintable():
        return None
    if "/" not in text and os.sep not in text and not Path(text).suffix:
        return None
    try:
        q = Path(os.path.expanduser(text))
        q = q if q.is_absolute() else root / q
    except (ValueError, RuntimeError):
        return None
    return q.absolute() if is_regular(q) else None


def file_digest(path: Path) -> str:
    """A digest of a file's content (the same for an unchanged file, whatever its times;
    each file read once per process: :func:`kvsim.files.sha256_file`)."""
    digest = sha256_file(path)
    return digest[:16] if digest is not None else "unreadable"


# scenario fields that name files, and are resolved against the file that sets them
PATH_FIELDS = (("workload", "path"), ("timing", "table"))


def absolute_paths(overrides: dict[str, Any], folder: Path) -> dict[str, Any]:
    """``overrides`` (field path -> value) with the relative file names they set (a trace,
    a timing table, a profile file, plugin files) made absolute against ``folder``, the
    folder of the file that wrote them, whether given as ``workload.path: x`` or
    ``workload: {path: x}``."""

    def fix(parts: tuple[str, ...], value: Any) -> Any:
        if isinstance(value, dict):
            return {k: fix((*parts, str(k)), v) for k, v in value.items()}
        if parts == ("plugins",) and isinstance(value, list):  # modules stay as they are
            return [str(folder / p) if isinstance(p, str) and is_file_spec(p) else p for p in value]
        if not isinstance(value, str) or not value:
            return value
        is_profile_file = parts == ("profile",) and value.endswith((".yaml", ".yml"))
        if parts in PATH_FIELDS or is_profile_file:
            q = Path(os.path.expanduser(value))
            return value if q.is_absolute() else str(folder / q)
        return value

    return {k: fix(tuple(k.split(".")), v) for k, v in overrides.items()}


def _check_key(section: str, key: str, where: str) -> None:
    """A swept or set key must be a scenario field path (and not ``seed``: the seeds of a
    sweep are its ``seeds`` or ``replications``, which every run's row records)."""
    from kvsim.config.schema import Scenario

    parts = key.split(".")
    shown = json.dumps(key)[1:-1][:80]  # control characters escaped, length bounded
    if key == "seed":
        raise InputError(
            f"{section}.seed: a sweep sets its seeds with `seeds: [...]` or "
            "`replications: N` (every configuration runs with each seed), not as a field",
            where=where,
        )
    if not all(part.strip() for part in parts):
        raise InputError(f"{section}.{shown}: empty field name in the path", where=where)
    if any(part != part.strip() for part in parts):
        raise InputError(f"{section}.{shown}: spaces around a field name", where=where)
    if parts[0] not in Scenario.model_fields or parts[0] == "source":
        raise InputError(
            f"{section}.{shown}: not a scenario field (top-level fields: "
            f"{', '.join(f for f in Scenario.model_fields if f not in ('seed', 'source'))})",
            where=where,
        )
    _check_below(section, parts, shown, where)


def _check_below(section: str, parts: list[str], shown: str, where: str) -> None:
    """A key must not go below a field that holds one value (``seed.x``, ``name.y``,
    ``cluster.engines.z``) nor name a field its record does not have: every run would
    fail, so the sweep is refused before any."""
    import types
    import typing

    from pydantic import BaseModel

    from kvsim.config.schema import Scenario

    def models(annotation: Any) -> list[type[BaseModel]] | None:
        """The records a field may hold; None when kvsim cannot tell (a mapping, say);
        [] for a field holding one value."""
        origin = typing.get_origin(annotation)
        if origin is typing.Annotated:
            return models(typing.get_args(annotation)[0])
        if origin in (typing.Union, types.UnionType):
            found: list[type[BaseModel]] = []
            for arg in typing.get_args(annotation):
                if arg is type(None):
                    continue
                inner = models(arg)
                if inner is None:
                    return None
                found += inner
            return found
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            return [annotation]
        if origin in (dict, typing.Mapping) or annotation is Any or annotation is dict:
            return None
        return []  # a number, a text, a list: nothing below it

    current: list[type[BaseModel]] | None = [Scenario]
    for depth, part in enumerate(parts):
        if current is None:
            return
        if not current:
            above = ".".join(parts[:depth])
            raise InputError(
                f"{section}.{shown}: {above} holds a single value, with no fields below it",
                where=where,
            )
        fields = [m.model_fields[part] for m in current if part in m.model_fields]
        gone = REMOVED_FIELDS.get((parts[depth - 1], part)) if depth else None
        if not fields and gone is not None:  # a field kvsim used to have: say what replaces it
            raise InputError(f"{section}.{shown}: {gone}", where=where)
        if not fields:
            raise InputError(
                f"{section}.{shown}: {'.'.join(parts[:depth]) or 'the scenario'} has no "
                f"field {json.dumps(part)[1:-1][:40]!r}",
                where=where,
            )
        nxt: list[type[BaseModel]] = []
        for f in fields:
            inner = models(f.annotation)
            if inner is None:
                current = None
                break
            nxt += inner
        else:
            current = nxt


def _policy_and_its_parts(field: str, inner: str, fixed: Mapping[str, Any]) -> bool:
    """Does `set:` give the policy field ``field`` as a bare name, and ``inner`` one of
    its parts (``field.params.x`` or ``field.name``)? The name then becomes ``{name:
    NAME}`` and the part goes in (kvsim.config.loader.apply_overrides), as with two
    ``--set``."""
    from kvsim.config.schema import POLICY_FIELDS

    part = inner[len(field) + 1 :].split(".", 1)[0]
    return (
        tuple(field.split(".")) in POLICY_FIELDS
        and isinstance(fixed.get(field), str)
        and part in ("params", "name")
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


def _digest(obj: Any) -> str:
    text = json.dumps(obj, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def flat_summary(summary: dict[str, Any]) -> dict[str, Any]:
    """The scalar summary metrics, nested ones as ``parent.child`` (per-tier lists out),
    and the run's 95% intervals (:data:`~kvsim.results.metrics.INTERVALS`) as the summary
    holds them, two numbers beside their value: ``ttft_p50_s_lo``, ``ttft_p50_s_hi``, ...
    (:func:`~kvsim.results.uncertainty.bound_keys`; NaN without one, a column of numbers).
    An older kvsim's summary's ``[lo, hi]`` lists (``ttft_p50_ci_s``...:
    :data:`~kvsim.results.metrics.LEGACY_INTERVALS`) become the same two numbers."""
    out: dict[str, Any] = {}
    for k, v in summary.items():
        if k in ("tiers", "provenance"):  # per-tier lists; no provenance column either
            continue
        if isinstance(v, dict):
            for k2, v2 in v.items():
                if not isinstance(v2, (dict, list)):
                    out[f"{k}.{k2}"] = v2
        elif k in LEGACY_INTERVALS:
            out.update(_bounds_of(LEGACY_INTERVALS[k], v))
        elif k in _BOUNDS:
            out[k] = math.nan if v is None else v
        elif not isinstance(v, list):
            out[k] = v
    return out


_BOUNDS = frozenset(key for pair in INTERVALS.values() for key in pair)


def _bounds_of(name: str, raw: Any) -> dict[str, Any]:
    """A run's interval (a list [lo, hi], or an older journal's JSON text of one) as
    ``name_lo``, ``name_hi`` (NaN without one: a column of numbers)."""
    from kvsim.results.uncertainty import bound_keys

    try:
        lo, hi = json.loads(raw) if isinstance(raw, str) else raw
        bounds = (float(lo), float(hi))
    except (TypeError, ValueError):
        bounds = None
    return {k: math.nan if v is None else v for k, v in bound_keys(name, bounds).items()}


def run_one(spec: RunSpec) -> dict[str, Any]:
    """Run one sweep point; never raises: failures become the row's ``error``."""
    from kvsim import api

    row = _row(spec)
    try:
        res = api.run(spec.base, spec.overrides(), spec.seed)
        row.update(flat_summary(res.summary))
    except InputError as e:
        row.update(status="error", error=str(relabel(e, spec.overrides(), dict(spec.labels))))
    except Exception as e:  # a kvsim bug in one run must not stop the rest
        row.update(status="error", error=f"{type(e).__name__}: {e}")
    return row


def _row(spec: RunSpec, status: str = "ok", error: str = "") -> dict[str, Any]:
    """The columns every row of a run starts with (an ``error`` row: a run that could not
    report its own failure)."""
    head: dict[str, Any] = {"run": spec.index, "run_id": spec.run_id, **dict(spec.params)}
    return {**head, "seed": spec.seed, "status": status, "error": error}


def read_journal(out_dir: Path) -> dict[str, dict[str, Any]]:
    """Rows already finished, by run id (see :func:`read_journal_lines`)."""
    return {k: row for k, (_, row) in read_journal_lines(out_dir).items()}


def read_journal_lines(out_dir: Path) -> dict[str, tuple[int, dict[str, Any]]]:
    """Rows already finished, by run id, with their line numbers (the last row of a run
    wins: ``--retry-failed`` appends a run's new row).

    Every row carries a checksum of its content: a row edited by hand (a metric, a seed, a
    status), or one without a checksum, is refused by file and line, for a person to
    delete it (its run is then done again).

    A last line without its newline is a write torn by an interrupt: it is left out here
    (and :func:`repair_journal` cuts it off before new rows are appended). Any other line
    that is not a JSON object with a ``run_id`` is damage a person must look at: an
    InputError naming the file and line."""
    path = out_dir / JOURNAL
    done: dict[str, tuple[int, dict[str, Any]]] = {}
    if not os.path.lexists(path):
        return done
    check_regular(path, what="sweep journal")
    try:
        with path.open("rb") as fh:
            lineno = 0
            while True:
                raw = fh.readline(MAX_JOURNAL_LINE + 1)
                if not raw:
                    break
                lineno += 1
                where = f"{path}:{lineno}"
                if len(raw) > MAX_JOURNAL_LINE:
                    raise InputError(f"a journal line over {MAX_JOURNAL_LINE:,} bytes", where=where)
                torn = not raw.endswith(b"\n")
                row = _journal_row(raw, where, torn=torn)
                if row is not None:
                    done[row["run_id"]] = (lineno, row)
    except OSError as e:
        raise InputError(f"cannot read: {e.strerror or e}", where=str(path)) from None
    return done


def _journal_row(raw: bytes, where: str, *, torn: bool) -> dict[str, Any] | None:
    """One journal line as a row; None for a blank line or a torn (unterminated) tail."""
    try:
        text = raw.decode("utf-8-sig")  # a BOM (a journal saved by an editor) is dropped
    except UnicodeDecodeError as e:
        if torn:
            return None
        raise InputError(f"not UTF-8 text ({e.reason})", where=where) from None
    if not text.strip():
        return None
    try:
        row = json.loads(text)
    except (ValueError, RecursionError) as e:
        if torn:
            return None
        reason = e.msg if isinstance(e, json.JSONDecodeError) else type(e).__name__
        raise InputError(
            f"not a JSON row ({reason}); a damaged sweep journal: delete this line to "
            "re-run its run",
            where=where,
        ) from None
    if not isinstance(row, dict):
        if torn:
            return None
        raise InputError(
            f"a journal row must be a JSON object, got {type(row).__name__}", where=where
        )
    for key in ("run_id", "status"):
        if not isinstance(row.get(key), str):
            if torn:
                return None
            raise InputError(f"a journal row needs a text {key!r}", where=where)
    redo = "delete this line to re-run that run"
    if not isinstance(row.get(CHECK), str):
        if torn:
            return None
        raise InputError(
            f"a journal row without its checksum (written by hand, or by an older kvsim); {redo}",
            where=where,
        )
    if row[CHECK] != _row_check(row):
        if torn:
            return None
        raise InputError(
            f"this row was edited or damaged (its checksum does not match its content); {redo}",
            where=where,
        )
    if row["status"] not in ("ok", "error"):
        raise InputError(
            f"status {clean(row['status'], 40)!r} is neither ok nor error; {redo}", where=where
        )
    del row[CHECK]
    return row


def _row_check(row: dict[str, Any]) -> str:
    """The checksum a journal row carries: of its content, as JSON, without the checksum."""
    return _digest({k: v for k, v in row.items() if k != CHECK})


def journal_line(row: dict[str, Any]) -> str:
    """A row as a journal line, with its checksum (computed on what reading it gives back)."""
    plain = json.loads(json.dumps(row, default=str))
    plain.pop(CHECK, None)
    plain[CHECK] = _row_check(plain)
    return json.dumps(plain) + "\n"


def repair_journal(path: Path) -> None:
    """Make the journal end at a line boundary before rows are appended to it: a torn tail
    (an interrupted write) is cut off, a complete last row missing its newline gets one."""
    try:
        with path.open("rb+") as fh:
            size = fh.seek(0, os.SEEK_END)
            if size == 0:
                return
            fh.seek(size - 1)
            if fh.read(1) == b"\n":
                return
            # find the start of the last line
            pos = size
            start = 0
            while pos > 0:
                step = min(65536, pos)
                pos -= step
                fh.seek(pos)
                chunk = fh.read(step)
                i = chunk.rfind(b"\n")
                if i >= 0:
                    start = pos + i + 1
                    break
            fh.seek(start)
            tail = fh.read()
            if _journal_row(tail, str(path), torn=True) is not None:
                fh.seek(0, os.SEEK_END)
                fh.write(b"\n")
            else:
                fh.truncate(start)
    except FileNotFoundError:
        return
    except OSError as e:
        raise InputError(f"cannot write: {e.strerror or e}", where=str(path)) from None


def parse_scheduler(address: str) -> tuple[str, int]:
    """(host, port) of a Dask scheduler address ``tcp://HOST:PORT`` (or ``HOST:PORT``);
    anything else is refused before any work (other protocols need settings kvsim does
    not pass, and ``inproc://`` only reaches schedulers inside the same process)."""
    from urllib.parse import urlsplit

    shown = json.dumps(address)[1:-1][:120]
    where = f"--scheduler {shown}"
    usage = "expected tcp://HOST:PORT, e.g. tcp://10.0.0.5:8786"
    text = address.strip()
    if not text or any(c.isspace() or not c.isprintable() for c in text):
        raise InputError(f"not an address; {usage}", where=where)
    if "://" not in text:
        text = "tcp://" + text
    scheme = text.split("://", 1)[0].lower()
    if scheme != "tcp":
        raise InputError(f"the {scheme}:// protocol is not supported; {usage}", where=where)
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError as e:
        raise InputError(f"bad port ({e}); {usage}", where=where) from None
    if parts.path not in ("", "/") or parts.query or parts.fragment or parts.username:
        raise InputError(f"not an address; {usage}", where=where)
    if not parts.hostname:
        raise InputError(f"no host; {usage}", where=where)
    if port is None:
        raise InputError(f"no port; {usage}", where=where)
    if not 0 < port < 65536:
        raise InputError(f"port {port} is out of range (1-65535); {usage}", where=where)
    return parts.hostname, port


def connect(scheduler: str) -> Any:
    """A Dask client on a reachable scheduler, or InputError (before any output exists)."""
    host, port = parse_scheduler(scheduler)
    where = f"--scheduler {scheduler}"
    try:
        from dask.distributed import Client
    except ImportError:
        raise InputError(
            "Dask is not installed: pip install 'kvsim[cluster]'", where="--scheduler"
        ) from None
    import logging
    import socket

    # Dask logs a lost connection with tracebacks of its own; kvsim reports it in one line
    for name in ["distributed", *logging.root.manager.loggerDict]:
        if name == "distributed" or name.startswith("distributed."):
            logging.getLogger(name).setLevel(logging.CRITICAL + 1)
    try:
        socket.create_connection((host, port), timeout=5).close()
    except (OSError, UnicodeError) as e:
        reason = getattr(e, "strerror", None) or str(e) or type(e).__name__
        raise InputError(f"cannot reach the Dask scheduler: {reason}", where=where) from None
    address = f"tcp://{host}:{port}" if ":" not in host else f"tcp://[{host}]:{port}"
    # The handshake runs in a thread with a bounded wait: a peer that accepts the connection
    # but never answers would hang Client() for ever, and one that is not a Dask scheduler
    # (a web server, say) makes Dask fail in arbitrary ways (even a 3 EiB allocation).
    box: dict[str, Any] = {}

    def handshake() -> None:
        try:
            box["client"] = Client(address, timeout=f"{CONNECT_TIMEOUT}s")
        except BaseException as e:  # reported by the caller, in one line
            box["error"] = e

    thread = threading.Thread(target=handshake, name="kvsim-dask-connect", daemon=True)
    thread.start()
    wait_s = CONNECT_TIMEOUT * 1.5  # Dask's own timeout first, when it works
    thread.join(wait_s)
    not_dask = "not a Dask scheduler, or kvsim cannot talk to it"
    if thread.is_alive():
        raise InputError(f"{not_dask}: no handshake within {wait_s:g} s", where=where)
    if "error" in box:
        e = box["error"]
        if isinstance(e, KeyboardInterrupt):
            raise e
        reason = clean(str(e) or type(e).__name__, 160)
        raise InputError(f"{not_dask} ({type(e).__name__}: {reason})", where=where)
    return box["client"]


def execute(
    todo: list[RunSpec],
    workers: int,
    scheduler: str | None = None,
    *,
    client: Any = None,
    runner: Callable[[RunSpec], dict[str, Any]] | None = None,
) -> Generator[dict[str, Any], None, None]:
    """Rows as runs complete, on local processes or a Dask cluster (``client``, or one
    connected to ``scheduler``); ``runner`` (a module-level function, for the workers;
    :func:`run_one` when not given, looked up at call time) makes each row. Closing the
    iterator early stops the workers."""
    if runner is None:
        runner = run_one
    if client is None and scheduler:
        client = connect(scheduler)
    if client is not None:
        from dask.distributed import KilledWorker, as_completed

        spec_of: dict[Any, RunSpec] = {}
        try:
            futures = []
            for s in todo:
                fut = client.submit(runner, s, pure=False, key=f"kvsim-{s.run_id}-{s.index}")
                spec_of[fut.key] = s
                futures.append(fut)
            for fut in as_completed(futures):
                try:
                    row = fut.result()
                except KilledWorker as e:  # this run killed its workers (out of memory?)
                    row = _row(spec_of[fut.key], "error", f"KilledWorker: {e}")
                yield row
        except (OSError, TimeoutError, CancelledError) as e:  # the cluster went away
            raise InputError(
                f"lost the Dask cluster ({clean(str(e) or type(e).__name__, 160)}); the runs "
                "that finished "
                "are kept: run the same command again to resume",
                where=f"--scheduler {clean(scheduler or '(a Dask client)')}",
            ) from None
        finally:
            client.close()
        return
    if workers <= 1 or len(todo) <= 1:
        for s in todo:
            yield runner(s)
        return
    pool = worker_pool(min(workers, len(todo)))
    finished = False
    try:
        pending: set[Future] = {pool.submit(runner, s) for s in todo}
        while pending:
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            for fut in done:
                try:
                    row = fut.result()
                except BrokenProcessPool:
                    raise InputError(
                        "a worker process was killed (out of memory? a signal?); the runs "
                        "that finished are kept: run the same command again to resume",
                        where=f"--workers {workers}",
                    ) from None
                yield row
        finished = True
    finally:
        if finished:
            pool.shutdown(wait=True)
        else:
            stop_pool(pool)


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

    ``progress(done, total)`` is called after each run. The results tables are written only
    when every run of the sweep has a row: on KeyboardInterrupt (or any failure) only the
    journal is kept, and tables left from before are removed, so that no table looks
    complete while runs remain (running the same command again resumes). One sweep at a
    time writes a folder (an exclusive lock; a second is refused). Nothing is left before
    the first run finishes (or unless the folder already holds a journal): a sweep refused
    or interrupted at once leaves no folder and no empty files.
    """
    if sweep.refused:  # before any run, and before anything is written
        raise sweep.refused[0]
    out = Path(out_dir)
    journal_path = out / JOURNAL
    _journal_inside(journal_path)  # a link out of the folder: refused before any run
    lines = read_journal_lines(out)
    if os.path.lexists(journal_path) and not os.access(
        journal_path, os.W_OK
    ):  # refused before any run, not after
        raise InputError("cannot write: permission denied", where=str(journal_path))
    by_id = {r.run_id: r for r in sweep.runs}
    for run_id, (lineno, row) in lines.items():
        if run_id in by_id:
            _check_row_matches(row, by_id[run_id], f"{journal_path}:{lineno}")
    done = {k: row for k, (_, row) in lines.items()}
    client = connect(scheduler) if scheduler else None  # refused before anything is written
    made = not out.exists()
    lock = None
    try:
        lock = _lock_folder(out)
        again = {k: n for k, (n, _) in read_journal_lines(out).items()} if lock is not None else {}
        if lock is not None and again != {k: n for k, (n, _) in lines.items()}:
            # another sweep appended rows before this one took the lock: start again
            raise InputError(
                "another kvsim sweep wrote to this folder meanwhile; run the command again",
                where=str(out),
            )
    except BaseException:
        if client is not None:
            with contextlib.suppress(Exception):
                client.close()
        if lock is not None:
            _unlock_folder(lock, out, remove=made and not os.path.lexists(journal_path))
        raise
    todo = [
        r
        for r in sweep.runs
        if r.run_id not in done or (retry_failed and done[r.run_id].get("status") != "ok")
    ]
    finished = len(sweep.runs) - len(todo)
    journal = None
    complete = False
    table: pd.DataFrame | None = None
    try:
        rows = execute(todo, workers, scheduler, client=client)
        with contextlib.closing(rows):
            if progress:
                progress(finished, len(sweep.runs))
            for row in rows:
                if journal is None:
                    journal = _open_journal(out)
                try:
                    journal.write(journal_line(row))
                    journal.flush()
                except OSError as e:
                    raise InputError(
                        f"cannot write: {e.strerror or e}", where=str(journal_path)
                    ) from None
                done[row["run_id"]] = row
                finished += 1
                if progress:
                    progress(finished, len(sweep.runs))
        ran = [done[r.run_id] for r in sweep.runs if r.run_id in done]
        complete = len(ran) == len(sweep.runs)
        table = results_table(sweep, ran)
        table.attrs["reused"] = len(sweep.runs) - len(todo)  # rows from the journal
        if complete:
            write_table(table, out)
    finally:
        if client is not None:
            with contextlib.suppress(Exception):
                client.close()
        if journal is not None:
            with contextlib.suppress(OSError):
                journal.close()
        if not complete:  # tables of an earlier, smaller state would look complete
            for name in TABLES:
                with contextlib.suppress(OSError):
                    (out / name).unlink(missing_ok=True)
        _unlock_folder(lock, out, remove=made and not os.path.lexists(journal_path))
    assert table is not None
    return table


def _check_row_matches(row: dict[str, Any], spec: RunSpec, where: str) -> None:
    """A journal row must be the row of its run: the seed and swept values of its run id."""
    redo = "delete this line to re-run that run"
    if row.get("seed") != spec.seed or isinstance(row.get("seed"), bool):
        raise InputError(
            f"seed {clean(str(row.get('seed')), 40)} is not the seed of run {spec.run_id} "
            f"({spec.seed}); {redo}",
            where=where,
        )
    for key, value in spec.params:
        want = json.dumps(value, sort_keys=True, default=str)
        got = json.dumps(row.get(key), sort_keys=True, default=str)
        if key not in row or got != want:
            raise InputError(
                f"{key} = {clean(got, 60)} is not the value of run {spec.run_id} "
                f"({clean(want, 60)}); {redo}",
                where=where,
            )


def _lock_folder(out: Path) -> int | None:
    """Take the sweep folder's exclusive lock (the folder made if needed), or refuse: two
    sweeps writing one folder would interleave their journals and tables."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX: no lock
        return None
    path = out / LOCK
    try:
        out.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o644)
    except OSError as e:
        raise InputError(f"cannot write: {e.strerror or e}", where=str(path)) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        same = os.fstat(fd).st_ino == os.stat(path).st_ino  # not a lock file just removed
    except OSError:
        same = False
    if not same:
        os.close(fd)
        raise InputError(
            "another kvsim sweep is writing to this folder; wait for it to end (or give "
            "another --out)",
            where=str(out),
        )
    return fd


def _unlock_folder(fd: int | None, out: Path, *, remove: bool) -> None:
    """Release the lock; the lock file goes (and the folder, when this sweep made it and
    wrote nothing to it)."""
    if fd is None:
        return
    with contextlib.suppress(OSError):
        (out / LOCK).unlink()
    with contextlib.suppress(OSError):
        os.close(fd)
    if remove:
        with contextlib.suppress(OSError):
            out.rmdir()  # only when empty


def _open_journal(out: Path) -> Any:
    """The journal, opened for appending at a line boundary (the folder made if needed)."""
    try:
        out.mkdir(parents=True, exist_ok=True)
        clean_leftovers(out, TABLES)  # temporary tables of sweeps that died
        path = out / JOURNAL
        if os.path.lexists(path):
            _journal_inside(path)
            check_regular(path, what="sweep journal")
            repair_journal(path)
        # never through a link put in its place meanwhile (O_NOFOLLOW), nor to a file with
        # another name elsewhere (a hard link: checked on what was opened)
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0)
        fd = os.open(path, flags, 0o644)
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_nlink > 1:
            os.close(fd)
            _journal_inside(path)
            raise InputError("is not a regular file only this folder holds", where=str(path))
        return os.fdopen(fd, "a", encoding="utf-8")
    except OSError as e:
        if e.errno == errno.ELOOP:  # O_NOFOLLOW met a link
            _journal_inside(out / JOURNAL)
        raise InputError(f"cannot write: {e.strerror or e}", where=str(out)) from None


def _journal_inside(path: Path) -> None:
    """A sweep appends its journal only to a file of its own folder: a symbolic link (to a
    file outside ``--out``, say) or a hard link (the same file under another name) would
    make it write rows into someone else's file."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    except OSError as e:
        raise InputError(f"cannot read: {e.strerror or e}", where=str(path)) from None
    if stat.S_ISLNK(st.st_mode):
        raise InputError(
            "is a symbolic link; a sweep appends its journal only to a regular file inside "
            "its --out folder (remove the link, or give another --out)",
            where=str(path),
        )
    if stat.S_ISREG(st.st_mode) and st.st_nlink > 1:
        raise InputError(
            f"has {counted(st.st_nlink - 1, 'other hard link')}: appending to it would write into "
            "another file too; copy it (cp) to make it a file of its own, or give another --out",
            where=str(path),
        )


def results_table(sweep: Sweep, rows: Iterable[dict[str, Any]]) -> pd.DataFrame:
    """Rows in expansion order; swept columns first, then the metrics."""
    df = pd.DataFrame(list(rows))
    first = list(dict.fromkeys(["run", "run_id", *sweep.columns, "seed", "status", "error"]))
    if df.empty:
        return pd.DataFrame(columns=first)
    index = {r.run_id: r.index for r in sweep.runs}
    df["run"] = df["run_id"].map(index)
    df = df.sort_values("run", kind="stable").reset_index(drop=True)
    rest = [c for c in df.columns if c not in first]
    df = df[[c for c in first if c in df.columns] + rest]
    for old, name in LEGACY_INTERVALS.items():  # an older kvsim's journal rows: [lo, hi]
        if old in df.columns:
            bounds = pd.DataFrame([_bounds_of(name, v) for v in df[old]], index=df.index)
            for col in bounds.columns:
                df[col] = df[col].fillna(bounds[col]) if col in df.columns else bounds[col]
            df = df.drop(columns=old)
    df = add_paired(df, sweep)
    for col in df.columns:  # one type per column, or Parquet refuses it
        if col not in sweep.columns and df[col].dtype != object:
            continue
        kinds = {_kind(v) for v in df[col] if not _missing(v)}
        numeric = kinds <= {"int", "float"}
        if numeric or (col not in sweep.columns and len(kinds) == 1 and kinds <= {"str", "bool"}):
            continue
        df[col] = df[col].map(lambda v: v if isinstance(v, str) else json.dumps(v, default=str))
    # recorded in results.parquet's metadata: `kvsim plot` refuses a table missing one
    df.attrs["swept"] = list(sweep.columns)
    return df


#: the metrics a sweep compares between configurations (paired, per seed)
PAIRED_METRICS = ("ttft_p50_s", "ttft_p95_s", "ttft_p99_s", "hit_ratio")


def add_paired(df: pd.DataFrame, sweep: Sweep) -> pd.DataFrame:
    """``df`` with the paired differences against the reference configuration
    (:meth:`Sweep.reference_index`), per compared metric M (:data:`PAIRED_METRICS`):
    ``delta_M``, per row, this run minus the reference's run with the same seed (every
    configuration runs every seed, so the two saw the same workload draw), and
    ``delta_M_lo`` and ``delta_M_hi``, the configuration's 95% interval of the mean
    difference over its seeds (:func:`~kvsim.results.uncertainty.paired_interval`),
    numbers on each of its rows. Both empty on the reference's rows, for a run that failed (or
    whose reference run did), and the interval with fewer than two paired seeds. A
    sweep of one configuration gets no columns."""
    import numpy as np

    from kvsim.results.uncertainty import paired_interval

    conf_of = sweep.configuration_of()
    if len(set(conf_of.values())) < 2 or df.empty:
        return df
    conf = df["run_id"].map(conf_of).fillna(-1).to_numpy(dtype=int)
    ref = sweep.reference_index()
    ok = (df["status"] == "ok").to_numpy()
    seeds = df["seed"].to_numpy()
    is_ref = conf == ref
    added: dict[str, Any] = {}
    for m in PAIRED_METRICS:
        if m not in df.columns:
            continue
        values = np.where(ok, pd.to_numeric(df[m], errors="coerce").to_numpy(dtype=float), np.nan)
        base = {s: v for s, v in zip(seeds[is_ref], values[is_ref], strict=True)}
        paired = np.array([base.get(s, np.nan) for s in seeds], dtype=float)
        delta = values - paired
        delta[is_ref] = np.nan
        cis: dict[int, tuple[float, float]] = {}
        for c in np.unique(conf[~is_ref & (conf >= 0)]):
            mask = (conf == c) & np.isfinite(delta)
            iv = paired_interval(values[mask], paired[mask])
            if iv.bounded:
                cis[int(c)] = (iv.lo, iv.hi)
        added[f"delta_{m}"] = delta
        none = (math.nan, math.nan)
        added[f"delta_{m}_lo"] = [cis.get(int(c), none)[0] for c in conf]
        added[f"delta_{m}_hi"] = [cis.get(int(c), none)[1] for c in conf]
    return pd.concat([df, pd.DataFrame(added, index=df.index)], axis=1) if added else df


def _kind(value: Any) -> str:
    """The Parquet-relevant type of a table cell."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int" if -(2**63) <= value < 2**63 else "big"
    if isinstance(value, float):
        return "float"
    return "str" if isinstance(value, str) else "other"


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def write_table(df: pd.DataFrame, out: Path) -> None:
    """results.parquet and results.csv: both written whole beside the old ones, then renamed
    into place one after the other, so a failed write leaves the old pair untouched (and
    both are remade from the journal by the next run of the same command)."""
    clean_leftovers(out, TABLES)  # temporary tables of sweeps that died
    writers = {
        RESULTS: lambda p: df.to_parquet(p, index=False),
        "results.csv": lambda p: df.to_csv(p, index=False),
    }
    temps = {name: out / f".{name}.tmp-{os.getpid()}" for name in TABLES}
    try:
        for name in TABLES:
            writers[name](temps[name])
        for name in TABLES:
            os.replace(temps[name], out / name)
    except OSError as e:
        raise InputError(f"cannot write: {e.strerror or e}", where=str(out)) from None
    finally:
        for tmp in temps.values():
            with contextlib.suppress(OSError):
                tmp.unlink(missing_ok=True)


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
    from kvsim import api

    run = sweep.runs[0]
    try:
        sc = api.load(run.base, run.overrides())
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
