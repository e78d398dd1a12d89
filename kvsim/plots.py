"""Figures (matplotlib, headless): labelled with units and the scenario name, saved as
PNG or SVG by the file's extension. Plotting is an edge: nothing in the core imports it."""

from __future__ import annotations

import math
import os
import warnings
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from kvsim.errors import InputError, clean
from kvsim.physics.costmodel import GIB, CostModel


def _save(fig: plt.Figure, path: str | os.PathLike[str], in_folder: bool = False) -> Path:
    """Save a figure all or nothing (a hidden temporary file renamed into place); the
    format is the file's extension. ``in_folder``: a figure of kvsim's own naming in an
    output folder, never written through a symlink (writers.refuse_link)."""
    from kvsim.results.writers import write_file

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


def costmodel_plot(
    model: CostModel,
    paths: Sequence[Mapping[str, Any]],
    path: str | os.PathLike[str],
    recompute: Callable[[int], float] | None = None,
    title: str = "",
) -> Path:
    """Restore time against prompt length, one line per restore path of ``paths`` (the
    rows ``kvsim costmodel`` prints: ``path``, ``bandwidth``, ``t0_s``; nothing else is
    drawn), recompute for reference; each crossover marked where a line meets the
    recompute line. Line labels are :func:`costmodel_label` of their row."""
    tokens = np.linspace(1024, 131072, 256)
    # (constrained: the legend below the axes gets its room, the axes keep the width)
    fig, ax = plt.subplots(figsize=(7.5, 5.6), layout="constrained")
    linear = [model.recompute(t) for t in tokens]
    ax.plot(
        tokens / 1000,
        linear,
        color="black",
        lw=2,
        label=f"recompute S/R (R = {model.rate / 1000:.1f}k tok/s)",
    )
    if recompute is not None:
        ax.plot(
            tokens / 1000,
            [recompute(int(t)) for t in tokens],
            color="black",
            lw=1,
            ls=":",
            label="recompute, step model (super-linear)",
        )
    for row in paths:
        bw = float(row["bandwidth"])
        m = CostModel(model.kv_bytes, model.rate, float(row["t0_s"]), model.reference_tokens)
        restore = [m.restore(t, bw) for t in tokens]
        (line,) = ax.plot(tokens / 1000, restore, lw=1.5, label=costmodel_label(row))
        x = m.crossover(bw)
        if math.isfinite(x) and x <= tokens[-1]:
            ax.plot([x / 1000], [m.recompute(x)], "o", color=line.get_color())
            ax.annotate(
                f"{x / 1000:.1f}k",
                (x / 1000, m.recompute(x)),
                textcoords="offset points",
                xytext=(4, -12),
                fontsize=8,
            )
    ax.set_xlabel("prompt length (thousand tokens)")
    ax.set_ylabel("time to have the prompt's KV (s)")
    ax.set_title(
        title
        or f"restore vs recompute: T0 = {model.t0 * 1000:.0f} ms, "
        f"B* = {model.b_star / GIB:.3g} GiB/s"
    )
    ax.set_ylim(0, max(linear) * 1.05)
    ax.grid(alpha=0.3)
    # below the axes, in two columns: beside them it took half the figure's width
    fig.legend(loc="outside lower center", ncol=2, fontsize=7, frameon=False)
    return _save(fig, path)


def costmodel_label(row: Mapping[str, Any]) -> str:
    """The legend entry of a restore path's line: its name, bandwidth and T0, as the table
    prints them."""
    from kvsim.units import fmt_duration

    return (
        f"restore, {row['path']}: {float(row['bandwidth']) / GIB:.4g} GiB/s, "
        f"T0 {fmt_duration(float(row['t0_s']))}"
    )


def ttft_cdf_plot(
    series: Mapping[str, Sequence[float]],
    path: str | os.PathLike[str],
    title: str,
    in_folder: bool = False,
) -> Path:
    """Empirical CDFs of TTFT (log time axis, in s or ms), p50, p95 and p99 marked and
    given in the legend."""
    from kvsim.units import fmt_duration

    fig, ax = plt.subplots(figsize=(7, 4.2))
    shown: list[float] = []
    for label, values in series.items():
        v = np.sort(np.asarray(values, dtype=float))
        if v.size == 0:
            continue
        p50, p95, p99 = (float(np.quantile(v, q)) for q in (0.5, 0.95, 0.99))
        y = np.arange(1, v.size + 1) / v.size
        shown += [float(v[v > 0].min()) if (v > 0).any() else p50, float(v[-1])]
        (line,) = ax.step(
            v,
            y,
            where="post",
            label=wrap(
                f"{label}: p50 {fmt_duration(p50)}, p95 {fmt_duration(p95)}, "
                f"p99 {fmt_duration(p99)}",
                70,
            ),
        )
        ax.plot([p50, p95, p99], [0.5, 0.95, 0.99], "o", color=line.get_color(), ms=4)
    unit_axis(ax, "x", "duration", shown, label="TTFT", log=True)
    ax.set_ylabel("fraction of requests")
    ax.set_ylim(0, 1.02)
    ax.grid(alpha=0.3, which="both")
    ax.set_title(wrap(title, 70))
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    return _save(fig, path, in_folder)


# ---- one run ---------------------------------------------------------------------------

PARTS = (  # TTFT's parts (lost_s, on failed engines, only where some request lost time)
    ("lost_s", "lost (failed engine)"),
    ("queue_wait_s", "queue"),
    ("load_s", "load (prefetch wait, restore)"),
    ("compute_s", "compute"),
    ("store_s", "store copy"),
)
BANDS = ((0, 50), (50, 90), (90, 99), (99, 100))


def ttft_breakdown_plot(
    df: Any, path: str | os.PathLike[str], title: str, in_folder: bool = False
) -> Path:
    """Mean lost / queue / load / compute / store time of the requests in each TTFT
    percentile band, stacked (they sum to its mean TTFT): where the tail's time goes."""
    parts = [
        (c, name) for c, name in PARTS if c in df and (c != "lost_s" or (df[c].fillna(0) > 0).any())
    ]
    ttft = df["ttft_s"].to_numpy()
    edges = np.percentile(ttft, [b[0] for b in BANDS] + [100])
    fig, ax = plt.subplots(figsize=(7, 4.2))
    labels = []
    bottoms = np.zeros(len(BANDS))
    means = []
    for lo, hi, (a, b) in zip(edges[:-1], edges[1:], BANDS, strict=True):
        sel = (ttft >= lo) & (ttft <= hi) if b == 100 else (ttft >= lo) & (ttft < hi)
        part = df[sel]
        means.append([float(part[c].mean()) if len(part) else 0.0 for c, _ in parts])
        labels.append(f"p{a}-p{b}\n({int(sel.sum())} req)")
    means_arr = np.array(means)
    for j, (_, name) in enumerate(parts):
        ax.bar(labels, means_arr[:, j], bottom=bottoms, label=name)
        bottoms += means_arr[:, j]
    _seconds_axis(ax, bottoms, "mean time per request")
    ax.set_xlabel("requests by TTFT percentile band")
    ax.set_title(wrap(title, 70))
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    return _save(fig, path, in_folder)


def token_sources_plot(
    fractions: Mapping[str, float],
    path: str | os.PathLike[str],
    title: str,
    in_folder: bool = False,
    enabled: Collection[str] | None = None,
) -> Path:
    """Share of prompt tokens by where they came from. ``enabled``: the run's tiers (its
    summary's ``tiers``); a tier not among them (disabled) has no bar, where a 0% bar
    would read as a tier that served nothing; GPU and compute are always drawn. None (an
    older kvsim's summary, without tiers): every source."""
    fig, ax = plt.subplots(figsize=(6, 3.6))
    always = ("gpu", "compute")
    names = [n for n in fractions if enabled is None or n in always or n in enabled]
    values = [100 * fractions[n] for n in names]
    palette = ["#4c72b0", "#55a868", "#c44e52", "#8172b2", "#ccb974", "#937860"]  # 6 sources
    order = list(fractions)  # a source keeps its colour whichever are left out
    colours = [palette[order.index(n) % len(palette)] for n in names]
    bars = ax.bar(names, values, color=colours)
    for bar, v in zip(bars, values, strict=True):
        ax.annotate(
            f"{v:.1f}%",
            (bar.get_x() + bar.get_width() / 2, v),
            textcoords="offset points",
            xytext=(0, 3),
            ha="center",
            fontsize=8,
        )
    ax.set_ylabel("share of prompt tokens (%)")
    ax.set_ylim(0, max([*values, 1]) * 1.15)
    ax.set_title(wrap(title, 60))
    ax.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    return _save(fig, path, in_folder)


def engine_timeline_plot(
    df: Any,
    engines: int,
    path: str | os.PathLike[str],
    title: str,
    bins: int = 200,
    in_folder: bool = False,
) -> Path:
    """Requests in prefill (from their first step to their last chunk; batch-mates share a
    step, so this counts requests, not GPU time: the summary's gpu_busy_frac is that) and
    requests waiting, over simulated time, all engines."""
    start = float(df["arrival_s"].min())
    end = float(df["finish_s"].max())
    if not end > start:  # every request at one instant: a window of one second
        end = start + 1.0
    edges = np.linspace(start, end, bins + 1)
    width = edges[1] - edges[0]

    def covered(t: np.ndarray, starts: np.ndarray) -> np.ndarray:
        """sum over intervals of max(0, t - start), for each t (starts sorted)."""
        k = np.searchsorted(starts, t)
        csum = np.concatenate([[0.0], np.cumsum(starts)])
        return t * k - csum[k]

    def occupancy(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Time each bin spends inside the intervals [a, b], summed over intervals."""
        f = covered(edges, np.sort(a)) - covered(edges, np.sort(b))  # integral up to t
        return np.diff(f)

    fin = df["finish_s"].to_numpy() - df["store_s"].to_numpy()
    computing = occupancy(fin - df["compute_s"].to_numpy(), fin) / width
    waiting = occupancy(df["arrival_s"].to_numpy(), df["start_s"].to_numpy()) / width
    per, unit = _time_unit(end - start)
    mid = (edges[:-1] + edges[1:]) / 2 / per
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(8, 5), sharex=True)
    ax1.plot(mid, computing, lw=1)
    ax1.set_ylabel(f"requests in prefill\n({engines} engines)")
    ax1.set_ylim(0, None)
    ax1.grid(alpha=0.3)
    ax2.plot(mid, waiting, lw=1, color="#c44e52")
    ax2.set_ylabel("requests waiting\n(first wait)")
    ax2.set_xlabel(f"simulated time ({unit})")
    ax2.grid(alpha=0.3)
    ax1.set_title(wrap(title, 80))
    fig.tight_layout()
    return _save(fig, path, in_folder)


def _time_unit(span: float) -> tuple[float, str]:
    """Seconds per unit and the unit's name for a simulated-time axis ``span`` long."""
    if span > 2 * 3600:
        return 3600.0, "h"
    if span > 10 * 60:
        return 60.0, "min"
    return 1.0, "s"


def timeseries_plot(
    ts: Any, path: str | os.PathLike[str], title: str, in_folder: bool = False
) -> Path:
    """A run's time series (:func:`kvsim.results.timeseries.timeseries`) over simulated
    time, a panel each: TTFT p50 and p95, hit ratio, GPU busy, and the share of GPU
    compute time spent recomputing evicted tokens; one point per window, at its middle
    (empty windows leave gaps). A panel whose column the run did not record says so."""
    from matplotlib.ticker import FuncFormatter, PercentFormatter

    start = ts["window_start_s"].to_numpy(float)
    end = ts["window_end_s"].to_numpy(float)
    span = float(end.max() - start.min()) if len(ts) else 0.0
    per, unit = _time_unit(span)
    mid = (start + end) / 2 / per
    fig, axes = plt.subplots(4, 1, figsize=(8, 8.4), sharex=True)
    ax_t, ax_hit, ax_gpu, ax_re = axes

    def values(column: str) -> np.ndarray:
        v = ts[column].to_numpy(float) if column in ts else np.full(len(ts), np.nan)
        return np.where(np.isfinite(v), v, np.nan)

    def draw(ax: Any, column: str, label: str, scale: float = 1.0, **kw: Any) -> bool:
        v = values(column)
        if not np.isfinite(v).any():
            return False
        ax.plot(mid, v * scale, "o-", ms=2.5, lw=1, label=label, **kw)
        return True

    def none(ax: Any, what: str) -> None:
        ax.text(0.5, 0.5, f"{what}: not recorded", transform=ax.transAxes, ha="center", va="center")

    drawn = [draw(ax_t, f"ttft_{q}_s", f"TTFT {q}") for q in ("p50", "p95")]
    if any(drawn):
        ax_t.legend(fontsize=8, loc="upper left")
        ax_t.set_ylim(0, None)
    else:
        none(ax_t, "TTFT")
    ttfts = [v for q in ("p50", "p95") for v in values(f"ttft_{q}_s")]
    _seconds_axis(ax_t, ttfts, "TTFT")
    for ax, column, label, what in (
        (ax_hit, "hit_ratio", "hit ratio\n(% of prompt tokens)", "hit ratio"),
        (ax_gpu, "gpu_busy_frac", "GPU busy\n(% of engine time)", "GPU busy"),
        (
            ax_re,
            "gpu_recompute_frac",
            "recompute share\n(% of GPU compute)",
            "recomputed tokens",
        ),
    ):
        if not draw(ax, column, label, 100.0):
            none(ax, what)
        ax.set_ylabel(label)
        top = float(np.nanmax(values(column), initial=0.0))
        ax.set_ylim(0, max(105.0, min(105.0 * top, 1e6)))  # GPU work summed over overlapping spans
        ax.yaxis.set_major_formatter(PercentFormatter(100, decimals=0))
    for ax in axes:
        ax.grid(alpha=0.3)
    ax_re.set_xlabel(f"simulated time ({unit}; arrivals per window)")
    ax_re.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax_t.set_title(wrap(title, 80))
    fig.tight_layout()
    return _save(fig, path, in_folder)


# ---- reading an output folder (whatever state it is in) ----------------------------------

RUN_COLUMNS = (
    "warmup", "arrival_s", "start_s", "finish_s", "ttft_s",
    "queue_wait_s", "load_s", "compute_s", "store_s",
)  # fmt: skip


def read_table(path: Path, what: str) -> Any:
    """A parquet or CSV table kvsim wrote, or :class:`InputError` naming the file."""
    import pandas as pd

    from kvsim.files import check_regular

    check_regular(path, what=what)
    try:
        if path.suffix == ".parquet":
            return pd.read_parquet(path)
        return pd.read_csv(path)
    except (KeyboardInterrupt, MemoryError):
        raise
    except Exception as e:  # pyarrow, pandas and codec errors alike: a damaged file
        kind = "parquet" if path.suffix == ".parquet" else "CSV"
        # one short line; InputError escapes what is unsafe to print
        why = " ".join(str(e).replace(str(path), "").replace("''", "").split())[:100]
        raise InputError(
            f"not a readable {kind} {what} ({type(e).__name__}: {why})", where=str(path)
        ) from None


def require_columns(df: Any, columns: Sequence[str], path: Path, numeric: bool = True) -> None:
    """Refuse a table without ``columns`` or (``numeric``) with non-numeric ones."""
    import pandas as pd

    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise InputError(f"missing column(s): {', '.join(missing)}", where=str(path))
    if numeric:
        bad = [
            c
            for c in columns
            if not (pd.api.types.is_numeric_dtype(df[c]) or pd.api.types.is_bool_dtype(df[c]))
        ]
        if bad:
            raise InputError(f"column(s) not numeric: {', '.join(bad)}", where=str(path))


_TIME_COLUMNS = (
    "arrival_s", "start_s", "finish_s", "ttft_s",
    "queue_wait_s", "load_s", "compute_s", "store_s",
)  # fmt: skip
MAX_TIME_S = 2.0**32  # past this no kvsim time (nor TTFT) is written


def _row_where(path: Path, row: int) -> str:
    """A table's row as a place: ``file.csv:LINE`` (the header is line 1) or
    ``file.parquet (row N)``."""
    return f"{path}:{row + 2}" if path.suffix == ".csv" else f"{path} (row {row})"


def _require_times(df: Any, path: Path) -> None:
    """Refuse a requests table kvsim cannot have written, by the first row that shows it:
    a time negative, infinite or past 2**32 s (NaN is a dropped request's, and fine); a
    finished request (arrival, start, first token and TTFT all known) without its queue,
    restore, compute or store time, starting before it arrived, or ending before it
    started, or a TTFT that is not first token - arrival; a warm-up flag not 0/1."""
    for col in _TIME_COLUMNS:
        if col not in df.columns:
            continue
        v = df[col].to_numpy(float)
        bad = np.flatnonzero(~np.isnan(v) & ~((v >= 0) & (v <= MAX_TIME_S)))
        if len(bad):
            row = int(bad[0])
            raise InputError(
                f"column {col}: {float(v[row])!r} is not a time kvsim writes (>= 0 s, finite)",
                where=_row_where(path, row),
            )
    w = df["warmup"].to_numpy(float)
    bad = np.flatnonzero(~((w == 0) | (w == 1)))
    if len(bad):
        row = int(bad[0])
        raise InputError(
            f"column warmup: {float(w[row])!r} is not a flag kvsim writes (true/false)",
            where=_row_where(path, row),
        )
    t = {c: df[c].to_numpy(float) for c in _TIME_COLUMNS}
    done = np.isfinite(t["arrival_s"]) & np.isfinite(t["start_s"])
    done &= np.isfinite(t["finish_s"]) & np.isfinite(t["ttft_s"])
    slack = 1e-9 * np.maximum(1.0, np.nan_to_num(t["finish_s"]))
    checks = [
        (f"column {c}: missing (NaN) for a finished request", np.isnan(t[c]))
        for c in ("queue_wait_s", "load_s", "compute_s", "store_s")
    ]
    checks += [
        ("start_s is before arrival_s", t["start_s"] < t["arrival_s"] - slack),
        ("finish_s is before start_s", t["finish_s"] < t["start_s"] - slack),
        (
            "ttft_s is not finish_s - arrival_s",
            np.abs(t["ttft_s"] - (t["finish_s"] - t["arrival_s"])) > slack,
        ),
    ]
    for why, bad_rows in checks:
        hit = np.flatnonzero(done & bad_rows)
        if len(hit):
            raise InputError(
                f"{why}: not a requests table kvsim wrote", where=_row_where(path, int(hit[0]))
            )


def read_summary(path: Path) -> dict[str, Any]:
    """A run's summary.json with the fields the plots use, checked."""
    import json

    from kvsim.files import MAX_TABLE_BYTES, read_text

    text = read_text(path, what="summary", max_bytes=MAX_TABLE_BYTES)
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise InputError(
            f"not JSON: {e.msg} (column {e.colno}); damaged or truncated?",
            where=f"{path}:{e.lineno}",
        ) from None
    except RecursionError:
        raise InputError("not a kvsim summary (nested too deeply)", where=str(path)) from None
    if not isinstance(doc, dict):
        raise InputError("not a kvsim summary (expected an object)", where=str(path))
    name = doc.get("scenario")
    if not isinstance(name, str) or not name:
        raise InputError("field scenario: missing or not a name", where=str(path))
    engines = doc.get("engines", 1)
    if isinstance(engines, bool) or not isinstance(engines, int) or not 1 <= engines <= 1_000_000:
        raise InputError("field engines: not a positive whole number", where=str(path))
    src = doc.get("token_source_frac")
    if (
        not isinstance(src, dict)
        or not 0 < len(src) <= 64
        or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v <= 1
            for v in src.values()
        )
        or sum(src.values()) > 1 + 1e-6
    ):
        raise InputError(
            "field token_source_frac: not a mapping of 1 to 64 fractions (0 to 1, "
            "summing to at most 1)",
            where=str(path),
        )
    return doc


RUN_FIGURES = (
    "ttft_cdf", "ttft_breakdown", "token_sources", "engine_timeline", "timeseries", "tiers",
)  # fmt: skip
TIMESERIES_PLOT_COLUMNS = (
    "window_start_s", "window_end_s", "requests",
    "ttft_p50_s", "ttft_p95_s", "hit_ratio", "gpu_busy_frac", "gpu_recompute_frac",
)  # fmt: skip


def read_timeseries(path: Path) -> Any:
    """A run's timeseries.parquet (or .csv), checked as kvsim writes it: the columns the
    figure draws, numeric; at least one row; windows of finite times >= 0 with an end past
    their start; request counts >= 0; TTFTs NaN or times; fractions NaN or >= 0 (hit
    ratio and recompute share at most 1)."""
    df = read_table(path, "time-series table")
    require_columns(df, TIMESERIES_PLOT_COLUMNS, path)
    if df.empty:
        raise InputError("no rows", where=str(path))
    v = {c: df[c].to_numpy(float) for c in TIMESERIES_PLOT_COLUMNS}
    finite_time = {c: (v[c] >= 0) & (v[c] <= MAX_TIME_S) for c in v}
    checks = [
        ("window_start_s", ~finite_time["window_start_s"], "not a time kvsim writes"),
        ("window_end_s", ~finite_time["window_end_s"], "not a time kvsim writes"),
        ("window_end_s", ~(v["window_end_s"] > v["window_start_s"]), "not after window_start_s"),
        ("requests", ~((v["requests"] >= 0) & (v["requests"] <= 2.0**53)), "not a count"),
    ]
    for c in ("ttft_p50_s", "ttft_p95_s"):
        checks.append((c, ~np.isnan(v[c]) & ~finite_time[c], "not a TTFT kvsim writes"))
    for c, high in (("hit_ratio", 1.0), ("gpu_recompute_frac", 1.0), ("gpu_busy_frac", 1e6)):
        bad = ~np.isnan(v[c]) & ~((v[c] >= 0) & (v[c] <= high * (1 + 1e-9)))
        checks.append((c, bad, "not a fraction kvsim writes"))
    for c, bad, why in checks:
        hit = np.flatnonzero(bad)
        if len(hit):
            row = int(hit[0])
            raise InputError(
                f"column {c}: {float(v[c][row])!r} is {why}", where=_row_where(path, row)
            )
    return df


def _check_figure_paths(paths: Sequence[Path]) -> None:
    """Before any figure is drawn: none of them may be a symlink or a folder (so a
    refusal leaves no figure half the set written)."""
    from kvsim.results.writers import refuse_link

    for p in paths:
        refuse_link(p)


def run_plots(out_dir: str | os.PathLike[str], fmt: str = "png") -> list[Path]:
    """Every figure of one run from its --out folder (summary.json + requests table)."""
    d = Path(out_dir)
    summary = read_summary(d / "summary.json")
    table = d / "requests.parquet"
    if not table.exists() and not table.is_symlink():
        table = d / "requests.csv"
        if not table.exists() and not table.is_symlink():
            raise InputError(
                "no requests.parquet or requests.csv beside summary.json", where=str(d)
            )
    df = read_table(table, "requests table")
    require_columns(df, RUN_COLUMNS, table)
    _require_times(df, table)
    done = np.isfinite(df[["arrival_s", "start_s", "finish_s", "ttft_s"]].to_numpy(float)).all(1)
    df = df[done]
    m = df[~df["warmup"].astype(bool)]
    if m.empty:
        raise InputError("no finished requests after warm-up to plot", where=str(table))
    name = summary["scenario"]
    engines = int(summary.get("engines", 1))
    series = _run_timeseries(d, df)
    tiers = read_tier_counts(summary, d / "summary.json")  # {}: an older kvsim's summary
    cdf, breakdown, sources, timeline, over_time, per_tier = (d / f"{n}.{fmt}" for n in RUN_FIGURES)
    _check_figure_paths([cdf, breakdown, sources, timeline, over_time, per_tier])
    drawn = [
        ttft_cdf_plot({name: m["ttft_s"]}, cdf, f"{name}: TTFT CDF", in_folder=True),
        ttft_breakdown_plot(m, breakdown, f"{name}: where the time goes", in_folder=True),
        token_sources_plot(
            summary["token_source_frac"],
            sources,
            f"{name}: prompt tokens by source",
            in_folder=True,
            enabled=set(tiers) or None,  # (disabled tiers: no bar)
        ),
        engine_timeline_plot(
            df,
            engines,
            timeline,
            f"{name}: requests in prefill and waiting over time ({engines} engines)",
            in_folder=True,
        ),
        timeseries_plot(series, over_time, _timeseries_title(name, series), in_folder=True),
    ]
    if tiers:
        title = f"{name}: per tier and engine over the whole run (warm-up included)"
        drawn.append(tiers_plot(tiers, per_tier, title, in_folder=True))
    return drawn


def _timeseries_title(name: str, series: Any) -> str:
    from kvsim.units import fmt_duration

    w = series["window_end_s"] - series["window_start_s"]
    width = f"{fmt_duration(float(w.iloc[0]))} windows" if len(w) else "windows"
    return f"{name}: TTFT, hits and GPU time over the run ({width} of arrivals)"


def _run_timeseries(d: Path, df: Any) -> Any:
    """The folder's timeseries table, checked; for a folder without one (an older
    kvsim's), the same computed from its requests table in default windows, without the
    GPU's busy time (which needs the run's activity spans)."""
    for table in (d / "timeseries.parquet", d / "timeseries.csv"):
        if table.exists() or table.is_symlink():
            return read_timeseries(table)
    import pandas as pd

    from kvsim.config.schema import Run
    from kvsim.results.timeseries import timeseries

    # only the numeric columns it reads (a damaged optional one is left out, not read)
    keep = [c for c in df.columns if c == "decision" or pd.api.types.is_numeric_dtype(df[c])]
    return timeseries(df[keep], [], Run().timeseries_window, 1)


# ---- per tier and engine -----------------------------------------------------------------

#: the tiers in the order a lookup walks them
TIER_ORDER = ("gpu", "host", "nvme", "peer", "remote")
#: per-tier counters the tiers figure draws (summary["tiers"][tier] and its ``engines``)
TIER_COUNTS = ("hits", "misses", "evictions", "write_bytes", "read_bytes")
TIERS_ENGINE_BARS = 16  # more engines: one bar per tier (the mean engine, a min-max whisker)


def read_tier_counts(summary: Mapping[str, Any], path: Path) -> dict[str, dict[str, Any]]:
    """The counters of summary["tiers"] the tiers figure draws, checked: per tier (in
    lookup order) ``total`` (counter -> value) and ``engines`` (one counter -> value
    mapping per engine; empty when the summary has none). Counters a summary lacks (an
    older kvsim's) are left out; {} when it has none of them. A value kvsim never writes
    (negative, not finite, not a number) is refused, naming its field."""
    tiers = summary.get("tiers")
    if tiers is None:
        return {}
    if not isinstance(tiers, dict):
        raise InputError("field tiers: expected a mapping of tiers", where=str(path))

    def counts(obj: Any, field: str) -> dict[str, float]:
        if not isinstance(obj, dict):
            raise InputError(f"field {field}: expected a mapping", where=str(path))
        out = {}
        for k in TIER_COUNTS:
            if k not in obj:
                continue
            v = obj[k]
            ok = isinstance(v, (int, float)) and not isinstance(v, bool)
            if not ok or not math.isfinite(v) or not 0 <= v <= 2.0**63:
                raise InputError(
                    f"field {field}.{k}: {clean(repr(v), 40)} is not a count kvsim writes",
                    where=str(path),
                )
            out[k] = float(v)
        return out

    found: dict[str, dict[str, Any]] = {}
    for name in (*TIER_ORDER, *sorted(set(tiers) - set(TIER_ORDER), key=str)):
        if name not in tiers:
            continue
        shown = clean(str(name), 40)
        total = counts(tiers[name], f"tiers.{shown}")
        engines = tiers[name].get("engines", [])
        if not isinstance(engines, list) or len(engines) > 1_000_000:
            raise InputError(f"field tiers.{shown}.engines: expected a list", where=str(path))
        per = [counts(e, f"tiers.{shown}.engines[{i}]") for i, e in enumerate(engines)]
        if total or any(per):
            found[shown] = {"total": total, "engines": per}
    return found


def _tier_values(tier: Mapping[str, Any], key: str) -> tuple[list[float] | None, float | None]:
    """A counter of one tier: its value per engine (None: not kept per engine) and for
    the tier as a whole (None: not kept)."""
    per = [e[key] for e in tier["engines"] if key in e]
    whole = tier["total"].get(key)
    return (per if tier["engines"] and len(per) == len(tier["engines"]) else None), whole


def tiers_plot(
    tiers: Mapping[str, Mapping[str, Any]],
    path: str | os.PathLike[str],
    title: str,
    in_folder: bool = False,
) -> Path:
    """Per tier (in lookup order) and per engine, from :func:`read_tier_counts`: blocks
    the lookups asked it for (hits solid, misses hatched above them; the tier's hit
    ratio over its group), blocks evicted, bytes stored into it (``write_bytes``) and
    read out of it (``read_bytes``). Up to :data:`TIERS_ENGINE_BARS` engines get a bar
    each; with more, a tier gets one bar (the mean engine) with a whisker from the
    smallest to the largest engine. A counter kept only for the tier as a whole (the
    shared remote store's evictions; a summary without per-engine entries) is one
    outlined bar; a tier without the counter says n/a."""
    from matplotlib.patches import Patch

    names = list(tiers)
    n_eng = max((len(t["engines"]) for t in tiers.values()), default=0)
    each = 0 < n_eng <= TIERS_ENGINE_BARS
    # engine colours: tab20's, darker first, greys left out (grey: n/a)
    cmap = plt.get_cmap("tab20")
    palette = [cmap(i) for i in (*range(0, 20, 2), *range(1, 20, 2)) if i not in (14, 15)]
    colors = [palette[i % len(palette)] for i in range(max(n_eng, 1))]
    grey = "#8c8c8c"
    whole_style: dict[str, Any] = {"facecolor": "none", "edgecolor": "black", "linewidth": 1.0}
    x = np.arange(len(names), dtype=float)
    width = 0.8 / n_eng if each else 0.6
    whole_used = False  # a whole-tier bar above 0 was drawn
    drawn: set[int] = set()  # engines with a bar above 0 (the legend lists only those)

    def bars(ax: Any, key: str, under: str | None = None, **kw: Any) -> list[float]:
        """One counter's bars (stacked on ``under``'s); every bar top drawn."""
        nonlocal whole_used
        tops: list[float] = []
        for i, name in enumerate(names):
            per, whole = _tier_values(tiers[name], key)
            base_per, base_whole = _tier_values(tiers[name], under) if under else (None, None)
            if per is not None and each:
                at = x[i] - 0.4 + width * (np.arange(len(per)) + 0.5)
                bottom = np.asarray(base_per if base_per is not None else [0.0] * len(per))
                ax.bar(at, per, width, bottom=bottom, color=colors[: len(per)], **kw)
                tops += list(bottom + np.asarray(per))
                drawn.update(j for j, v in enumerate(per) if v > 0)
            elif per is not None:  # many engines: the mean engine, a whisker min..max
                a = np.asarray(per, dtype=float)
                b = float(np.mean(base_per)) if base_per is not None else 0.0
                mean = float(a.mean())
                err = [[mean - float(a.min())], [float(a.max()) - mean]]
                ax.bar(x[i], mean, width, bottom=b, color=colors[0], yerr=err, capsize=3, **kw)
                tops.append(b + float(a.max()))
            elif whole is not None:  # kept for the tier as a whole only
                b = base_whole if base_per is None and base_whole is not None else 0.0
                ax.bar(x[i], whole, width, bottom=b, **{**kw, **whole_style})
                tops.append(b + whole)
                whole_used = whole_used or whole > 0
            else:
                ax.annotate("n/a", (x[i], 0), textcoords="offset points", xytext=(0, 3),
                            ha="center", fontsize=8, color=grey)  # fmt: skip
        return tops

    def finish(ax: Any, tops: list[float], unit: str | None, label: str, what: str) -> None:
        ax.set_xticks(x, names)
        ax.set_xlim(-0.6, len(names) - 0.4)
        ax.set_xlabel("tier (in lookup order)")
        ax.set_title(what, fontsize=10)
        unit_axis(ax, "y", unit, tops or [0.0], label=label, log=False)
        top = max([*tops, 0.0])
        ax.set_ylim(0, top * 1.2 if top > 0 else 1.0)
        ax.grid(alpha=0.3, axis="y")

    fig, axes = plt.subplots(2, 2, figsize=(11, 7.5), layout="constrained")
    look, evicted, into, out_of = axes.flat
    tops = bars(look, "hits")
    tops += bars(look, "misses", "hits", alpha=0.4, hatch="///", edgecolor="white")
    finish(look, tops, None, "blocks looked up", "lookups: hits (solid), misses (hatched)")
    for i, name in enumerate(names):
        h, m = (tiers[name]["total"].get(k) for k in ("hits", "misses"))
        if h is not None and m is not None and h + m > 0:
            r = h / (h + m)
            shown = "<1%" if 0 < r < 0.005 else ">99%" if 0.995 <= r < 1 else f"{r:.0%}"
            look.annotate(f"{shown} hits", (x[i], max(tops) * 1.03),
                          ha="center", va="bottom", fontsize=8)  # fmt: skip
    finish(evicted, bars(evicted, "evictions"), None, "blocks evicted", "evictions")
    finish(into, bars(into, "write_bytes"), "size", "bytes stored into the tier",
           "bytes in (write_bytes)")  # fmt: skip
    finish(out_of, bars(out_of, "read_bytes"), "size", "bytes read out of the tier",
           "bytes out (read_bytes)")  # fmt: skip
    idle = [i for i in range(n_eng) if i not in drawn] if each else []
    if each:  # a legend entry only for what is drawn; engines with every counter 0 named
        handles = [Patch(color=colors[i], label=f"engine {i}") for i in sorted(drawn)]
    elif n_eng:
        handles = [Patch(color=colors[0], label=f"mean of {n_eng} engines (whisker: min to max)")]
    else:
        handles = []
    if whole_used:
        handles.append(Patch(**whole_style, label="the tier as a whole"))
    if handles:
        fig.legend(handles=handles, loc="outside lower center", ncol=min(len(handles), 9),
                   fontsize=8, frameon=False)  # fmt: skip
    if idle:
        shown = ", ".join(map(str, idle[:8])) + (", ..." if len(idle) > 8 else "")
        title = f"{title} (engine{'s' if len(idle) > 1 else ''} {shown}: every counter 0)"
    fig.suptitle(wrap(title, 90))
    return _save(fig, path, in_folder)


SWEEP_COLUMNS = ("run_id", "seed", "status", "ttft_p50_s", "ttft_p99_s")
CAPACITY_COLUMNS = ("configuration", "capacity_rps", "slo")
CAPACITY_BOUNDS = ("capacity_rps_lo", "capacity_rps_hi")  # the interval (older kvsim: ci95_rps)


SWEPT_ATTR = "swept"  # the results table's metadata: its swept columns (kvsim sweep's)


def read_sweep_results(path: Path) -> tuple[Any, list[str]]:
    """A sweep's results table and its swept columns: those its metadata lists (what
    ``kvsim sweep`` records in results.parquet), every one of which must be there; in a
    table without that metadata (an older kvsim's), those between run_id and seed. The
    TTFTs of its successful runs are checked as kvsim writes them."""
    df = read_table(path, "sweep results table")
    require_columns(df, SWEEP_COLUMNS, path, numeric=False)
    require_columns(df, ("ttft_p50_s", "ttft_p99_s"), path)
    swept = df.attrs.get(SWEPT_ATTR)
    if swept is None:
        cols = list(df.columns)
        start, stop = cols.index("run_id") + 1, cols.index("seed")
        columns = cols[start:stop] if start <= stop else []
    elif (
        not isinstance(swept, list)
        or len(swept) > 1000
        or not all(isinstance(c, str) and c not in SWEEP_COLUMNS for c in swept)
    ):
        raise InputError(
            f"its metadata ({SWEPT_ATTR!r}: the swept columns) is damaged", where=str(path)
        )
    else:
        columns = list(swept)
        missing = [c for c in columns if c not in df.columns]
        if missing:
            raise InputError(
                f"missing swept column(s) {', '.join(missing[:5])} (the sweep's metadata lists "
                f"{', '.join(columns[:5])}); damaged table?",
                where=str(path),
            )
    ok = (df["status"] == "ok").to_numpy()
    p50, p99 = (df[c].to_numpy(float) for c in ("ttft_p50_s", "ttft_p99_s"))
    for col, v in (("ttft_p50_s", p50), ("ttft_p99_s", p99)):
        bad = np.flatnonzero(ok & ~np.isnan(v) & ~((v >= 0) & (v <= MAX_TIME_S)))
        if len(bad):
            row = int(bad[0])
            raise InputError(
                f"column {col}: {float(v[row])!r} is not a TTFT kvsim writes (>= 0 s, finite)",
                where=_row_where(path, row),
            )
    bad = np.flatnonzero(ok & (p50 > p99 * (1 + 1e-9)))
    if len(bad):
        raise InputError(
            "ttft_p50_s is above ttft_p99_s: not a results table kvsim wrote",
            where=_row_where(path, int(bad[0])),
        )
    if "ttft_p95_s" in df.columns:  # (an older kvsim's table has none)
        require_columns(df, ("ttft_p95_s",), path)
        p95 = df["ttft_p95_s"].to_numpy(float)
        bad = np.flatnonzero(ok & ~np.isnan(p95) & ~((p95 >= 0) & (p95 <= MAX_TIME_S)))
        if len(bad):
            row = int(bad[0])
            raise InputError(
                f"column ttft_p95_s: {float(p95[row])!r} is not a TTFT kvsim writes "
                "(>= 0 s, finite)",
                where=_row_where(path, row),
            )
        bad = np.flatnonzero(ok & ((p50 > p95 * (1 + 1e-9)) | (p95 > p99 * (1 + 1e-9))))
        if len(bad):
            raise InputError(
                "ttft_p95_s is not between ttft_p50_s and ttft_p99_s: not a results table "
                "kvsim wrote",
                where=_row_where(path, int(bad[0])),
            )
    return df, columns


def percentiles(tables: Sequence[Any]) -> tuple[str, ...]:
    """The TTFT percentiles the sweep figures draw, a panel each: p50, p95 and p99, or
    p50 and p99 when a table has no p95 (an older kvsim's)."""
    has95 = all(
        "ttft_p95_s" in t.columns and np.isfinite(t["ttft_p95_s"].to_numpy(float)).any()
        for t in tables
    )
    return ("p50", "p95", "p99") if has95 else ("p50", "p99")


def read_capacity(path: Path) -> Any:
    """A capacity.csv, checked: its columns, numbers and at least one row. The interval
    is ``capacity_rps_lo`` and ``capacity_rps_hi``; an older kvsim's table has a
    half-width ``ci95_rps`` instead, read as the interval mean -+ it (never below 0)."""
    df = read_table(path, "capacity table")
    require_columns(df, CAPACITY_COLUMNS, path, numeric=False)
    legacy = "ci95_rps" in df.columns and not set(CAPACITY_BOUNDS) <= set(df.columns)
    bounds = ("ci95_rps",) if legacy else CAPACITY_BOUNDS
    require_columns(df, ("capacity_rps", *bounds), path)
    if df.empty:
        raise InputError("no rows", where=str(path))
    for c in ("capacity_rps", *bounds):
        v = df[c].to_numpy(float)
        bad = ~np.isnan(v) & ~(np.isfinite(v) & (v >= 0))
        if bad.any():
            row = int(np.argmax(bad))
            raise InputError(
                f"column {c}: {v[row]} is not a finite number >= 0", where=f"{path}:{row + 2}"
            )
    df = _capacity_bounds(df)
    lo, mid, hi = (
        df[c].to_numpy(float) for c in ("capacity_rps_lo", "capacity_rps", "capacity_rps_hi")
    )
    bad = np.isfinite(lo) & np.isfinite(hi) & ~((lo <= mid * (1 + 1e-9)) & (mid <= hi * (1 + 1e-9)))
    if bad.any():
        row = int(np.argmax(bad))
        raise InputError(
            "capacity_rps is not inside [capacity_rps_lo, capacity_rps_hi]",
            where=f"{path}:{row + 2}",
        )
    return df


# ---- sweeps and capacity -----------------------------------------------------------------


def _load_axis(columns: Sequence[str]) -> str | None:
    for c in columns:
        if c.endswith(("arrivals.rate", "time_scale")):
            return c
    return None


def _number(v: Any) -> float:
    """A swept value as a number in base units ("600 GB" -> 6e11, "2/s" -> 2); NaN when
    it is not a quantity (a policy name, say)."""
    if isinstance(v, bool):
        return math.nan
    if isinstance(v, (int, float)):
        return float(v)
    text = str(v).strip().strip('"')
    try:
        return float(text)
    except ValueError:
        pass
    from kvsim.units import parse_bandwidth, parse_duration, parse_rate, parse_size

    for parse in (parse_rate, parse_bandwidth, parse_size, parse_duration):
        try:
            return float(parse(text))
        except (ValueError, TypeError):
            continue
    return math.nan


def _seconds_axis(ax: Any, values: Any = (), label: str = "") -> None:
    """A y axis of seconds in one human unit (s, ms or µs, by the largest value), named
    in its label: "TTFT p99 (ms)"."""
    unit_axis(ax, "y", "duration", values, label=label or ax.get_ylabel(), log=False)


# ---- human units on axes -----------------------------------------------------------------

MIN_BAND_SEEDS = 3  # a band (an interval over seeds) is drawn from this many seeds on
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


def _models(annotation: Any) -> list[Any]:
    """The pydantic records an annotation holds (itself, or a union's or list's members)."""
    from typing import get_args

    from pydantic import BaseModel

    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for a in get_args(annotation) for m in _models(a)]


def _field_info(path: str) -> Any:
    """The schema's FieldInfo of the scenario field at a dotted path; None if it has none."""
    from kvsim.config.schema import Scenario

    candidates: list[Any] = [Scenario]
    info = None
    for part in path.split("."):
        info = next((m.model_fields[part] for m in candidates if part in m.model_fields), None)
        if info is None:
            return None
        candidates = _models(info.annotation)
    return info


def field_unit_of(path: str) -> str | None:
    """The unit kind ("size", "bandwidth", "duration", "rate") of a scenario field named
    by its dotted path (``tiers.host.capacity`` -> "size"), from the schema; None for a
    plain number, a name or a path the schema does not have."""
    from kvsim.config.schema import field_unit

    info = _field_info(path)
    return field_unit(info.annotation, info.metadata) if info is not None else None


def field_is_whole(path: str) -> bool:
    """Whether the scenario field at ``path`` holds a whole number (``cluster.engines``,
    ``remote.servers``): an axis of it ticks on whole numbers only."""
    from typing import get_args

    info = _field_info(path)
    if info is None:
        return False
    if info.annotation is int:
        return True
    args = get_args(info.annotation)
    return bool(args) and args[0] is int and not _models(info.annotation)


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
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

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


def value_text(path: str, value: Any) -> str:
    """A swept value as a legend or label shows it: booleans as YAML writes them
    (false), a number in a unit field in its human unit (600 GB), a policy with params
    as ``name(k=v)``, else as written."""
    from kvsim.config.schema import policy_text

    value = _plain(value)
    policy = policy_text(value)
    if policy is not None:
        return policy
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        unit = field_unit_of(path)
        if unit in ("size", "bandwidth", "duration"):
            scale, name = display_unit(unit, [value])
            return f"{tick_text(value / scale)} {name}"
        return f"{value:g}" if isinstance(value, float) else str(value)
    return str(value)


def config_text(fields: Sequence[str], values: Sequence[Any], sep: str = ", ") -> str:
    """A configuration as people read it: "tiers.host.capacity = 600 GB, tiers.nvme.enabled
    = false" (every field named in full, so the tier is never lost)."""
    return sep.join(f"{c} = {value_text(c, v)}" for c, v in zip(fields, values, strict=True))


def wrap(text: str, width: int) -> str:
    """``text`` wrapped to lines of at most ``width`` characters (on spaces)."""
    import textwrap

    return "\n".join(textwrap.wrap(text, max(width, 10), break_long_words=False)) or text


def text_outside(fig: Any) -> list[str]:
    """Texts of ``fig`` (titles, labels, tick labels, legend entries) that extend outside
    the figure once drawn: none for a figure whose labels fit."""
    from matplotlib.text import Text

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


def _spread(values: Any) -> tuple[float, float, float]:
    """Mean and 95% interval (Student t over seeds, never below 0: a TTFT); the mean
    three times under :data:`MIN_BAND_SEEDS` seeds, which draws no band (two seeds give
    an interval too wide to read: t = 12.7)."""
    from kvsim.results.uncertainty import mean_interval

    v = [float(x) for x in values if np.isfinite(float(x))]
    if not v:
        return math.nan, math.nan, math.nan
    iv = mean_interval(v)
    if len(v) < MIN_BAND_SEEDS or not math.isfinite(iv.lo):  # too few seeds: no band
        return iv.mean, iv.mean, iv.mean
    return iv.mean, iv.lo, iv.hi


def _slo_line(axes: Sequence[Any], slo: Any, qs: Sequence[str]) -> None:
    """The SLO's threshold as a dashed line on the axis of its metric (p50, p95 or p99)."""
    if slo is None:
        return
    for ax, q in zip(axes, qs, strict=True):
        if slo.metric == f"ttft_{q}_s":
            from kvsim.units import fmt_duration

            shown = f"SLO {slo.metric} {slo.op} {fmt_duration(slo.threshold)}"
            ax.axhline(slo.threshold, color="red", ls="--", lw=1, label=shown)
            ax.legend(fontsize=7)  # (the curves' legend on the last axis holds it too)


def _plain(value: Any) -> Any:
    """A table cell as plain Python (a numpy scalar's repr is noisy in a message)."""
    return value.item() if hasattr(value, "item") else value


def _sweep_table(d: Path, x: str | None) -> tuple[Any, list[str], str | None]:
    """A sweep folder's successful runs, its swept columns and its load axis (or None);
    the axis's values checked: numbers (or quantities), finite, >= 0, and > 0 for a load
    (an arrival rate or a time scale)."""
    results = d / "results.parquet"
    df, columns = read_sweep_results(results)
    if x and x not in columns:
        raise InputError(f"not a swept field; swept: {', '.join(columns) or 'none'}", where="--x")
    df = df[df["status"] == "ok"]
    axis = x or _load_axis(columns)
    if axis is not None and not df.empty:
        values = df[axis].map(_number)
        if values.isna().any():
            raise InputError(
                f"{axis} is not a number or quantity, so it cannot be an axis", where="--x"
            )
        v = values.to_numpy(float)
        load = _load_axis([axis]) is not None
        bad = np.flatnonzero(~(np.isfinite(v) & ((v > 0) if load else (v >= 0))))
        if len(bad):
            row = int(values.index[bad[0]])
            least = "> 0" if load else ">= 0"
            raise InputError(
                f"column {axis}: {_plain(df[axis].iloc[bad[0]])!r} is not a value kvsim sweeps "
                f"(finite, {least})",
                where=_row_where(results, row),
            )
    return df, columns, axis


def _seeds(df: Any, columns: Sequence[str]) -> int:
    """Seeds per configuration of a sweep table (the fewest any configuration has)."""
    if df.empty:
        return 0
    if not columns:
        return int(df["seed"].nunique())
    counts = df.groupby(list(columns), sort=False, dropna=False)["seed"].nunique()
    return int(counts.min()) if len(counts) and not math.isnan(counts.min()) else 0


def _seeds_text(n: int) -> str:
    """What a curve or bar is, by the seeds behind it."""
    if n >= MIN_BAND_SEEDS:
        return f"mean of {n} seeds, 95% band over seeds"
    if n == 2:
        return "mean of 2 seeds; no band under 3 seeds"
    return "one seed"


def _draw_curves(
    axes: Sequence[Any], df: Any, columns: list[str], x: str, prefix: str, qs: Sequence[str]
) -> None:
    """TTFT percentiles ``qs`` against the axis ``x``, one curve per configuration of the
    other swept fields (named in full in the legend: "tiers.nvme.enabled = false"): the
    mean over seeds, and a band for its 95% interval from 3 seeds on."""
    others = [c for c in columns if c != x]
    xs = df[x].map(_number)
    inverse = x.endswith("time_scale")  # a smaller time scale is more load
    df = df.assign(_x=1 / xs if inverse else xs)
    groups = df.groupby(others, sort=False) if others else [((), df)]
    for key, g in groups:
        key = key if isinstance(key, tuple) else (key,)
        label = prefix + (config_text(others, key) or "all")
        band = g.groupby("_x")["seed"].nunique().min() >= MIN_BAND_SEEDS
        for ax, q in zip(axes, qs, strict=True):
            pts = sorted((xv, *_spread(h[f"ttft_{q}_s"])) for xv, h in g.groupby("_x", sort=False))
            xv = [p[0] for p in pts]
            (line,) = ax.plot(xv, [p[1] for p in pts], "o-", label=wrap(label, 48), ms=3)
            if band:  # (a TTFT's interval never below 0: mean_interval clips it)
                low = np.maximum([p[2] for p in pts], 0.0)
                ax.fill_between(xv, low, [p[3] for p in pts], color=line.get_color(), alpha=0.15)


def sweep_plots(
    out_dir: str | os.PathLike[str],
    fmt: str = "png",
    x: str | None = None,
    title: str = "",
    slo: Any = None,
    overlay: Sequence[str | os.PathLike[str]] = (),
) -> list[Path]:
    """TTFT p50/p95/p99 against load, one curve per configuration (mean over seeds, with
    a 95% band over them), or, when nothing swept is a load, p50/p95/p99 bars per
    configuration with each one's paired difference from the reference below them (p50
    and p99 only for an older kvsim's table without p95); the SLO's
    threshold as a line; and, when the folder has a capacity.csv, the capacity of each
    configuration. ``overlay``: more sweep folders
    whose curves join this folder's on one figure (``overlay_ttft_vs_load``).

    Every table is read and checked, and every option matched to a figure that uses it,
    before anything is drawn: ``x``, ``slo`` and ``overlay`` act on the TTFT figure, so
    they are refused (InputError naming the option) where the folder gets none."""
    d = Path(out_dir)
    results = d / "results.parquet"
    cap = d / "capacity.csv"
    cdf = read_capacity(cap) if cap.exists() or cap.is_symlink() else None
    tables = []
    if results.exists() or results.is_symlink():
        tables.append((d, *_sweep_table(d, x)))
        for other in overlay:
            o = Path(other)
            if not (o / "results.parquet").exists():
                raise InputError("not a sweep folder (no results.parquet)", where=str(o))
            tables.append((o, *_sweep_table(o, x)))
        if tables[0][1].empty and cdf is None:
            raise InputError("no successful run to plot (every run failed)", where=str(results))
    draws: list[tuple[Path, Callable[[Path], Path]]] = []
    if tables and not tables[0][1].empty:
        df, columns, axis = tables[0][1], tables[0][2], tables[0][3]
        qs = percentiles([t[1] for t in tables] if axis is not None else [df])
        if slo is not None and slo.metric not in {f"ttft_{q}_s" for q in qs}:
            raise InputError(
                f"the sweep table has no {slo.metric} to draw the SLO on (an older kvsim's?)",
                where="--slo",
            )
        if axis is not None:
            for folder, t_df, _, t_axis in tables:
                if t_axis is None or t_df.empty:
                    raise InputError("no load axis to overlay (use --x)", where=str(folder))
            name = "overlay_ttft_vs_load" if overlay else "ttft_vs_load"
            draws.append(
                (
                    d / f"{name}.{fmt}",
                    lambda p: _load_curves(tables, p, title, slo, bool(overlay), qs),
                )
            )
        elif columns:  # a categorical sweep (policies, layouts): bars per configuration
            if overlay:
                raise InputError("overlays need a load axis (use --x)", where=str(d))
            draws.append(
                (
                    d / f"ttft_by_config.{fmt}",
                    lambda p: _config_bars(df, columns, p, title, slo, qs),
                )
            )
    if not draws:  # no TTFT figure: the options that act on it would be ignored
        why = (
            "every run failed"
            if tables and tables[0][1].empty
            else "nothing swept"
            if tables
            else "no results.parquet"
        )
        if slo is not None:
            raise InputError(f"{d} gets no TTFT figure ({why}) to draw the SLO on", where="--slo")
        if x:
            raise InputError(f"{d} gets no TTFT figure ({why}) to use it as an axis", where="--x")
        if overlay:
            raise InputError(
                f"gets no TTFT figure ({why}) to overlay {overlay[0]} on", where=str(d)
            )
    if cdf is not None:
        draws.append((d / f"capacity.{fmt}", lambda p: capacity_plot(cdf, p, title, True)))
    _check_figure_paths([p for p, _ in draws])
    return [draw(p) for p, draw in draws]


def _load_curves(
    tables: list[Any], path: Path, title: str, slo: Any, overlay: bool, qs: Sequence[str]
) -> Path:
    """The TTFT-percentiles figure of one sweep table (or several, overlaid) against its
    axis (a load, or the field given with --x), a panel per percentile of ``qs``; the
    axis in its field's unit, logarithmic where its values span more than 10x."""
    df, axis = tables[0][1], tables[0][3]
    fig, axes = plt.subplots(1, len(qs), figsize=(5 * len(qs), 4.4), sharex=True)
    for folder, t_df, t_cols, t_axis in tables:
        _draw_curves(axes, t_df, t_cols, t_axis, f"{folder.name}: " if overlay else "", qs)
    inverse = axis.endswith("time_scale")
    xs = [v for _, t_df, _, t_axis in tables for v in t_df[t_axis].map(_number)]
    if inverse:
        xs = [1 / v for v in xs]
    load = _load_axis([axis]) is not None
    _slo_line(axes, slo, qs)
    for ax, q in zip(axes, qs, strict=True):
        if inverse:
            unit_axis(ax, "x", None, xs, label=f"load (x the trace's rate = 1 / {axis})")
        else:
            unit_axis(ax, "x", field_unit_of(axis), xs, label=axis)
            if field_is_whole(axis) and ax.get_xscale() == "linear":  # a count: 1, 2, 3
                from matplotlib.ticker import MaxNLocator

                ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        values = pd_values(df, f"ttft_{q}_s")
        _seconds_axis(ax, values, f"TTFT {q}")
        if len(values) and values.min() > 0 and values.max() / values.min() > LOG_SPAN:
            unit_axis(ax, "y", "duration", values, label=f"TTFT {q}", log=True)
        elif ax.get_ylim()[0] < 0:  # a TTFT is never below 0: nor is its axis
            ax.set_ylim(bottom=0.0)
        ax.grid(alpha=0.3, which="both")
    if axes[-1].get_legend_handles_labels()[0]:  # nothing drawn when no run has a value
        axes[-1].legend(fontsize=7)
    against = f"load ({axis})" if load else axis
    seeds = _seeds_text(min(_seeds(t[1], t[2]) for t in tables))
    _suptitle(fig, title or f"TTFT against {against} ({seeds})")
    return _save(fig, path, in_folder=True)


def _suptitle(fig: Any, text: str) -> None:
    """The figure's title, wrapped to its width, and a layout that keeps every text
    inside the figure."""
    width = int(fig.get_figwidth() * 11)
    fig.suptitle(wrap(text, width), fontsize=11)
    fig.tight_layout()


def pd_values(df: Any, column: str) -> Any:
    """A column's finite values."""
    v = df[column]
    return v[np.isfinite(v.to_numpy(float))]


def _paired(groups: list[Any], q: str) -> list[tuple[float, float, float] | None] | None:
    """Per configuration, its paired difference in TTFT ``q`` from the reference (the
    table's per-run ``delta_ttft_<q>_s``: this run minus the reference's on the same seed):
    the mean over seeds and its 95% interval (:func:`~kvsim.results.uncertainty.
    mean_interval` of the differences, as the sweep's table gives it); None for the
    reference (the configuration without differences). None for the whole table when it
    has no differences (one configuration)."""
    from kvsim.results.uncertainty import mean_interval

    column = f"delta_ttft_{q}_s"
    if not groups or column not in groups[0][1].columns:
        return None
    out: list[tuple[float, float, float] | None] = []
    for _, g in groups:
        d = [float(x) for x in g[column] if np.isfinite(float(x))]
        if not d:
            out.append(None)
            continue
        iv = mean_interval(d, nonnegative=False)
        if len(d) < MIN_BAND_SEEDS or not iv.bounded:
            out.append((iv.mean, iv.mean, iv.mean))
        else:
            out.append((iv.mean, iv.lo, iv.hi))
    return out if sum(x is None for x in out) == 1 else None


def _delta_bars(ax: Any, deltas: list[Any], q: str, horizontal: bool = False) -> None:
    """The paired differences from the reference as bars with their 95% intervals; the
    reference a marker at 0, named; the axis in one unit of seconds."""
    at = np.arange(len(deltas))
    mean = np.array([d[0] if d is not None else 0.0 for d in deltas])
    err = np.array(
        [
            [d[0] - d[1] if d is not None else 0.0 for d in deltas],
            [d[2] - d[0] if d is not None else 0.0 for d in deltas],
        ]
    )
    colors = ["#e45756" if m > 0 else "#54a24b" for m in mean]
    draw = ax.barh if horizontal else ax.bar
    kw = {"xerr": err} if horizontal else {"yerr": err}
    draw(at, mean, color=colors, capsize=3, **kw)
    ref = [i for i, d in enumerate(deltas) if d is None]
    for i in ref:
        xy = (0.0, i) if horizontal else (i, 0.0)
        ax.plot(*xy, "kD", ms=5)
        ax.annotate("reference", xy, textcoords="offset points", fontsize=7,
                    xytext=(4, 0) if horizontal else (0, 5), ha="left" if horizontal else "center",
                    va="center" if horizontal else "bottom")  # fmt: skip
    (ax.axvline if horizontal else ax.axhline)(0.0, color="black", lw=0.8)
    values = [v for d in deltas if d is not None for v in d] + [0.0]
    unit_axis(ax, "x" if horizontal else "y", "duration", values,
              label=f"TTFT {q} minus the reference's", log=False)  # fmt: skip


def _config_bars(
    df: Any, columns: list[str], path: Path, title: str, slo: Any, qs: Sequence[str]
) -> Path:
    """TTFT percentiles ``qs`` per configuration of a sweep with no load axis: the mean
    over seeds (top row), and below it each configuration's paired difference from the
    reference with its 95% interval over seeds (the table's paired differences, from 3
    seeds on: an unpaired interval of each mean would hide a difference every seed
    agrees on); each bar labelled with its fields' values, a line each. A table without
    paired differences (one configuration) gets the means with their own intervals."""
    groups = list(df.groupby(columns, sort=False))
    if len(groups) > MAX_UPRIGHT_BARS:
        return _config_rows(df, groups, columns, path, title, slo, qs)
    labels = [
        "\n".join(value_text(c, v) for c, v in zip(columns, _key(k), strict=True))
        for k, _ in groups
    ]
    paired = {q: _paired(groups, q) for q in qs}
    two = all(p is not None for p in paired.values())
    per_bar = _bar_width(labels)
    width = min(20, max(4.5 * len(qs), (per_bar * len(groups) + 1) * len(qs)))
    fig, grid = plt.subplots(2 if two else 1, len(qs), figsize=(width, 8.0 if two else 4.4),
                             squeeze=False)  # fmt: skip
    axes = list(grid[0])
    for ax, q in zip(axes, qs, strict=True):
        stats = [_spread(g[f"ttft_{q}_s"]) for _, g in groups]
        means = [s[0] for s in stats]
        if two:  # the means alone: their intervals are the paired row's
            ax.bar(range(len(groups)), means, color="#4c78a8")
            _seconds_axis(ax, means, f"TTFT {q} (mean)")
        else:
            err = [[m - lo for m, (_, lo, _) in zip(means, stats, strict=True)]]
            err.append([hi - m for m, (_, _, hi) in zip(means, stats, strict=True)])
            ax.bar(range(len(groups)), means, yerr=err, capsize=4, color="#4c78a8")
            _seconds_axis(ax, [v for st in stats for v in st], f"TTFT {q}")
        ax.grid(alpha=0.3, axis="y")
    if two:
        for ax, q in zip(grid[1], qs, strict=True):
            _delta_bars(ax, paired[q], q)  # type: ignore[arg-type]
            ax.grid(alpha=0.3, axis="y")
    _slo_line(axes, slo, qs)
    if slo is not None:
        for ax in axes:
            if ax.get_legend_handles_labels()[0]:
                ax.legend(fontsize=7)
    n = _seeds(df, columns)
    if two:
        seeds = (
            f"mean of {n} seeds; below: paired difference from the reference, 95% interval "
            "over seeds"
            if n >= MIN_BAND_SEEDS
            else _seeds_text(n).replace("band", "interval")
        )
    else:
        seeds = _seeds_text(n).replace("band", "interval")
    bottom = list(grid[-1])
    for ax in bottom:
        ax.set_xlabel(_fields_label(columns))
    _suptitle(fig, title or f"TTFT per configuration of {', '.join(columns)} ({seeds})")
    for ax in grid.flat:
        if ax in bottom:
            _fit_bar_labels(fig, ax, labels)
        else:
            ax.set_xticks(range(len(labels)), [""] * len(labels))
    return _save(fig, path, in_folder=True)


MAX_UPRIGHT_BARS = 12  # more configurations than this: one row each (horizontal bars)


def _config_rows(
    df: Any,
    groups: list[Any],
    columns: list[str],
    path: Path,
    title: str,
    slo: Any,
    qs: Sequence[str],
) -> Path:
    """:func:`_config_bars` for many configurations (a grid of several fields): one row
    per configuration, labelled on one line by its values in the fields' order (the
    fields are named once, in the axis label), the panels sharing the rows; each
    percentile's means, then (where the table has them) its paired differences from the
    reference with their 95% intervals."""
    labels = [
        " | ".join(
            value_text(c, v).split(" = ", 1)[-1] for c, v in zip(columns, _key(k), strict=True)
        )
        for k, _ in groups
    ]
    paired = {q: _paired(groups, q) for q in qs}
    two = all(p is not None for p in paired.values())
    panels = [(q, kind) for q in qs for kind in (("mean", "delta") if two else ("mean",))]
    longest = max(len(s) for s in labels)
    height = 1.6 + 0.24 * len(groups)
    width = min(26.0 if two else 22.0, 2.0 + 0.065 * longest + 3.6 * len(panels))
    fig, axes = plt.subplots(1, len(panels), figsize=(width, height), sharey=True)
    rows = np.arange(len(groups))
    for ax, (q, kind) in zip(axes, panels, strict=True):
        if kind == "delta":
            _delta_bars(ax, paired[q], q, horizontal=True)  # type: ignore[arg-type]
            ax.grid(alpha=0.3, axis="x")
            continue
        stats = [_spread(g[f"ttft_{q}_s"]) for _, g in groups]
        means = np.array([s[0] for s in stats])
        if two:
            ax.barh(rows, means, color="#4c78a8", height=0.7)
            unit_axis(ax, "x", "duration", means, label=f"TTFT {q} (mean)", log=False)
        else:
            err = np.array(
                [
                    [m - lo for m, (_, lo, _) in zip(means, stats, strict=True)],
                    [hi - m for m, (_, _, hi) in zip(means, stats, strict=True)],
                ]
            )
            ax.barh(rows, means, xerr=err, capsize=2, color="#4c78a8", height=0.7)
            unit_axis(
                ax, "x", "duration", [v for st in stats for v in st], label=f"TTFT {q}", log=False
            )
        ax.grid(alpha=0.3, axis="x")
        if slo is not None and slo.metric == f"ttft_{q}_s":  # the axis is in seconds
            from kvsim.units import fmt_duration

            shown = f"SLO {slo.metric} {slo.op} {fmt_duration(slo.threshold)}"
            ax.axvline(slo.threshold, color="red", ls="--", lw=1, label=shown)
            ax.legend(fontsize=7, loc="lower right")
    axes[0].set_yticks(rows, labels, fontsize=7)
    axes[0].invert_yaxis()  # the sweep's first configuration on top
    axes[0].set_ylabel(wrap(" | ".join(columns), 60), fontsize=8)
    seeds = _seeds_text(_seeds(df, columns)).replace("band", "interval")
    if two:
        seeds = seeds.split(",")[0].split(";")[0] + "; paired differences from the reference"
    _suptitle(fig, title or f"TTFT per configuration ({len(groups)} configurations, {seeds})")
    return _save(fig, path, in_folder=True)


def _key(k: Any) -> tuple[Any, ...]:
    """A groupby key as a tuple (pandas gives a scalar for one column)."""
    return k if isinstance(k, tuple) else (k,)


def _fields_label(fields: Sequence[str]) -> str:
    """The x label of bars labelled by their values, a line per field: the fields in
    full, in the lines' order."""
    if len(fields) == 1:
        return fields[0]
    return "; ".join(f"line {i}: {f}" for i, f in enumerate(fields, 1))


def _split_configurations(configs: Sequence[str]) -> tuple[list[str], list[str]]:
    """capacity.csv's configuration labels ("tiers.host.capacity=600 GB, ...") as the
    fields they set (the same for every row, else []) and each row's values, a line per
    field; a label that is not such a list is kept whole."""
    parsed = []
    for c in configs:
        parts = [p.partition("=") for p in c.split(", ")]
        if not all(sep for _, sep, _ in parts):
            return [], [wrap(c, 24) for c in configs]
        parsed.append(([k.strip() for k, _, _ in parts], [v.strip() for _, _, v in parts]))
    fields = parsed[0][0] if parsed else []
    if any(f != fields for f, _ in parsed):
        return [], ["\n".join(f"{k} = {v}" for k, v in zip(f, v, strict=True)) for f, v in parsed]
    return fields, ["\n".join(v) for _, v in parsed]


def _bar_width(labels: Sequence[str]) -> float:
    """Inches per bar that hold its label upright at a small font (its longest line)."""
    return max(0.8, 0.06 * max(len(line) for t in labels for line in t.split("\n")))


def _fit_bar_labels(fig: Any, ax: Any, labels: Sequence[str]) -> None:
    """Bar labels that fit: upright, then smaller, then turned, until no two overlap and
    none leaves the figure (the layout redone at each try)."""
    from itertools import pairwise

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


def capacity_plot(
    cdf: Any, path: str | os.PathLike[str], title: str = "", in_folder: bool = False
) -> Path:
    """Capacity (requests/s meeting the SLO) per configuration, with its 95% interval
    (``capacity_rps_lo`` .. ``_hi``, :func:`read_capacity`) from 3 replications on; each
    bar labelled with its fields, a line each, every value beside its field's name
    ("tiers.nvme.enabled = false": a bare "False" says nothing)."""
    cdf = _capacity_bounds(cdf)
    labels = _capacity_labels(cdf)
    fig, ax = plt.subplots(figsize=(min(16, max(5.0, _bar_width(labels) * len(cdf) + 1)), 4.4))
    reps = cdf["replications"].to_numpy(float) if "replications" in cdf else None
    cap = cdf["capacity_rps"].to_numpy(float)
    below = np.nan_to_num(cap - cdf["capacity_rps_lo"].to_numpy(float), nan=0.0)
    above = np.nan_to_num(cdf["capacity_rps_hi"].to_numpy(float) - cap, nan=0.0)
    if reps is not None:  # no interval under 3 replications
        below, above = (np.where(reps >= MIN_BAND_SEEDS, e, 0.0) for e in (below, above))
    ax.bar(range(len(cdf)), cap, yerr=[np.maximum(below, 0.0), np.maximum(above, 0.0)], capsize=4)
    ax.set_ylabel("capacity (requests/s meeting the SLO)")
    from matplotlib.ticker import FuncFormatter

    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: tick_text(v)))
    few = reps is not None and bool((reps < MIN_BAND_SEEDS).any())
    note = "; no interval under 3 replications" if few else "; 95% interval"
    text = title or f"capacity per configuration ({cdf['slo'].iloc[0]}{note})"
    ax.set_title(wrap(text, int(fig.get_figwidth() * 11)), fontsize=10)
    ax.grid(alpha=0.3, axis="y")
    _fit_bar_labels(fig, ax, labels)
    return _save(fig, path, in_folder)


def _capacity_bounds(df: Any) -> Any:
    """A capacity table with its interval as ``capacity_rps_lo`` and ``_hi``: an older
    kvsim's half-width ``ci95_rps`` read as the mean -+ it (never below 0)."""
    if set(CAPACITY_BOUNDS) <= set(df.columns) or "ci95_rps" not in df.columns:
        return df
    cap, half = df["capacity_rps"].astype(float), df["ci95_rps"].astype(float)
    return df.assign(capacity_rps_lo=(cap - half).clip(lower=0.0), capacity_rps_hi=cap + half)


def cheapest_plot(
    rows: Sequence[Mapping[str, Any]],
    configs: Sequence[Mapping[str, Any]],
    slo: Any,
    path: str | os.PathLike[str],
) -> Path:
    """``kvsim capacity --sweep ... --cheapest --out``: one row per layout, its SLO metric
    (the mean over replications, its 95% interval from ``<metric>_lo`` .. ``_hi``) against
    the threshold, coloured by whether it meets it, and beside it the layout's price per
    hour, the cheapest that meets the SLO marked."""
    metric = slo.metric
    labels = [config_text(list(c), list(c.values())) or "the scenario" for c in configs]
    labels = [wrap(t, 44) for t in labels]
    height = 1.8 + 0.5 * sum(t.count("\n") + 1 for t in labels) ** 0.9
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, max(3.2, height)), sharey=True)
    at = np.arange(len(rows))
    mean = np.array([_number_or_nan(r[metric]) for r in rows], dtype=float)
    lo = np.array([_number_or_nan(r.get(f"{metric}_lo")) for r in rows])
    hi = np.array([_number_or_nan(r.get(f"{metric}_hi")) for r in rows])
    err = np.nan_to_num(np.array([mean - lo, hi - mean]), nan=0.0).clip(min=0.0)
    colors = ["#4c78a8" if r["meets"] else "#bab0ac" for r in rows]
    left.barh(at, mean, xerr=err, capsize=3, color=colors, height=0.6)
    unit = metric_unit(metric)
    shown = [*mean, *lo, *hi, float(slo.threshold)]
    scale, name = unit_axis(left, "x", unit, [v for v in shown if np.isfinite(v)],
                            label=f"{metric.removesuffix('_s')} (mean, 95% interval)",
                            log=False)  # fmt: skip
    line = f"SLO {slo.op} {tick_text(slo.threshold / scale)} {name}".strip()
    left.axvline(float(slo.threshold), color="red", ls="--", lw=1, label=line)
    left.legend(fontsize=7, loc="lower right")
    usd = np.array([_number_or_nan(r["usd_per_hour"]) for r in rows], dtype=float)
    right.barh(at, usd, color=colors, height=0.6)
    unit_axis(right, "x", "usd_per_hour", usd, label="price", log=False)
    for i, r in enumerate(rows):
        if r.get("cheapest"):
            right.annotate("cheapest", (usd[i], i), textcoords="offset points", xytext=(4, 0),
                           va="center", fontsize=8, fontweight="bold")  # fmt: skip
    right.set_xlim(0, float(np.nanmax(usd)) * 1.25 if np.isfinite(usd).any() else 1.0)
    left.set_yticks(at, labels, fontsize=7)
    left.invert_yaxis()  # the sweep's first layout on top
    for ax in (left, right):
        ax.grid(alpha=0.3, axis="x")
    _suptitle(fig, f"layouts at their own load against {slo} (grey: fails it)")
    return _save(fig, path)


def _number_or_nan(v: Any) -> float:
    try:
        return float(v) if v is not None else math.nan
    except (TypeError, ValueError):
        return math.nan


def _capacity_labels(cdf: Any) -> list[str]:
    """capacity.csv's configurations as bar labels, a line per swept field, each
    "field = value" (:func:`value_text`: booleans as YAML writes them, sizes in a unit):
    from the table's per-field columns where it has them (kvsim writes the swept values
    beside ``configuration``), else parsed from the ``configuration`` text."""
    fields, values = _split_configurations([str(c) for c in cdf["configuration"]])
    if not fields:
        return values
    out = []
    for (_, row), text in zip(cdf.iterrows(), values, strict=True):
        parts = text.split("\n")
        lines = []
        for f, shown in zip(fields, parts, strict=True):
            v = row[f] if f in cdf.columns and not _missing_cell(row[f]) else shown
            if isinstance(v, str) and v in ("True", "False"):  # (str() of a Python bool)
                v = v == "True"
            lines.append(f"{f} = {value_text(f, v)}")
        out.append("\n".join(lines))
    return out


def _missing_cell(v: Any) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


def mrc_plot(
    points: Sequence[Mapping[str, Any]],
    path: str | os.PathLike[str],
    title: str,
    kv_bytes: float | None = None,
) -> Path:
    """Hit ratio against cache capacity (log scale), one step curve per ``policy`` of the
    points (none: "LRU prefix cache"); the unlimited cache dashed. Capacities are
    ``capacity_tokens`` (a second axis in GB when ``kv_bytes`` is given) or
    ``capacity_bytes`` (a recorded run's stream)."""
    from matplotlib.ticker import FuncFormatter

    in_bytes = any("capacity_bytes" in p for p in points)
    cap = "capacity_bytes" if in_bytes else "capacity_tokens"
    curves: dict[str, list[Mapping[str, Any]]] = {}
    for p in points:
        curves.setdefault(str(p.get("policy", "LRU prefix cache")), []).append(p)
    unlimited = next((p["hit_ratio"] for p in points if p[cap] is None), None)
    fig, ax = plt.subplots(figsize=(7, 4.2))
    xs: list[float] = []
    styles = ("-", "--", "-.", ":")
    for i, (name, pts) in enumerate(curves.items()):
        finite = sorted((p for p in pts if p[cap] is not None), key=lambda p: p[cap])
        x = [p[cap] for p in finite]
        xs += x
        ax.step(
            x,
            [100 * p["hit_ratio"] for p in finite],
            where="post",
            label=name,
            ls=styles[(i // 10) % len(styles)],
        )
    if unlimited is not None:
        ax.axhline(
            100 * unlimited, ls="--", color="grey", label=f"unlimited: {100 * unlimited:.1f}%"
        )
    if in_bytes:
        unit_axis(ax, "x", "size", xs, label="cache capacity", log=True)
        ax.set_ylabel("hit ratio (% of blocks asked)")
    else:
        unit_axis(ax, "x", None, xs, label="cache capacity (tokens)", log=True)
        ax.set_ylabel("hit ratio (% of prompt tokens)")
    if xs and max(xs) > 1e3 * max(min(xs), 1e-9):  # many decades: a tick a decade, readable
        from matplotlib.ticker import LogLocator

        ax.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0,)))
    if kv_bytes and not in_bytes:
        sec = ax.secondary_xaxis(
            "top", functions=(lambda t: t * kv_bytes / 1e9, lambda g: g * 1e9 / kv_bytes)
        )
        sec.set_xlabel("cache capacity (GB at this model's KV bytes/token)")
        sec.xaxis.set_major_formatter(FuncFormatter(lambda v, _: tick_text(v)))
    ax.set_ylim(0, 100)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8, loc="upper left")
    ax.set_title(wrap(title, 70))
    fig.tight_layout()
    return _save(fig, path)


def reuse_plot(rows: Sequence[Mapping[str, Any]], path: str | os.PathLike[str], title: str) -> Path:
    """Reuse-distance histogram: the share of block references per power-of-two bin of
    LRU stack distance (distinct blocks), first uses ("cold") as the last bar."""
    bins = [r for r in rows if r["low"] is not None]
    cold = next((r for r in rows if r["low"] is None), None)
    labels = [tick_text(r["low"]) for r in bins]
    shares = [100 * r["share"] for r in bins]
    if cold is not None:
        labels.append("cold")
        shares.append(100 * cold["share"])
    fig, ax = plt.subplots(figsize=(max(7.0, 0.35 * len(labels) + 2), 4.2))
    x = np.arange(len(labels))
    colors = ["C0"] * len(bins) + (["grey"] if cold is not None else [])
    ax.bar(x, shares, color=colors)
    ax.set_xticks(x, labels, rotation=90 if len(labels) > 14 else 0, fontsize=8)
    ax.set_xlabel(
        "reuse distance (distinct blocks since the last use; a bar from the value shown to "
        "twice it)"
    )
    ax.set_ylabel("block references (%)")
    ax.grid(alpha=0.3, axis="y")
    ax.set_title(wrap(title, 70))
    fig.tight_layout()
    return _save(fig, path)
