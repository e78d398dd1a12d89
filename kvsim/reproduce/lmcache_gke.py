"""Validate kvsim against Google's LMCache-on-GKE benchmark ("LMCache on Google Kubernetes
Engine: Boosting LLM Inference Performance with KV Cache on Tiered Storage", Danna Wang,
LMCache blog 2025-10-07 and Google Cloud blog 2025-11-07; LMCache/lmcache.github.io
``_posts/2025-10-07-LMCache-on-GKE.md``) from the scenarios in
``scenarios/validation/lmcache-gke/``: each change the page states against HBM only next
to kvsim's, made from the model and GPU catalogue with no constant fitted to it.

The page's setup: Llama-3.3-70B-Instruct on one vLLM server on an A3 Mega machine (8 x
H100 80GB), LMCache v0.3.3; HBM only, HBM + CPU RAM (1 TiB), HBM + CPU RAM + local SSD
(5 TiB); SGLang's ``bench_serving`` with ``generated-shared-prefix``: groups of 20
requests share a system prompt of 1k, 5k, 10k, 50k or 100k tokens, each request adds its
own 256-token question and makes 512 output tokens; ``--request-rate 800
--max-concurrency 200``. Test 2 sizes the workload to 4.0-4.3 M tokens of KV, Test 3 to
12.6-13.7 M; for each prompt length the page names the best configuration and its mean
TTFT, input throughput and mean end-to-end latency as a change against HBM only.

Interpretations adopted (L; docs/validation.md says why):

- A test's "total cache" counts every group's system prompt once and every request's
  question and output: ``groups x (prompt + 20 x (256 + 512))`` tokens (the page's
  example command, 80 groups of a 1,000-token prompt, gives 1.31 M: Test 1's
  "1.1M-1.3M"). The number of groups is the range's midpoint over that, rounded.
- bench_serving shuffles the requests (``random.shuffle``) and spaces them by
  exponential gaps at 800/s; the seed is the scenario's.
- A change of x% is the ratio 1 + x/100 of the two configurations' values (kvsim's:
  the same two configurations run on the same requests).
- Only the named best configuration is compared (the page gives no other).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from kvsim import api
from kvsim.config.schema import Scenario
from kvsim.reproduce import catalogue_ranges, remote_kv_tiers
from kvsim.reproduce.checks import check_files, find_folder
from kvsim.reproduce.remote_kv_tiers import Figure, Row, _fmt
from kvsim.reproduce.vllm_offload import KINDS, Validation
from kvsim.results.writers import write_reproduction
from kvsim.rng import stream
from kvsim.workload.request import Request

STUDY = "LMCache on GKE: Llama-3.3-70B on 8 x H100, HBM vs CPU RAM and local SSD tiers"
SOURCE = (
    "LMCache blog 2025-10-07 / Google Cloud blog 2025-11-07, 'LMCache on Google Kubernetes "
    "Engine: Boosting LLM Inference Performance with KV Cache on Tiered Storage' "
    "(LMCache/lmcache.github.io _posts/2025-10-07-LMCache-on-GKE.md)"
)

PER_GROUP = 20  # S: --gsp-prompts-per-group 20
QUESTION = 256  # S: --gsp-question-len 256
OUTPUT = 512  # S: --gsp-output-len 512
RATE = 800.0  # S: --request-rate 800 (requests/s, exponential gaps)
CONCURRENCY = 200  # S: --max-concurrency 200 (the scenario's workload.concurrency)

# S: each test's total KV, tokens (the page's range; its midpoint sizes the workload)
TOTALS = {"test2": (4.0e6, 4.3e6), "test3": (12.6e6, 13.7e6)}

# the configurations, each a scenario file in scenarios/validation/lmcache-gke/
CONFIGS = {
    "base": "HBM only (vLLM's prefix cache)",
    "cpu": "HBM + CPU RAM (LMCache, 1 TiB)",
    "ssd": "HBM + CPU RAM + local SSD (LMCache, 1 TiB + 5 TiB)",
}


@dataclass(frozen=True)
class Case:
    """One row of the page's tables: the test, the system prompt's tokens, the best
    configuration (a file of :data:`CONFIGS`) and its published changes against HBM only
    (mean TTFT, input throughput, mean end-to-end latency) as ratios."""

    test: str
    prompt: int
    best: str
    ttft: float
    throughput: float
    e2e: float


# S: the page's Test 2 and Test 3 tables (a change of x% as 1 + x/100). Test 2's
# 1,000-token row names HBM only itself (0% by construction): not a comparison.
CASES = (
    Case("test2", 5_000, "cpu", 0.82, 1.16, 0.86),
    Case("test2", 10_000, "cpu", 0.56, 1.50, 0.67),
    Case("test2", 50_000, "ssd", 0.32, 2.79, 0.36),
    Case("test2", 100_000, "ssd", 0.21, 3.64, 0.27),
    Case("test3", 1_000, "cpu", 1.05, 1.01, 0.99),
    Case("test3", 5_000, "cpu", 0.94, 1.27, 0.79),
    Case("test3", 10_000, "ssd", 2.21, 1.23, 0.81),
    Case("test3", 50_000, "ssd", 1.48, 1.69, 0.59),
    Case("test3", 100_000, "ssd", 0.97, 2.30, 0.43),
)

METRICS = (
    ("ttft", "mean TTFT"),
    ("throughput", "input throughput"),
    ("e2e", "mean end-to-end latency"),
)


def _key(c: Case) -> str:
    return f"{c.test}.{c.prompt // 1000}k"


def _figures(c: Case) -> tuple[Figure, ...]:
    return tuple(
        Figure(
            f"{m}_ratio.{_key(c)}",
            getattr(c, m),
            "x",
            f"{what}, {CONFIGS[c.best]} / HBM only ({c.test}, {c.prompt:,}-token prompts)",
        )
        for m, what in METRICS
    )


FIGURES: tuple[Figure, ...] = tuple(f for c in CASES for f in _figures(c))

NOT_MODELLED = {
    "hbm_blocks": "vLLM's own 16-token blocks in HBM: kvsim's blocks are LMCache's "
    "256-token chunks in every tier (a prefix's last partial chunk is recomputed)",
    "disk_io": "LMCache's local disk backend reads files through its own thread pool; "
    "kvsim reads the local SSD at its drives' rate",
    "best_of": "the page picked each row's best configuration after measuring all three; "
    "kvsim compares the named one only",
}

COLUMNS = remote_kv_tiers.COLUMNS
RANGE_SEEDS = 1  # the CLI's: catalogue ranges on (deterministic runs; --no-ranges: 0)
# the cases the catalogue ranges screen: Test 2's 10k (HBM + CPU RAM) and 50k (HBM + CPU
# RAM + SSD), about half a minute a setting; all nine cases' 55,020 requests would make
# each of some 50 settings five minutes
RANGE_CASES = tuple(
    c for c in CASES if (c.test, c.prompt) in (("test2", 10_000), ("test2", 50_000))
)

FAR = 10**12  # block ids far from any generated by a scenario's own workload


def find_scenarios(folder: str | Path | None = None) -> Path:
    """The study's scenarios: the given folder, ./scenarios/validation/lmcache-gke, or
    the checkout's."""
    return find_folder(folder, "scenarios/validation/lmcache-gke")


def scenario_files(folder: str | Path | None = None) -> list[Path]:
    """The scenario files the study runs (:func:`kvsim.reproduce.checks.check_files`)."""
    d = find_scenarios(folder)
    return [d / f"{name}.yaml" for name in CONFIGS]


def groups(test: str, prompt: int) -> int:
    """Groups of a test at a system prompt length: the test's midpoint total over a
    group's tokens (its prompt once, every request's question and output)."""
    lo, hi = TOTALS[test]
    return max(1, round((lo + hi) / 2 / (prompt + PER_GROUP * (QUESTION + OUTPUT))))


def shared_prefix(sc: Scenario, n_groups: int, prompt: int) -> list[Request]:
    """bench_serving's generated-shared-prefix requests: ``n_groups`` x 20 requests, each
    its group's system prompt (shared blocks) and its own question, shuffled, sent at
    exponential gaps at :data:`RATE` (the scenario's ``workload.concurrency`` holds each
    until a slot frees)."""
    bt = sc.workload.block_tokens
    shared = prompt // bt  # whole blocks of the system prompt
    total = prompt + QUESTION
    own = -(-total // bt) - shared
    rng = stream(sc.seed, "lmcache-gke")
    order = rng.permutation(n_groups * PER_GROUP)
    gaps = rng.exponential(1.0 / RATE, len(order))
    own_base = FAR + n_groups * shared
    reqs, t = [], 0.0
    for i, k in enumerate(order):
        g = int(k) // PER_GROUP
        ids = tuple(range(FAR + g * shared, FAR + (g + 1) * shared))
        ids += tuple(range(own_base + int(k) * own, own_base + (int(k) + 1) * own))
        reqs.append(Request(i, t, total, OUTPUT, ids))
        t += float(gaps[i])
    return reqs


def measures(
    path: Path, reqs: list[Request], overrides: list[str] | None = None
) -> dict[str, float]:
    """bench_serving's three figures of one configuration: mean TTFT, input throughput
    (prompt tokens over the run, first send to last token) and mean end-to-end latency."""
    res = api.run(api.load(path, overrides), requests=reqs)
    r = res.requests
    done = r["arrival_s"] + r["e2e_s"]
    start = float(r["arrival_s"].min())
    return {
        "ttft": float(r["ttft_s"].mean()),
        "throughput": float(r["input_tokens"].sum()) / (float(done.max()) - start),
        "e2e": float(r["e2e_s"].mean()),
    }


def values(
    d: Path,
    overrides: list[str] | None = None,
    log: Callable[[str], None] = lambda _msg: None,
    cases: tuple[Case, ...] = CASES,
) -> dict[str, float]:
    """kvsim's value of every figure of ``cases`` (``overrides``: ``--set``-style, for
    every file). Each test runs all its groups: a smaller workload would fit tiers the
    page's overflows."""
    out: dict[str, float] = {}
    base = api.load(d / "base.yaml", overrides)
    for c in cases:
        reqs = shared_prefix(base, groups(c.test, c.prompt), c.prompt)
        log(f"{_key(c)}: {len(reqs):,} requests, HBM only and {c.best}")
        hbm = measures(d / "base.yaml", reqs, overrides)
        best = measures(d / f"{c.best}.yaml", reqs, overrides)
        out |= {f"{m}_ratio.{_key(c)}": best[m] / hbm[m] for m, _ in METRICS}
    return out


def reproduce(
    folder: str | Path | None = None,
    log: Callable[[str], None] = lambda _msg: None,
    seeds: int = 1,
    range_seeds: int = RANGE_SEEDS,
) -> Validation:
    """Run every case (HBM only and the named best configuration on the same requests)
    and compute every figure; then, when ``range_seeds`` > 0 (the CLI without
    ``--no-ranges``), the range of each figure of :data:`RANGE_CASES` over the catalogue's
    assumptions (:func:`kvsim.reproduce.catalogue_ranges.study_ranges`). Deterministic:
    one run gives each figure exactly (``seeds``: the CLI's, ignored)."""
    d = find_scenarios(folder)
    check_files(scenario_files(d))
    n = sum(groups(c.test, c.prompt) * PER_GROUP for c in CASES)
    log(
        f"running {len(CASES)} cases on HBM only and on their best setup: "
        f"{n:,} requests, each twice"
    )
    got = values(d, log=log)
    rows = [Row(f, got[f.name], got[f.name], got[f.name], [got[f.name]]) for f in FIGURES]
    rep = Validation(rows, {}, [api.load(d / "base.yaml").seed])
    if range_seeds:
        screened = {f.name for c in RANGE_CASES for f in _figures(c)}
        log(f"catalogue ranges over {', '.join(_key(c) for c in RANGE_CASES)}")
        rep.ranges = catalogue_ranges.study_ranges(
            scenario_files(d),
            {f.name: got[f.name] for f in FIGURES if f.name in screened},
            lambda sets: values(d, sets, cases=RANGE_CASES),
            log,
            base=got,
        )
    return rep


# ---- output ------------------------------------------------------------------------------


def text_table(rep: Validation) -> str:
    """The side-by-side table for a terminal, with each figure's range."""
    return catalogue_ranges.study_text(
        rep, STUDY, NOT_MODELLED, _fmt, ", " + " and ".join(_key(c) for c in RANGE_CASES)
    )


def markdown(rep: Validation) -> str:
    """The same table as Markdown."""
    return catalogue_ranges.study_markdown(rep, STUDY, SOURCE, KINDS, NOT_MODELLED, _fmt)


def write(rep: Validation, out: str | Path) -> list[Path]:
    """reproduction.csv and reproduction.md, written as the folder ``out`` all or nothing."""
    table = pd.DataFrame(rep.records(), columns=COLUMNS)
    return write_reproduction(table, markdown(rep), out)
