"""Service-level objectives: what this module owns is :class:`SLO` (one or more terms
``metric op threshold`` on a run's summary, all of which must hold), :func:`parse_slo`
(the ``--slo`` text: ``'ttft_p99<=2s'`` or a joint ``'ttft_p99<=2s,tpot_p99<=50ms'``),
:data:`OUTCOMES`, the summary metrics an SLO or a regression gate can be on, and goodput
(:func:`good_requests`, :func:`slo_summary`): the requests per second that meet every
per-request bound of an SLO.

A term's percentile decides whether the run meets the SLO (``ttft_p99_s <= 2`` on the
summary); its threshold is also the bound each request must meet to count as good
(``ttft_s <= 2``, ``tpot_s <= 0.05``): goodput counts the measured requests within every
bound of the SLO's latency terms (ttft, tpot, itl, e2e), over the measured window."""

from __future__ import annotations

import dataclasses
import difflib
import math
import operator
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from kvsim.config.schema import Scenario
from kvsim.errors import InputError
from kvsim.results.metrics import COLOCATED_METRICS, NUMERIC, ratio
from kvsim.results.records import in_prompt_range, rows_where, window
from kvsim.units import parse_duration

_OPS: dict[str, Callable[[float, float], bool]] = {
    "<=": operator.le,
    "<": operator.lt,
    ">=": operator.ge,
    ">": operator.gt,
}
# the metrics an SLO or a regression gate can be on: outcomes of a run, not its settings
OUTCOMES = tuple(m for m in NUMERIC if m not in {"seed", "engines"})
# outcomes of co-located serving (engine.mode: colocated, issue 42): an SLO may name them;
# a run without decode (prefill mode) has none, and an SLO on one is refused at its run
DECODE = COLOCATED_METRICS
SLO_METRICS = OUTCOMES + tuple(m for m in DECODE if m not in OUTCOMES)
# a term's metric family -> the per-request column its threshold bounds (for goodput)
PER_REQUEST = {"ttft": "ttft_s", "tpot": "tpot_s", "itl": "itl_p99_s", "e2e": "e2e_s"}
# families whose per-request value is undefined (NaN) for a one-token output: no bound
_VACUOUS = ("tpot", "itl")
_SLO = re.compile(r"^\s*([A-Za-z0-9_.]+)\s*(<=|>=|<|>)\s*(.+?)\s*$")


@dataclass(frozen=True)
class Term:
    """One ``metric op threshold`` of an SLO, e.g. tpot_p99_s <= 0.05."""

    metric: str
    op: str
    threshold: float

    def value(self, summary: Mapping[str, Any]) -> Any:
        """The term's metric in ``summary``; a run without it (a decode metric of a
        prefill-mode run) is refused, naming it."""
        if self.metric not in summary:
            raise InputError(
                f"{self.metric}: this run has no such metric (decode metrics such as tpot, "
                "itl and e2e need engine.mode: colocated; a prefill-mode run has none)",
                where="--slo",
            )
        return summary[self.metric]

    def met(self, summary: Mapping[str, Any]) -> bool:
        value = self.value(summary)
        return value is not None and not math.isnan(value) and _OPS[self.op](value, self.threshold)

    @property
    def column(self) -> str | None:
        """The per-request column the threshold bounds (None: not a per-request latency)."""
        return PER_REQUEST.get(self.metric.split("_", 1)[0])

    def __str__(self) -> str:
        return f"{self.metric} {self.op} {self.threshold:g}"


@dataclass(frozen=True)
class SLO:
    """``metric op threshold`` on a summary value, e.g. ttft_p99_s <= 2.0, and for a joint
    SLO further terms (``also``), every one of which must hold."""

    metric: str
    op: str
    threshold: float
    scope: str | None = None  # run.prompt_range the runs measure (None: every prompt)
    also: tuple[Term, ...] = ()  # a joint SLO's further terms (after the first)

    @property
    def terms(self) -> tuple[Term, ...]:
        """Every term, the first (``metric``, ``op``, ``threshold``) first."""
        return (Term(self.metric, self.op, self.threshold), *self.also)

    def met(self, summary: Mapping[str, Any]) -> bool:
        return all([t.met(summary) for t in self.terms])  # (all: each missing metric named)

    def missed(self, summary: Mapping[str, Any]) -> SLO:
        """The first term ``summary`` misses, as an SLO of its own (what an explanation
        of a failure is about); this SLO when every term holds."""
        t = next((t for t in self.terms if not t.met(summary)), None)
        if t is None or not self.also:
            return self
        return SLO(t.metric, t.op, t.threshold, self.scope)

    def scoped(self, sc: Scenario) -> SLO:
        """This SLO as the runs of ``sc`` measure it: over its ``run.prompt_range``."""
        return dataclasses.replace(self, scope=sc.run.prompt_range)

    def __str__(self) -> str:
        text = " and ".join(str(t) for t in self.terms)
        return f"{text} for prompts {self.scope} tokens" if self.scope else text


def parse_slo(text: str, where: str | None = None) -> SLO:
    """Parse 'ttft_p99<=2s' or a joint 'ttft_p99<=2s,tpot_p99<=50ms': comma-separated
    terms, each a numeric summary metric (the ``_s`` of times may be left out), an
    operator and a value (durations take units: s, ms, us). ``where`` names the input in
    errors (default ``--slo TEXT``)."""
    where = where or f"--slo {text}"
    parts = text.split(",")
    terms = [_term(part, where) for part in parts]
    seen = [t.metric for t in terms]
    dup = next((m for m in seen if seen.count(m) > 1), None)
    if dup is not None:
        raise InputError(f"{dup} is bounded twice; give each metric once", where=where)
    first = terms[0]
    return SLO(first.metric, first.op, first.threshold, also=tuple(terms[1:]))


def _term(text: str, where: str) -> Term:
    m = _SLO.match(text)
    if not m:
        raise InputError(
            "expected METRIC<=VALUE, e.g. 'ttft_p99<=2s' (joint: 'ttft_p99<=2s,tpot_p99<=50ms')",
            where=where,
        )
    name, op, raw = m.groups()
    ok = SLO_METRICS
    metric = name if name in ok else f"{name}_s" if f"{name}_s" in ok else None
    if metric is None:
        near = difflib.get_close_matches(name, ok, n=1) or difflib.get_close_matches(
            f"{name}_s", ok, n=1
        )
        hint = f"did you mean {near[0].removesuffix('_s')!r}? " if near else ""
        raise InputError(
            f"unknown metric {name!r}; {hint}choose one of {', '.join(ok)} (a metric in "
            "seconds may leave out its _s)",
            where=where,
        )
    try:
        value = parse_duration(raw) if metric.endswith("_s") else float(raw)
    except (ValueError, OverflowError) as e:
        raise InputError(str(e), where=where) from None
    if not math.isfinite(value):
        raise InputError(f"the threshold must be a finite number, got {raw}", where=where)
    return Term(metric, op, value)


def decode_terms(slo: SLO) -> list[Term]:
    """The terms of ``slo`` that only co-located serving measures (tpot, itl, e2e and the
    other :data:`DECODE` metrics)."""
    return [t for t in slo.terms if t.metric in DECODE]


def check_slo(slo: SLO, sc: Scenario) -> None:
    """Refuse, before anything runs, an SLO with a term the runs of ``sc`` cannot have: a
    decode metric (tpot, itl, e2e) when the scenario is not ``engine.mode: colocated``."""
    mode = getattr(sc.engine, "mode", "prefill")
    bad = decode_terms(slo)
    if bad and mode != "colocated":
        raise InputError(
            f"{bad[0].metric}: a {mode}-mode run has no such metric (decode metrics such as "
            "tpot, itl and e2e need engine.mode: colocated)",
            where="--slo",
        )


def good_requests(requests: pd.DataFrame, slo: SLO) -> np.ndarray:
    """Which rows of ``requests`` meet every per-request bound of ``slo``: for each term
    on a latency (ttft, tpot, itl, e2e), its column (``ttft_s``, ``tpot_s``,
    ``itl_p99_s``, ``e2e_s``) against the term's threshold; a tpot or itl that is NaN (a
    one-token output has no time per output token) meets its bound. A term on another
    metric (hit_ratio) bounds no request. A bounded column the table lacks (tpot in a
    prefill-mode run) is refused, naming it."""
    good = np.ones(len(requests), dtype=bool)
    for t in slo.terms:
        col = t.column
        if col is None:
            continue
        if col not in requests.columns:
            raise InputError(
                f"{t.metric}: this run's requests have no {col} (decode metrics such as tpot, "
                "itl and e2e need engine.mode: colocated; a prefill-mode run has none)",
                where="--slo",
            )
        v = requests[col].to_numpy(dtype=float)
        ok = _OPS[t.op](v, t.threshold)
        if col.split("_", 1)[0] in _VACUOUS:
            ok = ok | np.isnan(v)
        good &= ok
    return good


def goodput(requests: pd.DataFrame, slo: SLO, span: float) -> float:
    """Requests per second over a window of ``span`` seconds that meet every per-request
    bound of ``slo`` (0 for an empty window)."""
    return ratio(int(good_requests(requests, slo).sum()), span)


def slo_summary(
    requests: pd.DataFrame, summary: Mapping[str, Any], sc: Scenario, slo: SLO
) -> dict[str, Any]:
    """The summary keys an SLO adds to a run's: ``slo`` (its text), ``slo_met`` and
    ``slo_met_<metric>`` per term (the run's percentiles against the thresholds),
    ``goodput_rps`` (measured requests, not dropped and in ``run.prompt_range``, within
    every per-request bound, per second of the measured window that ``requests_per_s``
    divides by) and ``goodput_frac`` (their share of those requests)."""
    kept = rows_where(requests, requests["decision"] != "dropped")
    _, lo, hi = window(kept, float(summary["warmup_s"]))
    span = max(hi - lo, 0.0)
    m = rows_where(kept, ~kept["warmup"])
    m = rows_where(m, in_prompt_range(m, sc))
    good = int(good_requests(m, slo).sum())
    per_term = {f"slo_met_{t.metric}": t.met(summary) for t in slo.terms}
    return {
        "slo": str(slo.scoped(sc)),
        "slo_met": all(per_term.values()),
        **per_term,
        "goodput_rps": ratio(good, span),
        "goodput_frac": ratio(good, len(m)),
    }


def with_slo(results: Any, slo: SLO | None) -> Any:
    """``results`` (a :class:`~kvsim.results.records.Results`) with :func:`slo_summary`'s
    keys added to its summary when an SLO is given (unchanged without one)."""
    if slo is not None:
        results.summary.update(
            slo_summary(results.requests, results.summary, results.scenario, slo)
        )
    return results
