"""Planning questions at the scenario's own load: the smallest value of one field that
meets an SLO (``kvsim capacity --minimize``), and the cheapest layout of a sweep that
meets it (``kvsim capacity --sweep ... --cheapest``).

Both run the scenario as it is (no load scaling), ``reps`` replications each (seeds
base, base+1, ...; a trace is resampled per seed, as everywhere). ``--minimize`` bisects
the field per replication, assuming more is never worse (a bigger tier, more engines or
servers, a faster link); the replications' thresholds give the answer's spread. A field
is numeric when its value is a number: a count, or a size, bandwidth, duration or rate
(written back in base units); a field where more can be worse (a latency, a T0) is not
one to minimize. ``--cheapest`` needs a ``cost:`` section: a configuration
meets the SLO when the mean of its metric over the replications does, and the cheapest of
those by ``usd_per_hour`` wins.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kvsim.config.schema import Scenario, field_unit
from kvsim.errors import InputError
from kvsim.experiments.capacity import SLO, replication_overrides
from kvsim.results.metrics import mean_ci95
from kvsim.units import UNIT_WRITERS, parse_bandwidth, parse_duration, parse_rate, parse_size

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
        if self.integer:
            return str(int(x))
        from kvsim.units import fmt_bytes, fmt_duration

        if self.unit == "size":
            return fmt_bytes(x)
        if self.unit == "bandwidth":
            return f"{fmt_bytes(x)}/s"
        if self.unit == "duration":
            return fmt_duration(x)
        return f"{x:.4g}{'/s' if self.unit == 'rate' else ''}"


def numeric_field(sc: Scenario, path: str) -> NumericField:
    """The field at ``path`` (``tiers.host.capacity``) if it holds a number, else an
    InputError naming it."""
    where = f"--minimize {path}"
    node: Any = sc
    parts = path.split(".")
    for i, part in enumerate(parts):
        fields = getattr(type(node), "model_fields", None)
        if not fields or part not in fields:
            done = ".".join(parts[:i]) or "the scenario"
            raise InputError(f"{done} has no field {part!r}", where=where)
        info = fields[part]
        node = getattr(node, part)
    value = node
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        shown = "null" if value is None else type(value).__name__
        raise InputError(f"not a numeric field (it holds {shown})", where=where)
    if not math.isfinite(value):
        raise InputError(f"not a finite number ({value})", where=where)
    unit = field_unit(info.annotation, info.metadata)
    return NumericField(path, float(value), isinstance(value, int), unit)


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

    @property
    def mean(self) -> float:
        return sum(self.values) / len(self.values)

    @property
    def ci95(self) -> float:
        return mean_ci95(self.values)[1]


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
    from kvsim import api

    f = numeric_field(sc, path)
    lo, hi = parse_range(f, span)
    if not 0 < tol < 1:
        raise InputError(f"must be in (0, 1), got {tol}", where="--tol")
    extra = replication_overrides(sc, reps)
    evaluations = 0

    def meets(x: float, seed: int) -> bool:
        nonlocal evaluations
        evaluations += 1
        try:
            summary = api.run(sc, {**extra, path: f.override(x)}, seed).summary
        except InputError as e:
            raise InputError(
                f"with {path} = {f.show(x)} (seed {seed}): {e}; give a --range the scenario accepts"
            ) from None
        return slo.met(summary)

    def close(a: float, b: float) -> bool:
        if f.integer:
            return b - a <= 1
        return b - a <= tol * b

    values = []
    at_bottom = 0  # replications where the bottom of the range already met the SLO
    for rep in range(reps):
        seed = sc.seed + rep
        if not meets(hi, seed):
            raise InputError(
                f"the SLO ({slo}) fails even with {path} = {f.show(hi)} (seed {seed}); "
                "widen --range, or the SLO depends on something else"
            )
        if meets(lo, seed):
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
    return Minimum(slo, f, values, evaluations, (lo, hi), at_bottom)


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
    from kvsim import api
    from kvsim.experiments.capacity import sweep_with_sets
    from kvsim.experiments.sweep import load_sweep
    from kvsim.results.records import usd_per_hour

    sweep = load_sweep(sweep_path)
    configs, scenarios = [], []
    for overrides, sc in sweep_with_sets(sweep, list(sets or [])):  # priced before any run
        if sc.cost is None or usd_per_hour(sc) == 0:
            raise InputError(
                "--cheapest needs prices: add a cost: section with at least one price above "
                "0 to the base scenario or the sweep's set (see docs/planning.md)",
                where=str(sweep_path),
            )
        configs.append({k: v for k, v in overrides.items() if k in sweep.columns})
        scenarios.append(sc)
    log(f"{len(configs)} configurations, {reps} replications each")
    out = []
    for cfg, sc in zip(configs, scenarios, strict=True):
        extra = replication_overrides(sc, reps)
        sums = []
        for rep in range(reps):
            try:
                sums.append(api.run(sc, extra or None, sc.seed + rep).summary)
            except InputError as e:
                label = ", ".join(f"{k}={v}" for k, v in cfg.items())
                raise InputError(f"configuration {label}: {e}") from None
        vals = [float(s.get(slo.metric, math.nan)) for s in sums]
        mean, half = mean_ci95(vals)
        probe = dict(sums[0])
        probe[slo.metric] = mean
        label = ", ".join(f"{k}={v}" for k, v in cfg.items())
        usd = sums[0]["usd_per_hour"]
        per_m = sum(s["usd_per_million_prompt_tokens"] for s in sums) / len(sums)
        layout = Layout(cfg, mean, half, slo.met(probe), usd, per_m, sums)
        log(
            f"  {label}: {slo.metric} {mean:.4g} ({'meets' if layout.meets else 'fails'}), "
            f"${usd:,.2f}/h"
        )
        out.append(layout)
    return out


def cheapest(found: list[Layout]) -> Layout | None:
    """The configuration that meets the SLO at the lowest cost per hour (ties: the first
    in the sweep's order); None when none meets it."""
    ok = [x for x in found if x.meets]
    return min(ok, key=lambda x: x.usd_per_hour) if ok else None
