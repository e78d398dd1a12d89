"""Measurements made by kvsim: known constants plus noise, written in each reader's format.

What this module owns: :func:`synthesize` (rows' TTFT statistics simulated with some
assumptions set to "true" values, each multiplied by exp(noise x z), z standard normal
under a seed: the recovery test's and the shipped samples' measurements), :func:`ttfts`
(a row's per-request TTFTs, for a histogram) and one writer per format: :func:`csv_text`,
:func:`vllm_result` (a ``vllm bench serve --save-result`` object), :func:`sglang_line`
(a bench_serving result line) and :func:`prometheus_text` (a scrape of vLLM's /metrics),
each holding what the real tool writes for such a run, the cached prefix said where that
tool lets a run say it (``--metadata``, ``--tag``). Nothing here is a measurement of real
hardware: examples/measurements/README.md says so beside the files.
"""

from __future__ import annotations

import io
import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from kvsim import api
from kvsim.calibrate.fields import resolve, scenario_composition
from kvsim.calibrate.predict import Predictor
from kvsim.calibrate.rows import Row
from kvsim.calibrate.runs import row_overrides, row_requests

#: vLLM's bucket bounds of vllm:time_to_first_token_seconds (s)
TTFT_BUCKETS = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0,
    2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)  # fmt: skip


def template(
    prompt: int,
    cached: int = 0,
    *,
    concurrency: int | None = 1,
    rate: float | None = None,
    requests: int = 1,
    tier: str | None = None,
    statistic: str = "mean",
    where: str = "synthetic",
) -> Row:
    """A row to synthesize (its TTFT a placeholder)."""
    t = "none" if cached == 0 else (tier or "gpu")
    return Row(
        "synthetic", where, prompt, cached, 1.0, statistic, concurrency, rate, requests, t,
        "", "synthetic",
    )  # fmt: skip


def synthesize(
    scenario: str,
    rows: Sequence[Row],
    truth: Mapping[str, float],
    *,
    noise: float = 0.05,
    seed: int = 0,
    overrides: Sequence[str] = (),
    max_requests: int = 100,
) -> list[Row]:
    """``rows`` with their TTFT simulated at ``truth`` (assumption name: value) times
    exp(noise x z), z ~ N(0, 1) drawn in row order under ``seed``."""
    sc = api.load(scenario, list(overrides))
    fields, _ = resolve(list(truth), sc, scenario_composition(sc, scenario))
    predictor = Predictor(scenario, overrides, None, fields, rows, max_requests=max_requests)
    clean = predictor([truth[f.name] for f in fields])
    z = np.random.default_rng(seed).standard_normal(len(rows))
    return [
        replace(r, ttft_s=float(t * math.exp(noise * e)))
        for r, t, e in zip(rows, clean, z, strict=True)
    ]


def ttfts(
    scenario: str,
    row: Row,
    truth: Mapping[str, float],
    overrides: Sequence[str] = (),
    max_requests: int = 100,
) -> np.ndarray:
    """The row's per-request TTFTs (s) simulated at ``truth``."""
    sc = api.load(scenario, list(overrides))
    fields, _ = resolve(list(truth), sc, scenario_composition(sc, scenario))
    sc = api.load(scenario, [*overrides, *(f.override(truth[f.name]) for f in fields)])
    reqs, at = row_requests(sc, row, max_requests)
    res = api.run(api.load(sc, row_overrides(sc, row, at)), requests=reqs)
    df = res.requests
    return df.loc[~df["warmup"].to_numpy(), "ttft_s"].to_numpy(dtype=float)


def csv_text(rows: Sequence[Row]) -> str:
    """Rows as a measurements CSV (kvsim/calibrate/readers/csvfile.py)."""
    out = io.StringIO()
    out.write("prompt_tokens,cached_tokens,concurrency,request_rate,requests,tier,ttft_ms\n")
    for r in rows:
        conc = "" if r.concurrency is None else str(r.concurrency)
        rate = "" if r.rate is None else f"{r.rate:g}"
        tier = "" if r.tier == "none" else r.tier
        out.write(
            f"{r.prompt_tokens},{r.cached_tokens},{conc},{rate},{r.requests},{tier},"
            f"{r.ttft_s * 1e3:.3f}\n"
        )
    return out.getvalue()


def _stats(row: Row, each: Sequence[float] | None) -> dict[str, float]:
    """The TTFT statistics (ms) a benchmark reports, from per-request TTFTs (s; None:
    every request at the row's TTFT)."""
    t = np.asarray(each if each is not None else [row.ttft_s], dtype=float) * 1e3
    return {
        "mean_ttft_ms": float(np.mean(t)),
        "median_ttft_ms": float(np.median(t)),
        "std_ttft_ms": float(np.std(t)),
        "p99_ttft_ms": float(np.percentile(t, 99)),
    }


def vllm_result(row: Row, model_id: str, each: Sequence[float] | None = None) -> dict[str, Any]:
    """A ``vllm bench serve --save-result`` object for the row (``--metadata
    cached_tokens=N``, and ``tier=host`` where it is); ``each``: its requests' TTFTs (s)."""
    out: dict[str, Any] = {
        "date": "20260101-000000",
        "endpoint_type": "openai",
        "backend": "openai",
        "label": None,
        "model_id": model_id,
        "tokenizer_id": model_id,
        "num_prompts": row.requests,
        "cached_tokens": str(row.cached_tokens),
    }
    if row.tier == "host":
        out["tier"] = "host"
    out.update(
        {
            "request_rate": "inf" if row.rate is None else row.rate,
            "burstiness": 1.0,
            "max_concurrency": row.concurrency,
            "duration": 0.0,
            "completed": row.requests,
            "failed": 0,
            "total_input_tokens": row.prompt_tokens * row.requests,
            "total_output_tokens": row.requests,
            **_stats(row, each),
        }
    )
    return out


def sglang_line(row: Row, dataset: str, each: Sequence[float] | None = None) -> dict[str, Any]:
    """An SGLang bench_serving result line for the row (``--tag cached_tokens=N`` unless
    the dataset is a random one, which shares no prefix); ``each``: its requests' TTFTs."""
    tag = None if dataset.startswith("random") else f"cached_tokens={row.cached_tokens}"
    if row.tier == "host" and tag:
        tag += ",tier=host"
    return {
        "tag": tag,
        "backend": "sglang",
        "dataset_name": dataset,
        "request_rate": math.inf if row.rate is None else row.rate,
        "max_concurrency": row.concurrency,
        "sharegpt_output_len": None,
        "random_input_len": row.prompt_tokens,
        "random_output_len": 1,
        "random_range_ratio": 1.0,
        "duration": 0.0,
        "completed": row.requests,
        "total_input_tokens": row.prompt_tokens * row.requests,
        "total_output_tokens": row.requests,
        **_stats(row, each),
    }


def prometheus_text(row: Row, ttft: Sequence[float], model: str) -> str:
    """A scrape of vLLM's /metrics after the row's requests (per-request TTFTs ``ttft``,
    s): the TTFT histogram, prompt tokens and prefix-cache counters."""
    n = len(ttft)
    label = f'engine="0",model_name="{model}"'
    lines = [
        "# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.",
        "# TYPE vllm:time_to_first_token_seconds histogram",
    ]
    for le in TTFT_BUCKETS:
        c = int(np.sum(np.asarray(ttft) <= le))
        lines.append(f'vllm:time_to_first_token_seconds_bucket{{{label},le="{le}"}} {c:.1f}')
    lines += [
        f'vllm:time_to_first_token_seconds_bucket{{{label},le="+Inf"}} {n:.1f}',
        f"vllm:time_to_first_token_seconds_count{{{label}}} {n:.1f}",
        f"vllm:time_to_first_token_seconds_sum{{{label}}} {float(np.sum(ttft))!r}",
        "# HELP vllm:prompt_tokens_total Number of prefill tokens processed.",
        "# TYPE vllm:prompt_tokens_total counter",
        f"vllm:prompt_tokens_total{{{label}}} {float(row.prompt_tokens * n):.1f}",
        "# HELP vllm:request_prompt_tokens Number of prefill tokens processed.",
        "# TYPE vllm:request_prompt_tokens histogram",
        f"vllm:request_prompt_tokens_count{{{label}}} {n:.1f}",
        f"vllm:request_prompt_tokens_sum{{{label}}} {float(row.prompt_tokens * n):.1f}",
        "# HELP vllm:prefix_cache_queries_total Prefix cache queries, in terms of number of "
        "queried tokens.",
        "# TYPE vllm:prefix_cache_queries_total counter",
        f"vllm:prefix_cache_queries_total{{{label}}} {float(row.prompt_tokens * n):.1f}",
        "# HELP vllm:prefix_cache_hits_total Prefix cache hits, in terms of number of cached "
        "tokens.",
        "# TYPE vllm:prefix_cache_hits_total counter",
        f"vllm:prefix_cache_hits_total{{{label}}} {float(row.cached_tokens * n):.1f}",
    ]
    return "\n".join(lines) + "\n"
