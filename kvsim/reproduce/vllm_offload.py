"""Validate kvsim against vLLM's KV offloading connector blog ("Inside vLLM's New KV
Offloading Connector", blog.vllm.ai, 2026-01-08; vllm-project.github.io
``_posts/2025-12-29-offloading-connector.md``) from the scenarios in
``scenarios/validation/vllm-offload/``: each figure the post states in its text next to
kvsim's prediction, made from the model and GPU catalogue with no constant fitted to it.

The post's setup: Llama-3.1-8B-Instruct (and Llama-3.2-1B-Instruct) on one H100 80GB, GPU
prefix caching off, 16-token GPU and CPU blocks, KV offloaded to CPU DRAM by the
offloading connector (asynchronous loads and stores over DMA: ~50 GB/s one way, 83.4 GB/s
both ways in its micro-benchmark). Its plots are images: only the values written in the
text are used (docs/validation.md lists them, and what kvsim does not model).

Interpretations adopted (L; docs/validation.md says why):

- "X2-X22 depending on the prompt size": 2x at 512 tokens (the post: "TTFT for this prompt
  size only decreased by X2") and 22x at the largest prompt, read as ~90k tokens (the
  size of the largest prompt of the post's Figure 5, same benchmark on Llama-3.2-1B).
- "10,000 unique requests (each of 512 tokens)" at a CPU hit rate h: every request starts
  with the same h x 512-token prefix (rounded to whole 16-token blocks), which a warm-up
  request put in the CPU cache before the measurement; the rest of each prompt is its
  own. 10,000 distinct 512-token prompts would need 671 GB of KV for Llama-3.1-8B, more
  than the setup's 500 GB of DRAM, so the cached part must be shared. The highest hit
  rate is 100% (Figure 6's text names it).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from kvsim import api
from kvsim.config.schema import Scenario
from kvsim.physics.step import scenario_lone_seconds
from kvsim.report import columns
from kvsim.reproduce import remote_kv_tiers
from kvsim.reproduce.catalogue_ranges import (
    figure_table,
    range_cell,
    sensitive_lines,
    study_ranges,
)
from kvsim.reproduce.checks import check_files, find_folder
from kvsim.reproduce.ranges import Range
from kvsim.reproduce.remote_kv_tiers import Figure, Row, _fmt
from kvsim.results.records import Results
from kvsim.results.writers import write_reproduction
from kvsim.workload.request import Request

STUDY = "vLLM offloading connector blog (2026-01-08): CPU KV offload on one H100"
SOURCE = (
    "https://blog.vllm.ai (Inside vLLM's New KV Offloading Connector; "
    "vllm-project.github.io _posts/2025-12-29-offloading-connector.md)"
)

# the configurations, each a scenario file in scenarios/validation/vllm-offload/
CONFIGS = {
    "base": "Llama-3.1-8B, CPU offload over DMA",
    "kernel": "Llama-3.1-8B, loads by a copy kernel",
    "llama-3.2-1b": "Llama-3.2-1B, CPU offload over DMA",
    "llama-3.2-1b-kernel": "Llama-3.2-1B, loads by a copy kernel",
    "llama-3.2-1b-no-offload": "Llama-3.2-1B, no CPU offloading",
}

KINDS = {
    "input": "a setup value of the study, given to kvsim (matching it shows the input)",
    "calibrated": "an input fitted to the study (matching it shows the fit, not the model)",
    "derived": "arithmetic on inputs (calibrated or sourced); no queueing involved",
    "predicted": "comes out of the simulation, from constants not fitted to the study",
}

PROMPT = 512  # tokens of the throughput benchmark's prompts (the post)
REQUESTS = 10_000  # prompts of the throughput benchmark (the post)
LONG = 90_000  # L: the largest single-request prompt (Figure 5's, read as Figure 1's)
# CPU hit rates of the throughput runs, as cached 16-token blocks of a 512-token prompt:
# 0%, 25%, 50%, 81.25% (the post's "80%": 409.6 tokens, the nearest whole block) and
# 100% (every block; the last token is always computed, as vLLM's scheduler does)
HIT_BLOCKS = (0, 8, 16, 26, 32)
HIT_80 = 26

FIGURES: tuple[Figure, ...] = (
    Figure("h2d_one_way", 50.0, "GB/s", "host-to-GPU copy rate, one way (DMA)", "input"),
    Figure(
        "copy_both_ways",
        83.4,
        "GB/s",
        "host-to-GPU + GPU-to-host copy rate, both ways at once (DMA)",
        "input",
    ),
    Figure("ttft_recompute_512_s", None, "s", "one 512-token prompt computed, idle engine"),
    Figure("ttft_cpu_hit_512_s", None, "s", "the same prompt loaded from CPU, idle engine"),
    Figure("ttft_speedup_512", 2.0, "x", "recompute / CPU hit TTFT, 512 tokens (Llama-3.1-8B)"),
    Figure("ttft_recompute_90k_s", None, "s", "one 90k-token prompt computed, idle engine"),
    Figure("ttft_cpu_hit_90k_s", None, "s", "the same prompt loaded from CPU, idle engine"),
    Figure("ttft_speedup_90k", 22.0, "x", "recompute / CPU hit TTFT, ~90k tokens (L: the size)"),
    Figure(
        "throughput_0pct",
        None,
        "tokens/s",
        "10,000 prompts of 512 tokens at once, no CPU hits (Llama-3.1-8B)",
    ),
    *(
        Figure(
            f"throughput_gain_{round(100 * b / 32)}pct",
            9.0 if b == 32 else None,
            "x",
            f"throughput at a {100 * b / 32:.4g}% CPU hit rate / at 0%",
        )
        for b in HIT_BLOCKS[1:]
    ),
    Figure(
        "dma_over_kernel_max_8b",
        1.32,
        "x",
        "DMA / copy-kernel throughput, the largest over the hit rates (Llama-3.1-8B)",
    ),
    Figure(
        "dma_over_kernel_0pct_1b",
        1.055,
        "x",
        "DMA / copy-kernel throughput at 0% CPU hits (Llama-3.2-1B)",
    ),
    Figure(
        "dma_over_kernel_80pct_1b",
        1.15,
        "x",
        "DMA / copy-kernel throughput at 80% CPU hits (Llama-3.2-1B)",
    ),
    Figure(
        "kernel_over_no_offload_0pct_1b",
        0.94,
        "x",
        "copy-kernel offloading / no offloading throughput at 0% hits (Llama-3.2-1B)",
    ),
)

# what the post states that kvsim does not model (docs/validation.md)
NOT_MODELLED = {
    "kernel_ttft_gain_1k_1b": "< 1 ms: the copy kernel's TTFT lead over DMA at a 1K "
    "prompt (Llama-3.2-1B). kvsim copies at one rate per link whatever the block size: "
    "DMA's lower efficiency on 0.5 MB blocks (the post's Figures 3-4) is not modelled, "
    "so both copy engines give the same single-request TTFT",
    "kernel_ttft_gain_90k_1b": "~15 ms at a 90K prompt: the same (not modelled)",
    "block_size_throughput": "DMA and kernel copy rates per block size, 4 KB-16 MB "
    "(Figures 3-4: plots only, and a per-block-size efficiency kvsim does not have)",
    "version_gains": "0.11 -> 0.12: up to 4x lower TTFT and 5x throughput from the "
    "contiguous KV layout (per-layer fragments are not modelled; kvsim moves whole blocks)",
}


@dataclass
class Validation:
    """kvsim's figures for the study (one value each: every figure here is deterministic,
    so its interval is the point), and the runs they came from."""

    rows: list[Row]
    runs: dict[str, Results] = field(default_factory=dict)
    seeds: list[int] = field(default_factory=list)
    # each predicted figure over the catalogue's assumptions (None: --no-ranges)
    ranges: dict[str, Range] | None = None

    def value(self, name: str) -> float:
        return self.row(name).kvsim

    def row(self, name: str) -> Row:
        return next(r for r in self.rows if r.figure.name == name)

    def verdict(self, r: Row) -> str | None:
        """Where the post's value lies against kvsim's interval (predicted figures)."""
        p = r.figure.paper
        if r.figure.kind != "predicted" or p is None:
            return None
        return "inside interval" if r.lo <= p <= r.hi else "outside interval"

    def records(self) -> list[dict[str, object]]:
        """One dict per figure, :data:`COLUMNS`: as ``kvsim reproduce paper``'s CSV
        (``paper`` is the post's value); sensitive_to, range_lo and range_hi over the
        catalogue's assumptions (empty when not screened)."""
        out = []
        for r in self.rows:
            rg = (self.ranges or {}).get(r.figure.name)
            out.append(
                remote_kv_tiers.record(
                    r,
                    self.verdict(r),
                    ";".join(rg.sensitive_to) if rg else "",
                    rg.lo if rg else None,
                    rg.hi if rg else None,
                )
            )
        return out


COLUMNS = remote_kv_tiers.COLUMNS  # the same reproduction.csv columns as every study
RANGE_SEEDS = 1  # the CLI's: ranges on (deterministic runs; --no-ranges: 0, none)
# prompts of a range run's throughput benchmarks (the study's 10,000 / 10: each of some 60
# settings runs 15 of them); the range's base is the same smaller run (paired)
RANGE_REQUESTS = 1_000


def find_scenarios(folder: str | Path | None = None) -> Path:
    """The study's scenarios: the given folder, ./scenarios/validation/vllm-offload, or the
    checkout's."""
    return find_folder(folder, "scenarios/validation/vllm-offload")


# ---- workloads ---------------------------------------------------------------------------

FAR = 10**12  # block ids far from any generated by a scenario's own workload


def single_requests(sc: Scenario, tokens: int) -> list[Request]:
    """One prompt of ``tokens`` tokens, then the same prompt again once the first has long
    finished and its KV has landed in host memory: cold, then a CPU hit. The gap is the
    first prompt's time alone at 1% of the achievable rate, at least 60 s."""
    bt = sc.workload.block_tokens
    ids = tuple(range(FAR, FAR + -(-tokens // bt)))
    gap = max(60.0, 100.0 * scenario_lone_seconds(sc)(tokens, 0))
    return [Request(0, 0.0, tokens, 1, ids), Request(1, gap, tokens, 1, ids)]


def batch_requests(sc: Scenario, hit_blocks: int, n: int = REQUESTS) -> tuple[list[Request], float]:
    """The throughput benchmark: a warm-up request holding the shared ``hit_blocks``-block
    prefix at t = 0 (none at 0% hits), then ``n`` prompts of :data:`PROMPT` tokens at
    once, each the shared prefix and its own blocks. Returns the requests and when the
    measured batch arrives (the warm-up is over and its KV has landed in host by then)."""
    bt = sc.workload.block_tokens
    blocks = -(-PROMPT // bt)
    if not 0 <= hit_blocks <= blocks:
        raise ValueError(f"hit_blocks must be in [0, {blocks}], got {hit_blocks}")
    prefix = tuple(range(FAR, FAR + hit_blocks))
    reqs: list[Request] = []
    at = 0.0
    if hit_blocks:
        warm = min(hit_blocks * bt, PROMPT)
        reqs.append(Request(0, 0.0, warm, 1, prefix))
        at = max(60.0, 100.0 * scenario_lone_seconds(sc)(warm, 0))
    base = FAR + blocks
    for i in range(n):
        own = tuple(range(base + i * blocks, base + i * blocks + blocks - hit_blocks))
        reqs.append(Request(len(reqs), at, PROMPT, 1, prefix + own))
    return reqs, at


def throughput(
    path: Path, hit_blocks: int, n: int = REQUESTS, overrides: list[str] | None = None
) -> Results:
    """One run of the throughput benchmark on a configuration: the warm-up left out
    (``run.warmup`` = when the batch arrives)."""
    sc = api.load(path, overrides)
    reqs, at = batch_requests(sc, hit_blocks, n)
    res = api.run(sc, {"run.warmup": f"{at!r} s"} if at else None, requests=reqs)
    w = res.requests[res.requests["warmup"]]
    if len(w) and float(w["finish_s"].max()) >= at:  # the warm-up must be over
        raise RuntimeError(f"{path.name}: the warm-up ran past the batch's arrival ({at} s)")
    return res


def ttft_pair(path: Path, tokens: int, overrides: list[str] | None = None) -> tuple[float, float]:
    """(recompute, CPU hit) TTFT of one prompt alone on the configuration's engine."""
    sc = api.load(path, overrides)
    res = api.run(sc, requests=single_requests(sc, tokens))
    t = res.requests["ttft_s"]
    return float(t.iloc[0]), float(t.iloc[1])


# ---- the reproduction ----------------------------------------------------------------------


def scenario_files(folder: str | Path | None = None) -> list[Path]:
    """The scenario files the study runs (:func:`kvsim.reproduce.checks.check_files`)."""
    d = find_scenarios(folder)
    return [d / f"{name}.yaml" for name in CONFIGS]


def values(
    d: Path,
    requests: int = REQUESTS,
    overrides: list[str] | None = None,
    log: Callable[[str], None] = lambda _msg: None,
    runs: dict[str, Results] | None = None,
) -> dict[str, float]:
    """kvsim's value of every figure from the scenarios in ``d``, with ``--set``-style
    ``overrides`` on every file and ``requests`` prompts per throughput benchmark;
    ``runs``: where to keep the throughput runs."""
    path = {name: d / f"{name}.yaml" for name in CONFIGS}
    base = api.load(path["base"], overrides)
    out: dict[str, float] = {
        "h2d_one_way": base.node.h2d_per_gpu / 1e9,
        "copy_both_ways": (base.node.h2d_per_gpu + base.node.d2h_per_gpu) / 1e9,
    }
    for tokens, tag in ((PROMPT, "512"), (LONG, "90k")):
        log(f"running single requests of {tokens:,} tokens (Llama-3.1-8B)")
        cold, hit = ttft_pair(path["base"], tokens, overrides)
        out[f"ttft_recompute_{tag}_s"] = cold
        out[f"ttft_cpu_hit_{tag}_s"] = hit
        out[f"ttft_speedup_{tag}"] = cold / hit
    kept = runs if runs is not None else {}

    def tput(config: str, hit_blocks: int) -> float:
        key = f"{config}@{hit_blocks}"
        log(
            f"running {requests:,} prompts of {PROMPT} tokens: {CONFIGS[config]}, "
            f"{100 * hit_blocks / 32:.4g}% CPU hits"
        )
        kept[key] = throughput(path[config], hit_blocks, requests, overrides)
        return float(kept[key].summary["prompt_tokens_per_s"])

    dma = {b: tput("base", b) for b in HIT_BLOCKS}
    kernel = {b: tput("kernel", b) for b in HIT_BLOCKS}
    out["throughput_0pct"] = dma[0]
    for b in HIT_BLOCKS[1:]:
        out[f"throughput_gain_{round(100 * b / 32)}pct"] = dma[b] / dma[0]
    out["dma_over_kernel_max_8b"] = max(dma[b] / kernel[b] for b in HIT_BLOCKS)
    small = {
        (c, b): tput(c, b) for c in ("llama-3.2-1b", "llama-3.2-1b-kernel") for b in (0, HIT_80)
    }
    none = tput("llama-3.2-1b-no-offload", 0)
    out["dma_over_kernel_0pct_1b"] = small["llama-3.2-1b", 0] / small["llama-3.2-1b-kernel", 0]
    out["dma_over_kernel_80pct_1b"] = (
        small["llama-3.2-1b", HIT_80] / small["llama-3.2-1b-kernel", HIT_80]
    )
    out["kernel_over_no_offload_0pct_1b"] = small["llama-3.2-1b-kernel", 0] / none
    return out


def reproduce(
    folder: str | Path | None = None,
    log: Callable[[str], None] = lambda _msg: None,
    seeds: int = 1,
    range_seeds: int = 0,
    requests: int = REQUESTS,
    range_requests: int = RANGE_REQUESTS,
) -> Validation:
    """Run every configuration and compute kvsim's value of every figure. Every run here
    is deterministic (requests built here, all at fixed times; no random stream is drawn),
    so one seed gives each figure exactly: its interval is the point. ``range_seeds`` > 0
    (the CLI without ``--no-ranges``): then each predicted figure over the catalogue's
    assumptions (:func:`kvsim.reproduce.catalogue_ranges.study_ranges`), its throughput
    benchmarks with ``range_requests`` prompts (the base too: paired). ``seeds`` is
    accepted for the CLI's sake and ignored."""
    d = find_scenarios(folder)
    check_files(scenario_files(d))  # every file checked before the first run
    runs: dict[str, Results] = {}
    got = values(d, requests, None, log, runs)
    rows = [Row(f, got[f.name], got[f.name], got[f.name], [got[f.name]]) for f in FIGURES]
    rep = Validation(rows, runs, [api.load(d / "base.yaml").seed])
    if range_seeds:
        rep.ranges = study_ranges(
            scenario_files(d),
            {f.name: got[f.name] for f in FIGURES if f.kind == "predicted"},
            lambda sets: values(d, range_requests, sets),
            log,
        )
    return rep


# ---- output ------------------------------------------------------------------------------


def text_table(rep: Validation) -> str:
    """The side-by-side table for a terminal."""
    head = ("figure", "published", "kvsim", "range", "unit", "kvsim/published", "error", "kind")
    head = (*head, "what")
    body = [
        (
            r.figure.name,
            _fmt(r.figure.paper),
            _fmt(r.kvsim),
            range_cell(rep, r.figure.name),
            r.figure.unit,
            _fmt(r.ratio),
            "-" if r.ratio is None else f"{abs(r.ratio - 1.0):.0%}",
            r.figure.kind,
            r.figure.what,
        )
        for r in rep.rows
    ]
    lines = [
        f"validating against {STUDY}: deterministic runs (no random stream), so each "
        "value is exact and its interval the point; error = |kvsim / published - 1|",
        *columns([head, *body], left=(0, 4, 7, 8)),
        *sensitive_lines(rep),
        f"not modelled (no mechanism in kvsim): {', '.join(NOT_MODELLED)}",
        "each figure's setup and what drives its error: docs/validation.md",
    ]
    return "\n".join(lines)


def markdown(rep: Validation) -> str:
    """The same table as Markdown, with what each figure is."""
    lines = [
        f"# Validation: {STUDY}",
        "",
        f"Source: {SOURCE}. kvsim: one deterministic run per value (the interval is the "
        "point). Kinds: " + "; ".join(f"**{k}**: {v}" for k, v in KINDS.items()) + ".",
        "",
        *figure_table(rep, _fmt, verdict=True),
    ]
    lines += ["", "Not modelled:", ""]
    lines += [f"- `{k}`: {v}" for k, v in NOT_MODELLED.items()]
    return "\n".join(lines) + "\n"


def write(rep: Validation, out: str | Path) -> list[Path]:
    """reproduction.csv and reproduction.md, written as the folder ``out`` all or
    nothing."""

    table = pd.DataFrame(rep.records(), columns=COLUMNS)
    return write_reproduction(table, markdown(rep), out)


def summary(rep: Validation) -> dict[str, Any]:
    """The records keyed by figure (for tests and scripts)."""
    return {r["figure"]: r for r in rep.records()}
