"""``kvsim reproduce``: reproduce a published study's figures (or every study and the
validation summary)."""

from __future__ import annotations

import argparse
import json
import sys
import time

from kvsim.errors import InputError
from kvsim.reproduce import validation
from kvsim.reproduce.studies import study
from kvsim.results.writers import REPRODUCTION_FILES, check_out_folder


def _cmd_reproduce(args: argparse.Namespace) -> int:
    if args.quick and args.study != "central-nvme":
        raise InputError("only central-nvme has a quick version", where="--quick")
    if args.study == "all":
        return _reproduce_all(args)
    mod = study(args.study)
    if args.out is not None:
        check_out_folder(args.out, flag="--out", owned=REPRODUCTION_FILES)
    quick = {"quick": True} if args.quick else {}
    rep = mod.reproduce(
        args.scenarios,
        log=lambda msg: print(msg, file=sys.stderr),
        range_seeds=0 if args.no_ranges else mod.RANGE_SEEDS,
        **quick,
    )
    if args.out is not None:  # before printing: a refused folder prints no figures
        paths = mod.write(rep, args.out)
    if args.json:
        print(json.dumps(rep.records(), indent=2))
    else:
        print(mod.text_table(rep))
    if args.out is not None:
        print(f"wrote {len(paths)} files to {args.out}", file=sys.stderr)
    return 0


def _reproduce_all(args: argparse.Namespace) -> int:
    """Every study (the paper's without its ranges; ``--no-ranges``: no catalogue ranges
    either), then the validation summary."""

    if args.scenarios is not None:
        raise InputError(
            "reproduce all runs every study from the checkout's scenarios", where="--scenarios"
        )
    if args.out is not None:
        check_out_folder(args.out, flag="--out", owned=validation.FILES)
    start = time.monotonic()
    rows, _reps = validation.run_all(
        log=lambda msg: print(msg, file=sys.stderr), ranges=not args.no_ranges
    )
    seconds = time.monotonic() - start
    if args.out is not None:  # before printing: a refused folder prints no figures
        paths = validation.write(rows, args.out, seconds)
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        print(validation.text_table(rows))
    print(f"all studies in {seconds:.0f} s", file=sys.stderr)
    if args.out is not None:
        print(f"wrote {len(paths)} files to {args.out}", file=sys.stderr)
    return 0
