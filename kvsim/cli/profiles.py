"""``kvsim profiles``: list the shipped profiles, model and GPU cards, and show a
composition's derived constants."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from kvsim.catalogue.calibrated import calibrated_notes
from kvsim.catalogue.compose import compose, describe, numbers
from kvsim.catalogue.gpus import list_gpus
from kvsim.catalogue.models import list_models
from kvsim.catalogue.ranges import lone_ranges, range_text
from kvsim.errors import InputError
from kvsim.profiles import DEFAULT_PROFILE, list_profiles


def _cmd_profiles(args: argparse.Namespace) -> int:
    if args.action == "show":
        return _show_composition(args)
    if args.model is not None:
        raise InputError(f"unknown action {args.model!r}; did you mean `kvsim profiles show`?")
    flags = [f"--{k}" for k in ("gpus", "tp", "pcp", "pp", "ep") if getattr(args, k) is not None]
    if flags:
        raise InputError(f"{flags[0]} goes with `kvsim profiles show MODEL GPU`")
    profiles, models, gpus = list_profiles(), list_models(), list_gpus()
    if args.json:
        rows = [
            {"kind": kind, **row}
            for kind, group in (("profile", profiles), ("model", models), ("gpu", gpus))
            for row in group
        ]
        print(json.dumps(rows, indent=2))
        return 0
    for title, rows in (("profiles", profiles), ("models", models), ("gpus", gpus)):
        print(f"{title}:")
        width = max(len(p["name"]) for p in rows)
        for p in rows:
            mark = " (default)" if p["name"] == DEFAULT_PROFILE else ""
            print(f"  {p['name']:<{width}}  {p['description']}{mark}")
    print(
        "\ncompose one in a scenario: profile: {model: MODEL, gpu: GPU, gpus: N, tp: N, "
        "pcp: N, pp: N, ep: N}; see its numbers: kvsim profiles show MODEL GPU [--tp N ...]"
    )
    return 0


def _show_composition(args: argparse.Namespace) -> int:
    if not args.model or not args.gpu:
        raise InputError(
            "usage: kvsim profiles show MODEL GPU [--gpus N --tp N --pcp N --pp N --ep N]"
        )
    spec: dict[str, Any] = {"model": args.model, "gpu": args.gpu}
    for key in ("gpus", "tp", "pcp", "pp", "ep"):
        if getattr(args, key) is not None:
            spec[key] = getattr(args, key)
    try:
        comp = compose(spec, Path.cwd())
    except InputError as e:  # name the flag or argument the user gave
        field, _, why = e.reason.partition(": ")
        key = field.removeprefix("profile.")
        if e.where:  # a card's own mistake: its file and line
            raise InputError(why or e.reason, where=e.where) from None
        if not why or (key not in spec and key != "profile"):
            raise
        where = {"model": args.model, "gpu": args.gpu, "profile": "profiles show"}
        raise InputError(why, where=where.get(key, f"--{key}")) from None
    rows = describe(comp)
    graphs = not args.eager
    ranges = lone_ranges(comp, cuda_graphs=graphs)  # over the assumptions' ranges
    for name, label, how in (
        (
            "lone_16k_ttft_s",
            "lone 16k TTFT",
            "a cold 16,384-token prompt alone, frontend in" + ("" if graphs else "; eager mode"),
        ),
        ("gpu_hit_1k_ttft_s", "GPU-hit 1k TTFT", "a 1,024-token prompt all in HBM"),
        ("gpu_hit_64k_ttft_s", "GPU-hit 64k TTFT", "a 65,536-token prompt all in HBM"),
    ):
        rows.append((label, range_text(ranges[name]), how))
    notes = calibrated_notes(comp)  # a calibrated profile of the same system: say so
    if args.json:
        shown = [{"quantity": q, "value": v, "how": h} for q, v, h in rows]
        ranged = {
            k: {"value": r.shipped, "lo": r.lo, "hi": r.hi, "sensitive_to": list(r.sensitive_to)}
            for k, r in ranges.items()
        }
        out = {"numbers": numbers(comp), "ranges": ranged, "rows": shown, "notes": notes}
        print(json.dumps(out, indent=2))
        return 0
    width = max(len(q) for q, _, _ in rows)
    vwidth = max(len(v) for _, v, _ in rows)
    for q, v, h in rows:
        print(f"{q:<{width}}  {v:<{vwidth}}  {h}")
    for line in notes:
        print(f"note: {line}")
    return 0
