"""What ``kvsim check`` reports: the terminal table and lines, and the Markdown and JUnit
XML reports it writes with ``--report``."""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from pathlib import Path
from xml.sax.saxutils import escape, quoteattr

from kvsim.experiments.regression.comparison import CheckResult, Comparison
from kvsim.experiments.regression.power import ESTIMATE
from kvsim.experiments.regression.suite import Suite
from kvsim.experiments.replicate import PAIRED
from kvsim.experiments.sweep.spec import counted
from kvsim.results.uncertainty import bound_keys
from kvsim.results.writers import REPORT_FILES, write_folder


def _mark(c: Comparison) -> str:
    if c.failed:
        return "FAIL"
    if c.improved:
        return "IMPR"
    return "noise" if c.within_noise else "ok"


def terminal_table(result: CheckResult, metrics: Sequence[str]) -> str:
    """Entry x load rows, a column per metric: a mark (ok, noise, IMPR, FAIL), the change
    of the mean and the minimum detectable change relative to the baseline mean."""
    rows: dict[tuple[str, float], dict[str, Comparison]] = {}
    for c in result.comparisons:
        rows.setdefault((c.entry, c.load), {})[c.metric] = c
    head = ["entry", "load", *metrics]
    body = []
    for (entry, load), cs in rows.items():
        cells = [entry, f"{load:g}x"]
        for m in metrics:
            c = cs[m]
            cell = f"{_mark(c)} {c.change_text()}"
            if not c.missing and math.isfinite(c.mdc_rel):
                cell += f" mdc {c.mdc_rel:.0%}"
            cells.append(cell)
        body.append(cells)
    widths = [max(len(r[i]) for r in [head, *body]) for i in range(len(head))]
    lines = ["  ".join(x.ljust(w) for x, w in zip(r, widths, strict=True)) for r in [head, *body]]
    if any(math.isfinite(c.mdc_rel) for c in result.comparisons):
        lines.append(
            "(change of the mean; mdc: minimum detectable change at 80% power, of the baseline "
            "mean; paired over the same seeds)"
        )
    return "\n".join(lines)


def report_lines(result: CheckResult) -> list[str]:
    """What ``kvsim check`` prints under its table: notes, one line per failure and per
    improvement, and the verdict."""
    out = [f"note: {n}" for n in (*result.provenance, *result.notes)]
    out += [
        f"{'REGRESSION' if c.verdict != 'CHANGED' else 'CHANGED'} {c.line()}"
        for c in result.failures
    ]
    out += [f"IMPROVED {c.line()}" for c in result.improvements]
    out += [f"SLO MISSED {line}" for line in result.slo_misses]
    if result.paired:
        out.append(PAIRED)
    fails = len(result.failures)
    better = len(result.improvements)
    noise = sum(c.within_noise for c in result.comparisons)
    out.append(
        f"{'FAILED' if result.failed else 'passed'}: {fails} of "
        f"{counted(len(result.comparisons), 'comparison')} failed (a sure change beyond "
        "tolerance the worse way, or no value)"
        + (f"; {better} improved" if better else "")
        + (f"; {noise} moved beyond tolerance within noise (passed)" if noise else "")
        + (
            f"; an SLO missed at {len(result.slo_misses)} load point(s)"
            if result.slo_misses
            else ""
        )
    )
    return out


def _rule_text(suite: Suite) -> str:
    return (
        "A metric fails when its change is beyond its tolerance (max(rel x |baseline mean|, "
        "abs)) in its worse direction and the 95% interval of the paired differences "
        "excludes 0 (exact differences: beyond the tolerance suffices); the same in the "
        "better direction is an improvement (passes). MDC: minimum detectable change, the "
        "true change this rule flags with 80% power over "
        f"{counted(len(suite.seeds), 'seed')}."
    )


def markdown_report(result: CheckResult, suite: Suite) -> str:
    status = "FAILED" if result.failed else "passed"
    noise = sum(c.within_noise for c in result.comparisons)
    lines = [
        f"# kvsim check: {suite.name} {status}",
        "",
        f"{len(result.comparisons)} comparisons: {len(result.failures)} failed, "
        f"{len(result.improvements)} improved, {noise} moved within noise; seeds {suite.seeds}.",
        "",
    ]
    if result.paired:
        lines += [f"{PAIRED[0].upper()}{PAIRED[1:]}. {_rule_text(suite)}", ""]
    if result.notes or result.provenance:
        notes = [*result.provenance, *result.notes]
        lines += ["Notes:", ""] + [f"- {n}" for n in notes] + [""]
    if result.slo_misses:  # an entry's SLO (its slo:) missed at a load point
        lines += ["## SLO missed", ""] + [f"- {m}" for m in result.slo_misses] + [""]
    if result.failures:
        lines += ["## Regressions", ""] + [f"- {c.verdict}: {c.line()}" for c in result.failures]
        lines += [""]
    if result.improvements:
        lines += [
            "## Improvements",
            "",
            "They pass; a new baseline (`kvsim baseline`) would record them.",
            "",
        ]
        lines += [f"- {c.line()}" for c in result.improvements] + [""]
    lines += [
        "## All comparisons",
        "",
        "| entry | load | metric | baseline | new | delta | 95% interval | MDC | tolerance "
        "| verdict |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for c in result.comparisons:
        verdict = "ok (within noise)" if c.within_noise else c.verdict
        new = "no value" if c.missing else f"{c.new['mean']:.4g}"
        delta = "" if c.missing else f"{c.delta:+.3g} ({c.change:+.1%})"
        lines.append(
            f"| {c.entry} | {c.load:g}x | {c.metric} | {c.base['mean']:.4g} | {new} | {delta} "
            f"| {c.interval_text()} | {c.mdc_text()} | {c.tolerance:.3g} | {verdict} |"
        )
    if any(c.mdc_estimated for c in result.comparisons):
        lines += ["", f"est.: nothing moved on any seed, so the MDC is {ESTIMATE}."]
    return "\n".join(lines) + "\n"


def _num(x: float) -> str:
    return repr(float(x)) if math.isfinite(x) else ""


def junit_report(result: CheckResult, suite: Suite) -> str:
    """JUnit XML: a testsuite per entry, a testcase per load point and metric, each with
    its figures as <properties> (delta, interval, MDC, tolerance, verdict); a failure
    message per regression, a <system-out> line per improvement or change within noise."""
    by_entry: dict[str, list[Comparison]] = {}
    for c in result.comparisons:
        by_entry.setdefault(c.entry, []).append(c)
    out = [
        '<?xml version="1.0" encoding="UTF-8"?>',
        f"<testsuites name={quoteattr('kvsim check ' + suite.name)} "
        f'tests="{len(result.comparisons) + len(result.slo_misses)}" '
        f'failures="{len(result.failures) + len(result.slo_misses)}">',
    ]
    for entry, cs in by_entry.items():
        fails = sum(c.failed for c in cs)
        out.append(
            f'  <testsuite name={quoteattr(entry)} tests="{len(cs)}" '
            f'failures="{fails}" errors="0" skipped="0" '
            f'time="{sum(c.seconds for c in cs):.3f}">'
        )
        if result.paired:
            out += [
                "    <properties>",
                f'      <property name="comparison" value={quoteattr(PAIRED)}/>',
                "    </properties>",
            ]
        for c in cs:
            name = quoteattr(f"{c.metric} @ {c.load:g}x load")
            # the real time of the check: its point's runs (every seed), shared by its metrics
            out.append(
                f'    <testcase classname={quoteattr(entry)} name={name} time="{c.seconds:.3f}">'
            )
            props = {
                "verdict": "ok (within noise)" if c.within_noise else c.verdict,
                "baseline": _num(c.base["mean"]),
                "new": _num(c.new["mean"]),
                "delta": "" if c.missing else _num(c.delta),
                # its 95% interval as two numbers (empty without one; both the delta when
                # exact); the text form is the markdown report's
                **{
                    k: "" if v is None else _num(v)
                    for k, v in bound_keys("delta", None if c.missing else c.diff).items()
                },
                "mdc": _num(c.mdc),
                "mdc_rel": _num(c.mdc_rel),
                "tolerance": _num(c.tolerance),
                "direction": str(c.direction),
                "seeds": str(len(suite.seeds)),
            }
            out.append("      <properties>")
            out += [
                f"        <property name={quoteattr(k)} value={quoteattr(v)}/>"
                for k, v in props.items()
            ]
            out.append("      </properties>")
            if c.failed:
                kind = {"no value": "no-value", "CHANGED": "changed"}.get(c.verdict, "regression")
                out.append(
                    f"      <failure message={quoteattr(c.line())} "
                    f'type="{kind}">{escape(c.line())}</failure>'
                )
            elif c.improved or c.within_noise:
                text = f"IMPROVED {c.line()}" if c.improved else c.noise_line()
                out.append(f"      <system-out>{escape(text)}</system-out>")
            out.append("    </testcase>")
        out.append("  </testsuite>")
    if result.slo_misses:  # an entry's slo: missed at a load point: a failing case each
        n = len(result.slo_misses)
        out.append(f'  <testsuite name="slo" tests="{n}" failures="{n}" errors="0" skipped="0">')
        for miss in result.slo_misses:
            out += [
                f'    <testcase classname="slo" name={quoteattr(miss.split(":", 1)[0])}>',
                f'      <failure message={quoteattr(miss)} type="slo">{escape(miss)}</failure>',
                "    </testcase>",
            ]
        out.append("  </testsuite>")
    out.append("</testsuites>")
    return "\n".join(out) + "\n"


def write_reports(result: CheckResult, suite: Suite, out_dir: str | os.PathLike[str]) -> list[Path]:
    md, xml = markdown_report(result, suite), junit_report(result, suite)
    return write_folder(
        out_dir,
        {
            "kvsim-check.md": lambda p: p.write_text(md, encoding="utf-8"),
            "kvsim-check.xml": lambda p: p.write_text(xml, encoding="utf-8"),
        },
        flag="--report",
        owned=REPORT_FILES,
    )
