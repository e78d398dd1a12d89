"""``kvsim baseline`` and ``kvsim check``: the CI regression gate (record a suite's
baseline; re-run the suite and compare with it)."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys

from kvsim.config.loader import with_sets
from kvsim.errors import InputError
from kvsim.experiments import regression
from kvsim.experiments.sweep.spec import counted
from kvsim.results.writers import BASELINE_FILES, REPORT_FILES, check_out_folder

# (the gate's steps are the regression package's entry points, looked up when called)


def _cmd_baseline(args: argparse.Namespace) -> int:
    if args.workers < 1:
        raise InputError("must be >= 1", where="--workers")
    check_out_folder(args.out, flag="--out", owned=BASELINE_FILES)
    extra = with_sets({}, args.overrides)  # each --set parsed as `kvsim run` parses it
    suite = regression.load_suite(args.suite, extra)
    doc = regression.measure(
        suite,
        workers=args.workers,
        log=lambda m: print(m, file=sys.stderr),
        require_finite=True,  # a baseline never records NaN
    )
    path = regression.write_baseline(doc, args.out)
    # a gated metric whose minimum detectable change is above 10% of its mean: said
    for line in regression.power_warnings(doc, suite):
        print(f"warning: {line}", file=sys.stderr)
    points = sum(len(e["points"]) for e in doc["entries"])
    print(
        f"baseline of {counted(len(doc['entries']), 'entry')}, {counted(points, 'load point')}, "
        f"seeds {doc['seeds']}: {path}"
    )
    return 0


def _cmd_check(args: argparse.Namespace) -> int:
    if args.workers < 1:
        raise InputError("must be >= 1", where="--workers")
    baseline = regression.read_baseline(args.baseline)  # every field checked before anything runs
    extra = with_sets({}, args.overrides)  # each --set parsed as `kvsim run` parses it
    suite = regression.load_suite(args.suite, extra)
    # the suite matches the baseline: checked before anything runs
    regression.check_baseline(
        suite, baseline, strict=args.strict, where=str(regression.baseline_path(args.baseline))
    )
    if args.report:
        check_out_folder(args.report, flag="--report", owned=REPORT_FILES)
    new = regression.measure(suite, workers=args.workers, log=lambda m: print(m, file=sys.stderr))
    result = regression.compare(suite, baseline, new, strict=args.strict)
    code = 1 if result.failed else 0  # (a regression, or an entry's SLO missed)
    # the reports first, and the verdict's exit code whatever happens to the printing: a
    # gate piped into `head` must still fail on a regression (main() reads a broken pipe
    # as exit 0)
    if args.report:
        for p in regression.write_reports(result, suite, args.report):
            print(f"wrote {p}", file=sys.stderr)
    try:
        print(regression.terminal_table(result, list(suite.metrics)))
        # notes, a line per regression and per improvement (an improvement passes), the verdict
        print("\n".join(regression.report_lines(result)))
        sys.stdout.flush()
    except BrokenPipeError:
        with contextlib.suppress(OSError):  # nothing more can reach the closed pipe
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115 (lives as long as the process)
    return code
