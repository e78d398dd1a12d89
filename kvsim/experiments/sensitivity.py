"""Which assumptions an answer rests on (``kvsim sensitivity``): run the scenario with each
assumption moved down and up by a fraction, and rank them by how far the metric swings.

By default the assumptions are the profile's values marked as an assumption (L) or an
estimate (M) in its YAML file (a trailing ``# L ...`` or ``# M ...`` comment on the line
that sets a number, or a comment block just above it that starts so); ``--vary FIELD``
names fields instead. A field moves to value x (1 - by) and x (1 + by) (whole numbers:
rounded, at least one step); a field at 0 moves by an absolute step instead (1 for a
count, else ``by`` times :data:`ZERO_STEP` of its unit: 1 ms, 1 GB, 1 GB/s, 1/s or 1),
and says so.

The comparison is paired: every run (the value as given, each field's low and high side)
uses the same seeds, ``reps`` of them, hence the same workload draws (common random
numbers). A field's swing on seed s is the metric's high-side value minus its low-side
value, both on seed s; a side the scenario refuses (below a limit, past a node's capacity)
is skipped and listed, and the swing is then the other side's distance from the value as
given, on the same seed. The swing shown is the mean over seeds, with its 95% interval
(:func:`kvsim.results.uncertainty.paired_interval`). Beside the swings a noise row says
how far the metric moves between two independent replications of ``reps`` seeds each:
+- t95 x sd x sqrt(2 / reps), sd the metric's standard deviation over the seeds as given.
A swing whose paired interval contains 0 is marked "within noise": a field that only
perturbs the event path (a few events reordered, a batch formed differently) moves the
metric that much, either way, and lands inside the noise row. The pairing is the test: a
swing inside the noise row whose interval excludes 0 is real (every seed moved the same
way), only smaller than what separates two unpaired replications. With one seed there
is neither interval nor noise row, and the output says to give ``--reps 3``.

A field that does not describe the simulated system (the seed, the run: section, labels),
or that sits in a disabled section, is refused (``--vary``) or skipped (marked fields);
so is one whose moves change nothing the run computes (every request's record and every
outcome the same as the run as given: a value the run never reads, a limit never
reached). The tornado chart draws each field's two runs around the baseline, the
largest swing on top, with the swing's interval and the noise row; a field whose swing is
0 (it changed the run but not this metric) is listed, not drawn.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from dataclasses import field as dc_field
from pathlib import Path
from typing import Any

import matplotlib
import matplotlib.pyplot as plt
import pandas as pd

from kvsim import api
from kvsim.catalogue.compose import STACK
from kvsim.config.schema import Scenario
from kvsim.errors import InputError
from kvsim.experiments.planner import NumericField, fingerprint, numeric_field
from kvsim.experiments.replicate import PAIRED, replication_overrides
from kvsim.experiments.slo import OUTCOMES
from kvsim.plots.style import (
    LOG_SPAN,
    display_unit,
    metric_unit,
    text_outside,
    tick_text,
    unit_axis,
    wrap,
)
from kvsim.profiles import profile_path
from kvsim.results.uncertainty import (
    IDENTICAL,
    Interval,
    bound_keys,
    mean_interval,
    paired_interval,
)

ONE_SEED = (
    "one seed: no interval and no noise row, so a small swing cannot be told from noise "
    "(the event path moved); give --reps 3"
)

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
    if isinstance(profile, str):
        return marked_fields(profile_path(profile, folder))
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
    """One assumption's effect on the metric: per seed (the same seeds for every run), the
    metric at the field's low and high sides and as given."""

    path: str
    mark: str
    value: float
    low: float
    high: float
    metric_low: float  # mean over seeds; NaN for a side the scenario refused
    metric_high: float
    field: NumericField
    base: float = math.nan  # the metric as given (mean over seeds)
    refused: dict[str, str] = dc_field(default_factory=dict)  # side ("low"/"high"): why
    step: str = ""  # how a field at 0 was moved (an absolute step), else ""
    low_values: list[float] = dc_field(default_factory=list)  # per seed ([] when refused)
    high_values: list[float] = dc_field(default_factory=list)
    base_values: list[float] = dc_field(default_factory=list)

    def differences(self) -> tuple[list[float], list[float]]:
        """The paired (new, reference) values per seed whose differences are the swing:
        high against low, or a side against the value as given when the other is
        refused."""
        if "low" in self.refused:
            return self.high_values, self.base_values
        if "high" in self.refused:
            return self.base_values, self.low_values
        return self.high_values, self.low_values

    @property
    def swing(self) -> float:
        """High side minus low side (mean over seeds); with one side refused, the other
        side's distance from the value as given (signed the same way)."""
        if "low" in self.refused:
            return self.metric_high - self.base
        if "high" in self.refused:
            return self.base - self.metric_low
        return self.metric_high - self.metric_low

    @property
    def interval(self) -> Interval:
        """The swing's 95% interval over seeds (paired: seed s against seed s); NaN bounds
        with one seed (or without per-seed values)."""
        new, ref = self.differences()
        if not new or len(new) != len(ref):
            return Interval(self.swing, math.nan, math.nan, 1, "no per-seed values")
        return paired_interval(new, ref)

    def size(self) -> float:
        return abs(self.swing) if math.isfinite(self.swing) else math.inf


@dataclass
class Sensitivity:
    metric: str
    base: float
    # half-width of the noise row: how far the metric moves between two independent
    # replications of ``reps`` seeds (t95 x sd x sqrt(2 / reps)); NaN with one seed
    noise: float
    by: float
    swings: list[Swing]
    skipped: list[str]
    no_effect: list[str] = dc_field(default_factory=list)  # "path (mark)": runs unchanged
    base_values: list[float] = dc_field(default_factory=list)  # the metric as given, per seed

    @property
    def reps(self) -> int:
        return max(len(self.base_values), 1)

    def within_noise(self, s: Swing) -> bool:
        """Whether a swing cannot be told from noise: its paired 95% interval over the
        seeds contains 0. The pairing (both sides on the same seeds and workload draws)
        is the test; the noise row is shown beside it as the scale of an unpaired
        difference, which a swing can sit inside and still be sure. False with one seed
        (nothing to judge by: the report says so instead)."""
        iv = s.interval
        if iv.note == IDENTICAL:  # exact: a sure swing, or (0) none at all; never noise
            return False
        return math.isfinite(iv.lo) and iv.lo <= 0.0 <= iv.hi


def noise_row(values: list[float]) -> float:
    """How far a metric moves between two independent replications of ``len(values)``
    seeds each: t95 x sd x sqrt(2 / n) (sd over ``values``, t95 with n - 1 degrees of
    freedom), i.e. sqrt(2) times the half-width of the mean's interval; 0 for identical
    values, NaN for one."""
    iv = mean_interval(values, nonnegative=False)
    return math.sqrt(2.0) * iv.half if len(values) > 1 else math.nan


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

    def measure(overrides: dict[str, Any]) -> tuple[list[float], list[tuple[Any, ...]]]:
        vals, prints = [], []
        for seed in seeds:  # the same seeds as the value as given: paired
            res = api.run(sc, {**extra, **overrides}, seed)
            vals.append(float(res.summary[metric]))
            prints.append(fingerprint(res))
        return vals, prints

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
    noise = noise_row(base_vals)
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
        got: dict[str, tuple[list[float], list[tuple[Any, ...]]]] = {}
        refused: dict[str, str] = {}
        for side, x in (("low", lo), ("high", hi)):
            try:
                got[side] = measure({f.path: f.override(x)})
            except InputError as e:  # the scenario refuses this value: skip the side
                refused[side] = f"{f.path} = {f.show(x)}: {str(e).removeprefix('overrides: ')}"
        shown = " .. ".join(
            f"{_mean(got[s][0]):.4g}" if s in got else "refused" for s in ("low", "high")
        )
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
        v_lo = got["low"][0] if "low" in got else []
        v_hi = got["high"][0] if "high" in got else []
        swings.append(
            Swing(
                f.path,
                mark,
                f.value,
                lo,
                hi,
                _mean(v_lo),
                _mean(v_hi),
                f,
                base,
                refused,
                step,
                v_lo,
                v_hi,
                base_vals,
            )
        )
    swings.sort(key=lambda s: -s.size())
    return Sensitivity(metric, base, noise, by, swings, skipped, no_effect, base_vals)


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else math.nan


def report_lines(result: Sensitivity) -> list[str]:
    """The ranking as ``kvsim sensitivity`` prints it: one line per field (with several
    seeds its paired 95% interval and, where it cannot be told from noise, "within
    noise"), the noise row in its place by size, then the fields without effect, the
    sides refused, the fields moved by an absolute step, and the fields skipped."""
    by = result.by
    n = result.reps
    out = [
        f"{result.metric} = {result.base:.4g} as given (mean of {n} seed{'s' if n > 1 else ''}); "
        f"each field moved -{by:.0%} and +{by:.0%} (a field at 0 by an absolute step), "
        "largest swing first:",
        f"  {PAIRED}",
    ]
    if math.isfinite(result.noise):
        noise = (
            f"  noise row: +-{result.noise:.4g} (how far {result.metric} moves between two "
            f"independent replications of {n} seeds: t95 x sd over seeds x sqrt(2/{n})); a "
            'swing whose paired interval contains 0 is "within noise"'
        )
    else:
        noise = f"  {ONE_SEED}"
    out.append(noise)
    w = max((len(s.path) for s in result.swings), default=5)
    row_at = next(
        (i for i, s in enumerate(result.swings) if s.size() <= result.noise), len(result.swings)
    )
    for i, s in enumerate(result.swings):
        if i == row_at and math.isfinite(result.noise):
            out.append(f"  {'-- noise row --':<{w}}       +-{result.noise:.4g}")
        f = s.field
        lo = "refused" if "low" in s.refused else f"{s.metric_low:.4g}"
        hi = "refused" if "high" in s.refused else f"{s.metric_high:.4g}"
        one = " (one side: from the value as given)" if s.refused else ""
        iv = s.interval
        if iv.note == IDENTICAL:  # every seed swung by exactly this much: no interval to show
            ci = ", the same on every seed"
        else:
            ci = f", 95% interval {iv.lo:+.4g} .. {iv.hi:+.4g}" if math.isfinite(iv.lo) else ""
        mark = "  within noise" if result.within_noise(s) else ""
        out.append(
            f"  {s.path:<{w}} ({s.mark})  {f.show(s.low)} -> {lo}   "
            f"{f.show(s.high)} -> {hi}   swing {s.swing:+.4g}{one}{ci}{mark}"
        )
    if row_at == len(result.swings) and math.isfinite(result.noise) and result.swings:
        out.append(f"  {'-- noise row --':<{w}}       +-{result.noise:.4g}")
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
    """sensitivity.csv: a row per field; ``swing`` is the mean per-seed (paired)
    difference, ``swing_lo`` and ``swing_hi`` its 95% interval (numbers; empty with one
    seed), ``noise`` the noise row's half-width (empty with one seed) and
    ``within_noise`` whether the swing cannot be told from it."""

    noise = result.noise if math.isfinite(result.noise) else None
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
                **bound_keys("swing", s.interval),
                "noise": noise,
                "within_noise": result.within_noise(s) if noise is not None else None,
                "seeds": result.reps,
                "step": s.step or f"-{result.by:.0%} / +{result.by:.0%}",
                "refused": "; ".join(f"{k} side: {v}" for k, v in s.refused.items()),
            }
            for s in result.swings
        ]
    )


def tornado_figure(result: Sensitivity) -> Any:
    """The tornado chart as a matplotlib figure: for each field whose swing is not 0, a
    bar from the baseline (0 on the axis: the axis is the change from it) to its low
    side's and its high side's metric (mean paired differences over seeds), with their
    95% intervals as error bars; the noise row as a shaded band around 0; the metric's
    unit on the axis, symmetric-log where the bars span more than 10x (a linear axis
    would squash every row beside one large swing); the largest swing on top."""

    matplotlib.use("Agg")

    drawn = [s for s in result.swings if s.swing != 0]
    zero = len(result.swings) - len(drawn)
    rows = drawn[::-1]  # largest on top
    fig, ax = plt.subplots(figsize=(9, max(3.0, 0.45 * len(rows) + 1.8)))
    y = list(range(len(rows)))
    base = result.base
    values = [0.0]  # distances from the baseline the axis must hold

    def side(s: Swing, name: str, vals: list[float]) -> tuple[float, float, float]:
        """(mean distance from the baseline, error below, error above); 0s if refused."""
        if name in s.refused or not vals:
            return 0.0, 0.0, 0.0
        iv = paired_interval(vals, s.base_values) if len(vals) == len(s.base_values) else None
        if iv is None or not math.isfinite(iv.lo):
            return _mean(vals) - base, 0.0, 0.0
        return iv.mean, iv.mean - iv.lo, iv.hi - iv.mean

    sides = []
    for offset, name, color in ((0.2, "low", "#4c78a8"), (-0.2, "high", "#f58518")):
        parts = [side(s, name, s.low_values if name == "low" else s.high_values) for s in rows]
        sides.append((offset, name, color, parts))
        values += [p[0] + p[2] for p in parts] + [p[0] - p[1] for p in parts]
    # the axis is the distance from the baseline; symmetric-log where the bars span more
    # than 10x (one large swing would otherwise squash every other row to nothing)
    moved = [abs(p[0]) for *_, parts in sides for p in parts if p[0] != 0]
    symlog = bool(moved) and max(moved) / min(moved) > LOG_SPAN
    if symlog:
        ax.set_xscale("symlog", linthresh=min(moved), linscale=0.5)
    for offset, name, _color, parts in sides:
        widths = [p[0] for p in parts]
        err = [[p[1] for p in parts], [p[2] for p in parts]]
        sign = "-" if name == "low" else "+"
        has_err = any(e > 0 for e in err[0] + err[1])
        ax.barh(
            [i + offset for i in y],
            widths,
            height=0.4,
            color=_color,
            xerr=err if has_err else None,
            error_kw={"elinewidth": 1, "capsize": 2, "ecolor": "black"},
            label=f"field {sign}{result.by:.0%}" + (" (paired 95% interval)" if has_err else ""),
        )
    ax.axvline(0.0, color="black", lw=1)
    if math.isfinite(result.noise) and result.noise > 0:
        ax.axvspan(
            -result.noise,
            result.noise,
            color="grey",
            alpha=0.25,
            label=f"noise row (2 replications of {result.reps} seeds)",
        )
        values += [-result.noise, result.noise]
    labels = [
        f"{s.path} ({s.mark}){' (one side)' if s.refused else ''}"
        + ("\nwithin noise" if result.within_noise(s) else "")
        for s in rows
    ]
    ax.set_yticks(y, labels, fontsize=8)
    if not rows:
        ax.set_yticks([])
        ax.text(0.5, 0.5, f"no field moved {result.metric}", ha="center", transform=ax.transAxes)
    # "ttft_p99 (ms)", not "ttft_p99_s (ms)": the unit is the axis's, not the name's
    label = result.metric.removesuffix("_s") if result.metric.endswith("_s") else result.metric
    label = f"change in {label} from the baseline"
    unit_axis(ax, "x", metric_unit(result.metric), values, label=label, log=False)
    if symlog:  # (unit_axis named the unit; say the scale too)
        ax.set_xlabel(ax.get_xlabel().removesuffix(")") + ", symmetric log scale)")
    lo, hi = min(values), max(values)
    pad = 0.05 * (hi - lo) if not symlog else 0.0
    ax.set_xlim(lo - pad, hi + pad) if not symlog else ax.set_xlim(lo * 1.3, hi * 1.3)
    seeds = (
        f"paired, mean of {result.reps} seeds"
        if result.reps > 1
        else "one seed: no intervals, no noise row (give --reps 3)"
    )
    dropped = f"; {zero} field(s) with zero swing not drawn" if zero else ""
    title = (
        f"sensitivity of {result.metric} to each field moved -{result.by:.0%} / "
        f"+{result.by:.0%} (baseline {_show(result.metric, base)}; {seeds}{dropped})"
    )
    fig.suptitle(wrap(title, int(fig.get_figwidth() * 11)), fontsize=10)
    fig.tight_layout()
    if rows:  # below the axes, in as many columns as fit the figure's width
        handles, names = ax.get_legend_handles_labels()
        for ncol in (3, 2, 1):
            legend = fig.legend(
                handles, names, loc="lower center", ncol=ncol, fontsize=8, frameon=False
            )
            fig.canvas.draw()
            height = legend.get_window_extent().height
            fig.tight_layout(rect=(0.0, height / fig.bbox.height + 0.01, 1.0, 1.0))
            if not text_outside(fig):
                break
            legend.remove()
    return fig


def _show(metric: str, value: float) -> str:
    """A metric's value with its unit (312 ms, 12.5 $/h, 37.2%)."""
    scale, name = display_unit(metric_unit(metric), [value])
    sep = "" if name == "%" else " "
    return f"{tick_text(value / scale)}{sep}{name}".strip()


def tornado_plot(result: Sensitivity, path: Path) -> None:
    """Write :func:`tornado_figure` to ``path`` (its format by the extension)."""

    fig = tornado_figure(result)
    try:
        fig.savefig(path, dpi=130)
    finally:
        plt.close(fig)
