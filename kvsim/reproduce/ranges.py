"""Unknowns as ranges: which assumed inputs of a study move a figure by more than 10% over
their documented ranges, and what the figure is over those ranges.

A study declares its inputs (:class:`Input`: a scenario field, the configurations it
applies to, its shipped value and a documented low and high end, with the reasoning for
the range) and an :data:`Evaluate` function giving figures' means with some inputs set to
an end of their range (each range run is a normal scenario run with ``--set``-style
overrides). :func:`screen` then

1. moves one input at a time to each end of its range, the others as shipped, and lists
   the input in a figure's ``sensitive_to`` when either end moves the figure's mean by
   more than ``threshold`` (10%) of its mean as shipped over the same seeds (paired
   seeds and named random streams: the difference is the input's, not the seeds');
2. for a figure with two or more sensitive inputs, also evaluates every corner of the
   ``corners`` (3) that moved it most, all at an end at once;
3. gives ``range_lo`` / ``range_hi``: the least and greatest of the figure's mean as
   shipped (over every seed of the reproduction) and its means at those ends and corners.
   A figure no input moves by more than the threshold gets ``range_lo = range_hi`` = its
   mean as shipped.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

THRESHOLD = 0.10  # an input is listed when it moves the figure by more than this
CORNERS = 3  # corners of up to this many sensitive inputs (2**3 settings) per figure
END_NAMES = ("lo", "hi")

# a setting: (input name, "lo" | "hi") pairs, sorted; () is every input as shipped
Setting = tuple[tuple[str, str], ...]
Evaluate = Callable[[Setting, Sequence[str]], Mapping[str, float]]


@dataclass(frozen=True)
class Input:
    """An assumed input of a study with its documented range. ``field`` is the scenario
    field the range moves (``kvsim run --set FIELD=VALUE``); ``configs`` are the
    configurations whose scenario files it applies to; ``shipped``, ``lo`` and ``hi``
    are values as ``--set`` takes them; ``source`` says why the range is what it is."""

    name: str
    field: str
    configs: tuple[str, ...]
    shipped: str
    lo: str
    hi: str
    source: str
    mark: str = "L"

    def value(self, end: str) -> str:
        if end not in END_NAMES:
            raise ValueError(f"an end is 'lo' or 'hi', got {end!r}")
        return self.lo if end == "lo" else self.hi

    def override(self, end: str) -> str:
        """The ``--set`` override putting this input at ``end``."""
        return f"{self.field}={self.value(end)}"


@dataclass
class Range:
    """One figure over its inputs' ranges: the inputs that move it by more than the
    threshold (declaration order), its range, and what every screened setting gave."""

    figure: str
    sensitive_to: tuple[str, ...]
    lo: float
    hi: float
    shipped: float  # the mean as shipped over the range runs' seeds (the paired base)
    moves: dict[str, tuple[float, float]] = field(default_factory=dict)  # input: lo, hi
    points: dict[Setting, float] = field(default_factory=dict)  # setting: mean


def relative_move(value: float, base: float) -> float:
    """(value - base) / |base|; infinite when the base is 0 (or a value not finite)
    and the value differs."""
    if value == base:
        return 0.0
    if not (math.isfinite(value) and math.isfinite(base)) or base == 0:
        return math.inf
    return (value - base) / abs(base)


def setting_text(setting: Setting, inputs: Mapping[str, Input]) -> str:
    """'name=value, ...' for a log line or a table."""
    return ", ".join(f"{n}={inputs[n].value(e)}" for n, e in setting) or "as shipped"


def screen(
    figures: Mapping[str, float],
    inputs: Sequence[Input],
    affects: Callable[[str, Input], bool],
    evaluate: Evaluate,
    *,
    threshold: float = THRESHOLD,
    corners: int = CORNERS,
) -> dict[str, Range]:
    """Screen ``figures`` (name: the mean as shipped over every seed) against ``inputs``.
    ``affects(figure, input)`` says whether the input applies to a configuration the
    figure comes from (only those pairs are run); ``evaluate(setting, names)`` gives the
    named figures' means (over the range seeds) with the setting's inputs at their ends."""
    names = list(figures)
    by_name = {i.name: i for i in inputs}
    if len(by_name) != len(inputs):
        raise ValueError("two inputs share a name")
    base = evaluate((), names)
    points: dict[str, dict[Setting, float]] = {f: {} for f in names}
    moves: dict[str, dict[str, tuple[float, float]]] = {f: {} for f in names}
    for inp in inputs:
        figs = [f for f in names if affects(f, inp)]
        if not figs:
            continue
        ends: dict[str, Mapping[str, float]] = {}
        for end in END_NAMES:
            setting: Setting = ((inp.name, end),)
            ends[end] = evaluate(setting, figs)
            for f in figs:
                points[f][setting] = float(ends[end][f])
        for f in figs:
            moves[f][inp.name] = (
                relative_move(float(ends["lo"][f]), float(base[f])),
                relative_move(float(ends["hi"][f]), float(base[f])),
            )

    def size(f: str, name: str) -> float:
        return max(abs(m) for m in moves[f][name])

    sensitive = {
        f: tuple(i.name for i in inputs if i.name in moves[f] and size(f, i.name) > threshold)
        for f in names
    }
    # corners: every combination of ends of the (up to) `corners` inputs moving a figure most
    groups: dict[tuple[str, ...], list[str]] = {}
    for f in names:
        if len(sensitive[f]) >= 2 and corners >= 2:
            top = sorted(sensitive[f], key=lambda n, f=f: -size(f, n))[:corners]
            groups.setdefault(tuple(sorted(top)), []).append(f)
    for top, figs in groups.items():
        for ends_ in itertools.product(END_NAMES, repeat=len(top)):
            setting = tuple(zip(top, ends_, strict=True))
            got = evaluate(setting, figs)
            for f in figs:
                points[f][setting] = float(got[f])
    out = {}
    for f in names:
        mean = float(figures[f])
        chosen = set(sensitive[f])
        seen = [
            v for s, v in points[f].items() if {n for n, _ in s} <= chosen and not math.isnan(v)
        ]
        values = [mean, *seen] if chosen else [mean]
        lo, hi = min(values), max(values)
        out[f] = Range(f, sensitive[f], lo, hi, float(base[f]), moves[f], points[f])
    return out


VERDICTS = {
    "inside interval": "the study's value lies inside kvsim's 95% interval over seeds",
    "inside range": "outside the interval, inside the figure's range over its sensitive inputs",
    "outside both": "outside the interval and outside the range",
}
NO_RANGES_VERDICTS = {
    "inside interval": VERDICTS["inside interval"],
    "outside interval": "outside the interval (ranges not run: --no-ranges)",
}


def verdict(
    paper: float | None,
    lo: float,
    hi: float,
    range_lo: float | None,
    range_hi: float | None,
) -> str | None:
    """Where the study's value lies: inside kvsim's interval [lo, hi], inside the range
    [range_lo, range_hi], or outside both (None without a study value; 'outside
    interval' when no range was computed)."""
    if paper is None:
        return None
    if lo <= paper <= hi:
        return "inside interval"
    if range_lo is None or range_hi is None:
        return "outside interval"
    if range_lo <= paper <= range_hi:
        return "inside range"
    return "outside both"
