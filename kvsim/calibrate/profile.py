"""The calibrated profile file (``DIR/profile.yaml``) a scenario can name.

What this module owns: :func:`profile_text`. The file is the scenario's composed profile
(every section a named profile has: node, model, timing, engine, tiers, remote) with the
fitted assumptions in place, plus:

- ``assume:``, the fitted values by name as the catalogue writes its numbers, ``[value,
  lo, hi, C]``, lo..hi the 95% interval (prediction ranges on a composition naming this
  file as its base span it), the scenario's value and the documented range beside
  (kvsim.profiles.profile_assume reads it);
- a ``# C: from NAME`` comment on every number a fitted value moved (found by composing
  the profile again with that value moved 1%: the derived numbers are named, not guessed);
- ``sources: calibration:``, the provenance: kvsim's version, the command, the scenario
  and each measurement file with its SHA-256 and the rows fitted and held out, and the
  fit's errors.

Named as ``profile: DIR/profile.yaml`` a scenario gets these numbers as they are (a named
profile: no prediction ranges). Named as a composition's base, ``profile: {model: ...,
gpu: ..., base: DIR/profile.yaml}``, the composition keeps this file's host, links,
tiers and remote and takes its ``assume:`` values, marked C (kvsim/catalogue/compose.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from kvsim.calibrate.fit import Calibration
from kvsim.catalogue.compose import Composition
from kvsim.config.loader.layers import load_profile
from kvsim.config.schema import Scenario
from kvsim.version import __version__

HEADER = """\
# Written by `kvsim calibrate` (kvsim {version}).
# The composed profile of {what},
# with the catalogue assumptions in `assume:` fitted to measured TTFTs. Those values, and
# every number derived from them, are marked C: calibrated to the runs in
# sources.calibration, not predicted. A scenario names it as
#   profile: {path}
# (these numbers, as a named profile), or as
#   profile: {{model: ..., gpu: ..., base: {path}}}
# (a composition keeping this file's host, tiers and remote, with its fitted values).
"""


def _spec(sc: Scenario) -> dict[str, Any]:
    spec = sc.profile
    assert not isinstance(spec, str)  # calibrate refuses a named profile first
    return spec.model_dump(exclude_none=True)


def _layer(spec: Mapping[str, Any], scenario_dir: Path) -> dict[str, Any]:
    layer, _ = load_profile(dict(spec), "profile", scenario_dir)
    return layer


def _flat(d: Mapping[str, Any], path: tuple[str, ...] = ()) -> dict[tuple[str, ...], Any]:
    out: dict[tuple[str, ...], Any] = {}
    for k, v in d.items():
        if isinstance(v, Mapping):
            out.update(_flat(v, (*path, str(k))))
        else:
            out[(*path, str(k))] = v
    return out


def _scalar(v: Any) -> str:
    text = yaml.safe_dump(v, default_flow_style=True, width=10_000).strip()
    return text.removesuffix("...").strip()


def _emit(
    d: Mapping[str, Any], comments: Mapping[tuple[str, ...], str], path: tuple[str, ...] = ()
) -> list[str]:
    out = []
    pad = "  " * len(path)
    for k, v in d.items():
        p = (*path, str(k))
        note = f"  # {comments[p]}" if p in comments else ""
        if isinstance(v, Mapping):
            out.append(f"{pad}{_scalar(str(k))}:{note}")
            out += _emit(v, comments, p)
        else:
            out.append(f"{pad}{_scalar(str(k))}: {_scalar(v)}{note}")
    return out


def profile_text(
    cal: Calibration,
    sc: Scenario,
    comp: Composition,
    scenario_path: str,
    scenario_digest: str | None,
    out_path: str,
    command: str,
) -> str:
    """The profile file (see the module docstring)."""
    scenario_dir = Path(scenario_path).resolve().parent
    spec = _spec(sc)
    given = dict(spec.get("assume") or {})
    fitted = {e.field.name: e.field.yaml_value(e.value) for e in cal.estimates}
    layer = _layer({**spec, "assume": {**given, **fitted}}, scenario_dir)
    flat = _flat(layer)
    comments: dict[tuple[str, ...], str] = {}
    for e in cal.estimates:
        moved = {**fitted, e.field.name: e.field.yaml_value(e.value * 0.99)}
        other = _flat(_layer({**spec, "assume": {**given, **moved}}, scenario_dir))
        for p, v in flat.items():
            if other.get(p) != v:
                prior = comments.get(p)
                comments[p] = f"{prior}, {e.field.name}" if prior else f"C: from {e.field.name}"
    # [value, lo, hi, C]: the catalogue's own form; lo..hi the 95% interval (the
    # documented range for a value at a bound, which has none)
    assume: dict[str, list[Any]] = {}
    assume_comments: dict[tuple[str, ...], str] = {}
    for e in cal.estimates:
        f = e.field
        lo, hi = (e.lo95, e.hi95) if e.at_bound is None else (f.lo, f.hi)
        assume[f.name] = [f.yaml_value(e.value), f.yaml_value(lo), f.yaml_value(hi), "C"]
        what = "95% interval" if e.at_bound is None else "at a bound: no interval; its range"
        assume_comments[("assume", f.name)] = (
            f"C, {what}; the scenario's {f.text(f.value)} ({f.mark}), range "
            f"{f.text(f.lo)} .. {f.text(f.hi)}"
        )
    what = f"{comp.model.name} on {comp.gpus} x {comp.gpu.name}"
    head = HEADER.format(version=__version__, what=what, path=out_path)
    name = f"calibrated-{comp.model.name}-{comp.gpu.name}".lower()
    doc: dict[str, Any] = {
        "name": name,
        "description": (
            f"{what}, {', '.join(fitted)} fitted by kvsim calibrate to "
            f"{len(cal.rows) - sum(cal.held_out)} measured rows"
        ),
    }
    sources = {"sources": {"calibration": provenance(cal, scenario_path, scenario_digest, command)}}
    lines = [head.rstrip("\n"), *_emit(doc, {})]
    lines += _emit({"assume": assume}, assume_comments)
    text = yaml.safe_dump(sources, sort_keys=False, width=88, default_flow_style=None)
    lines += text.rstrip("\n").split("\n")
    lines += _emit(layer, comments)
    return "\n".join(lines) + "\n"


def provenance(
    cal: Calibration, scenario_path: str, scenario_digest: str | None, command: str
) -> dict[str, Any]:
    """Where the fitted values came from: the command, the scenario, every measurement
    file with its SHA-256 and the rows fitted and held out, and the fit's errors."""
    files: dict[str, dict[str, Any]] = {}
    for r, h in zip(cal.rows, cal.held_out, strict=True):
        entry = files.setdefault(
            r.source,
            {"file": r.source, "sha256": r.digest, "format": r.fmt, "fit": [], "held_out": []},
        )
        line = r.where.rsplit(":", 1)[-1]
        entry["held_out" if h else "fit"].append(int(line) if line.isdigit() else line)
    fit, held = cal.errors("fit", "after"), cal.errors("held-out", "after")
    return {
        "tool": f"kvsim calibrate (kvsim {__version__})",
        "command": command,
        "scenario": {"file": scenario_path, "sha256": scenario_digest},
        "measurements": list(files.values()),
        "rows_fit": len(cal.rows) - sum(cal.held_out),
        "rows_held_out": sum(cal.held_out),
        "median_error_fit": round(fit.median, 4),
        "median_error_held_out": None if not held.rows else round(held.median, 4),
    }
