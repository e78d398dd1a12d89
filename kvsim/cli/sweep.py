"""``kvsim sweep``: run a scenario over a grid of values and seeds, and print one line
per grid point."""

from __future__ import annotations

import argparse
import math
import sys
from typing import Any

import pandas as pd
from tqdm import tqdm

from kvsim.api import load
from kvsim.config.schema import policy_text
from kvsim.errors import InputError
from kvsim.experiments import sweep as sweeps
from kvsim.experiments.replicate import PAIRED
from kvsim.experiments.sweep.cluster import parse_scheduler
from kvsim.experiments.sweep.journal import SWEEP_FILES
from kvsim.experiments.sweep.spec import counted, fixed_count_note
from kvsim.results.timeseries import unsteady_runs_note
from kvsim.results.uncertainty import mean_interval, read_bounds
from kvsim.results.writers import check_out_folder
from kvsim.workload.resample_note import resampling_note


def _cmd_sweep(args: argparse.Namespace) -> int:
    if args.workers < 1:
        raise InputError("must be >= 1", where="--workers")
    if args.scheduler is not None:
        parse_scheduler(args.scheduler)  # a malformed address: refused before any work
    # (the package's entry points, looked up when called)
    sweep = sweeps.load_sweep(args.sweep, plugins=args.plugins, slo=getattr(args, "slo", None))
    if sweep.refused:  # a configuration no run of which could start (a policy name)
        raise sweep.refused[0]
    # a folder holding someone else's files (a `kvsim run` folder, their own results.csv)
    check_out_folder(args.out, flag="--out", owned=SWEEP_FILES)
    _log_resampling(sweep)  # what the seeds replay (--quiet drops only the progress bar)
    fixed = fixed_count_note(sweep)  # a swept rate with a fixed request count
    if fixed is not None:
        print(f"warning: {fixed}", file=sys.stderr)
    bar = None
    if not args.quiet:
        bar = tqdm(
            total=len(sweep.runs), unit="run", desc=sweep.name, disable=None, file=sys.stderr
        )

    def progress(done: int, total: int) -> None:
        if bar is not None:
            bar.n = done
            bar.refresh()

    try:
        table = sweeps.run_sweep(
            sweep,
            args.out,
            workers=args.workers,
            scheduler=args.scheduler,
            retry_failed=args.retry_failed,
            progress=progress,
        )
    except KeyboardInterrupt:
        if bar is not None:
            bar.close()
            bar = None
        print(
            f"kvsim: interrupted: the finished runs are kept in {args.out}/runs.jsonl; run the "
            "same command again to resume (results.parquet and results.csv are written once "
            "every run has a row)",
            file=sys.stderr,
        )
        return 130
    finally:
        if bar is not None:
            bar.close()
    failed = table[table["status"] != "ok"]
    reused = table.attrs.get("reused", 0)
    print(_sweep_points(table, sweep.columns, _reference_runs(sweep)))
    print(
        f"{counted(len(table), 'run')} ({reused} reused from {args.out}/runs.jsonl, "
        f"{len(failed)} failed) in {args.out}/results.parquet and results.csv"
    )
    unsteady = unsteady_runs_note(table)  # runs whose measured window was still filling
    if unsteady is not None:
        print(f"warning: {unsteady}", file=sys.stderr)
    if len(failed):
        for _, row in failed.iterrows():
            print(f"  run {row['run']} failed: {row['error']}", file=sys.stderr)
        print(
            f"kvsim: error: {len(failed)} of {counted(len(table), 'run')} failed "
            f"({'run' if len(failed) == 1 else 'runs'} "
            f"{', '.join(str(r) for r in failed['run'])}); fix them and run again with "
            "--retry-failed",
            file=sys.stderr,
        )
        return 2
    return 0


def _log_resampling(sweep: Any) -> None:
    """Print (stderr) how the runs resample a trace and the prefix reuse that keeps (the
    trace's as it is beside the draws'), from the reference configuration's runs."""
    ref = _reference_runs(sweep)
    runs = [r for r in sweep.runs if r.run_id in ref] or sweep.runs
    if not runs:
        return
    try:
        note = resampling_note(load(runs[0].base, runs[0].overrides()), [r.seed for r in runs])
    except InputError:  # that configuration's runs fail with their own message
        return
    if note is not None:
        print(note, file=sys.stderr)


SWEEP_METRICS = ("ttft_p50_s", "ttft_p95_s", "ttft_p99_s", "hit_ratio", "requests_per_s")


def _reference_runs(sweep: Any) -> set[str]:
    """The run ids of the configuration a sweep compares the others with."""
    ref = sweep.reference_index()
    return {run_id for run_id, i in sweep.configuration_of().items() if i == ref}


def _sweep_points(table: Any, columns: list[str], reference: set[str] = frozenset()) -> str:
    """One line per grid point: its key metrics (the mean over its seeds, and how many),
    the 95% interval of its p99 (over seeds; a single seed's own bootstrap interval), and,
    with several configurations, its paired difference in p99 from the reference (the
    first configuration, or the sweep file's ``reference:``) with that difference's 95%
    interval over seeds, and the line that says the comparison is paired."""
    ok = table[table["status"] == "ok"]
    if ok.empty:
        return "no run finished"
    keys = [c for c in columns if c in ok.columns]
    # with an SLO (--slo, or the sweep file's slo:): the goodput, and the seeds meeting it
    metrics = [m for m in (*SWEEP_METRICS, "goodput_rps") if m in ok.columns]
    judged = "slo_met" in ok.columns
    groups = (
        list(ok.groupby(keys, sort=False, dropna=False)) if keys else [((), ok)]
    )  # (configuration order: the table's)
    paired = "delta_ttft_p99_s" in table.columns
    head = [*keys, *metrics]
    if "ttft_p99_s" in metrics:
        head.append("p99 95% interval")
    if paired:
        head.append("delta p99 [lo, hi]")
    if judged:
        head.append("SLO met")
    head.append("seeds")
    cells = [head]
    for _, g in groups:
        row = [policy_text(g[k].iloc[0]) or str(g[k].iloc[0]) for k in keys]
        row += [f"{pd.to_numeric(g[m], errors='coerce').mean():.4g}" for m in metrics]
        if "ttft_p99_s" in metrics:
            row.append(_p99_interval(g))
        if paired:
            is_ref = bool(g["run_id"].isin(reference).any())
            row.append("(reference)" if is_ref else _delta_text(g, "ttft_p99_s"))
        if judged:  # (seeds whose run met every term)
            row.append(f"{int(g['slo_met'].map(_true).sum())}/{len(g)}")
        row.append(str(len(g)))
        cells.append(row)
    widths = [max(len(r[i]) for r in cells) for i in range(len(cells[0]))]
    lines = [
        "  ".join(
            c.rjust(w) if i >= len(keys) else c.ljust(w)
            for i, (c, w) in enumerate(zip(r, widths, strict=True))
        )
        for r in cells
    ]
    if paired:
        lines.append(PAIRED)
    return "\n".join(lines)


def _true(v: Any) -> bool:
    """A table's yes (True, or a resumed journal's text of it)."""
    return v is True or v == "true" or v == "True" or (isinstance(v, bool) and v)


def _bounds(lo: float, hi: float) -> str:
    return f"[{lo:.4g}, {hi:.4g}]"


def _p99_interval(g: Any) -> str:
    """A configuration's p99: the 95% interval of its mean over seeds (never below 0), or
    with one seed that run's own (block bootstrap) interval."""
    values = [float(v) for v in g["ttft_p99_s"] if isinstance(v, (int, float))]
    if len(values) == 1:  # (an older kvsim's table: the text column ttft_p99_ci_s)
        run = read_bounds(g.iloc[0], "ttft_p99_s", legacy="ttft_p99_ci_s")
        return _bounds(*run) + " (run)" if run is not None else "n/a"
    iv = mean_interval(values)
    return _bounds(iv.lo, iv.hi) if iv.bounded else "n/a"


def _delta_text(g: Any, metric: str) -> str:
    """A configuration's mean paired difference in ``metric`` from the reference and its
    95% interval over seeds ("+0.012 [-0.003, 0.027]"); "n/a" when no seed of it pairs
    with a finished run of the reference."""
    d = g[f"delta_{metric}"].dropna()
    if d.empty:
        return "n/a"
    text = f"{d.mean():+.4g}"
    bounds = read_bounds(g.loc[d.index[0]], f"delta_{metric}", legacy=f"delta_{metric}_ci")
    if bounds is None:
        return f"{text} (one seed)"
    lo, hi = bounds
    if lo == hi:  # every seed moved by exactly this much: no interval to show
        return f"{text} (every seed)"
    # a difference's bounds carry their signs, as kvsim check and --cheapest write them
    return f"{text} [{lo:+.4g}, {hi:+.4g}]" if math.isfinite(lo) and math.isfinite(hi) else text
