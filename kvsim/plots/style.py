"""What every kvsim figure shares: saving (all or nothing, headless Agg backend), wrapped
titles, axes in human units with plain tick numbers, and labels that fit the figure."""

from __future__ import annotations

import math
import os
import textwrap
import warnings
from collections.abc import Sequence
from itertools import pairwise
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
from matplotlib.text import Text
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from kvsim.results.writers import refuse_link, write_file


def save(fig: plt.Figure, path: str | os.PathLike[str], in_folder: bool = False) -> Path:
    """Save a figure all or nothing (a hidden temporary file renamed into place); the
    format is the file's extension. ``in_folder``: a figure of kvsim's own naming in an
    output folder, never written through a symlink (writers.refuse_link). Every figure
    module saves through ``style.save``: the one place to capture figures (as tests do)."""
    p = Path(path)
    fmt = p.suffix[1:].lower() or "png"
    try:
        return write_file(
            p,
            lambda tmp: fig.savefig(tmp, format=fmt, dpi=130, bbox_inches="tight"),
            in_folder=in_folder,
        )
    finally:
        plt.close(fig)


def check_figure_paths(paths: Sequence[Path]) -> None:
    """Before any figure is drawn: none of them may be a symlink or a folder (so a
    refusal leaves no figure half the set written)."""
    for p in paths:
        refuse_link(p)


def wrap(text: str, width: int) -> str:
    """``text`` wrapped to lines of at most ``width`` characters (on spaces)."""
    return "\n".join(textwrap.wrap(text, max(width, 10), break_long_words=False)) or text


def suptitle(fig: Any, text: str) -> None:
    """The figure's title, wrapped to its width, and a layout that keeps every text
    inside the figure."""
    width = int(fig.get_figwidth() * 11)
    fig.suptitle(wrap(text, width), fontsize=11)
    fig.tight_layout()


# ---- human units on axes -----------------------------------------------------------------


LOG_SPAN = 10.0  # an axis is logarithmic only where its values span more than this factor
# display units per unit kind, largest first: (base units per display unit, its name)
DISPLAY_UNITS: dict[str, tuple[tuple[float, str], ...]] = {
    "size": ((1e15, "PB"), (1e12, "TB"), (1e9, "GB"), (1e6, "MB"), (1e3, "kB"), (1.0, "B")),
    "bandwidth": (
        (1e12, "TB/s"),
        (1e9, "GB/s"),
        (1e6, "MB/s"),
        (1e3, "kB/s"),
        (1.0, "B/s"),
    ),
    "duration": ((3600.0, "h"), (1.0, "s"), (1e-3, "ms"), (1e-6, "µs"), (1e-9, "ns")),
    "rate": ((1.0, "per s"),),
    "fraction": ((0.01, "%"),),
    "usd_per_hour": ((1.0, "$/h"),),
    "usd": ((1.0, "$"),),
}


def metric_unit(metric: str) -> str | None:
    """The unit kind of a summary metric, by its name: times end in ``_s``, fractions in
    ``_frac`` or ``_ratio``, rates in ``_per_s``; bandwidths end in ``_bw``."""
    if metric == "usd_per_hour":
        return "usd_per_hour"
    if metric.startswith("usd_"):
        return "usd"
    if metric.endswith("_per_s"):
        return "rate"
    if metric.endswith("_s"):
        return "duration"
    if metric.endswith(("_frac", "_ratio")):
        return "fraction"
    if metric.endswith("_bw"):
        return "bandwidth"
    return None


def display_unit(unit: str | None, values: Any = ()) -> tuple[float, str]:
    """How an axis of ``unit`` shows its ``values``: (base units per shown unit, the
    unit's name), the largest unit in which the largest value is at least 1 ("GB" for
    6e11 bytes, "ms" for 0.3 s); (1, "") for a plain number."""
    units = DISPLAY_UNITS.get(unit or "")
    if not units:
        return 1.0, ""
    v = np.abs(np.asarray([float(x) for x in values], dtype=float))
    v = v[np.isfinite(v) & (v > 0)]
    top = float(v.max()) if v.size else 1.0
    if unit == "duration" and top < 2 * 3600:  # hours only for long spans
        units = units[1:]
    return next(((scale, name) for scale, name in units if top >= scale), units[-1])


def tick_text(v: float) -> str:
    """A tick's number as people read it: 0.25, 120, 2,000 (never 1e+12 or 2e-05)."""
    if v == 0 or not math.isfinite(v):
        return "0" if v == 0 else f"{v}"
    a = abs(v)
    if a >= 1e4:
        return f"{v:,.0f}"
    if a >= 1e-3:
        return f"{v:.4g}"
    return np.format_float_positional(v, precision=3, fractional=False, trim="-")


def unit_axis(
    ax: Any,
    axis: str,
    unit: str | None,
    values: Any,
    *,
    label: str,
    log: bool | None = None,
) -> tuple[float, str]:
    """Show ``axis`` ("x" or "y") of ``ax`` in a human unit (:func:`display_unit`), named
    in its label ("tiers.host.capacity (GB)"), with plain tick numbers; logarithmic when
    ``log``, or (``log`` None) where the values are all > 0 and span more than 10x.
    Returns the shown unit's scale and name."""
    scale, name = display_unit(unit, values)
    v = np.asarray([float(x) for x in values], dtype=float)
    v = v[np.isfinite(v)]
    if log is None:
        log = bool(v.size) and float(v.min()) > 0 and float(v.max()) / float(v.min()) > LOG_SPAN
    target = ax.xaxis if axis == "x" else ax.yaxis
    if log:
        (ax.set_xscale if axis == "x" else ax.set_yscale)("log")
        target.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        target.set_minor_formatter(NullFormatter())
    target.set_major_formatter(FuncFormatter(lambda x, _: tick_text(x / scale)))
    text = f"{label} ({name}{', log scale' if log else ''})" if name else label
    if log and not name:  # "cache capacity (tokens)" -> "cache capacity (tokens, log scale)"
        text = f"{label[:-1]}, log scale)" if label.endswith(")") else f"{label} (log scale)"
    (ax.set_xlabel if axis == "x" else ax.set_ylabel)(text)
    return scale, name


def seconds_axis(ax: Any, values: Any = (), label: str = "") -> None:
    """A y axis of seconds in one human unit (s, ms or µs, by the largest value), named
    in its label: "TTFT p99 (ms)"."""
    unit_axis(ax, "y", "duration", values, label=label or ax.get_ylabel(), log=False)


# ---- labels that fit ---------------------------------------------------------------------


def text_outside(fig: Any) -> list[str]:
    """Texts of ``fig`` (titles, labels, tick labels, legend entries) that extend outside
    the figure once drawn: none for a figure whose labels fit."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    box = fig.bbox
    hidden: set[int] = (
        set()
    )  # labels of ticks outside their axis's view: matplotlib does not draw them
    axes = [a for ax in fig.axes for a in (ax, *ax.child_axes)]
    for ax in axes:
        for axis in (ax.xaxis, ax.yaxis):
            lo, hi = sorted(axis.get_view_interval())
            eps = 1e-9 * max(abs(lo), abs(hi), 1e-300)
            for tick in [*axis.get_major_ticks(), *axis.get_minor_ticks()]:
                loc = tick.get_loc()
                if loc is None or not lo - eps <= loc <= hi + eps:
                    hidden.update((id(tick.label1), id(tick.label2)))
    out = []
    for t in fig.findobj(Text):
        if not t.get_visible() or not t.get_text().strip() or id(t) in hidden:
            continue
        e = t.get_window_extent(renderer)
        if e.x0 < box.x0 - 1 or e.y0 < box.y0 - 1 or e.x1 > box.x1 + 1 or e.y1 > box.y1 + 1:
            out.append(t.get_text())
    return out


def bar_width(labels: Sequence[str]) -> float:
    """Inches per bar that hold its label upright at a small font (its longest line)."""
    return max(0.8, 0.06 * max(len(line) for t in labels for line in t.split("\n")))


def fit_bar_labels(fig: Any, ax: Any, labels: Sequence[str]) -> None:
    """Bar labels that fit: upright, then smaller, then turned, until no two overlap and
    none leaves the figure (the layout redone at each try)."""
    for rotation, size in ((0, 8), (0, 7), (0, 6), (30, 7), (30, 6), (60, 6), (90, 6), (90, 5)):
        ax.set_xticks(
            range(len(labels)),
            labels,
            rotation=rotation,
            ha="right" if 0 < rotation < 90 else "center",
            rotation_mode="anchor" if 0 < rotation < 90 else "default",
            fontsize=size,
        )
        with warnings.catch_warnings():  # a try that does not fit is the next try's cue
            warnings.filterwarnings("ignore", "Tight layout not applied", UserWarning)
            fig.tight_layout()
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        boxes = [t.get_window_extent(renderer) for t in ax.get_xticklabels()]
        apart = all(a.x1 <= b.x0 + 1 for a, b in pairwise(boxes))
        inside = all(
            b.x0 >= fig.bbox.x0 - 1 and b.x1 <= fig.bbox.x1 + 1 and b.y0 >= fig.bbox.y0 - 1
            for b in boxes
        )
        if apart and inside:
            return
