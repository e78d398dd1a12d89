"""Validate kvsim against LMCache's cookbook pages for Llama-3.1-8B, Qwen3-8B and
Mistral-7B-Instruct-v0.2 (LMCache documentation, ``docs/source/getting_started/
quickstart/{llama,qwen,mistral}_usage_guide.rst``, published on docs.lmcache.ai) from the
scenarios in ``scenarios/validation/lmcache-longdoc/``: each page's Long Doc QA TTFTs next
to kvsim's, made from the model and GPU catalogue (the A40 card: its datasheet) with no
constant fitted to them.

Each page's setup: the model on one NVIDIA A40, ``vllm serve`` (TP 1) alone and with
LMCache's CPU offloading (``LMCACHE_MAX_LOCAL_CPU_SIZE=66``); LMCache's
``long_doc_qa.py`` with 46 documents of 10,000 tokens, 100 output tokens, repeat count 1,
``tile`` mode (every document once in a warm-up round, then once more in the same order in
the query round), at most 4 requests in flight. It reports each round's mean TTFT and
duration.

Interpretations adopted (L; docs/validation.md says why):

- The benchmark as stated, in co-located mode (``engine.mode: colocated``, issue 42): every
  request makes 100 output tokens, at most 4 are in flight (``workload.concurrency: 4``, a
  request is sent when one has its last token), and prompts' chunks share the steps with
  the others' decode. The warm-up round's 46 requests are due at once; the query round
  starts once the warm-up round is over. (Until 2026-12-07 the study put the requests
  one at a time on an idle engine with one output token: kvsim had no decode then.)
- A prompt is the document's 10,000 tokens (the benchmark's template adds a few dozen).
- The Qwen page's ``qwen/Qwen-3-8B-Instruct`` is Qwen3-8B (no model of that id exists).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from kvsim import api
from kvsim.config.schema import Scenario
from kvsim.physics.step import scenario_lone_seconds
from kvsim.reproduce import catalogue_ranges, remote_kv_tiers
from kvsim.reproduce.checks import check_files, find_folder
from kvsim.reproduce.remote_kv_tiers import Figure, Row, _fmt
from kvsim.reproduce.vllm_offload import KINDS, Validation
from kvsim.results.writers import write_reproduction
from kvsim.workload.request import Request

STUDY = "LMCache cookbooks: Long Doc QA on one A40, vLLM alone and with LMCache"
SOURCE = (
    "LMCache documentation, 'Cookbook' pages for Llama 3.1 8B, Qwen3-8B and Mistral-7B, "
    "their benchmark sections (LMCache/LMCache docs/source/getting_started/quickstart/"
    "llama_usage_guide.rst, qwen_usage_guide.rst, mistral_usage_guide.rst; docs.lmcache.ai)"
)


@dataclass(frozen=True)
class Page:
    """One cookbook page: its model's two scenario files (vLLM alone, with LMCache) and
    its published mean TTFTs (warm-up and query round, each mode), in seconds."""

    page: str
    vllm: str
    lmcache: str
    published: tuple[float, float, float, float]
    # the rounds' durations (warm-up and query, each mode), s, where the page gives them
    durations: tuple[float, float, float, float] | None = None


PAGES = {
    "llama-3.1-8b": Page(
        "llama_usage_guide.rst",
        "base",
        "lmcache",
        (2.767, 2.783, 2.862, 0.353),
        (121.3, 121.7, 124.2, 51.0),
    ),
    "qwen3-8b": Page(
        "qwen_usage_guide.rst", "qwen3-8b", "qwen3-8b-lmcache", (2.933, 2.956, 3.073, 0.393)
    ),
    "mistral-7b": Page(
        "mistral_usage_guide.rst", "mistral-7b", "mistral-7b-lmcache", (2.479, 2.518, 2.616, 0.322)
    ),
}

# the configurations, each a scenario file in scenarios/validation/lmcache-longdoc/
CONFIGS = {
    c: f"{model} on one A40, {mode}"
    for model, p in PAGES.items()
    for c, mode in ((p.vllm, "vLLM alone (GPU prefix cache)"), (p.lmcache, "with LMCache (66 GiB)"))
}

DOCUMENTS = 46  # S: --num-documents 46
DOC_TOKENS = 10_000  # S: --document-length 10000 (L: the template's few tokens left out)
OUTPUT_TOKENS = 100  # S: --output-len 100


def _figures(model: str, p: Page) -> tuple[Figure, ...]:
    w, q, lw, lq = p.published
    return (
        Figure(f"warmup_ttft_vllm_s.{model}", w, "s", "warm-up round mean TTFT, vLLM alone"),
        Figure(f"query_ttft_vllm_s.{model}", q, "s", "query round mean TTFT, vLLM alone"),
        Figure(f"warmup_ttft_lmcache_s.{model}", lw, "s", "warm-up round mean TTFT, LMCache"),
        Figure(f"query_ttft_lmcache_s.{model}", lq, "s", "query round mean TTFT, LMCache"),
        Figure(
            f"query_ttft_speedup.{model}",
            q / lq,
            "x",
            "query round mean TTFT, vLLM alone / with LMCache",
        ),
        Figure(
            f"query_gpu_hit_frac_vllm.{model}",
            None,
            "fraction",
            "query round: prompt tokens found in HBM, vLLM alone (the pages: no improvement)",
        ),
        *(
            Figure(f"{r}_duration_{mode}_s.{model}", v, "s", f"{r} round's duration, {what}")
            for (r, mode, what), v in zip(
                (
                    ("warmup", "vllm", "vLLM alone"),
                    ("query", "vllm", "vLLM alone"),
                    ("warmup", "lmcache", "LMCache"),
                    ("query", "lmcache", "LMCache"),
                ),
                p.durations or (),
                strict=False,
            )
        ),
    )


FIGURES: tuple[Figure, ...] = tuple(f for m, p in PAGES.items() for f in _figures(m, p))

NOT_MODELLED = {
    "store_overhead": "LMCache's store of every computed chunk slows its warm-up round "
    "(the pages: +3-5% TTFT); kvsim's stores are asynchronous",
    "retrieval_chunks": "LMCache retrieves in 256-token chunks through its pinned buffer; "
    "kvsim loads a prefix as one transfer at the host link's rate",
}

COLUMNS = remote_kv_tiers.COLUMNS
RANGE_SEEDS = 1  # the CLI's: catalogue ranges on (deterministic runs; --no-ranges: 0)

FAR = 10**12  # block ids far from any generated by a scenario's own workload


def find_scenarios(folder: str | Path | None = None) -> Path:
    """The study's scenarios: the given folder, ./scenarios/validation/lmcache-longdoc, or
    the checkout's."""
    return find_folder(folder, "scenarios/validation/lmcache-longdoc")


def scenario_files(folder: str | Path | None = None) -> list[Path]:
    """The scenario files the study runs (:func:`kvsim.reproduce.checks.check_files`)."""
    d = find_scenarios(folder)
    return [d / f"{name}.yaml" for name in CONFIGS]


def query_start(sc: Scenario, documents: int = DOCUMENTS, tokens: int = DOC_TOKENS) -> float:
    """When the query round is due: after the warm-up round whatever its concurrency, twice
    its documents' time one by one (a prefill alone, then a decode step alone per output
    token)."""
    lone = scenario_lone_seconds(sc)
    return 2.0 * documents * (lone(tokens, 0) + OUTPUT_TOKENS * lone(1, tokens))


def rounds(sc: Scenario, documents: int = DOCUMENTS, tokens: int = DOC_TOKENS) -> list[Request]:
    """The benchmark's two rounds in tile order: every document once (warm-up, all due at
    0), then every document again in the same order (query, all due at
    :func:`query_start`); the scenario's ``workload.concurrency`` sends each when a slot
    frees."""
    bt = sc.workload.block_tokens
    blocks = -(-tokens // bt)
    start = query_start(sc, documents, tokens)
    reqs = []
    for i in range(2 * documents):
        doc = i % documents
        ids = tuple(range(FAR + doc * blocks, FAR + (doc + 1) * blocks))
        reqs.append(Request(i, 0.0 if i < documents else start, tokens, OUTPUT_TOKENS, ids))
    return reqs


def round_means(
    path: Path, overrides: list[str] | None = None, documents: int = DOCUMENTS
) -> dict[str, float]:
    """warm-up and query rounds' mean TTFT and duration (first send to last token), and
    the query round's share of prompt tokens found in HBM, of one configuration."""
    sc = api.load(path, overrides)
    reqs = rounds(sc, documents)
    res = api.run(sc, requests=reqs)
    r = res.requests.sort_values("id")
    warm, query = r.iloc[:documents], r.iloc[documents:]
    warm_end = float((warm["arrival_s"] + warm["e2e_s"]).max())
    start = reqs[documents].arrival  # the query round's (query_start)
    if warm_end > start:  # (query_start's bound is a study constant, not an input)
        raise RuntimeError(f"{path}: the warm-up round ran past the query round's start")
    gpu = float(query["tokens_gpu"].sum())
    return {
        "warmup": float(warm["ttft_s"].mean()),
        "query": float(query["ttft_s"].mean()),
        "query_gpu_frac": gpu / float(query["input_tokens"].sum()),
        "warmup_duration": warm_end,
        "query_duration": float((query["arrival_s"] + query["e2e_s"]).max()) - start,
    }


def values(
    d: Path, overrides: list[str] | None = None, documents: int = DOCUMENTS
) -> dict[str, float]:
    """kvsim's value of every figure (``overrides``: ``--set``-style, for every file)."""
    out: dict[str, float] = {}
    for model, p in PAGES.items():
        vllm = round_means(d / f"{p.vllm}.yaml", overrides, documents)
        lmc = round_means(d / f"{p.lmcache}.yaml", overrides, documents)
        out |= {
            f"warmup_ttft_vllm_s.{model}": vllm["warmup"],
            f"query_ttft_vllm_s.{model}": vllm["query"],
            f"warmup_ttft_lmcache_s.{model}": lmc["warmup"],
            f"query_ttft_lmcache_s.{model}": lmc["query"],
            f"query_ttft_speedup.{model}": vllm["query"] / lmc["query"],
            f"query_gpu_hit_frac_vllm.{model}": vllm["query_gpu_frac"],
            f"warmup_duration_vllm_s.{model}": vllm["warmup_duration"],
            f"query_duration_vllm_s.{model}": vllm["query_duration"],
            f"warmup_duration_lmcache_s.{model}": lmc["warmup_duration"],
            f"query_duration_lmcache_s.{model}": lmc["query_duration"],
        }
    return out


def reproduce(
    folder: str | Path | None = None,
    log: Callable[[str], None] = lambda _msg: None,
    seeds: int = 1,
    range_seeds: int = RANGE_SEEDS,
) -> Validation:
    """Run both configurations and compute every figure; then, when ``range_seeds`` > 0
    (the CLI without ``--no-ranges``), each predicted figure's range over the
    catalogue's assumptions (:func:`kvsim.reproduce.catalogue_ranges.study_ranges`).
    Deterministic: one run gives each figure exactly (``seeds``: the CLI's, ignored)."""
    d = find_scenarios(folder)
    check_files(scenario_files(d))
    log(f"running {DOCUMENTS} documents twice (tile) per model, vLLM alone and with LMCache")
    got = values(d)
    rows = [Row(f, got[f.name], got[f.name], got[f.name], [got[f.name]]) for f in FIGURES]
    rep = Validation(rows, {}, [api.load(d / "base.yaml").seed])
    if range_seeds:
        rep.ranges = catalogue_ranges.study_ranges(
            scenario_files(d),
            {f.name: got[f.name] for f in FIGURES if f.kind == "predicted"},
            lambda sets: values(d, sets),
            log,
            base=got,
        )
    return rep


# ---- output ------------------------------------------------------------------------------


def text_table(rep: Validation) -> str:
    """The side-by-side table for a terminal, with each figure's range."""
    return catalogue_ranges.study_text(rep, STUDY, NOT_MODELLED, _fmt)


def markdown(rep: Validation) -> str:
    """The same table as Markdown."""
    return catalogue_ranges.study_markdown(rep, STUDY, SOURCE, KINDS, NOT_MODELLED, _fmt)


def write(rep: Validation, out: str | Path) -> list[Path]:
    """reproduction.csv and reproduction.md, written as the folder ``out`` all or nothing."""
    table = pd.DataFrame(rep.records(), columns=COLUMNS)
    return write_reproduction(table, markdown(rep), out)
