"""``kvsim sensitivity``: which assumptions an answer rests on (a tornado of one
metric)."""

from __future__ import annotations

import argparse
import sys

from kvsim.api import load
from kvsim.experiments.sensitivity import parse_by, report_lines, sensitivity, table, tornado_plot
from kvsim.results.writers import SENSITIVITY_FILES, check_out_folder, write_folder


def _cmd_sensitivity(args: argparse.Namespace) -> int:
    by = parse_by(args.by)
    if args.out is not None:
        check_out_folder(args.out, flag="--out", owned=SENSITIVITY_FILES)
    sc = load(args.scenario, args.overrides)
    result = sensitivity(
        sc,
        args.metric,
        vary=args.vary,
        by=by,
        reps=args.reps,
        log=lambda msg: print(msg, file=sys.stderr),
    )
    df = table(result)
    if args.out is not None:
        paths = write_folder(
            args.out,
            {
                "sensitivity.csv": lambda p: df.to_csv(p, index=False),
                "tornado.png": lambda p: tornado_plot(result, p),
            },
            flag="--out",
            owned=SENSITIVITY_FILES,
        )
        print(f"wrote {', '.join(str(p) for p in paths)}", file=sys.stderr)
    print("\n".join(report_lines(result)))  # (kvsim.experiments.sensitivity)
    return 0
