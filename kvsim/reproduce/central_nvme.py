"""The central NVMe KV store claims (``kvsim reproduce central-nvme``; docs/central-nvme.md).

A scenario study, not a reproduction: vendors of a shared NVMe KV store reached over RDMA
(WEKA's Augmented Memory Grid and similar) claim that without it about 60% of GPU time
goes to recomputing evicted context, that it lifts GPU utilisation from 30% to 90%, and
that it serves 4x to 7x more users per GPU. kvsim puts the claims beside what it computes
for one setup (``scenarios/validation/central-nvme/``): multi-turn sessions on four
8xH100 nodes behind a router without session affinity, in three layouts that differ only
in the tiers behind host memory:

- ``host-only``: GPU HBM and host DRAM;
- ``host-nvme``: and each node's own NVMe drives;
- ``shared-nvme``: host DRAM and a shared NVMe store (``remote.kind: shared_nvme``).

For each layout and seed: the capacity search (:func:`kvsim.experiments.capacity.search`)
finds the highest session arrival rate meeting :data:`SLO`, and reports the concurrent
sessions per GPU there (Little's law); the run at that load gives the GPU's busy share,
its recompute share (``gpu_recompute_frac``) and the useful share, busy x (1 - recompute).
All layouts are also run at one common load (the host-only layout's capacity), where the
GPU time each needs for the same sessions shows directly. Intervals: Student t over the
seeds (:data:`SEEDS`). The vendor's figures are listed beside kvsim's with kind ``vendor
claim``: they are not scored, and nothing in the scenarios is fitted to them.
``sensitivity`` (``kvsim sensitivity`` on the shared layout at its capacity) ranks the
assumptions that move the answer.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from kvsim import api
from kvsim.errors import InputError
from kvsim.experiments.capacity import Capacity, search
from kvsim.experiments.replicate import load_overrides
from kvsim.experiments.sensitivity import report_lines, sensitivity
from kvsim.experiments.slo import parse_slo
from kvsim.report import columns
from kvsim.reproduce import remote_kv_tiers
from kvsim.reproduce.checks import find_folder
from kvsim.reproduce.remote_kv_tiers import Figure, Row, _fmt
from kvsim.results.uncertainty import mean_interval
from kvsim.results.writers import write_reproduction

STUDY = "central NVMe KV store (WEKA Augmented Memory Grid and similar): vendor claims"

LAYOUTS = {
    "host-only": "GPU HBM + host DRAM",
    "host-nvme": "+ local NVMe per node",
    "shared-nvme": "host DRAM + shared NVMe store (RDMA, GPUDirect)",
}
SLO = "ttft_p95<=2s"  # L: an interactive turn's first token within 2 s, 19 times in 20
SEEDS = 3  # replications per layout (capacity searches and common-load runs)
TOL = 0.05  # the capacity search's relative bracket
RANGE_SEEDS = 1  # seeds per sensitivity run (`--no-ranges`: no sensitivity runs)
QUICK = {"workload.requests": 2500}  # `--quick`: shorter runs, a wider bracket
QUICK_TOL = 0.15
# the assumptions the sensitivity moves (shared-NVMe layout, at its capacity)
SENSITIVITY_FIELDS = (
    "tiers.host.capacity",
    "remote.bandwidth",
    "remote.servers",
    "remote.t0",
    "workload.sessions.think_time",
    "workload.sessions.turns.mean",
    "workload.arrivals.rate",
)
SENSITIVITY_METRIC = "ttft_p95_s"  # the SLO's metric: what moves the capacity

KINDS = {
    "predicted": "comes out of kvsim's simulation of the study's setup",
    "derived": "arithmetic on predicted figures (a ratio, a product)",
    "vendor claim": "a figure a vendor states (sourced), not measured by kvsim nor fitted",
}

# WEKA's pages (found with the search tool); the three headline figures are those the
# issue quotes from WEKA's Augmented Memory Grid material
SOURCES = {
    "weka-amg": "https://www.weka.io/blog/ai-ml/unlocking-scalable-inference-with-weka-augmented-memory-grid",
    "weka-prefill": "https://www.weka.io/?p=41758 "
    "(Why Prefill has Become the Bottleneck in Inference)",
    "weka-coreweave": "https://www.weka.io/blog/ai-ml/agents-at-scale-escaping-upside-down-tokenomics-with-up-to-4-2x-efficiency",
    "weka-lab": "https://weka.io/blog/gpu/ai-tokenomics-more-than-talk-see-results-from-our-labs",
}


@dataclass(frozen=True)
class Claim:
    """A vendor's figure and the kvsim figure it is read against."""

    name: str
    value: float
    unit: str
    what: str
    against: str  # the kvsim figure (a row name) it is compared with
    source: str  # a key of SOURCES
    span: tuple[float, float] | None = None  # a claim given as a range (value: its midpoint)


CLAIMS = (
    Claim(
        "claim_recompute_share_without_store",
        0.60,
        "fraction",
        "share of GPU time spent recomputing evicted context without the store (~60%)",
        "gpu_recompute_frac_at_slo.host-only",
        "weka-prefill",
    ),
    Claim(
        "claim_gpu_utilisation_without_store",
        0.30,
        "fraction",
        "GPU utilisation without the store (30%): read as useful GPU time, busy x (1 - "
        "recompute share), at the SLO",
        "useful_gpu_frac_at_slo.host-only",
        "weka-amg",
    ),
    Claim(
        "claim_gpu_utilisation_with_store",
        0.90,
        "fraction",
        "GPU utilisation with the store (90%): useful GPU time at the SLO",
        "useful_gpu_frac_at_slo.shared-nvme",
        "weka-amg",
    ),
    Claim(
        "claim_users_per_gpu_gain",
        5.5,
        "x",
        "more users per GPU with the store: 4x to 7x (the midpoint shown; the verdict "
        "compares the range)",
        "sessions_per_gpu_gain",
        "weka-amg",
        (4.0, 7.0),
    ),
    Claim(
        "claim_tokens_per_gpu_gain",
        4.2,
        "x",
        "up to 4.2x more tokens per GPU (long-context tests on CoreWeave)",
        "prompt_tokens_per_gpu_gain",
        "weka-coreweave",
    ),
)
SPANS = {c.name: c.span for c in CLAIMS if c.span is not None}


@dataclass
class Study:
    """kvsim's figures (rows; the vendor claims among them), the capacity searches per
    layout, the common load, the sensitivity ranking and the run time."""

    rows: list[Row]
    capacities: dict[str, Capacity] = field(default_factory=dict)
    common_rate: float = math.nan  # sessions/s of the common-load runs
    sensitivity: Any = None  # kvsim.experiments.sensitivity.Sensitivity, or None
    seeds: list[int] = field(default_factory=list)
    seconds: float = math.nan
    quick: bool = False
    ranges: None = None  # (the CLI's reproduce protocol)

    def row(self, name: str) -> Row:
        return next(r for r in self.rows if r.figure.name == name)

    def value(self, name: str) -> float:
        return self.row(name).kvsim

    def verdict(self, r: Row) -> str | None:
        """Where a vendor claim lies against kvsim's interval."""
        p = r.figure.paper
        if p is None:
            return None
        span = SPANS.get(r.figure.name)
        if span is not None:  # a range claim: does it meet kvsim's interval?
            lo, hi = span
            if lo <= r.hi and r.lo <= hi:
                return f"claim range {lo:g}-{hi:g} overlaps kvsim's interval"
            return (
                "claim range above kvsim's interval"
                if lo > r.hi
                else "claim range below kvsim's interval"
            )
        if r.lo <= p <= r.hi:
            return "claim inside kvsim's interval"
        return "claim above kvsim's interval" if p > r.hi else "claim below kvsim's interval"

    def records(self) -> list[dict[str, object]]:
        """One dict per figure, with the reproduction.csv columns (``paper``: the vendor's
        figure; ``sensitive_to``: for the shared layout's rows, the assumptions that move
        the SLO metric most there)."""
        top = ""
        if self.sensitivity is not None and self.sensitivity.swings:
            top = ", ".join(s.path for s in self.sensitivity.swings[:3])
        return [
            remote_kv_tiers.record(
                r, self.verdict(r), top if "shared-nvme" in r.figure.name else ""
            )
            for r in self.rows
        ]


COLUMNS = remote_kv_tiers.COLUMNS


def find_scenarios(folder: str | Path | None = None) -> Path:
    """The study's scenarios: the given folder, ./scenarios/validation/central-nvme, or
    the checkout's."""
    return find_folder(folder, "scenarios/validation/central-nvme", [f"{n}.yaml" for n in LAYOUTS])


def scenario_files(folder: str | Path | None = None) -> list[Path]:
    """The scenario files the study runs (:func:`kvsim.reproduce.checks.check_files`)."""
    d = find_scenarios(folder)
    return [d / f"{name}.yaml" for name in LAYOUTS]


def _row(name: str, values: list[float], unit: str, what: str, kind: str = "predicted") -> Row:
    iv = mean_interval(values)  # (identical values: lo = hi = the mean)
    lo, hi = iv.lo, iv.hi
    if not (math.isfinite(lo) and math.isfinite(hi)):  # one seed: the point
        lo = hi = iv.mean
    return Row(Figure(name, None, unit, what, kind), iv.mean, lo, hi, list(values))


def reproduce(
    folder: str | Path | None = None,
    log: Callable[[str], None] = lambda _msg: None,
    seeds: int = SEEDS,
    range_seeds: int = RANGE_SEEDS,
    quick: bool = False,
    overrides: dict[str, Any] | None = None,
) -> Study:
    """Run the study: per layout, ``seeds`` capacity searches and runs at the common
    load; then (``range_seeds`` > 0) the sensitivity of the shared layout at its
    capacity. ``quick``: shorter runs (:data:`QUICK`) and a wider bracket;
    ``overrides``: on every scenario (tests use it to shrink the study)."""
    start = time.monotonic()
    d = find_scenarios(folder)
    extra = {**(QUICK if quick else {}), **(overrides or {})}
    tol = QUICK_TOL if quick else TOL
    slo = parse_slo(SLO)
    scen = {name: api.load(d / f"{name}.yaml", extra or None) for name in LAYOUTS}
    caps: dict[str, Capacity] = {}
    for name, sc in scen.items():
        log(f"[{name}] capacity at {slo}, {seeds} seeds")
        caps[name] = search(sc, slo, reps=seeds, tol=tol, log=lambda m, n=name: log(f"[{n}] {m}"))
        if len(caps[name].sessions) != seeds:
            raise InputError(f"{name}: the workload has no sessions", where=str(d / f"{name}.yaml"))
    rows: list[Row] = []
    gpus = {n: sc.cluster.engines * sc.node.gpus for n, sc in scen.items()}
    for name, cap in caps.items():
        s = cap.summaries
        busy = [float(x["gpu_busy_frac"]) for x in s]
        rec = [float(x["gpu_recompute_frac"]) for x in s]
        rows += [
            _row(
                f"sessions_per_gpu.{name}",
                [st.per_gpu for st in cap.sessions],
                "sessions",
                f"{LAYOUTS[name]}: concurrent sessions per GPU at {slo}",
            ),
            _row(
                f"capacity_rps.{name}",
                cap.rates,
                "requests/s",
                f"{LAYOUTS[name]}: offered requests/s at {slo}",
            ),
            _row(
                f"gpu_recompute_frac_at_slo.{name}",
                rec,
                "fraction",
                f"{LAYOUTS[name]}: share of GPU compute time spent recomputing, at the SLO",
            ),
            _row(
                f"gpu_busy_frac_at_slo.{name}",
                busy,
                "fraction",
                f"{LAYOUTS[name]}: GPU busy share, at the SLO",
            ),
            _row(
                f"useful_gpu_frac_at_slo.{name}",
                [b * (1.0 - r) for b, r in zip(busy, rec, strict=True)],
                "fraction",
                f"{LAYOUTS[name]}: busy x (1 - recompute share), at the SLO",
                "derived",
            ),
        ]
    # the common load: the host-only layout's capacity (its mean arrival-rate factor)
    ref = caps["host-only"]
    factor = sum(ref.factors) / len(ref.factors)
    base = scen["host-only"].workload
    common = getattr(getattr(base, "arrivals", None), "rate", math.nan) * factor
    for name, sc in scen.items():
        log(f"[{name}] {seeds} runs at the common load ({common:.3g} sessions/s)")
        runs = [api.run(sc, load_overrides(sc, factor), sc.seed + i).summary for i in range(seeds)]
        rows += [
            _row(
                f"gpu_recompute_frac_common.{name}",
                [float(x["gpu_recompute_frac"]) for x in runs],
                "fraction",
                f"{LAYOUTS[name]}: recompute share of GPU time at the host-only capacity load",
            ),
            _row(
                f"gpu_busy_frac_common.{name}",
                [float(x["gpu_busy_frac"]) for x in runs],
                "fraction",
                f"{LAYOUTS[name]}: GPU busy share at the host-only capacity load",
            ),
            _row(
                f"ttft_p95_common_s.{name}",
                [float(x["ttft_p95_s"]) for x in runs],
                "s",
                f"{LAYOUTS[name]}: p95 TTFT at the host-only capacity load",
            ),
        ]

    def per_seed(name: str, fn: Callable[[Capacity, int], float]) -> list[float]:
        return [fn(caps[name], i) for i in range(seeds)]

    def tokens_per_gpu(c: Capacity, i: int, name: str) -> float:
        return float(c.summaries[i]["prompt_tokens_per_s"]) / gpus[name]

    shared = per_seed("shared-nvme", lambda c, i: c.sessions[i].per_gpu)
    alone = per_seed("host-only", lambda c, i: c.sessions[i].per_gpu)
    rows.append(
        _row(
            "sessions_per_gpu_gain",
            [a / b for a, b in zip(shared, alone, strict=True)],
            "x",
            "sessions per GPU at the SLO, shared-nvme / host-only (per seed)",
            "derived",
        )
    )
    tok_s = per_seed("shared-nvme", lambda c, i: tokens_per_gpu(c, i, "shared-nvme"))
    tok_h = per_seed("host-only", lambda c, i: tokens_per_gpu(c, i, "host-only"))
    rows.append(
        _row(
            "prompt_tokens_per_gpu_gain",
            [a / b for a, b in zip(tok_s, tok_h, strict=True)],
            "x",
            "prompt tokens/s per GPU at the SLO, shared-nvme / host-only (per seed)",
            "derived",
        )
    )
    by_name = {r.figure.name: r for r in rows}
    for c in CLAIMS:
        k = by_name[c.against]
        fig = Figure(c.name, c.value, c.unit, f"{c.what} [vs {c.against}]", "vendor claim")
        rows.append(Row(fig, k.kvsim, k.lo, k.hi, list(k.values)))
    sens = None
    if range_seeds > 0:
        sc = scen["shared-nvme"]
        f = caps["shared-nvme"]
        at = api.load(sc, load_overrides(sc, sum(f.factors) / len(f.factors)))
        log(f"[sensitivity] shared-nvme at its capacity: {SENSITIVITY_METRIC}")
        sens = sensitivity(
            at,
            SENSITIVITY_METRIC,
            vary=list(SENSITIVITY_FIELDS),
            reps=range_seeds,
            log=lambda m: log(f"[sensitivity] {m}"),
        )
    first = scen["host-only"].seed
    return Study(
        rows,
        caps,
        common,
        sens,
        [first + i for i in range(seeds)],
        time.monotonic() - start,
        quick,
    )


# ---- output ------------------------------------------------------------------------------


def _interval(r: Row) -> str:
    return "-" if r.lo == r.hi else f"{_fmt(r.lo)} .. {_fmt(r.hi)}"


def _spread(r: Row) -> str:
    """The per-seed values, as printed (the spread over seeds)."""
    return " ".join(_fmt(v) for v in r.values)


def layout_table(study: Study) -> list[tuple[str, ...]]:
    """One row per layout: sessions per GPU, recompute share, GPU busy, useful share at
    the SLO (mean [95% interval]), and the recompute share and busy at the common load."""
    out = []
    for name in LAYOUTS:

        def cell(fig: str, name: str = name) -> str:
            r = study.row(f"{fig}.{name}")
            iv = _interval(r)
            return _fmt(r.kvsim) + ("" if iv == "-" else f" [{iv}]")

        out.append(
            (
                name,
                cell("sessions_per_gpu"),
                cell("gpu_recompute_frac_at_slo"),
                cell("gpu_busy_frac_at_slo"),
                cell("useful_gpu_frac_at_slo"),
                cell("gpu_recompute_frac_common"),
                cell("gpu_busy_frac_common"),
            )
        )
    return out


LAYOUT_HEAD = (
    "layout",
    "sessions/GPU at SLO",
    "recompute share",
    "GPU busy",
    "useful GPU",
    "recompute (common load)",
    "GPU busy (common load)",
)


def sensitivity_lines(study: Study) -> list[str]:
    if study.sensitivity is None:
        return ["sensitivity: not run (--no-ranges)"]
    return ["sensitivity (shared-nvme layout at its capacity):", *report_lines(study.sensitivity)]


def text_table(study: Study) -> str:
    """The layouts, then every figure with its kind, then the sensitivity ranking."""
    head = ("figure", "vendor", "kvsim", "95% interval", "per seed", "unit", "kind", "verdict")
    body = [
        (
            r.figure.name,
            _fmt(r.figure.paper),
            _fmt(r.kvsim),
            _interval(r),
            _spread(r),
            r.figure.unit,
            r.figure.kind,
            study.verdict(r) or "-",
        )
        for r in study.rows
    ]
    lines = [
        f"{STUDY}: {len(study.seeds)} seeds per layout, SLO {SLO}; common load "
        f"{study.common_rate:.3g} sessions/s (the host-only capacity)"
        + (" [--quick]" if study.quick else ""),
        *columns([LAYOUT_HEAD, *layout_table(study)], left=(0,)),
        "",
        *columns([head, *body], left=(0, 4, 5, 6, 7)),
        "",
        *sensitivity_lines(study),
        "vendor claims are not scored; the setup and what drives the answer: docs/central-nvme.md",
    ]
    return "\n".join(lines)


def markdown(study: Study) -> str:
    lines = [
        f"# {STUDY}",
        "",
        f"`kvsim reproduce central-nvme`: {len(study.seeds)} seeds per layout, SLO `{SLO}`, "
        f"common load {study.common_rate:.3g} sessions/s (the host-only layout's capacity). "
        "Kinds: " + "; ".join(f"**{k}**: {v}" for k, v in KINDS.items()) + ".",
        "",
        "| " + " | ".join(LAYOUT_HEAD) + " |",
        "|" + "---|" * len(LAYOUT_HEAD),
        *("| " + " | ".join(r) + " |" for r in layout_table(study)),
        "",
        "| figure | what | kind | vendor | kvsim | 95% interval | per seed | unit | verdict |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in study.rows:
        lines.append(
            f"| `{r.figure.name}` | {r.figure.what} | {r.figure.kind} | {_fmt(r.figure.paper)} "
            f"| {_fmt(r.kvsim)} | {_interval(r)} | {_spread(r)} | {r.figure.unit} "
            f"| {study.verdict(r) or '-'} |"
        )
    lines += ["", "Sources of the vendor claims:", ""]
    lines += [f"- {k}: {v}" for k, v in SOURCES.items()]
    lines += ["", "```", *sensitivity_lines(study), "```"]
    if math.isfinite(study.seconds):
        lines += ["", f"Wall time: {study.seconds:.0f} s."]
    return "\n".join(lines) + "\n"


def write(study: Study, out: str | Path) -> list[Path]:
    """reproduction.csv and reproduction.md, written as the folder ``out`` all or
    nothing."""

    table = pd.DataFrame(study.records(), columns=COLUMNS)
    return write_reproduction(table, markdown(study), out)
