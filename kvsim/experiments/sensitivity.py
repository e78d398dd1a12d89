"""Which assumptions an answer rests on (``kvsim sensitivity``): run the scenario with each
assumption moved down and up by a fraction, and rank them by how far the metric swings.

By default the assumptions are the profile's values marked as an assumption (L) or an
estimate (M) in its YAML file (a trailing ``# L ...`` or ``# M ...`` comment on the line
that sets a number, or a comment block just above it that starts so); ``--vary FIELD``
names fields instead. A field moves to value x (1 -
by) and x (1 + by) (whole numbers: rounded, at least one step, never below 1); the swing
is the metric's high-side value minus its low-side value. Every run uses the scenario's
seed (``reps`` seeds, averaged, with ``--reps``), so a swing is the field's effect and
not sampling noise between runs; the run-to-run noise itself is reported beside it when
there are several seeds. The tornado chart draws each field's two runs around the
baseline, the largest swing on top.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvsim.config.schema import Scenario
from kvsim.errors import InputError
from kvsim.experiments.capacity import OUTCOMES, replication_overrides
from kvsim.experiments.planner import NumericField, numeric_field

_LINE = re.compile(
    r"^(?P<indent>\s*)(?P<key>[A-Za-z_][\w]*):(?P<value>[^#]*)(?:#\s*(?P<mark>.*))?$"
)
MARKS = ("L", "M")  # assumption, estimate (HARDWARE.md's confidence letters)


def marked_fields(profile_file: Path, marks: tuple[str, ...] = MARKS) -> list[tuple[str, str]]:
    """(field path, mark) of every line of a profile YAML that sets a value and carries a
    trailing comment starting with one of ``marks`` (``L``, ``L/H``, ``M (...)``)."""

    def letter(comment: str) -> str | None:
        c = comment.strip()
        return c[0] if c[:1] in marks and (len(c) == 1 or not c[1].isalnum()) else None

    stack: list[tuple[int, str]] = []
    out = []
    pending: str | None = None  # a comment block above a key that starts with a mark
    in_comment = False
    for raw in profile_file.read_text(encoding="utf-8").splitlines():
        text = raw.strip()
        if text.startswith("#"):
            if not in_comment:
                pending = letter(text[1:])
            in_comment = True
            continue
        in_comment = False
        m = _LINE.match(raw)
        if not m:
            pending = None
            continue
        indent = len(m["indent"])
        while stack and stack[-1][0] >= indent:
            stack.pop()
        key, value = m["key"], m["value"].strip()
        if not value:  # a section: its keys follow, indented
            stack.append((indent, key))
            pending = None
            continue
        mark = letter(m["mark"] or "") or pending
        pending = None
        if mark:
            out.append((".".join([*(k for _, k in stack), key]), mark))
    return out


@dataclass
class Swing:
    """One assumption's effect on the metric."""

    path: str
    mark: str
    value: float
    low: float
    high: float
    metric_low: float
    metric_high: float
    field: NumericField

    @property
    def swing(self) -> float:
        return self.metric_high - self.metric_low

    def size(self) -> float:
        return abs(self.swing) if math.isfinite(self.swing) else math.inf


@dataclass
class Sensitivity:
    metric: str
    base: float
    noise: float  # spread of the base metric over seeds (0 with one seed)
    by: float
    swings: list[Swing]
    skipped: list[str]


def parse_by(text: str) -> float:
    """``25%`` or ``0.25``: a fraction in (0, 1)."""
    t = str(text).strip()
    try:
        x = float(t[:-1]) / 100 if t.endswith("%") else float(t)
    except ValueError:
        raise InputError(
            f"expected a fraction such as 25% or 0.25, got {t!r}", where="--by"
        ) from None
    if not 0 < x < 1:
        raise InputError(f"must be between 0% and 100% (exclusive), got {t}", where="--by")
    return x


def _moved(f: NumericField, by: float) -> tuple[float, float]:
    lo, hi = f.value * (1 - by), f.value * (1 + by)
    if f.integer:
        lo = max(1.0, min(round(lo), f.value - 1))
        hi = max(round(hi), f.value + 1)
    return lo, hi


def sensitivity(
    sc: Scenario,
    metric: str,
    *,
    vary: list[str] | None = None,
    by: float = 0.25,
    reps: int = 1,
    log: Callable[[str], None] = lambda _m: None,
) -> Sensitivity:
    """Run the scenario with each field moved down and up by ``by`` (see the module
    docstring) and rank the fields by the size of the metric's swing."""
    from kvsim import api
    from kvsim.profiles import profile_path

    if metric not in OUTCOMES and f"{metric}_s" in OUTCOMES:
        metric = f"{metric}_s"  # as --slo: the _s of times may be left out
    if metric not in OUTCOMES:
        raise InputError(
            f"unknown metric {metric!r}; choose one of {', '.join(OUTCOMES)}", where="--metric"
        )
    if reps < 1:
        raise InputError("must be >= 1", where="--reps")
    skipped: list[str] = []
    if vary:
        fields = [(p, "given") for p in vary]
    else:
        folder = Path(sc.source).parent if sc.source else None
        fields = marked_fields(profile_path(sc.profile, folder))
        if not fields:
            raise InputError(
                f"profile {sc.profile!r} marks no value L or M; name fields with --vary",
                where="sensitivity",
            )
    extra = replication_overrides(sc, reps)
    seeds = [sc.seed + i for i in range(reps)]

    def measure(overrides: dict[str, Any]) -> float:
        vals = []
        for seed in seeds:
            try:
                vals.append(float(api.run(sc, {**extra, **overrides}, seed).summary[metric]))
            except InputError as e:
                shown = ", ".join(f"{k}={v}" for k, v in overrides.items()) or "as given"
                raise InputError(f"with {shown} (seed {seed}): {e}") from None
        return sum(vals) / len(vals)

    base_vals = [float(api.run(sc, extra or None, s).summary[metric]) for s in seeds]
    base = sum(base_vals) / len(base_vals)
    if not math.isfinite(base):
        raise InputError(
            f"{metric} has no value in this scenario (NaN: e.g. usd_per_hour without a cost: "
            "section, or no request measured)",
            where="--metric",
        )
    noise = (max(base_vals) - min(base_vals)) if len(base_vals) > 1 else 0.0
    swings = []
    numeric = []
    for path, mark in fields:
        try:
            numeric.append((numeric_field(sc, path), mark))
        except InputError as e:
            if vary:  # a field the user named must be one kvsim can move
                raise InputError(e.reason, where=f"--vary {path}") from None
            skipped.append(f"{path} ({e.reason})")
    log(f"{len(numeric)} fields, 2 runs each, {reps} seed(s) per run")
    for i, (f, mark) in enumerate(numeric, 1):
        lo, hi = _moved(f, by)
        m_lo = measure({f.path: f.override(lo)})
        m_hi = measure({f.path: f.override(hi)})
        log(f"  [{i}/{len(numeric)}] {f.path}: {m_lo:.4g} .. {m_hi:.4g}")
        swings.append(Swing(f.path, mark, f.value, lo, hi, m_lo, m_hi, f))
    swings.sort(key=lambda s: -s.size())
    return Sensitivity(metric, base, noise, by, swings, skipped)


def table(result: Sensitivity) -> Any:
    import pandas as pd

    return pd.DataFrame(
        [
            {
                "field": s.path,
                "mark": s.mark,
                "value": s.value,
                "low": s.low,
                "high": s.high,
                f"{result.metric}_low": s.metric_low,
                f"{result.metric}_high": s.metric_high,
                "swing": s.swing,
            }
            for s in result.swings
        ]
    )


def tornado_plot(result: Sensitivity, path: Path) -> None:
    """Horizontal bars from the baseline to each field's low- and high-side runs."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = result.swings[::-1]  # largest on top
    fig, ax = plt.subplots(figsize=(8, max(2.5, 0.35 * len(rows) + 1.2)))
    y = list(range(len(rows)))
    base = result.base
    # the two sides side by side, so that one never hides the other
    ax.barh(
        [i + 0.2 for i in y],
        [s.metric_low - base for s in rows],
        height=0.4,
        left=base,
        color="#4c78a8",
        label=f"field -{result.by:.0%}",
    )
    ax.barh(
        [i - 0.2 for i in y],
        [s.metric_high - base for s in rows],
        height=0.4,
        left=base,
        color="#f58518",
        label=f"field +{result.by:.0%}",
    )
    ax.axvline(base, color="black", lw=1)
    if result.noise > 0:
        ax.axvspan(
            base - result.noise / 2,
            base + result.noise / 2,
            color="grey",
            alpha=0.2,
            label="seed-to-seed range",
        )
    ax.set_yticks(y, [f"{s.path} ({s.mark})" for s in rows], fontsize=8)
    ax.set_xlabel(result.metric)
    ax.set_title(f"sensitivity of {result.metric} (baseline {base:.4g})")
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
