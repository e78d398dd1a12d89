"""A gate's baseline file: written all or nothing, read and checked field by field
(finite numbers only) before anything runs, and matched to the suite (seeds, entries, load
points, metrics; a changed scenario or file said, or refused with ``strict``)."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from kvsim.errors import InputError, clean
from kvsim.experiments.regression.suite import Entry, Suite
from kvsim.files import MAX_TABLE_BYTES, read_text
from kvsim.results.writers import BASELINE_FILES, write_folder
from kvsim.version import __version__

BASELINE = "baseline.json"


MAX_MAGNITUDE = 1e300  # a baseline number larger than this is damage, not a measurement


def write_baseline(doc: dict[str, Any], out_dir: str | os.PathLike[str]) -> Path:
    """baseline.json as the folder ``out_dir``, all or nothing (kvsim.results.writers:
    staged beside it, swapped in when complete); NaN is refused here too."""
    text = json.dumps(doc, indent=2, allow_nan=False) + "\n"  # ValueError: a kvsim bug
    (final,) = write_folder(
        out_dir,
        {BASELINE: lambda p: p.write_text(text, encoding="utf-8")},
        flag="--out",
        owned=BASELINE_FILES,
    )
    return final


def baseline_path(path: str | os.PathLike[str]) -> Path:
    """The baseline file of ``--baseline``: the folder's baseline.json, or the file."""
    p = Path(path)
    return p / BASELINE if p.is_dir() else p


def read_baseline(path: str | os.PathLike[str]) -> dict[str, Any]:
    """A baseline document, checked field by field (InputError naming the file and the
    field), so that ``kvsim check`` refuses a damaged one before running anything."""
    p = Path(path)
    f = baseline_path(p)
    if not os.path.lexists(f):
        raise InputError("no baseline.json here (make one with `kvsim baseline`)", where=str(p))
    text = read_text(f, what="baseline", max_bytes=MAX_TABLE_BYTES)
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise InputError(f"not a baseline: {e.msg}", where=f"{f}:{e.lineno}") from None
    except (ValueError, RecursionError) as e:
        reason = "nested too deeply" if isinstance(e, RecursionError) else str(e)
        raise InputError(f"not a baseline: {clean(reason)}", where=str(f)) from None
    check_baseline_doc(doc, str(f))
    return doc


def check_baseline_doc(doc: Any, where: str) -> None:
    """Every field :func:`~.comparison.compare` reads, with its type; finite numbers only."""

    def bad(field: str, what: str) -> None:
        raise InputError(f"{field}: {what}" if field else what, where=where)

    def kind(v: Any) -> str:
        names = {"str": "text", "dict": "an object", "list": "a list", "bool": "true/false"}
        return "null" if v is None else names.get(type(v).__name__, type(v).__name__)

    def need(obj: Any, key: str, typ: type | tuple[type, ...], field: str) -> Any:
        if not isinstance(obj, dict) or key not in obj:
            bad(field, "missing")
        v = obj[key]
        if isinstance(v, bool) or not isinstance(v, typ):
            names: dict[type, str] = {str: "text", list: "a list", dict: "an object"}
            want = names.get(typ, "a number") if isinstance(typ, type) else "a number"
            bad(field, f"expected {want}, got {kind(v)}")
        return v

    def finite(v: Any, field: str, positive: bool = False) -> float:
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            bad(field, f"expected a number, got {kind(v)}")
        try:
            x = float(v)
        except OverflowError:
            x = math.inf
        if not math.isfinite(x):
            bad(field, "not a finite number (a baseline never records NaN or infinity)")
        if abs(x) > MAX_MAGNITUDE:
            bad(field, f"{x:g} is out of range (a baseline number is within +-{MAX_MAGNITUDE:g})")
        if positive and x <= 0:
            bad(field, f"must be > 0, got {x:g}")
        return x

    if not isinstance(doc, dict):
        bad("", f"not a kvsim baseline (expected a JSON object, got {kind(doc)})")
    if "entries" not in doc:
        bad("", "not a kvsim baseline (no entries)")
    need(doc, "kvsim_version", str, "kvsim_version")
    if "provenance" in doc:  # (absent from a baseline made before kvsim recorded it)
        need(doc, "provenance", dict, "provenance")
    seeds = need(doc, "seeds", list, "seeds")
    for i, s in enumerate(seeds):
        if isinstance(s, bool) or not isinstance(s, int):
            bad(f"seeds[{i}]", f"expected an integer, got {kind(s)}")
    if "suite" in doc:
        need(doc, "suite", str, "suite")
    entries = need(doc, "entries", list, "entries")
    if not entries:
        bad("entries", "empty")
    ids: dict[str, int] = {}
    for i, e in enumerate(entries):
        fe = f"entries[{i}]"
        if not isinstance(e, dict):
            bad(fe, f"expected an object, got {kind(e)}")
        for key in ("id", "scenario", "hash"):
            need(e, key, str, f"{fe}.{key}")
        if "files" in e:  # (absent from a baseline made before kvsim recorded them)
            for name, digest in need(e, "files", dict, f"{fe}.files").items():
                if not isinstance(digest, str):
                    bad(f"{fe}.files.{clean(name, 80)}", f"expected text, got {kind(digest)}")
        if e["id"] in ids:
            bad(
                f"{fe}.id",
                f"entry {clean(e['id'], 80)!r} is listed twice (entries[{ids[e['id']]}])",
            )
        ids[e["id"]] = i
        points = need(e, "points", list, f"{fe}.points")
        loads: dict[float, int] = {}
        for j, pt in enumerate(points):
            fp = f"{fe}.points[{j}]"
            if not isinstance(pt, dict):
                bad(fp, f"expected an object, got {kind(pt)}")
            load = finite(need(pt, "load", (int, float), f"{fp}.load"), f"{fp}.load", positive=True)
            if load in loads:
                bad(
                    f"{fp}.load",
                    f"load point {load:g} is listed twice ({fe}.points[{loads[load]}])",
                )
            loads[load] = j
            metrics = need(pt, "metrics", dict, f"{fp}.metrics")
            for m, stats in metrics.items():
                fm = f"{fp}.metrics.{clean(m)}"
                if not isinstance(stats, dict):
                    bad(fm, f"expected an object, got {kind(stats)}")
                lo, mean, hi = (
                    finite(need(stats, k, (int, float), f"{fm}.{k}"), f"{fm}.{k}")
                    for k in ("lo", "mean", "hi")
                )
                if not lo <= mean <= hi:
                    bad(fm, f"expected lo <= mean <= hi, got {lo:g}, {mean:g}, {hi:g}")
                if "values" in stats:
                    vals = need(stats, "values", list, f"{fm}.values")
                    xs = [finite(v, f"{fm}.values[{k}]") for k, v in enumerate(vals)]
                    if len(xs) != len(seeds):
                        bad(
                            f"{fm}.values",
                            f"{len(xs)} values for {len(seeds)} seeds (one value per seed)",
                        )
                    avg = math.fsum(xs) / len(xs) if xs else mean
                    if not math.isclose(avg, mean, rel_tol=1e-9, abs_tol=1e-12):
                        bad(f"{fm}.mean", f"{mean:.17g} is not the mean of its values ({avg:.17g})")


def check_baseline(
    suite: Suite, baseline: dict[str, Any], *, strict: bool = False, where: str = "--baseline"
) -> list[str]:
    """Match the suite to a (checked) baseline before anything runs: the same seeds, every
    entry, scenario, load point and metric present. InputError on a mismatch; returns
    notes (a scenario whose hash changed, another kvsim version)."""
    notes = []
    if baseline.get("seeds") != list(suite.seeds):
        raise InputError(
            f"the baseline used seeds {clean(str(baseline.get('seeds')))}, the suite "
            f"{suite.seeds}; make a new baseline",
            where=where,
        )
    if "suite" in baseline and baseline["suite"] != suite.name:
        msg = (
            f"the baseline was made from suite {clean(str(baseline['suite']), 80)!r}, this "
            f"is suite {suite.name!r}"
        )
        if strict:
            raise InputError(msg + "; make a new baseline", where=where)
        notes.append(msg)
    if baseline.get("kvsim_version") != __version__:
        notes.append(
            f"baseline made by kvsim {clean(str(baseline.get('kvsim_version')))}, "
            f"this is {__version__}"
        )
    base_entries = {e["id"]: e for e in baseline["entries"]}
    for e in suite.entries:
        b = base_entries.get(e.id)
        if b is None:
            raise InputError(
                f"entry {e.id!r} is not in the baseline (its entries: "
                f"{clean(', '.join(base_entries), 200)}); was it made from another suite?",
                where=where,
            )
        if b["scenario"] != e.scenario:
            raise InputError(
                f"entry {e.id!r}: the baseline was made from scenario "
                f"{clean(b['scenario'])!r}, the suite runs {e.scenario!r}",
                where=where,
            )
        if b["hash"] != e.digest:
            msg = (
                f"entry {e.id!r}: scenario {e.scenario!r} differs from the "
                f"baseline's (hash {clean(b['hash'])} -> {e.digest})"
            )
            if strict:
                raise InputError(msg, where=where)
            notes.append(msg)
        if b.get("slo") != e.slo:  # (goodput counts the requests within the SLO's bounds)
            msg = (
                f"entry {e.id!r}: its slo changed since the baseline "
                f"({clean(str(b.get('slo')), 120)} -> {e.slo})"
            )
            if strict or "goodput_rps" in suite.metrics:
                raise InputError(
                    f"{msg}; goodput_rps is not comparable: make a new baseline"
                    if not strict
                    else msg,
                    where=where,
                )
            notes.append(msg)
        for msg in _changed_files(e, b):
            if strict:
                raise InputError(msg, where=where)
            notes.append(msg)
        bpoints = {float(p["load"]): p for p in b["points"]}
        for load in e.loads:
            bp = bpoints.get(float(load))
            if bp is None:
                raise InputError(
                    f"entry {e.id!r}: the baseline has no {load:g}x load "
                    f"point (it has {clean(str(sorted(bpoints)), 120)})",
                    where=where,
                )
            for m in suite.metrics:
                if m not in bp["metrics"]:
                    raise InputError(
                        f"entry {e.id!r} @ {load:g}x load: the baseline has no metric {m!r}",
                        where=where,
                    )
    return notes


def _changed_files(e: Entry, b: dict[str, Any]) -> list[str]:
    """What differs between the files an entry reads now and those its baseline read (a
    trace or plugin file edited, added, gone), one message each."""
    now = dict(e.files)
    if "files" not in b:
        if not now:
            return []
        return [
            f"entry {e.id!r}: the baseline records no digests of the files it reads (made by "
            f"an older kvsim), so kvsim cannot tell whether {', '.join(sorted(now))} changed; "
            "make a new baseline"
        ]
    then = b["files"]
    out = []
    for name in sorted({*now, *then}):
        shown = clean(name, 200)
        if name not in then:
            out.append(f"entry {e.id!r}: reads {shown}, which the baseline's runs did not")
        elif name not in now:
            out.append(f"entry {e.id!r}: no longer reads {shown}, which the baseline's runs did")
        elif now[name] != then[name]:
            out.append(
                f"entry {e.id!r}: file {shown} changed since the baseline (content digest "
                f"{clean(then[name], 40)} -> {now[name]})"
            )
    return out
