"""``kvsim reproduce all``: every study kvsim reproduces, and a validation summary.

Studies, each a table of figures (published value, kvsim's value and its 95% interval,
kind):

- ``paper``: the remote-KV-tier study (arXiv 2610.21500) on the calibrated default profile
  (``b300-pcp8-glm5``), as ``kvsim reproduce paper --no-ranges``;
- ``paper-catalogue``: the same study on the profile composed from the catalogue
  (:data:`CATALOGUE_PROFILE`: the GLM-5-class card on 8 B300 cards, PCP8, EP8) with no
  per-figure calibration: its 16k recompute time becomes a prediction. The remote store's
  constants (Valkey bandwidth, per-op cost, T0) are the seed study's calibration in both
  and stay labelled calibrated, as do the figures they were solved from;
- ``vllm-offload``: vLLM's KV offloading connector blog (:mod:`kvsim.reproduce.vllm_offload`);
- ``central-nvme``: a shared NVMe KV store's vendor claims beside kvsim's figures
  (:mod:`kvsim.reproduce.central_nvme`, without its sensitivity runs): every published
  value there is a ``vendor claim``, so none is scored.

The summary counts, per study and overall, the figures with a published value whose kind
is **predicted** (calibrated, derived and input figures leave it: matching them shows a
fit or an input, not the model): how many lie inside kvsim's 95% interval, how many within
a factor 1.25 and 1.5 of it (``max(r, 1/r)`` with ``r = kvsim / published``), and the
median absolute error ``|kvsim / published - 1|``.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from kvsim.report import columns
from kvsim.reproduce import (
    central_nvme,
    lmcache_gke,
    lmcache_longdoc,
    paper_catalogue,
    remote_kv_tiers,
    vllm_offload,
)
from kvsim.reproduce.checks import check_files
from kvsim.reproduce.paper_catalogue import (  # re-exported: the catalogue run's definition
    CATALOGUE_PROFILE,
    DEFAULT_PROFILE_LINE,
    UNCALIBRATED_IN_CATALOGUE,
    catalogue_folder,
)
from kvsim.results.writers import Writer, write_folder

STUDIES = (
    "paper",
    "paper-catalogue",
    "vllm-offload",
    "lmcache-longdoc",
    "lmcache-gke",
    "central-nvme",
)
__all__ = [
    "CATALOGUE_PROFILE",
    "DEFAULT_PROFILE_LINE",
    "UNCALIBRATED_IN_CATALOGUE",
    "catalogue_folder",
]
# "within 1.25x" and "within 1.5x": the ratio r = kvsim / published with max(r, 1/r) at most
# this (a factor either way: 1.25x over or 1/1.25 = 0.8x under)
WITHIN = (1.25, 1.5)

COLUMNS = [
    "study",
    "figure",
    "published",
    "kvsim",
    "kvsim_lo",
    "kvsim_hi",
    "unit",
    "kind",
    "inside",
    "within_1_25x",
    "within_1_5x",
    "abs_error",
    "range_lo",
    "range_hi",
    "sensitive_to",
]
FILES = ("validation.csv", "validation.md")


def _num(x: object) -> float | None:
    if x is None:
        return None
    v = float(x)  # type: ignore[arg-type]
    return None if math.isnan(v) else v


def factor(kvsim: float, published: float) -> float:
    """How far apart two values are as a factor: max(r, 1/r) with r = kvsim / published
    (infinite when they differ in sign or one is 0 and the other not)."""
    if kvsim == published:
        return 1.0
    r = kvsim / published if published else math.inf
    if not r > 0 or math.isinf(r):
        return math.inf
    return max(r, 1.0 / r)


def within(kvsim: float, published: float, bound: float) -> bool:
    """kvsim within a factor ``bound`` of the published value (max(r, 1/r) <= bound)."""
    return factor(kvsim, published) <= bound


def row(study: str, record: Mapping[str, Any]) -> dict[str, Any]:
    """A validation.csv row from a study's record (``paper``: the published value):
    inside (the published value lies in [kvsim_lo, kvsim_hi]), within_1_25x and
    within_1_5x (:func:`within`) and abs_error = |kvsim / published - 1|, empty without a
    published value; range_lo, range_hi and sensitive_to as the study's record gives them
    (its figure over the documented ranges; empty when not screened)."""
    pub = _num(record.get("paper"))
    kv = float(record["kvsim"])
    lo, hi = _num(record.get("kvsim_lo")), _num(record.get("kvsim_hi"))
    if lo is None or hi is None:  # one value: the interval is the point
        lo = hi = kv
    inside = w125 = w15 = err = None
    if pub is not None and pub != 0:
        err = abs(kv / pub - 1.0)
        inside = bool(lo <= pub <= hi)
        w125, w15 = (within(kv, pub, b) for b in WITHIN)
    return {
        "study": study,
        "figure": record["figure"],
        "published": pub,
        "kvsim": kv,
        "kvsim_lo": lo,
        "kvsim_hi": hi,
        "unit": record["unit"],
        "kind": record["kind"],
        "inside": inside,
        "within_1_25x": w125,
        "within_1_5x": w15,
        "abs_error": err,
        "range_lo": _num(record.get("range_lo")),
        "range_hi": _num(record.get("range_hi")),
        "sensitive_to": record.get("sensitive_to") or "",
    }


def summarize(rows: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """figures (all rows), scored (predicted with a published value), inside, within_1_25x,
    within_1_5x and median_abs_error over the scored ones (NaN when none)."""
    rows = list(rows)
    scored = [r for r in rows if r["kind"] == "predicted" and r["abs_error"] is not None]
    errors = [float(r["abs_error"]) for r in scored]
    return {
        "figures": len(rows),
        "scored": len(scored),
        "inside": sum(1 for r in scored if r["inside"]),
        "within_1_25x": sum(1 for r in scored if r["within_1_25x"]),
        "within_1_5x": sum(1 for r in scored if r["within_1_5x"]),
        "median_abs_error": statistics.median(errors) if errors else math.nan,
    }


def summary_lines(rows: list[dict[str, Any]]) -> list[str]:
    """The validation summary per study and overall, for a terminal."""
    out = [
        "validation summary (scored: predicted figures with a published value; calibrated, "
        "derived and input figures leave the error summary):"
    ]
    groups = [
        (s, [r for r in rows if r["study"] == s]) for s in dict.fromkeys(r["study"] for r in rows)
    ]
    groups.append(("overall", rows))
    width = max(len(g) for g, _ in groups)
    for name, rs in groups:
        s = summarize(rs)
        med = "-" if math.isnan(s["median_abs_error"]) else f"{s['median_abs_error']:.0%}"
        out.append(
            f"  {name:<{width}}  figures {s['figures']:>2}  scored {s['scored']:>2}  "
            f"inside interval {s['inside']:>2}  within 1.25x {s['within_1_25x']:>2}  "
            f"within 1.5x {s['within_1_5x']:>2}  median |kvsim/published - 1| {med}"
        )
    return out


def run_all(
    log: Callable[[str], None] = lambda _msg: None,
    paper_folder: str | Path | None = None,
    vllm_folder: str | Path | None = None,
    paper_seeds: int | None = None,
    ranges: bool = True,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Run every study; return the validation rows and each study's reproduction.
    ``ranges``: the catalogue ranges of paper-catalogue, vllm-offload, lmcache-longdoc and
    lmcache-gke (the paper study runs without its ranges, central-nvme without its
    sensitivity)."""

    seeds = paper_seeds or remote_kv_tiers.SEEDS
    reps: dict[str, Any] = {}
    rows: list[dict[str, Any]] = []
    paper = remote_kv_tiers.find_scenarios(paper_folder)
    # every study's files, before the first run of any: a typo in the last study's is
    # refused at once (by file and line), not after the others' runs
    check_files(
        [
            *remote_kv_tiers.scenario_files(paper),
            *vllm_offload.scenario_files(vllm_folder),
            *lmcache_longdoc.scenario_files(),
            *lmcache_gke.scenario_files(),
            *central_nvme.scenario_files(),
        ]
    )

    def timed(name: str, fn: Callable[[], Any]) -> Any:
        t = time.monotonic()
        log(f"[{name}] starting")
        out = fn()
        log(f"[{name}] done in {time.monotonic() - t:.0f} s")
        return out

    def sub(name: str) -> Callable[[str], None]:
        return lambda msg: log(f"[{name}] {msg}")

    reps["paper"] = timed(
        "paper",
        lambda: remote_kv_tiers.reproduce(paper, log=sub("paper"), seeds=seeds, range_seeds=0),
    )
    reps["paper-catalogue"] = timed(
        "paper-catalogue",
        lambda: paper_catalogue.reproduce(
            paper,
            log=sub("paper-catalogue"),
            seeds=seeds,
            range_seeds=paper_catalogue.RANGE_SEEDS if ranges else 0,
        ),
    )
    reps["vllm-offload"] = timed(
        "vllm-offload",
        lambda: vllm_offload.reproduce(
            vllm_folder, log=sub("vllm-offload"), range_seeds=1 if ranges else 0
        ),
    )
    reps["lmcache-longdoc"] = timed(
        "lmcache-longdoc",
        lambda: lmcache_longdoc.reproduce(
            log=sub("lmcache-longdoc"), range_seeds=1 if ranges else 0
        ),
    )
    reps["lmcache-gke"] = timed(
        "lmcache-gke",
        lambda: lmcache_gke.reproduce(log=sub("lmcache-gke"), range_seeds=1 if ranges else 0),
    )
    reps["central-nvme"] = timed(
        "central-nvme",
        lambda: central_nvme.reproduce(log=sub("central-nvme"), range_seeds=0),
    )
    for name in STUDIES:
        rows += [row(name, rec) for rec in reps[name].records()]
    return rows, reps


def _interval_and_error(r: Mapping[str, Any]) -> tuple[str, str]:
    """A row's 95% interval ("-" for a point) and its error, as printed."""
    lo, hi = r["kvsim_lo"], r["kvsim_hi"]
    iv = "-" if lo == hi else f"{_fmt(lo)} .. {_fmt(hi)}"
    err = "-" if r["abs_error"] is None else f"{r['abs_error']:.0%}"
    return iv, err


def _range(r: Mapping[str, Any]) -> str:
    """A row's range over the documented ranges ("-" when not screened)."""
    lo, hi = r.get("range_lo"), r.get("range_hi")
    if lo is None or hi is None:
        return "-"
    return _fmt(lo) if lo == hi else f"{_fmt(lo)} .. {_fmt(hi)}"


def _fmt(x: object) -> str:
    if x is None:
        return "-"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, float):
        if math.isnan(x):
            return "-"
        return f"{x:,.0f}" if abs(x) >= 1000 else f"{x:.3g}"
    return str(x)


def text_table(rows: list[dict[str, Any]]) -> str:
    """Every study's figures in one table, then the summary."""
    head = (
        "study",
        "figure",
        "published",
        "kvsim",
        "95% interval",
        "range",
        "unit",
        "kind",
        "inside",
        "error",
    )
    body = []
    for r in rows:
        iv, err = _interval_and_error(r)
        body.append(
            (
                r["study"],
                r["figure"],
                _fmt(r["published"]),
                _fmt(r["kvsim"]),
                iv,
                _range(r),
                r["unit"],
                r["kind"],
                _fmt(r["inside"]),
                err,
            )
        )
    lines = columns([head, *body], left=(0, 1, 6, 7, 8))
    return "\n".join([*lines, "", *summary_lines(rows)])


def markdown(rows: list[dict[str, Any]], seconds: float | None = None) -> str:
    lines = [
        "# kvsim validation",
        "",
        "`kvsim reproduce all`: every study, each figure's published value next to kvsim's "
        "(95% interval over seeds; the point where the seed moves nothing). error = "
        "|kvsim / published - 1|. range: the figure over the documented ranges of the "
        "assumptions (the catalogue's, for studies on composed profiles), sensitive to: "
        "those moving it by more than 10%.",
        "",
        "| study | figure | kind | published | kvsim | 95% interval | range | sensitive to "
        "| unit | inside | error |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        iv, err = _interval_and_error(r)
        sens = ", ".join(f"`{n}`" for n in r.get("sensitive_to", "").split(";") if n) or "-"
        lines.append(
            f"| {r['study']} | `{r['figure']}` | {r['kind']} | {_fmt(r['published'])} "
            f"| {_fmt(r['kvsim'])} | {iv} | {_range(r)} | {sens} | {r['unit']} "
            f"| {_fmt(r['inside'])} | {err} |"
        )
    lines += ["", "```", *summary_lines(rows), "```"]
    if seconds is not None:
        lines += ["", f"Wall time: {seconds:.0f} s."]
    return "\n".join(lines) + "\n"


def write(rows: list[dict[str, Any]], out: str | Path, seconds: float | None = None) -> list[Path]:
    """validation.csv and validation.md, written as the folder ``out`` all or nothing."""

    table = pd.DataFrame(rows, columns=COLUMNS)
    files: dict[str, Writer] = {
        "validation.csv": lambda p: table.to_csv(p, index=False),
        "validation.md": lambda p: p.write_text(markdown(rows, seconds), encoding="utf-8"),
    }
    return write_folder(out, files, flag="--out", owned=FILES)
