"""``kvsim run``: run one scenario, print its summary and write its result files."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from tqdm import tqdm

from kvsim.api import expected_requests, load
from kvsim.errors import InputError
from kvsim.experiments.predict import ranges_json, run_ranges
from kvsim.experiments.slo import check_slo, parse_slo, with_slo
from kvsim.report import summary_table
from kvsim.results.records import collect, json_ready
from kvsim.results.runfolder import write_results
from kvsim.results.writers import RUN_FILES, check_out_folder
from kvsim.sim.simulation import Simulation


def _cmd_run(args: argparse.Namespace) -> int:
    record = getattr(args, "record_accesses", False)
    if record and args.out is None:  # refused before anything runs
        raise InputError(
            "writes accesses.parquet into the run's folder: give --out DIR",
            where="--record-accesses",
        )
    slo = parse_slo(args.slo) if getattr(args, "slo", None) is not None else None
    sc = load(args.scenario, args.overrides, args.seed)
    if slo is not None:
        check_slo(slo, sc)
    if args.out is not None:
        check_out_folder(args.out, flag="--out", owned=RUN_FILES)
    bar = None
    if not args.quiet:
        bar = tqdm(
            total=expected_requests(sc),
            unit="req",
            desc=sc.name,
            disable=None,
            file=sys.stderr,
            leave=False,
        )
    try:
        sim = Simulation(
            sc, progress=bar.update if bar is not None else None, record_accesses=record
        )
        results = with_slo(collect(sim.run(), sc), slo)
        if sim.recorder is not None:
            results.accesses = sim.recorder.frame()
    finally:
        if bar is not None:
            bar.close()
    if not getattr(args, "no_ranges", False):
        progress = not args.quiet and sys.stderr.isatty()  # README: silent off a terminal
        ranges = run_ranges(
            args.scenario,
            args.overrides,
            args.seed,
            results.summary,
            _ranges_progress if progress else None,
        )
        if ranges:
            results.summary["prediction_ranges"] = ranges_json(ranges)
            if progress:  # end the progress line
                print(file=sys.stderr)
    paths = write_results(results, args.out, args.format) if args.out is not None else []
    if args.json:
        print(json.dumps(json_ready(results.summary), indent=2))
    else:
        print(summary_table(results.summary))
    if paths:
        print(f"wrote {', '.join(str(p) for p in paths)}", file=sys.stderr)
    # a measured window still filling (summary.json's steady_state says it too)
    for line in steady_warnings(results.summary):
        print(f"warning: {line}", file=sys.stderr)
    return 0


def _ranges_progress(done: int, total: int, what: str) -> None:
    """One line, rewritten, while the prediction ranges run (a terminal only: README,
    progress stays silent when stderr is not a terminal)."""
    print(
        f"\rranges: run {done} of about {total} ({what[:60]})".ljust(100), end="", file=sys.stderr
    )


def steady_warnings(summary: dict[str, Any]) -> list[str]:
    """The warnings of a summary's ``steady_state`` (none in an older kvsim's summary)."""
    st = summary.get("steady_state")
    got = st.get("warnings") if isinstance(st, dict) else None
    return [str(x) for x in got] if isinstance(got, list) else []
