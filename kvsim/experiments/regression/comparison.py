"""Comparing a suite's new runs with its baseline: per entry, load point and metric a
:class:`Comparison` of paired per-seed differences against the tolerance (its verdict and
the lines that explain it), gathered in a :class:`CheckResult` by :func:`compare`."""

from __future__ import annotations

import functools
import math
import statistics
from dataclasses import dataclass, field
from typing import Any

from kvsim.errors import InputError
from kvsim.experiments.regression.baseline import check_baseline, check_baseline_doc
from kvsim.experiments.regression.suite import (
    MIN_SEEDS,
    Direction,
    Suite,
    default_direction,
    few_seeds_note,
)
from kvsim.experiments.sweep.spec import counted
from kvsim.results.provenance import differences, environment
from kvsim.results.uncertainty import IDENTICAL, Interval, detectable_change, paired_interval


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
        spread instead (:data:`~.power.ESTIMATE`)."""
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
    # load points where an entry's SLO (its `slo:`) is missed on the new runs' means: each
    # a line, each a failure (exit 1)
    slo_misses: list[str] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        """A regression, a metric with no value, or an entry's SLO missed."""
        return bool(self.failures or self.slo_misses)

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
    misses = [
        f"{e['id']} @ {p['load']:g}x load: {slo_miss_text(p['slo'])}"
        for e in new["entries"]
        for p in e["points"]
        if isinstance(p.get("slo"), dict) and not p["slo"]["met"]
    ]
    return CheckResult(comparisons, notes, provenance_note(baseline), misses)


def slo_miss_text(point: dict[str, Any]) -> str:
    """A missed SLO at a load point: the SLO and each term's mean over the seeds."""
    got = ", ".join(f"{m} {v:.4g}" for m, v in point["values"].items())
    return f"{point['text']} missed (means over seeds: {got})"


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
