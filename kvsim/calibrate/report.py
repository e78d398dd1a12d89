"""What a calibration says: the terminal report, the Markdown report, the JSON record and
the per-row table.

What this module owns: :func:`lines` (the terminal report: the fitted values with their
95% intervals beside the scenario's and the documented ranges, the errors before and
after on the fit and held-out rows, notes and warnings), :func:`markdown` (the same with
every row), :func:`record` (everything as JSON-ready numbers) and :func:`row_table` (one
record per row: file and row, shape, measured and predicted TTFT, ratio, split, tier).
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

from kvsim.calibrate.fit import Calibration, Errors
from kvsim.report import columns
from kvsim.version import __version__


def _pct(x: float) -> str:
    return "n/a" if not math.isfinite(x) else f"{100 * x:.1f}%"


def _ms(s: float) -> str:
    return f"{s * 1e3:,.2f}"


def summary_line(cal: Calibration) -> str:
    """What was fitted to what, in one line."""
    files = len({r.source for r in cal.rows})
    held = sum(cal.held_out)
    fit = len(cal.rows) - held
    names = ", ".join(f.name for f in cal.fields)
    return (
        f"calibrated {names} to {fit} rows ({held} more held out: "
        f"{_holdout_text(cal)}) from {files} file{'s' if files != 1 else ''}; "
        f"{cal.evaluations} evaluations (a kvsim run of each fit row, or of each held-out "
        f"row) in {cal.seconds:.1f} s"
    )


def _holdout_text(cal: Calibration) -> str:
    held = sum(cal.held_out)
    if not held:
        return "none, --holdout 0"
    by = Counter(r.tier for r, h in zip(cal.rows, cal.held_out, strict=True) if h)
    return ", ".join(f"{n} {t}" for t, n in sorted(by.items())) + f"; seed {cal.seed}"


def field_rows(cal: Calibration) -> list[list[str]]:
    """The fitted values' table (header first)."""
    out = [["field", "scenario's", "fitted", "95% interval", "documented range", "mark"]]
    for e in cal.estimates:
        f = e.field
        interval = f"{f.text(e.lo95)} .. {f.text(e.hi95)}"
        if e.clipped:
            interval += " (cut at the range)"
        if e.at_bound is not None:
            interval = f"none: at the {'lower' if e.at_bound == 'lo' else 'upper'} bound"
        out.append(
            [
                f.name,
                f"{f.text(f.value)} ({f.mark})",
                f.text(e.value),
                interval,
                f"{f.text(f.lo)} .. {f.text(f.hi)}",
                "C",
            ]
        )
    return out


def error_rows(cal: Calibration) -> list[list[str]]:
    """The errors' table (header first): |predicted / measured - 1|."""
    out = [["rows", "n", "median error", "within 1.25x"]]
    for which in ("fit", "held-out"):
        for when, label in (("before", "scenario's values"), ("after", "fitted")):
            e: Errors = cal.errors(which, when)
            out.append([f"{which}, {label}", str(e.rows), _pct(e.median), _pct(e.within)])
    return out


def lines(cal: Calibration) -> list[str]:
    """The terminal report."""
    out = [summary_line(cal), ""]
    out += columns(field_rows(cal), left=(0, 3, 4, 5))
    out += ["", "error = |kvsim's prediction / measured - 1| (each row's mean or median TTFT)"]
    out += columns(error_rows(cal), left=(0,))
    out += [f"note: {n}" for n in cal.notes]
    out += [f"warning: {w}" for w in cal.warnings]
    return out


def row_table(cal: Calibration) -> list[dict[str, Any]]:
    """One record per row (see the module docstring)."""
    out = []
    for r, h, b, a, s in zip(
        cal.rows, cal.held_out, cal.before, cal.after, cal.served, strict=True
    ):
        out.append(
            {
                "where": r.where,
                "format": r.fmt,
                "split": "held-out" if h else "fit",
                "prompt_tokens": r.prompt_tokens,
                "cached_tokens": r.cached_tokens,
                "tier": r.tier,
                "served_by": s,
                "clients": r.clients(),
                "requests": r.requests,
                "statistic": r.statistic,
                "measured_s": r.ttft_s,
                "before_s": float(b),
                "after_s": float(a),
                "ratio_before": float(b) / r.ttft_s,
                "ratio_after": float(a) / r.ttft_s,
            }
        )
    return out


def markdown(cal: Calibration, command: str = "") -> str:
    """The report as Markdown, with every row."""
    md = ["# kvsim calibrate", ""]
    if command:
        md += ["```", command, "```", ""]
    md += [summary_line(cal) + ".", "", "## Fitted values (marked C: calibrated, not predicted)"]
    md += ["", *_md_table(field_rows(cal)), "", "## Errors", ""]
    md += ["|kvsim's prediction / measured - 1|, each row's mean or median TTFT.", ""]
    md += _md_table(error_rows(cal))
    if cal.notes or cal.warnings:
        md += ["", "## Notes and warnings", ""]
        md += [f"- note: {n}" for n in cal.notes] + [f"- warning: {w}" for w in cal.warnings]
    md += ["", "## Rows", ""]
    head = ["row", "split", "prompt", "cached", "tier", "clients", "measured ms"]
    body = [[*head, "scenario's ms", "fitted ms", "fitted / measured"]]
    for t in row_table(cal):
        body.append(
            [
                t["where"],
                t["split"],
                f"{t['prompt_tokens']:,}",
                f"{t['cached_tokens']:,}",
                t["tier"],
                t["clients"],
                _ms(t["measured_s"]),
                _ms(t["before_s"]),
                _ms(t["after_s"]),
                f"{t['ratio_after']:.3f}",
            ]
        )
    md += _md_table(body)
    md += ["", "Residuals by prompt length and by tier: residuals.png.", ""]
    return "\n".join(md)


def _md_table(rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(rows[0]) + " |", "|" + "---|" * len(rows[0])]
    out += ["| " + " | ".join(c.replace("|", "\\|") for c in r) + " |" for r in rows[1:]]
    return out


def record(cal: Calibration, command: str = "") -> dict[str, Any]:
    """Everything as JSON-ready values (fit.json)."""

    def err(e: Errors) -> dict[str, Any]:
        return {
            "rows": e.rows,
            "median_abs_error": e.median if math.isfinite(e.median) else None,
            "within_1_25x": e.within if math.isfinite(e.within) else None,
        }

    return {
        "kvsim": __version__,
        "command": command,
        "scenario": cal.scenario,
        "fields": {
            e.field.name: {
                "scenario_value": e.field.value,
                "scenario_mark": e.field.mark,
                "value": e.value,
                "ci95": [e.lo95, e.hi95] if e.at_bound is None else None,
                "ci95_cut_at_range": e.clipped,
                "at_bound": e.at_bound,
                "range": [e.field.lo, e.field.hi],
                "unit": e.field.unit or None,
                "mark": "C",
            }
            for e in cal.estimates
        },
        "errors": {
            f"{which}_{when}": err(cal.errors(which, when))
            for which in ("fit", "held-out")
            for when in ("before", "after")
        },
        "dof": cal.dof,
        "rms_log_residual": cal.rms,
        "evaluations": cal.evaluations,
        "seconds": cal.seconds,
        "seed": cal.seed,
        "notes": cal.notes,
        "warnings": cal.warnings,
        "rows": row_table(cal),
    }
