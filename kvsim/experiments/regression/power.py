"""What a gate's seeds can detect: the warning ``kvsim baseline`` gives for a gated metric
whose minimum detectable change (80% power) is above :data:`POWER_LIMIT` of its mean or
its tolerance, and how many seeds would bring it under."""

from __future__ import annotations

import statistics
from typing import Any

from kvsim.experiments.regression.suite import MIN_SEEDS, Suite
from kvsim.results.uncertainty import detectable_change

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
    fewer than :data:`~.suite.MIN_SEEDS` seeds (no interval to have power; said elsewhere)."""
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
