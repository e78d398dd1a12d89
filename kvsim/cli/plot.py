"""``kvsim plot``: draw the figures of a run's or a sweep's ``--out`` folder."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pandas as pd

from kvsim.cli.run import steady_warnings
from kvsim.errors import InputError
from kvsim.experiments.slo import parse_slo
from kvsim.plots.run import run_plots
from kvsim.plots.sweep import sweep_plots
from kvsim.results.timeseries import STEADY_COLUMN, unsteady_runs_note
from kvsim.results.writers import check_writable


def _cmd_plot(args: argparse.Namespace) -> int:
    folders = [Path(f) for f in args.folder]
    for f in folders:
        if not f.is_dir():
            raise InputError("not a folder", where=str(f))
    d = folders[0]
    check_writable(d, folder=True, flag="")  # the figures are written into the folder
    slo = None
    if args.slo is not None:
        slo = parse_slo(args.slo)
        if slo.metric not in ("ttft_p50_s", "ttft_p95_s", "ttft_p99_s"):
            raise InputError(
                "plots draw TTFT p50, p95 and p99: give an SLO on one of them", where="--slo"
            )
    if (d / "summary.json").exists() or (d / "summary.json").is_symlink():
        if len(folders) > 1:
            raise InputError(
                "overlays are of sweep folders; a run folder is plotted alone", where=str(d)
            )
        for flag, given in (("--slo", args.slo), ("--x", args.x)):
            if given is not None:  # every option acts on the figures, or is refused
                raise InputError(
                    f"is for sweep folders; {d} is a run folder, whose figures have no "
                    f"{'SLO line' if flag == '--slo' else 'load axis'}",
                    where=flag,
                )
        paths = run_plots(d, args.format)
        _warn_steady(d / "summary.json")
    elif any((d / n).exists() for n in ("results.parquet", "capacity.csv")):
        paths = sweep_plots(d, args.format, x=args.x, slo=slo, overlay=folders[1:])
        for f in folders:
            _warn_steady_runs(f)
        if not paths:
            raise InputError(
                "nothing to plot: nothing swept (no grid) and no capacity.csv",
                where=str(d),
            )
    else:
        raise InputError(
            "expected a run folder (summary.json) or a sweep folder "
            "(results.parquet or capacity.csv)",
            where=str(d),
        )
    for p in paths:
        print(p)
    return 0


def _warn_steady(summary_path: Path) -> None:
    """The run's steady-state warnings (its summary's ``steady_state``), on stderr: the
    figures drawn are of a run still filling up."""
    try:  # (run_plots has read and checked it)
        summary = json.loads(summary_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return
    for line in steady_warnings(summary) if isinstance(summary, dict) else []:
        print(f"warning: {line}", file=sys.stderr)


def _warn_steady_runs(folder: Path) -> None:
    """A sweep folder's runs that were not in steady state (results.parquet), on stderr."""
    table = folder / "results.parquet"
    if not table.is_file():
        return
    try:
        df = pd.read_parquet(table, columns=None)
    except Exception:  # (sweep_plots has read it; an unreadable one is its message)
        return
    note = unsteady_runs_note(df) if STEADY_COLUMN in df.columns else None
    if note is not None:
        print(f"warning: {folder}: {note}", file=sys.stderr)
