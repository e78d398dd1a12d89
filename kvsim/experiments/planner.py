"""Planning questions at the scenario's own load: the smallest value of one field that
meets an SLO (``kvsim capacity --minimize``), and the cheapest layout of a sweep that
meets it (``kvsim capacity --sweep ... --cheapest``).

Both run the scenario as it is (no load scaling), ``reps`` replications each (seeds
base, base+1, ...; a trace is resampled per seed, as everywhere). ``--minimize`` bisects
the field per replication, assuming more is never worse (a bigger tier, more engines or
servers, a faster link); the replications' thresholds give the answer's spread. A field
is numeric when its value is a number: a count, or a size, bandwidth, duration or rate
(written back in base units); a field where more can be worse (a latency, a T0) is not
one to minimize; an answer at the least value the field's schema accepts (one engine) is
that value, not "that value or lower" (:func:`field_floor`). :func:`minimize_sweep` runs
``--minimize`` in every configuration of a sweep, each exactly as on its own, and prices
each at its value to provision (the joint question: how many nodes, which layout).
``--cheapest`` needs a ``cost:`` section: a configuration
meets the SLO when the mean of its metric over the replications does, and the cheapest of
those by ``usd_per_hour`` wins.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from kvsim import api
from kvsim.config.schema import REMOVED_FIELDS, Scenario, field_unit
from kvsim.errors import InputError
from kvsim.experiments.capacity import Infeasible, sweep_with_sets
from kvsim.experiments.explain import Explanation, RunFacts, explain, run_facts
from kvsim.experiments.replicate import replication_overrides
from kvsim.experiments.slo import OUTCOMES, SLO, check_slo
from kvsim.experiments.sweep import load_sweep
from kvsim.results.records import usd_per_hour
from kvsim.results.uncertainty import (
    IDENTICAL,
    Interval,
    bound_keys,
    mean_interval,
    paired_interval,
)
from kvsim.units import (
    UNIT_WRITERS,
    fmt_bytes,
    fmt_duration,
    parse_bandwidth,
    parse_duration,
    parse_rate,
    parse_size,
)

PARSERS: dict[str, Callable[[object], float]] = {
    "size": parse_size,
    "bandwidth": parse_bandwidth,
    "duration": parse_duration,
    "rate": parse_rate,
}
SPAN = 64.0  # default range: the field's value / 64 .. x 64


@dataclass(frozen=True)
class NumericField:
    """A scenario field that ``--minimize`` can search: its path, current value, whether
    it is an integer, and its unit kind (None for a plain number)."""

    path: str
    value: float
    integer: bool
    unit: str | None
    floor: float | None = None  # the least value the scenario accepts (None: no least)

    def override(self, x: float) -> Any:
        """The value as a ``--set`` override."""
        if self.integer:
            return int(x)
        return UNIT_WRITERS[self.unit](float(x)) if self.unit else float(x)

    def parse(self, text: str, where: str) -> float:
        """A bound of ``--range`` in the field's unit ("40 GB") or as a plain number."""
        try:
            if self.unit is not None:
                return float(PARSERS[self.unit](text.strip()))
            return float(text)
        except (ValueError, TypeError, OverflowError) as e:
            raise InputError(f"{text.strip()!r}: {e}", where=where) from None

    def show(self, x: float) -> str:
        if self.integer:  # (a count is only ever shown whole: never truncated)
            return str(int(x)) if x == int(x) else f"{x:.4g}"
        if self.unit == "size":
            return fmt_bytes(x)
        if self.unit == "bandwidth":
            return f"{fmt_bytes(x)}/s"
        if self.unit == "duration":
            return fmt_duration(x)
        return f"{x:.4g}{'/s' if self.unit == 'rate' else ''}"

    def show_up(self, x: float) -> str:
        """``x`` as :meth:`show` writes it, rounded up, never down: a value to provision
        (a count: the next whole number)."""
        if self.integer:
            return str(math.ceil(x))
        y = x
        for _ in range(20):
            text = self.show(y)
            try:
                if self.parse(text, "") >= x:
                    return text
            except InputError:
                break
            y *= 1 + 4e-4  # the next value the shown digits can hold
        return self.show(x)


# Fields that do not describe the simulated system: moving one answers no planning
# question (the seed draws other random streams; the run: section says how a run is
# measured, not what is measured). Refused by --minimize and sensitivity.
NOT_THE_SYSTEM: dict[str, str] = {
    "seed": "the seed picks the random streams, not the system (replications: --reps)",
    "name": "a label",
    "description": "a label",
    "profile": "a name",
    "plugins": "code to load",
    "source": "the scenario's file",
    "run": "run: says how the run is measured (warm-up, time limit), not the system",
}


def numeric_field(sc: Scenario, path: str, where: str | None = None) -> NumericField:
    """The field at ``path`` (``tiers.host.capacity``) if it holds a number that the run
    reads, else an InputError naming it: a field that is not part of the simulated system
    (:data:`NOT_THE_SYSTEM`) or that sits in a disabled section (``enabled: false``) is
    refused here; whether moving it changes the run at all is checked by running it
    (:func:`fingerprint`)."""
    where = where or f"--minimize {path}"
    node: Any = sc
    parts = path.split(".")
    for key in (parts[0], path):
        if key in NOT_THE_SYSTEM:
            raise InputError(
                f"does not change the simulated system: {NOT_THE_SYSTEM[key]}", where=where
            )
    for i, part in enumerate(parts):
        done = ".".join(parts[:i]) or "the scenario"
        if node is None:
            raise InputError(f"{done} is null (not set): it has no field {part!r}", where=where)
        fields = getattr(type(node), "model_fields", None)
        if not fields or part not in fields:
            gone = REMOVED_FIELDS.get((parts[i - 1], part)) if i else None
            if gone is not None:  # a field kvsim used to have: say what replaces it
                raise InputError(f"{path}: {gone}", where=where)
            raise InputError(f"{done} has no field {part!r}", where=where)
        if "enabled" in fields and part != "enabled" and node.enabled is False:
            raise InputError(
                f"{done} is disabled ({done}.enabled: false): the run never reads {path}",
                where=where,
            )
        info = fields[part]
        node = getattr(node, part)
    value = node
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        shown = "null" if value is None else type(value).__name__
        raise InputError(f"not a numeric field (it holds {shown})", where=where)
    if not math.isfinite(value):
        raise InputError(f"not a finite number ({value})", where=where)
    unit = field_unit(info.annotation, info.metadata)
    integer = isinstance(value, int)
    return NumericField(path, float(value), integer, unit, field_floor(info.metadata, integer))


def field_floor(metadata: list[Any], integer: bool) -> float | None:
    """The least value a field's schema accepts, from its bounds: ``ge=k`` gives k, and
    for a whole number ``gt=k`` gives k + 1 (``cluster.engines``: 1); None when there is
    no least value (a real number above a bound, or no bound)."""
    least = None
    for m in metadata:
        ge, gt = getattr(m, "ge", None), getattr(m, "gt", None)
        if ge is not None:
            least = float(ge)
        elif gt is not None and integer:
            least = float(gt) + 1.0
    return least


def fingerprint(results: Any) -> tuple[Any, ...]:
    """What a run computed, to tell whether moving a field changed anything: a hash of
    every request's record and the summary's outcome metrics (prices included). Two runs
    with the same fingerprint simulated the same thing."""

    rows = pd.util.hash_pandas_object(results.requests, index=False).to_numpy()
    digest = hashlib.sha256(rows.tobytes()).hexdigest()
    return (digest, *(repr(results.summary.get(k)) for k in OUTCOMES))


def parse_range(f: NumericField, text: str | None) -> tuple[float, float]:
    """``LO..HI`` in the field's unit; by default the field's value / 64 .. x 64."""
    where = f"--range {text}"
    if text is None:
        lo, hi = f.value / SPAN, f.value * SPAN
        if f.value <= 0:
            raise InputError(
                f"{f.path} is {f.value:g}: give --range LO..HI to search from there",
                where=f"--minimize {f.path}",
            )
        if f.integer:
            lo, hi = max(1.0, math.floor(lo)), math.ceil(hi)
        return lo, hi
    if ".." not in text:
        raise InputError("expected LO..HI, e.g. 10 GB..2 TB", where=where)
    a, b = text.split("..", 1)
    lo, hi = f.parse(a, where), f.parse(b, where)
    if f.integer and (lo != int(lo) or hi != int(hi)):
        raise InputError(f"{f.path} is a whole number: give whole bounds", where=where)
    if not (math.isfinite(lo) and math.isfinite(hi)) or lo < 0:
        raise InputError("the bounds must be finite and >= 0", where=where)
    if not lo < hi:
        raise InputError(f"empty range: {f.show(lo)} is not below {f.show(hi)}", where=where)
    return lo, hi


@dataclass
class Minimum:
    """The smallest value meeting the SLO, per replication."""

    slo: SLO
    field: NumericField
    values: list[float]
    evaluations: int
    span: tuple[float, float] = (math.nan, math.nan)  # the range searched
    at_bottom: int = 0  # replications already meeting the SLO at the range's bottom
    # the price of the value to provision (the run that found it; NaN without prices)
    usd_per_hour: float = math.nan
    # the runs at each replication's answer whose measured window was still filling
    # (their summaries' steady_state warnings, "seed N: ..."): the answer rests on them
    unsteady: list[str] = dataclasses.field(default_factory=list)

    @property
    def mean(self) -> float:
        return sum(self.values) / len(self.values)

    @property
    def interval(self) -> Interval:
        """The mean and its 95% interval (none from one replication)."""
        return mean_interval(self.values)

    @property
    def ci95(self) -> float:
        """Half-width of the 95% interval (NaN with one replication)."""
        return self.interval.half

    @property
    def all_at_bottom(self) -> bool:
        """Every replication met the SLO at the bottom of the range: the smallest value
        is there or lower, and the replications' answers say nothing about spread."""
        return self.at_bottom == len(self.values)

    def bounds(self) -> tuple[float, float] | None:
        """The answer's 95% interval in the field's own terms: the mean's interval widened
        to hold every replication's answer, kept inside the range searched, and for a
        count rounded outward to whole numbers. None without one (one replication,
        identical answers, or every answer at the range's bottom)."""
        iv = self.interval
        if not iv.ok or self.all_at_bottom:
            return None
        lo = max(min(iv.lo, *self.values), self.span[0])
        hi = min(max(iv.hi, *self.values), self.span[1])
        if self.field.integer:
            return float(math.floor(lo)), float(math.ceil(hi))
        return lo, hi

    @property
    def provision(self) -> float:
        """What meets the SLO in every replication: the largest answer (a count: whole)."""
        top = max(self.values)
        return float(math.ceil(top)) if self.field.integer else top

    @property
    def at_floor(self) -> bool:
        """The range's bottom is the least value the field can take (one engine): an
        answer there is the smallest there is, not "that value or lower"."""
        return self.field.floor is not None and self.span[0] <= self.field.floor

    def lines(self) -> list[str]:
        """The answer as ``kvsim capacity --minimize`` prints it."""
        f, n = self.field, len(self.values)
        each = ", ".join(map(f.show, self.values))
        out = [f"smallest {f.path} meeting {self.slo} at the scenario's load ({n} replications):"]
        bottom = f.show(self.span[0])
        if self.all_at_bottom and self.at_floor:
            out.append(
                f"  {bottom}, the least {f.path} can be: every replication met the SLO there"
            )
            out.append(f"  provision {f.show_up(self.provision)}")
            return out
        if self.all_at_bottom:
            out.append(
                f"  {bottom} or lower: every replication met the SLO at the bottom of the "
                f"range ({bottom}), so there is no interval; widen --range to look lower"
            )
            out.append(
                f"  provision {f.show_up(self.provision)}: the range's bottom already meets it"
            )
            return out
        b = self.bounds()
        if b is not None:
            spread = f"95% interval {f.show(b[0])} .. {f.show(b[1])}"
        elif self.interval.note == IDENTICAL:  # (the runs differed; their answers did not)
            spread = "every replication found this same value: no spread for an interval"
        else:
            spread = self.interval.note or "no interval"
        if f.integer:  # a count: its answers and the interval, never a fractional mean
            out.append(f"  per replication: {each} ({spread})")
        else:
            out.append(f"  {f.show(self.mean)} ({spread}); per replication: {each}")
        out.append(f"  provision {f.show_up(self.provision)} to meet it in every replication")
        if self.at_bottom and self.at_floor:
            out.append(
                f"  note: {self.at_bottom} of {n} replication(s) met the SLO at {bottom}, the "
                f"least {f.path} can be"
            )
        elif self.at_bottom:
            out.append(
                f"  note: {self.at_bottom} of {n} replication(s) met the SLO at the bottom of "
                f"the range ({bottom}): their smallest value may be lower; widen --range"
            )
        return out

    def warning_lines(self) -> list[str]:
        """``warning:`` lines for the runs at the answers that were not in steady state."""
        return [f"warning: at the answer, {line}" for line in self.unsteady]

    def as_json(self) -> dict[str, Any]:
        """The answer for ``--json`` (base units; a count as whole numbers). Its interval
        is ``mean_lo`` and ``mean_hi`` (numbers, null without an interval)."""
        f = self.field
        whole: Callable[[float], Any] = int if f.integer else float
        b = self.bounds()
        if b is None and not self.all_at_bottom and len(set(self.values)) == 1 < len(self.values):
            b = (self.values[0], self.values[0])  # identical replications: [v, v]
        units = {"size": "B", "bandwidth": "B/s", "duration": "s", "rate": "1/s"}
        return {
            "field": f.path,
            "unit": units.get(f.unit or "", ""),
            "integer": f.integer,
            "slo": str(self.slo),
            "mean": self.mean,
            **bound_keys("mean", None if b is None else (whole(b[0]), whole(b[1]))),
            "provision": whole(self.provision),
            "values": [whole(v) for v in self.values],
            "range": [whole(x) for x in self.span],
            "at_range_bottom": self.at_bottom,
            "at_field_floor": self.at_floor,
            "evaluations": self.evaluations,
            "usd_per_hour": _json_float(self.usd_per_hour),
            "steady_state_warnings": list(self.unsteady),
        }


def _json_float(x: float) -> float | None:
    return x if math.isfinite(x) else None


def minimize(
    sc: Scenario,
    slo: SLO,
    path: str,
    *,
    span: str | None = None,
    reps: int = 3,
    tol: float = 0.02,
    log: Callable[[str], None] = lambda _m: None,
) -> Minimum:
    """Per replication, bisect ``path`` over its range for the smallest value that meets
    ``slo`` (integers to one, other numbers to ``tol`` relative)."""
    f = numeric_field(sc, path)
    slo = slo.scoped(sc)
    check_slo(slo, sc)
    lo, hi = parse_range(f, span)
    if not 0 < tol < 1:
        raise InputError(f"must be in (0, 1), got {tol}", where="--tol")
    extra = replication_overrides(sc, reps)
    evaluations = 0

    prints: dict[float, tuple[Any, ...]] = {}  # the first replication's runs at lo and hi
    tops: dict[int, Any] = {}  # the runs at the range's best end (Results), by seed
    prices: dict[tuple[float, int], float] = {}  # usd_per_hour of each run, by value and seed
    unsteady: dict[tuple[float, int], list[str]] = {}  # steady_state warnings, the same

    def meets(x: float, seed: int) -> bool:
        nonlocal evaluations
        evaluations += 1
        try:
            res = api.run(sc, {**extra, path: f.override(x)}, seed)
        except InputError as e:
            raise InputError(
                f"with {path} = {f.show(x)} (seed {seed}): {e}; give a --range the scenario accepts"
            ) from None
        if seed == sc.seed and x in (lo, hi):
            prints[x] = fingerprint(res)
        if x == hi:
            tops[seed] = res
        prices[x, seed] = float(res.summary.get("usd_per_hour", math.nan))
        unsteady[x, seed] = steady_warnings(res.summary)
        return slo.met(res.summary)

    def does_nothing() -> bool:
        """The run at the range's bottom is the run at its top: the field changes
        nothing the simulation computes (a limit never reached, a value never read)."""
        if lo not in prints:
            meets(lo, sc.seed)
        return prints[lo] == prints[hi]

    nothing = InputError(
        f"the run is the same with {path} = {f.show(lo)} and {f.show(hi)} (every request, "
        "every outcome): the scenario does not depend on it, so no value of it is smallest",
        where=f"--minimize {path}",
    )

    def close(a: float, b: float) -> bool:
        if f.integer:
            return b - a <= 1
        return b - a <= tol * b

    values = []
    notes: list[str] = []  # the answers' runs not in steady state (Minimum.unsteady)
    at_bottom = 0  # replications where the bottom of the range already met the SLO
    for rep in range(reps):
        seed = sc.seed + rep
        if not meets(hi, seed):
            if rep == 0 and does_nothing():
                raise nothing
            missed = slo.missed(tops[seed].summary)  # (a joint SLO: the term it misses)
            why = explain(missed, f"with {path} = {f.show(hi)}", [tops[seed]])
            depends = (
                "the SLO depends on something else (see the compute floor above)"
                if why.floor_fails
                else "widen --range, or the SLO depends on something else"
            )
            raise Infeasible(
                f"the SLO ({slo}) fails even with {path} = {f.show(hi)} (seed {seed}): "
                f"{missed.metric} = {why.value:.4g} there; {depends}",
                why,
            )
        if meets(lo, seed):
            if rep == 0 and does_nothing():
                raise nothing
            found = lo
            at_bottom += 1
        else:
            a, b = lo, hi  # a fails, b meets
            while not close(a, b):
                if f.integer:
                    mid = float((int(a) + int(b)) // 2)
                elif a > 0:
                    mid = math.sqrt(a * b)
                else:
                    mid = b / 2 if b > 2 * tol else (a + b) / 2
                a, b = (a, mid) if meets(mid, seed) else (mid, b)
            found = b
        log(f"replication {rep + 1}/{reps} (seed {seed}): {path} = {f.show(found)}")
        values.append(found)
        notes += [f"{path} = {f.show(found)}, seed {seed}: {w}" for w in unsteady[found, seed]]
    top, seed = max((v, sc.seed + r) for r, v in enumerate(values))
    answer = Minimum(slo, f, values, evaluations, (lo, hi), at_bottom)
    answer.usd_per_hour = prices.get((top, seed), math.nan)  # (a count's top is whole)
    answer.unsteady = notes
    return answer


def steady_warnings(summary: dict[str, Any]) -> list[str]:
    """A run summary's ``steady_state`` warnings (none for an older or short run)."""
    st = summary.get("steady_state")
    return list(st.get("warnings", [])) if isinstance(st, dict) else []


@dataclass
class LayoutMinimum:
    """``--minimize`` in one configuration of a sweep: its answer, or why there is none
    (the SLO fails even at the top of the range: ``failure``, ``explanation``)."""

    config: dict[str, Any]
    answer: Minimum | None
    failure: str = ""
    explanation: Explanation | None = None

    @property
    def label(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in self.config.items()) or "the scenario"

    @property
    def usd_per_hour(self) -> float:
        """The layout's price with the field at the value to provision (NaN: no answer or
        no prices)."""
        return self.answer.usd_per_hour if self.answer is not None else math.nan


def minimize_sweep(
    sweep_path: str,
    slo: SLO,
    path: str,
    *,
    span: str | None = None,
    reps: int = 3,
    tol: float = 0.02,
    sets: list[str] | None = None,
    priced: bool = False,
    log: Callable[[str], None] = lambda _m: None,
) -> list[LayoutMinimum]:
    """:func:`minimize` in every configuration of a sweep, each exactly as on its own
    (``kvsim capacity BASE --set ... --minimize``: the same scenario, seeds and range):
    the joint question "how many nodes, and which layout is cheapest". A layout where the
    SLO fails even at the top of the range has no answer (its failure and explanation
    kept); any other refusal (a range the scenario refuses, a field the layout does not
    depend on) stops the command, naming the layout. ``priced``: refuse, before any run,
    a layout without prices (``--cheapest``)."""
    sweep = load_sweep(sweep_path)
    if path in sweep.columns:
        raise InputError(
            f"{path} is swept by the sweep file: --minimize searches it in each layout, "
            "so it cannot also be swept",
            where=f"--minimize {path}",
        )
    configs = sweep_with_sets(sweep, list(sets or []))
    for overrides, sc in configs:  # a field a layout cannot search: refused before any run
        try:
            parse_range(numeric_field(sc, path), span)
        except InputError as e:
            label = ", ".join(f"{k}={v}" for k, v in overrides.items() if k in sweep.columns)
            raise InputError(f"configuration {label}: {e.reason}", where=e.where) from None
        if priced:
            _require_prices(sc, sweep_path)
        check_slo(slo, sc)
    log(f"{len(configs)} configurations, {reps} replications each")
    out = []
    for overrides, sc in configs:
        cfg = {k: v for k, v in overrides.items() if k in sweep.columns}
        row = LayoutMinimum(cfg, None)
        log(f"{row.label}:")
        try:
            row.answer = minimize(sc, slo, path, span=span, reps=reps, tol=tol, log=log)
        except Infeasible as e:
            row.failure, row.explanation = e.reason, e.explanation
            log(f"  {e.reason}")
        except InputError as e:
            raise InputError(f"configuration {row.label}: {e}") from None
        out.append(row)
    return out


@dataclass
class Layout:
    """One configuration of a sweep at the scenario's load: its metric and cost."""

    config: dict[str, Any]
    metric: float
    metric_ci95: float
    meets: bool
    usd_per_hour: float
    usd_per_million_prompt_tokens: float
    summaries: list[dict[str, Any]] = field(default_factory=list)
    interval: Interval | None = None  # the metric's mean over replications, its interval
    # a layout that fails the SLO: what each replication says about why (explain.py)
    facts: list[RunFacts] = field(default_factory=list, repr=False)
    scope: str | None = None  # its run.prompt_range (the SLO's scope)
    # paired differences from the reference layout (the sweep's first, or its
    # `reference:`), per compared value (the SLO's metric, usd_per_hour,
    # usd_per_million_prompt_tokens): the mean per-seed difference and its 95% interval
    # over seeds (every layout ran the same seeds: the same workload draws); empty for the
    # reference itself
    deltas: dict[str, Interval] = field(default_factory=dict)
    reference: bool = False

    @property
    def label(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in self.config.items()) or "the scenario"

    def why(self, slo: SLO) -> Explanation:
        """Why this layout fails ``slo``: its value, tail and compute floor."""
        slo = dataclasses.replace(slo, scope=self.scope)
        return Explanation(slo, f"with the closest layout ({self.label})", self.facts, self.scope)


def layouts(
    sweep_path: str,
    slo: SLO,
    *,
    reps: int,
    sets: list[str] | None = None,
    log: Callable[[str], None] = lambda _m: None,
) -> list[Layout]:
    """Every configuration of a sweep, run ``reps`` times at its own load, with the SLO's
    metric, whether its mean meets the SLO, and its price (a ``cost:`` section needed)."""
    sweep = load_sweep(sweep_path)
    configs, scenarios = [], []
    for overrides, sc in sweep_with_sets(sweep, list(sets or [])):  # priced before any run
        _require_prices(sc, sweep_path)
        check_slo(slo, sc)
        configs.append({k: v for k, v in overrides.items() if k in sweep.columns})
        scenarios.append(sc)
    log(f"{len(configs)} configurations, {reps} replications each")
    out = []
    for cfg, sc in zip(configs, scenarios, strict=True):
        extra = replication_overrides(sc, reps)
        sums, runs = [], []
        for rep in range(reps):
            try:
                runs.append(api.run(sc, extra or None, sc.seed + rep))
                sums.append(runs[-1].summary)
            except InputError as e:
                label = ", ".join(f"{k}={v}" for k, v in cfg.items())
                raise InputError(f"configuration {label}: {e}") from None
        vals = [float(s.get(slo.metric, math.nan)) for s in sums]
        iv = mean_interval(vals)
        mean, half = iv.mean, iv.half
        probe = dict(sums[0])
        probe[slo.metric] = mean
        for t in slo.also:  # a joint SLO's further terms: on their means as well
            probe[t.metric] = sum(float(t.value(s)) for s in sums) / len(sums)
        usd = sums[0]["usd_per_hour"]
        per_m = sum(s["usd_per_million_prompt_tokens"] for s in sums) / len(sums)
        # (no line per layout here: the command prints the list once, when all are run)
        layout = Layout(cfg, mean, half, slo.met(probe), usd, per_m, sums, iv)
        layout.scope = sc.run.prompt_range
        if not layout.meets:  # why not, kept small (the runs themselves are let go)
            layout.facts = [run_facts(r, slo.scoped(sc)) for r in runs]
        out.append(layout)
    if len(out) > 1:
        paired_deltas(out, slo.metric, sweep.reference_index())
    return out


def _require_prices(sc: Scenario, sweep_path: str) -> None:
    """Refuse a layout without prices (no ``cost:`` section, or every price 0)."""
    if sc.cost is None or usd_per_hour(sc) == 0:
        raise InputError(
            "--cheapest needs prices: add a cost: section with at least one price above "
            "0 to the base scenario or the sweep's set (see docs/planning.md)",
            where=str(sweep_path),
        )


PRICES = ("usd_per_hour", "usd_per_million_prompt_tokens")


def paired_deltas(found: list[Layout], metric: str, reference: int = 0) -> None:
    """Mark ``found[reference]`` as the reference and give every other layout its paired
    differences from it (:attr:`Layout.deltas`): per seed, its ``metric`` and prices minus
    the reference's with the same seed (replication i of every layout ran seed base + i)."""
    ref = found[reference]
    ref.reference = True
    for x in found:
        if x is ref or len(x.summaries) != len(ref.summaries):
            continue
        for name in (metric, *PRICES):
            new = [float(s.get(name, math.nan)) for s in x.summaries]
            base = [float(s.get(name, math.nan)) for s in ref.summaries]
            x.deltas[name] = paired_interval(new, base)


def closest(found: list[Layout], slo: SLO) -> Layout | None:
    """The layout whose mean metric comes nearest the SLO (lowest for ``<=``/``<``,
    highest for ``>=``/``>``); None when no layout has a value."""
    ok = [x for x in found if math.isfinite(x.metric)]
    if not ok:
        return None
    if slo.op in ("<=", "<"):
        return min(ok, key=lambda x: x.metric)
    return max(ok, key=lambda x: x.metric)


def cheapest(found: list[Layout]) -> Layout | None:
    """The configuration that meets the SLO at the lowest cost per hour (ties: the first
    in the sweep's order); None when none meets it."""
    ok = [x for x in found if x.meets]
    return min(ok, key=lambda x: x.usd_per_hour) if ok else None
