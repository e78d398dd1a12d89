"""``kvsim calibrate``: fit a composed profile's uncertain constants to the user's own TTFT
measurements, report the fit and its error on held-out rows, and write a profile file
(docs/calibration.md)."""

from __future__ import annotations

import argparse
import json
import math
import shlex
import sys
from pathlib import Path

import pandas as pd

from kvsim import api
from kvsim.calibrate.fields import scenario_composition
from kvsim.calibrate.fit import Calibration, calibrate
from kvsim.calibrate.profile import profile_text
from kvsim.calibrate.readers import read_measurements
from kvsim.calibrate.report import lines, markdown, record, row_table
from kvsim.calibrate.rows import Given
from kvsim.errors import InputError
from kvsim.files import sha256_file
from kvsim.plots.calibration import residual_plot
from kvsim.results.writers import check_out_folder, write_folder
from kvsim.units import parse_rate

CALIBRATE_FILES = ("profile.yaml", "fit.md", "fit.json", "rows.csv", "residuals.png")


def _rate(text: str | None) -> float | None:
    if text is None:
        return None
    try:
        value = float(text)
    except ValueError:
        try:
            value = parse_rate(text)
        except ValueError as e:
            raise InputError(str(e), where=f"--rate {text}") from None
    if not (value > 0 and math.isfinite(value)):
        raise InputError("expected a rate > 0 such as 4/s", where=f"--rate {text}")
    return value


def _fields(given: list[str] | None) -> list[str] | None:
    """``--fit a,b --fit c`` as [a, b, c]; None when not given (the defaults)."""
    if given is None:
        return None
    names = [n.strip() for part in given for n in part.split(",")]
    if not all(names):
        raise InputError("an empty field name (FIELD[,FIELD...])", where="--fit")
    return names


def _command(args: argparse.Namespace) -> str:
    """The command line as it was given (for provenance)."""
    words = ["kvsim", "calibrate", *args.measurements, "--scenario", args.scenario]
    for name in ("fit",):
        for v in getattr(args, name) or []:
            words += [f"--{name}", v]
    for flag, value in (
        ("--holdout", args.holdout),
        ("--cached-tokens", args.cached_tokens),
        ("--concurrency", args.concurrency),
        ("--rate", args.rate),
        ("--tier", args.tier),
        ("--statistic", args.statistic),
        ("--max-requests", args.max_requests),
        ("--seed", args.seed),
        ("--out", args.out),
    ):
        if value is not None:
            words += [flag, str(value)]
    for o in args.overrides:
        words += ["--set", o]
    return shlex.join(words)


def _cmd_calibrate(args: argparse.Namespace) -> int:
    if args.out is not None:
        check_out_folder(args.out, flag="--out", owned=CALIBRATE_FILES)
    if args.cached_tokens is not None and args.cached_tokens < 0:
        raise InputError(
            f"expected a count >= 0, got {args.cached_tokens}", where="--cached-tokens"
        )
    given = Given(
        cached_tokens=args.cached_tokens,
        concurrency=args.concurrency,
        rate=_rate(args.rate),
        tier=args.tier,
        statistic=args.statistic,
    )
    fit = _fields(args.fit)
    rows = read_measurements(args.measurements, given)
    log = None if args.quiet else (lambda msg: print(msg, file=sys.stderr))
    cal = calibrate(
        args.scenario,
        rows,
        fit,
        overrides=args.overrides,
        holdout=args.holdout,
        seed=args.seed,
        max_requests=args.max_requests,
        workers=args.workers,
        log=log,
    )
    print("\n".join(lines(cal)))
    if args.out is not None:
        paths = write_outputs(cal, args, _command(args))
        print(f"wrote {', '.join(str(p) for p in paths)}", file=sys.stderr)
    return 0


def write_outputs(cal: Calibration, args: argparse.Namespace, command: str) -> list[Path]:
    """The --out folder, all or nothing."""
    sc = api.load(args.scenario, args.overrides)
    comp = scenario_composition(sc, args.scenario)
    profile = str(Path(args.out) / "profile.yaml")
    text = profile_text(cal, sc, comp, args.scenario, sha256_file(args.scenario), profile, command)
    table = row_table(cal)
    return write_folder(
        args.out,
        {
            "profile.yaml": lambda p: p.write_text(text, encoding="utf-8"),
            "fit.md": lambda p: p.write_text(markdown(cal, command), encoding="utf-8"),
            "fit.json": lambda p: p.write_text(
                json.dumps(record(cal, command), indent=2, allow_nan=False) + "\n",
                encoding="utf-8",
            ),
            "rows.csv": lambda p: pd.DataFrame(table).to_csv(p, index=False),
            "residuals.png": lambda p: residual_plot(table, p),
        },
        flag="--out",
        owned=CALIBRATE_FILES,
    )
