"""``kvsim capacity``: the highest arrival rate that meets an SLO, and its
``--minimize`` and ``--cheapest`` modes."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import math
import sys
from collections.abc import Callable, Iterator

import pandas as pd

from kvsim.api import load
from kvsim.cli.common import _json_number
from kvsim.config.loader import load_record
from kvsim.config.schema import Scenario, prompt_bounds
from kvsim.errors import InputError
from kvsim.experiments.capacity import (
    Infeasible,
    capacity_table,
    search,
    sweep_capacity,
    sweep_with_sets,
)
from kvsim.experiments.planner import (
    cheapest,
    closest,
    layouts,
    minimize,
    minimize_sweep,
    steady_warnings,
)
from kvsim.experiments.replicate import PAIRED
from kvsim.experiments.slo import parse_slo
from kvsim.experiments.sweep import SweepSpec, load_sweep
from kvsim.plots import capacity_plot, cheapest_plot
from kvsim.results.uncertainty import IDENTICAL, bound_keys, read_bounds
from kvsim.results.writers import CAPACITY_FILES, check_out_folder, write_folder
from kvsim.workload.resample_note import resampling_note


def _cmd_capacity(args: argparse.Namespace) -> int:
    if (args.scenario is None) == (args.sweep is None):
        raise InputError("give a scenario or --sweep (one of them)", where="capacity")
    if args.reps is None:  # a sweep file's own seed count, as `kvsim sweep` runs it
        args.reps = _sweep_reps(args.sweep) if args.sweep is not None else 3
    if args.reps < 1:
        raise InputError("must be >= 1", where="--reps")
    if args.prompt_range is not None:  # every run (every mode) measures only those prompts
        args.overrides = [*args.overrides, _prompt_range_override(args.prompt_range)]
    log = (lambda msg: None) if args.json else (lambda msg: print(msg, file=sys.stderr))
    if args.minimize is not None or args.span is not None:
        return _capacity_minimize(args, log)
    if args.sweep is not None and not args.json:  # (a scenario's: below, once loaded)
        _log_sweep_resampling(args, log)
    if args.cheapest:
        return _capacity_cheapest(args, log)
    if args.out is not None:
        check_out_folder(args.out, flag="--out", owned=CAPACITY_FILES)
    if args.sweep:
        with _explained(args):
            caps = sweep_capacity(
                args.sweep,
                args.slo,
                reps=args.reps,
                tol=args.tol,
                workers=args.workers,
                sets=args.overrides,
                log=log,
            )
    else:
        slo = parse_slo(args.slo)
        sc = load(args.scenario, args.overrides)
        if not args.json:
            _log_resampling(sc, args.reps, log)
        with _explained(args):
            caps = [search(sc, slo, reps=args.reps, tol=args.tol, log=log)]
        caps[0].config = {"scenario": sc.name}
    df = capacity_table(caps)
    if args.out is not None:
        files = {"capacity.csv": lambda p: df.to_csv(p, index=False)}
        if args.sweep:
            files["capacity.png"] = lambda p: capacity_plot(df, p)
        paths = write_folder(args.out, files, flag="--out", owned=CAPACITY_FILES)
        print(f"wrote {', '.join(str(p) for p in paths)}", file=sys.stderr)
    if args.json:
        print(json.dumps(json.loads(df.to_json(orient="records")), indent=2))
        return 0
    print(f"capacity at {caps[0].slo} ({args.reps} replications, 95% interval):")
    for cap, (_, row) in zip(caps, df.iterrows(), strict=True):
        spread = cap.interval.text()
        print(
            f"  {row['configuration']}: {row['capacity_rps']:.4g} requests/s offered {spread} "
            f"({row['factor']:.3g}x the scenario's offered rate)"
        )
        if cap.sessions:  # a session workload: Little's law at that load
            iv = cap.sessions_per_gpu
            print(
                f"    {iv.mean:.4g} concurrent sessions per GPU {iv.text()} (sessions/s x "
                f"mean session lifetime {row['session_lifetime_s']:.4g} s / GPUs)"
            )
        if "goodput_rps" in df.columns:  # a joint SLO: what meets every bound there
            print(f"    goodput there {row['goodput_rps']:.4g} requests/s (within every bound)")
        if "delta_capacity_rps" in df.columns:
            print(f"    {_capacity_delta(cap, row)}")
    if "delta_capacity_rps" in df.columns:
        print(PAIRED)
    return 0


def _capacity_delta(cap: object, row: dict) -> str:
    """A configuration's paired difference in capacity from the reference configuration
    ("delta +1.2 requests/s [0.4, 2] vs the reference"), or that it is the reference."""
    if getattr(cap, "reference", False):
        return "(reference)"
    delta = float(row["delta_capacity_rps"])
    if not math.isfinite(delta):
        return "delta: n/a"
    text = f"delta {delta:+.4g} requests/s"
    bounds = read_bounds(row, "delta_capacity_rps")
    if bounds is None:
        return f"{text} vs the reference (one replication: no interval)"
    return f"{text} [{bounds[0]:+.4g}, {bounds[1]:+.4g}] vs the reference"


def _capacity_minimize(args: argparse.Namespace, log: Callable[[str], None]) -> int:
    """``kvsim capacity SCENARIO --slo ... --minimize FIELD [--range LO..HI]``, and over
    every layout of a sweep: ``kvsim capacity --sweep SWEEP --minimize FIELD``."""
    if args.minimize is None:
        raise InputError("--range needs --minimize FIELD", where="--range")
    if args.cheapest and args.sweep is None:
        raise InputError("--cheapest compares the configurations of a --sweep", where="--cheapest")
    if args.out is not None:
        raise InputError("--minimize prints its answer; it writes no folder", where="--out")
    slo = parse_slo(args.slo)
    if args.sweep is not None:
        return _minimize_layouts(args, slo, log)
    sc = load(args.scenario, args.overrides)
    if not args.json:
        _log_resampling(sc, args.reps, log)
    with _explained(args):
        found = minimize(
            sc, slo, args.minimize, span=args.span, reps=args.reps, tol=args.tol, log=log
        )
    _warn(found.warning_lines())  # the answer's runs still filling up (stderr)
    if args.json:  # (kvsim.experiments.planner.Minimum: the interval, provision, counts)
        print(json.dumps(found.as_json(), indent=2))
        return 0
    print("\n".join(found.lines()))
    return 0


def _sweep_reps(path: str) -> int:
    """A sweep file's ``replications`` (or the length of its ``seeds``), else 3."""
    spec = load_record(SweepSpec, path, "sweep")
    if spec.seeds is not None:
        return len(spec.seeds)
    return spec.replications or 3


def _warn(lines: list[str]) -> None:
    """Warnings on stderr, after the progress lines and beside stdout's answer."""
    for line in lines:
        print(line, file=sys.stderr)


def _minimize_layouts(args: argparse.Namespace, slo: object, log: Callable[[str], None]) -> int:
    """``--minimize`` in every layout of ``--sweep`` (each as on its own), each layout's
    price with the field at its value to provision, and with prices (always with
    ``--cheapest``) the cheapest layout at that value: how many nodes, and which layout."""
    if not args.json:
        _log_sweep_resampling(args, log)
    rows = minimize_sweep(
        args.sweep,
        slo,  # type: ignore[arg-type]
        args.minimize,
        span=args.span,
        reps=args.reps,
        tol=args.tol,
        sets=args.overrides,
        priced=args.cheapest,
        log=log,
    )
    done = [r for r in rows if r.answer is not None]
    for r in done:  # each layout's answer runs still filling up (stderr)
        _warn([f"layout {r.label}: {w}" for w in r.answer.warning_lines()])  # type: ignore[union-attr]
    priced = [r for r in done if math.isfinite(r.usd_per_hour) and r.usd_per_hour > 0]
    best = min(priced, key=lambda r: r.usd_per_hour) if priced else None
    if args.json:
        out = []
        for r in rows:
            row: dict[str, object] = {**r.config, "meets": r.answer is not None}
            if r.answer is not None:
                row.update(r.answer.as_json())
            else:
                row.update(failure=r.failure)
                if r.explanation is not None:
                    row["explanation"] = r.explanation.as_json()
            out.append({**row, "cheapest": r is best})
        print(json.dumps(out, indent=2))
    else:
        for r in rows:
            print(f"layout {r.label}:")
            if r.answer is None:
                print(f"  {r.failure}")
                if r.explanation is not None:
                    print("\n".join(r.explanation.lines()))
                continue
            print("\n".join(f"  {line}" for line in r.answer.lines()))
            if math.isfinite(r.usd_per_hour):
                mark = "  <- cheapest" if r is best else ""
                print(f"    ${r.usd_per_hour:,.2f}/h at that value{mark}")
        if best is not None:
            f = best.answer.field if best.answer is not None else None
            value = f.show_up(best.answer.provision) if f and best.answer else ""
            print(
                f"cheapest: {best.label} with {args.minimize} = {value} "
                f"(${best.usd_per_hour:,.2f}/h)"
            )
    if not done:
        raise InputError(
            f"the SLO ({slo}) fails in every layout even at the top of the range (see above)",
            where=f"--minimize {args.minimize}",
        )
    return 0


def _write_cheapest(out: str, rows: list[dict], found: list, slo: object) -> None:
    """``--cheapest --out DIR``: the layouts' rows as ``cheapest.csv`` (the explanation,
    nested, only in ``cheapest.json``), ``cheapest.json`` (what ``--json`` prints) and
    ``cheapest.png`` (the metric with its interval against the SLO, and the price)."""

    flat = [{k: v for k, v in r.items() if k != "explanation"} for r in rows]
    files = {
        "cheapest.csv": lambda p: pd.DataFrame(flat).to_csv(p, index=False),
        "cheapest.json": lambda p: p.write_text(json.dumps(rows, indent=2) + "\n"),
        "cheapest.png": lambda p: cheapest_plot(flat, [x.config for x in found], slo, p),
    }
    paths = write_folder(out, files, flag="--out", owned=CHEAPEST_FILES)
    print(f"wrote {', '.join(str(p) for p in paths)}", file=sys.stderr)


CHEAPEST_FILES = ("cheapest.csv", "cheapest.json", "cheapest.png")


def _capacity_cheapest(args: argparse.Namespace, log: Callable[[str], None]) -> int:
    """``kvsim capacity --sweep SWEEP --slo ... --cheapest [--out DIR]``."""
    if args.sweep is None:
        raise InputError("--cheapest compares the configurations of a --sweep", where="--cheapest")
    if args.out is not None:
        check_out_folder(args.out, flag="--out", owned=CHEAPEST_FILES)
    slo = parse_slo(args.slo)
    found = layouts(args.sweep, slo, reps=args.reps, sets=args.overrides, log=log)
    best = cheapest(found)
    slo = dataclasses.replace(slo, scope=found[0].scope) if found else slo
    nearest = closest(found, slo) if best is None else None
    why = nearest.why(slo) if nearest is not None else None
    rows = [
        {
            **x.config,
            slo.metric: _json_number(x.metric),
            **bound_keys(slo.metric, x.interval),
            "meets": x.meets,
            "usd_per_hour": _json_number(x.usd_per_hour),
            "usd_per_million_prompt_tokens": _json_number(x.usd_per_million_prompt_tokens),
            "cheapest": x is best,
            **_layout_deltas(x),
            # when none meets the SLO, the closest layout says why (else no key)
            **({"explanation": why.as_json()} if why is not None and x is nearest else {}),
        }
        for x in found
    ]
    for x in found:  # layouts whose runs at their own load were still filling up (stderr)
        label = ", ".join(f"{k}={v}" for k, v in x.config.items()) or "the scenario"
        _warn(
            [
                f"warning: layout {label}, seed run {i + 1}: {w}"
                for i, s in enumerate(x.summaries)
                for w in steady_warnings(s)
            ]
        )
    if args.out is not None:
        _write_cheapest(args.out, rows, found, slo)
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0 if best is not None else 1
    print(f"layouts at their own load, {slo} ({args.reps} replications, mean):")
    for x in found:
        label = ", ".join(f"{k}={v}" for k, v in x.config.items())
        mark = "  <- cheapest" if x is best else ""
        near = (
            " (its 95% interval straddles the threshold)"
            if x.interval is not None
            and x.interval.ok
            and x.interval.lo <= slo.threshold <= x.interval.hi
            else ""
        )
        print(
            f"  {label}: {slo.metric} {x.metric:.4g} {x.interval.text() if x.interval else ''} "
            f"{'meets' if x.meets else 'fails'}{near}, "
            f"${x.usd_per_hour:,.2f}/h, ${x.usd_per_million_prompt_tokens:,.4g} per million "
            f"prompt tokens{mark}"
        )
        if len(found) > 1:
            print(f"    {_layout_delta_text(x, slo.metric)}")
    if len(found) > 1:
        print(PAIRED)
    if best is None:
        print(f"no configuration meets {slo}")
        if why is not None:
            print("\n".join(why.lines()))
        return 1
    return 0


def _layout_deltas(x: object) -> dict[str, object]:
    """A layout's paired differences from the reference layout for --json:
    ``delta_<name>`` and its 95% interval ``delta_<name>_lo``, ``delta_<name>_hi``
    (null without one), and ``reference`` (with several layouts)."""

    out: dict[str, object] = {}
    deltas = getattr(x, "deltas", {})
    if deltas or getattr(x, "reference", False):
        out["reference"] = bool(getattr(x, "reference", False))
    for name, iv in deltas.items():
        out[f"delta_{name}"] = _json_number(iv.mean)
        out.update(bound_keys(f"delta_{name}", iv))
    return out


def _layout_delta_text(x: object, metric: str) -> str:
    """A layout's paired differences from the reference, one line: the SLO's metric and
    the price per hour and per million prompt tokens, each with its 95% interval."""
    if getattr(x, "reference", False):
        return "(reference)"
    deltas = getattr(x, "deltas", {})
    if not deltas:
        return "delta: n/a"

    def usd(v: float) -> str:
        return f"{'-' if v < 0 else '+'}${abs(v):.4g}"

    shown: dict[str, tuple[Callable[[float], str], str]] = {
        metric: (lambda v: f"{v:+.4g}", f" {metric}"),
        "usd_per_hour": (usd, "/h"),
        "usd_per_million_prompt_tokens": (usd, " per million prompt tokens"),
    }
    parts = []
    for name, (show, unit) in shown.items():
        iv = deltas.get(name)
        if iv is None or not math.isfinite(iv.mean):
            continue
        text = show(iv.mean) + unit
        if iv.note == IDENTICAL:
            text += " (every replication)"
        elif not iv.note:
            text += f" [{show(iv.lo)}, {show(iv.hi)}]"
        parts.append(text)
    return "delta vs the reference: " + ", ".join(parts)


def _log_resampling(sc: Scenario, reps: int, log: Callable[[str], None]) -> None:
    """Log how the replications resample a trace and the prefix reuse that keeps (the
    trace's as it is beside the draws'); nothing for a workload not resampled."""
    note = resampling_note(sc, [sc.seed + r for r in range(reps)])
    if note is not None:
        log(note)


def _log_sweep_resampling(args: argparse.Namespace, log: Callable[[str], None]) -> None:
    """:func:`_log_resampling` for a --sweep's first configuration (its configurations
    replay one trace); a configuration that does not load says so in its own search."""
    try:
        configs = sweep_with_sets(load_sweep(args.sweep), list(args.overrides or []))
    except InputError:
        return
    if configs:
        _log_resampling(configs[0][1], args.reps, log)


def _prompt_range_override(text: str) -> str:
    """``--prompt-range LO..HI`` as the ``--set run.prompt_range=...`` it stands for
    (checked here, so that a bad range is refused naming the flag)."""
    try:
        prompt_bounds(text)
    except ValueError as e:
        raise InputError(f"run.prompt_range: {e}", where=f"--prompt-range {text}") from None
    return f"run.prompt_range={json.dumps(text.strip())}"


@contextlib.contextmanager
def _explained(args: argparse.Namespace) -> Iterator[None]:
    """An SLO no point of the search meets: print why (the value reached, the slowest
    requests' parts, the compute floor; as JSON with --json) before the one-line
    refusal (exit 2)."""
    try:
        yield
    except Infeasible as e:
        why = e.explanation
        if args.json:
            print(json.dumps({"feasible": False, "explanation": why.as_json()}, indent=2))
        else:
            print(f"the SLO ({why.slo}) cannot be met:")
            print("\n".join(why.lines()))
        raise
