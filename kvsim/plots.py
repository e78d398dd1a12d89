"""Figures (matplotlib, headless): labelled with units and the scenario name, saved as
PNG or SVG by the file's extension. Plotting is an edge: nothing in the core imports it."""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from kvsim.errors import InputError
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
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
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
    # beside the axes, which the lines fill
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
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
    """Empirical CDFs of TTFT (log time axis), p50, p95 and p99 marked and given in the
    legend."""
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for label, values in series.items():
        v = np.sort(np.asarray(values, dtype=float))
        if v.size == 0:
            continue
        p50, p95, p99 = (float(np.quantile(v, q)) for q in (0.5, 0.95, 0.99))
        y = np.arange(1, v.size + 1) / v.size
        (line,) = ax.step(
            v,
            y,
            where="post",
            label=f"{label}: p50 {p50:.3g} s, p95 {p95:.3g} s, p99 {p99:.3g} s",
        )
        ax.plot([p50, p95, p99], [0.5, 0.95, 0.99], "o", color=line.get_color(), ms=4)
    ax.set_xscale("log")
    ax.set_xlabel("TTFT (s, log scale)")
    ax.set_ylabel("fraction of requests")
    ax.set_ylim(0, 1.02)
    ax.grid(alpha=0.3, which="both")
    ax.set_title(title)
    ax.legend(fontsize=8, loc="upper left")
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
    ax.set_ylabel("mean time per request (s)")
    ax.set_xlabel("requests by TTFT percentile band")
    ax.set_title(title)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3, axis="y")
    return _save(fig, path, in_folder)


def token_sources_plot(
    fractions: Mapping[str, float],
    path: str | os.PathLike[str],
    title: str,
    in_folder: bool = False,
) -> Path:
    """Share of prompt tokens by where they came from."""
    fig, ax = plt.subplots(figsize=(6, 3.6))
    names = list(fractions)
    values = [100 * fractions[n] for n in names]
    palette = ["#4c72b0", "#55a868", "#c44e52", "#8172b2", "#ccb974", "#937860"]  # 6 sources
    bars = ax.bar(names, values, color=[palette[i % len(palette)] for i in range(len(names))])
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
    ax.set_title(title)
    ax.grid(alpha=0.3, axis="y")
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
    mid = (edges[:-1] + edges[1:]) / 2
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(8, 5), sharex=True)
    ax1.plot(mid, computing, lw=1)
    ax1.set_ylabel(f"requests in prefill\n({engines} engines)")
    ax1.set_ylim(0, None)
    ax1.grid(alpha=0.3)
    ax2.plot(mid, waiting, lw=1, color="#c44e52")
    ax2.set_ylabel("requests waiting\n(first wait)")
    ax2.set_xlabel("simulated time (s)")
    ax2.grid(alpha=0.3)
    ax1.set_title(title)
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
    ax_t.set_ylabel("TTFT")
    _seconds_axis(ax_t)
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
    ax_t.set_title(title)
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


RUN_FIGURES = ("ttft_cdf", "ttft_breakdown", "token_sources", "engine_timeline", "timeseries")
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
    cdf, breakdown, sources, timeline, over_time = (d / f"{n}.{fmt}" for n in RUN_FIGURES)
    _check_figure_paths([cdf, breakdown, sources, timeline, over_time])
    return [
        ttft_cdf_plot({name: m["ttft_s"]}, cdf, f"{name}: TTFT CDF", in_folder=True),
        ttft_breakdown_plot(m, breakdown, f"{name}: where the time goes", in_folder=True),
        token_sources_plot(
            summary["token_source_frac"],
            sources,
            f"{name}: prompt tokens by source",
            in_folder=True,
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


SWEEP_COLUMNS = ("run_id", "seed", "status", "ttft_p50_s", "ttft_p99_s")
CAPACITY_COLUMNS = ("configuration", "capacity_rps", "ci95_rps", "slo")


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
    """A capacity.csv, checked: its columns, numbers and at least one row."""
    df = read_table(path, "capacity table")
    require_columns(df, CAPACITY_COLUMNS, path, numeric=False)
    require_columns(df, ("capacity_rps", "ci95_rps"), path)
    if df.empty:
        raise InputError("no rows", where=str(path))
    for c in ("capacity_rps", "ci95_rps"):
        v = df[c].to_numpy(float)
        bad = ~np.isnan(v) & ~(np.isfinite(v) & (v >= 0))
        if bad.any():
            row = int(np.argmax(bad))
            raise InputError(
                f"column {c}: {v[row]} is not a finite number >= 0", where=f"{path}:{row + 2}"
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


def _seconds_axis(ax: Any) -> None:
    """Tick labels in human units (ms, s) on a seconds axis."""
    from matplotlib.ticker import FuncFormatter

    from kvsim.units import fmt_duration

    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: "0" if v == 0 else fmt_duration(v)))


def _spread(values: Any) -> tuple[float, float, float]:
    """Mean and 95% interval (Student t over seeds, never below 0: a TTFT; the mean
    twice with one seed, which draws no band)."""
    from kvsim.results.uncertainty import mean_interval

    v = [float(x) for x in values if np.isfinite(float(x))]
    if not v:
        return math.nan, math.nan, math.nan
    iv = mean_interval(v)
    if not math.isfinite(iv.lo):  # one seed: no band
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


def _draw_curves(
    axes: Sequence[Any], df: Any, columns: list[str], x: str, prefix: str, qs: Sequence[str]
) -> None:
    """TTFT percentiles ``qs`` against the load axis, one curve per configuration: the
    mean over seeds, and a band for its 95% interval when there are several seeds."""
    others = [c for c in columns if c != x]
    xs = df[x].map(_number)
    inverse = x.endswith("time_scale")  # a smaller time scale is more load
    df = df.assign(_x=1 / xs if inverse else xs)
    groups = df.groupby(others, sort=False) if others else [((), df)]
    for key, g in groups:
        key = key if isinstance(key, tuple) else (key,)
        label = prefix + (
            ", ".join(f"{c.split('.')[-1]}={v}" for c, v in zip(others, key, strict=True)) or "all"
        )
        for ax, q in zip(axes, qs, strict=True):
            pts = sorted((xv, *_spread(h[f"ttft_{q}_s"])) for xv, h in g.groupby("_x", sort=False))
            xv = [p[0] for p in pts]
            (line,) = ax.plot(xv, [p[1] for p in pts], "o-", label=label, ms=3)
            if g["seed"].nunique() > 1:
                ax.fill_between(
                    xv, [p[2] for p in pts], [p[3] for p in pts], color=line.get_color(), alpha=0.15
                )


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
    configuration (p50 and p99 only for an older kvsim's table without p95); the SLO's
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
    """The TTFT-percentiles-against-load figure of one sweep table (or several, overlaid):
    a panel per percentile of ``qs``."""
    df, axis = tables[0][1], tables[0][3]
    fig, axes = plt.subplots(1, len(qs), figsize=(5 * len(qs), 4), sharex=True)
    for folder, t_df, t_cols, t_axis in tables:
        _draw_curves(axes, t_df, t_cols, t_axis, f"{folder.name}: " if overlay else "", qs)
    inverse = axis.endswith("time_scale")
    xlabel = "load (x the source's arrival rate = 1 / time_scale)" if inverse else axis
    _slo_line(axes, slo, qs)
    for ax, q in zip(axes, qs, strict=True):
        ax.set_xlabel(xlabel)
        ax.set_ylabel(f"TTFT {q}")
        values = pd_values(df, f"ttft_{q}_s")
        if len(values) and values.min() > 0 and values.max() / values.min() > 20:
            ax.set_yscale("log")  # tails that explode read better on a log axis
        _seconds_axis(ax)
        ax.grid(alpha=0.3, which="both")
    if axes[-1].get_legend_handles_labels()[0]:  # nothing drawn when no run has a value
        axes[-1].legend(fontsize=7)
    seeds = "mean over seeds, 95% band" if df["seed"].nunique() > 1 else "one seed"
    fig.suptitle(title or f"TTFT against load ({seeds})")
    fig.tight_layout()
    return _save(fig, path, in_folder=True)


def pd_values(df: Any, column: str) -> Any:
    """A column's finite values."""
    v = df[column]
    return v[np.isfinite(v.to_numpy(float))]


def _config_bars(
    df: Any, columns: list[str], path: Path, title: str, slo: Any, qs: Sequence[str]
) -> Path:
    """TTFT percentiles ``qs`` per configuration of a sweep with no load axis: the mean
    over seeds with its 95% interval as an error bar."""
    groups = list(df.groupby(columns, sort=False))
    labels = [", ".join(str(v) for v in (k if isinstance(k, tuple) else (k,))) for k, _ in groups]
    width = min(40, max(4 * len(qs), (0.5 * len(groups) + 2) * len(qs)))
    fig, axes = plt.subplots(1, len(qs), figsize=(width, 4))
    for ax, q in zip(axes, qs, strict=True):
        stats = [_spread(g[f"ttft_{q}_s"]) for _, g in groups]
        means = [s[0] for s in stats]
        err = [[m - lo for m, (_, lo, _) in zip(means, stats, strict=True)]]
        err.append([hi - m for m, (_, _, hi) in zip(means, stats, strict=True)])
        ax.bar(range(len(groups)), means, yerr=err, capsize=4, color="#4c78a8")
        ax.set_xticks(range(len(groups)), labels, rotation=20, ha="right", fontsize=8)
        ax.set_ylabel(f"TTFT {q}")
        _seconds_axis(ax)
        ax.grid(alpha=0.3, axis="y")
    _slo_line(axes, slo, qs)
    if slo is not None:
        for ax in axes:
            if ax.get_legend_handles_labels()[0]:
                ax.legend(fontsize=7)
    fig.suptitle(title or f"TTFT per configuration ({', '.join(columns)}; mean over seeds, 95%)")
    fig.tight_layout()
    return _save(fig, path, in_folder=True)


def capacity_plot(
    cdf: Any, path: str | os.PathLike[str], title: str = "", in_folder: bool = False
) -> Path:
    """Capacity (requests/s meeting the SLO) per configuration, with its 95% interval."""
    fig, ax = plt.subplots(figsize=(min(40, max(5, 1.2 * len(cdf))), 4))
    ax.bar(
        cdf["configuration"].astype(str),
        cdf["capacity_rps"],
        # the interval never below 0 (kvsim.results.uncertainty.mean_interval); none: no bar
        yerr=[
            np.minimum(cdf["ci95_rps"].fillna(0), cdf["capacity_rps"]),
            cdf["ci95_rps"].fillna(0),
        ],
        capsize=4,
    )
    ax.set_ylabel("capacity (requests/s meeting the SLO)")
    ax.set_title(title or f"capacity per configuration ({cdf['slo'].iloc[0]})")
    ax.tick_params(axis="x", labelrotation=20)
    ax.grid(alpha=0.3, axis="y")
    return _save(fig, path, in_folder)


def mrc_plot(
    points: Sequence[Mapping[str, float | None]],
    path: str | os.PathLike[str],
    title: str,
    kv_bytes: float | None = None,
) -> Path:
    """Hit ratio against cache capacity (log scale); the unlimited cache dashed."""
    finite = [p for p in points if p["capacity_tokens"] is not None]
    unlimited = next(p["hit_ratio"] for p in points if p["capacity_tokens"] is None)
    fig, ax = plt.subplots(figsize=(7, 4.2))
    xs = [p["capacity_tokens"] for p in finite]
    ax.step(xs, [100 * p["hit_ratio"] for p in finite], where="post", label="LRU prefix cache")
    ax.axhline(100 * unlimited, ls="--", color="grey", label=f"unlimited: {100 * unlimited:.1f}%")
    ax.set_xscale("log")
    ax.set_xlabel("cache capacity (tokens)")
    ax.set_ylabel("hit ratio (% of prompt tokens)")
    if kv_bytes:
        sec = ax.secondary_xaxis(
            "top", functions=(lambda t: t * kv_bytes / 1e9, lambda g: g * 1e9 / kv_bytes)
        )
        sec.set_xlabel("cache capacity (GB at this model's KV bytes/token)")
    ax.set_ylim(0, 100)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8, loc="upper left")
    ax.set_title(title)
    return _save(fig, path)
