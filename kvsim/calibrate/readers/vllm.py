"""The ``vllm bench serve --save-result`` reader: one row per result object.

A result (vllm/benchmarks/serve.py) holds the run's traffic (``request_rate``, a number
or ``"inf"``; ``max_concurrency``, null or N), its size (``completed``,
``total_input_tokens``) and its TTFT statistics in ms (``mean_ttft_ms``,
``median_ttft_ms``, ``p99_ttft_ms``...), plus every ``--metadata KEY=VALUE`` the run was
given. A row's prompt is ``total_input_tokens / completed`` (the mean: a random dataset
with ``--random-range-ratio`` varies it). The result does not say how much of each
prompt was cached: run the benchmark with ``--metadata cached_tokens=N`` (``N`` the shared
prefix, e.g. ``--random-prefix-len``; ``tier=host`` where an offloading connector serves
it from CPU memory with the GPU prefix cache off), or give ``--cached-tokens``; a file
that says neither is refused. Several results in one file (``--append-result``) are
several rows.
"""

from __future__ import annotations

from typing import Any

from kvsim.calibrate.readers.records import milliseconds, need, objects, per_request
from kvsim.calibrate.rows import Given, Row, make_row
from kvsim.errors import InputError

WHAT = "a vllm bench serve result"


def looks_like(obj: dict[str, Any]) -> bool:
    """A vllm bench serve result: its traffic keys (``burstiness``, ``num_prompts``)."""
    return "burstiness" in obj or "num_prompts" in obj


def read(path: str, text: str, given: Given) -> list[Row]:
    """The rows of a ``--save-result`` JSON file (see the module docstring)."""
    rows = []
    for line, obj in objects(path, text):
        where = f"{path}:{line}"
        if not looks_like(obj):
            raise InputError(
                f"not {WHAT}: no 'burstiness' or 'num_prompts' key (an SGLang "
                "bench_serving line? name it sglang:FILE)",
                where=where,
            )
        completed = need(obj, "completed", where, WHAT)
        total = need(obj, "total_input_tokens", where, WHAT)
        key = f"{given.statistic}_ttft_ms"
        ttft = need(obj, key, where, f"{WHAT} with TTFT (--percentile-metrics ttft)")
        cached: Any = obj.get("cached_tokens", given.cached_tokens)
        if cached is None:
            raise InputError(
                "the result does not say how many of each prompt's tokens were cached: run "
                "vllm bench serve with --metadata cached_tokens=N (0 for cold prompts), or "
                "give --cached-tokens N",
                where=where,
            )
        rate = obj.get("request_rate", "inf")
        rows.append(
            make_row(
                source=path,
                where=where,
                fmt="vllm",
                prompt_tokens=per_request(total, completed, where),
                cached_tokens=cached,
                ttft_s=milliseconds(ttft),
                statistic=given.statistic,
                concurrency=obj.get("max_concurrency"),
                rate=None if rate == "inf" else rate,
                requests=completed,
                tier=obj.get("tier", given.tier),
                ttft_name=key,
                ttft_raw=ttft,
            )
        )
    return rows
