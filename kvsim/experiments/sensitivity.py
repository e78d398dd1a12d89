"""Which assumptions an answer rests on (``kvsim sensitivity``): run the scenario with each
assumption moved down and up by a fraction, and rank them by how far the metric swings.

By default the assumptions are the profile's values marked as an assumption (L) or an
estimate (M) in its YAML file (a trailing ``# L ...`` or ``# M ...`` comment on the line
that sets a number, or a comment block just above it that starts so); ``--vary FIELD``
names fields instead. A field moves to value x (1 - by) and x (1 + by) (whole numbers:
rounded, at least one step); a field at 0 moves by an absolute step instead (1 for a
count, else ``by`` times :data:`ZERO_STEP` of its unit: 1 ms, 1 GB, 1 GB/s, 1/s or 1),
and says so. The swing is the metric's high-side value minus its low-side value; a side
the scenario refuses (below a limit, past a node's capacity) is skipped and listed, and
the swing is then the other side's distance from the value as given.

A field that does not describe the simulated system (the seed, the run: section, labels),
or that sits in a disabled section, is refused (``--vary``) or skipped (marked fields);
so is one whose moves change nothing the run computes (every request's record and every
outcome the same as the run as given: a value the run never reads, a limit never
reached). Every run uses the scenario's seed (``reps`` seeds, averaged, with ``--reps``),
so a swing is the field's effect and not sampling noise between runs; the run-to-run
noise itself is reported beside it when there are several seeds. The tornado chart draws
each field's two runs around the baseline, the largest swing on top.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from dataclasses import field as dc_field
from pathlib import Path
from typing import Any

from kvsim.config.schema import Scenario
from kvsim.errors import InputError
from kvsim.experiments.capacity import OUTCOMES
from kvsim.experiments.planner import NumericField, fingerprint, numeric_field
from kvsim.experiments.replicate import replication_overrides

_LINE = re.compile(
    r"^(?P<indent>\s*)(?P<key>[A-Za-z_][\w]*):(?P<value>[^#]*)(?:#\s*(?P<mark>.*))?$"
)
MARKS = ("L", "M")  # assumption, estimate (HARDWARE.md's confidence letters)
# what a field at 0 moves by, times --by: per unit kind (None: a plain number)
ZERO_STEP: dict[str | None, float] = {
    None: 1.0,
    "duration": 1e-3,
    "size": 1e9,
    "bandwidth": 1e9,
    "rate": 1.0,
}


def profile_marked_fields(profile: object, folder: Path | None) -> list[tuple[str, str]]:
    """The L/M fields of a scenario's profile: a named or file profile's marked lines; for
    a composition from the catalogue, its base's (or the stack file's) scenario fields and
    the roofline values the efficiency table gives (M or L)."""
    from kvsim.profiles import profile_path

    if isinstance(profile, str):
        return marked_fields(profile_path(profile, folder))
    from kvsim.catalogue.compose import STACK

    base = getattr(profile, "base", None)
    src = profile_path(base, folder) if base else STACK
    sections = ("node.", "tiers.", "remote.")
    derived = ("node.gpu", "node.gpus", "node.pcp", "node.hbm", "node.nvlink", "tiers.gpu.")
    fields = [
        (f, m)
        for f, m in marked_fields(src)
        if f.startswith(sections) and not f.startswith(derived)
    ]
    return [
        ("timing.roofline.achievable_flops", "M"),
        ("timing.roofline.hbm_efficiency", "M"),
        ("timing.roofline.fixed", "L"),
        *fields,
    ]


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
    metric_low: float  # NaN for a side the scenario refused
    metric_high: float
    field: NumericField
    base: float = math.nan  # the metric as given
    refused: dict[str, str] = dc_field(default_factory=dict)  # side ("low"/"high"): why
    step: str = ""  # how a field at 0 was moved (an absolute step), else ""

    @property
    def swing(self) -> float:
        """High side minus low side; with one side refused, the other side's distance
        from the value as given (signed the same way)."""
        if "low" in self.refused:
            return self.metric_high - self.base
        if "high" in self.refused:
            return self.base - self.metric_low
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
    no_effect: list[str] = dc_field(default_factory=list)  # "path (mark)": runs unchanged


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


def _moved(f: NumericField, by: float) -> tuple[float, float, str]:
    """The low and high values of a field, and how a field at 0 was moved ("" when by
    the fraction)."""
    v = f.value
    if v == 0:
        if f.integer:
            return -1.0, 1.0, "at 0: moved by 1 (an absolute step)"
        unit = ZERO_STEP[f.unit]
        step = by * unit
        return (
            -step,
            step,
            f"at 0: moved by {f.show(step)} (an absolute step: {by:.0%} of {f.show(unit)})",
        )
    d = abs(v) * by
    lo, hi = v - d, v + d
    if f.integer:
        lo, hi = float(min(round(lo), v - 1)), float(max(round(hi), v + 1))
    return lo, hi, ""


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
        fields = profile_marked_fields(sc.profile, folder)
        if not fields:
            raise InputError(
                f"profile {sc.profile!r} marks no value L or M; name fields with --vary",
                where="sensitivity",
            )
    numeric = []
    for path, mark in fields:  # (a field named with --vary is refused before any run)
        try:
            numeric.append((numeric_field(sc, path, where=f"--vary {path}"), mark))
        except InputError as e:
            if vary:  # a field the user named must be one that kvsim can move
                raise
            skipped.append(f"{path} ({e.reason})")
    extra = replication_overrides(sc, reps)
    seeds = [sc.seed + i for i in range(reps)]

    def measure(overrides: dict[str, Any]) -> tuple[float, list[tuple[Any, ...]]]:
        vals, prints = [], []
        for seed in seeds:
            res = api.run(sc, {**extra, **overrides}, seed)
            vals.append(float(res.summary[metric]))
            prints.append(fingerprint(res))
        return sum(vals) / len(vals), prints

    base_runs = [api.run(sc, extra or None, s) for s in seeds]
    base_vals = [float(r.summary[metric]) for r in base_runs]
    base_prints = [fingerprint(r) for r in base_runs]
    del base_runs
    base = sum(base_vals) / len(base_vals)
    if not math.isfinite(base):
        raise InputError(
            f"{metric} has no value in this scenario (NaN: e.g. usd_per_hour without a cost: "
            "section, or no request measured)",
            where="--metric",
        )
    noise = (max(base_vals) - min(base_vals)) if len(base_vals) > 1 else 0.0
    swings: list[Swing] = []
    no_effect: list[str] = []
    log(f"{len(numeric)} fields, 2 runs each, {reps} seed(s) per run")
    for i, (f, mark) in enumerate(numeric, 1):
        lo, hi, step = _moved(f, by)
        if not lo < f.value < hi:  # a value too small for its moves to change it
            reason = f"{f.show(f.value)} is too small to move by {by:.0%}"
            if vary:
                raise InputError(reason, where=f"--vary {f.path}")
            skipped.append(f"{f.path} ({reason})")
            continue
        got: dict[str, tuple[float, list[tuple[Any, ...]]]] = {}
        refused: dict[str, str] = {}
        for side, x in (("low", lo), ("high", hi)):
            try:
                got[side] = measure({f.path: f.override(x)})
            except InputError as e:  # the scenario refuses this value: skip the side
                refused[side] = f"{f.path} = {f.show(x)}: {str(e).removeprefix('overrides: ')}"
        shown = " .. ".join(f"{got[s][0]:.4g}" if s in got else "refused" for s in ("low", "high"))
        log(f"  [{i}/{len(numeric)}] {f.path}: {shown}")
        if not got:
            reason = f"neither side is valid: {refused['low']}; {refused['high']}"
            if vary:
                raise InputError(reason, where=f"--vary {f.path}")
            skipped.append(f"{f.path} ({reason})")
            continue
        if all(prints == base_prints for _, prints in got.values()):
            if vary:
                moved = " and ".join(f.show(x) for s, x in (("low", lo), ("high", hi)) if s in got)
                raise InputError(
                    f"the run is the same with it at {moved} as at {f.show(f.value)} (every "
                    "request, every outcome): the scenario does not depend on it (a value "
                    "it never reads, a limit never reached)",
                    where=f"--vary {f.path}",
                )
            sides = f"; {' and '.join(refused)} side refused" if refused else ""
            no_effect.append(f"{f.path} ({mark}{sides})")
            continue
        m_lo = got["low"][0] if "low" in got else math.nan
        m_hi = got["high"][0] if "high" in got else math.nan
        swings.append(Swing(f.path, mark, f.value, lo, hi, m_lo, m_hi, f, base, refused, step))
    swings.sort(key=lambda s: -s.size())
    return Sensitivity(metric, base, noise, by, swings, skipped, no_effect)


def report_lines(result: Sensitivity) -> list[str]:
    """The ranking as ``kvsim sensitivity`` prints it: one line per field, then the fields
    without effect, the sides refused, the fields moved by an absolute step, and the
    fields skipped."""
    by = result.by
    noise = f", seed-to-seed range (max - min) {result.noise:.4g}" if result.noise else ""
    out = [
        f"{result.metric} = {result.base:.4g} as given{noise}; each field moved -{by:.0%} "
        f"and +{by:.0%} (a field at 0 by an absolute step), largest swing first:"
    ]
    w = max((len(s.path) for s in result.swings), default=5)
    for s in result.swings:
        f = s.field
        lo = "refused" if "low" in s.refused else f"{s.metric_low:.4g}"
        hi = "refused" if "high" in s.refused else f"{s.metric_high:.4g}"
        one = " (one side: from the value as given)" if s.refused else ""
        out.append(
            f"  {s.path:<{w}} ({s.mark})  {f.show(s.low)} -> {lo}   "
            f"{f.show(s.high)} -> {hi}   swing {s.swing:+.4g}{one}"
        )
    if result.no_effect:
        out.append(
            "  no effect (the run is the same with it moved either way: never read here, "
            f"or a limit never reached): {', '.join(result.no_effect)}"
        )
    for s in result.swings:
        if s.step:
            out.append(f"  {s.path} {s.step}")
        for side, why in s.refused.items():
            out.append(f"  {side} side refused (skipped): {why}")
    for skipped in result.skipped:
        out.append(f"  skipped: {skipped}")
    return out


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
                "step": s.step or f"-{result.by:.0%} / +{result.by:.0%}",
                "refused": "; ".join(f"{k} side: {v}" for k, v in s.refused.items()),
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
        [0.0 if "low" in s.refused else s.metric_low - base for s in rows],
        height=0.4,
        left=base,
        color="#4c78a8",
        label=f"field -{result.by:.0%}",
    )
    ax.barh(
        [i - 0.2 for i in y],
        [0.0 if "high" in s.refused else s.metric_high - base for s in rows],
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
    labels = [f"{s.path} ({s.mark}){' (one side)' if s.refused else ''}" for s in rows]
    ax.set_yticks(y, labels, fontsize=8)
    ax.set_xlabel(result.metric)
    ax.set_title(f"sensitivity of {result.metric} (baseline {base:.4g})")
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
