"""The SGLang ``bench_serving --output-file`` reader: one row per JSON line.

bench_serving appends one result line per run (python/sglang/bench_serving.py): its
traffic (``request_rate``, a number or Infinity; ``max_concurrency``), its size
(``completed``, ``total_input_tokens``), the dataset (``dataset_name``,
``random_input_len``...), its TTFT statistics in ms (``mean_ttft_ms``,
``median_ttft_ms``...) and, in recent versions, ``--tag``. A row's prompt is
``total_input_tokens / completed``. The cached prefix: ``--tag cached_tokens=N`` (and
``tier=host``), else ``--cached-tokens``; a ``random`` or ``random-ids`` dataset shares no
prefix (0). Other datasets (``generated-shared-prefix``, ``sharegpt``) without either are
refused: the line does not say how much was cached. A line replaying a trace's
timestamps (``request_rate: "trace"``) is refused: kvsim builds rows from a rate or a
concurrency.
"""

from __future__ import annotations

import math
from typing import Any

from kvsim.calibrate.readers.records import milliseconds, need, notes, objects, per_request
from kvsim.calibrate.rows import Given, Row, make_row
from kvsim.errors import InputError

WHAT = "an SGLang bench_serving result line"
COLD_DATASETS = ("random", "random-ids")


def looks_like(obj: dict[str, Any]) -> bool:
    """An SGLang result line: its dataset keys."""
    return "dataset_name" in obj and "random_input_len" in obj


def read(path: str, text: str, given: Given) -> list[Row]:
    """The rows of a bench_serving JSONL file (see the module docstring)."""
    rows = []
    for line, obj in objects(path, text):
        where = f"{path}:{line}"
        if not looks_like(obj):
            raise InputError(
                f"not {WHAT}: no 'dataset_name' and 'random_input_len' keys (a vllm bench "
                "serve result? name it vllm:FILE)",
                where=where,
            )
        completed = need(obj, "completed", where, WHAT)
        total = need(obj, "total_input_tokens", where, WHAT)
        key = f"{given.statistic}_ttft_ms"
        ttft = need(obj, key, where, f"{WHAT} with {key} (older versions: --statistic median)")
        tags = notes(obj.get("tag"))
        cached: Any = tags.get("cached_tokens", given.cached_tokens)
        if cached is None and obj.get("dataset_name") in COLD_DATASETS:
            cached = 0
        if cached is None:
            raise InputError(
                f"the line does not say how many of each prompt's tokens were cached (dataset "
                f"{obj.get('dataset_name')!r}): run bench_serving with --tag cached_tokens=N "
                "(the shared prefix, e.g. --gsp-system-prompt-len), or give --cached-tokens N",
                where=where,
            )
        rate = obj.get("request_rate", math.inf)
        if rate == "trace":
            raise InputError(
                "request_rate 'trace': a replay of a trace's timestamps, not a rate or a "
                "concurrency kvsim can rebuild",
                where=where,
            )
        rows.append(
            make_row(
                source=path,
                where=where,
                fmt="sglang",
                prompt_tokens=per_request(total, completed, where),
                cached_tokens=cached,
                ttft_s=milliseconds(ttft),
                statistic=given.statistic,
                concurrency=obj.get("max_concurrency"),
                rate=rate,
                requests=completed,
                tier=tags.get("tier", given.tier),
                ttft_name=key,
                ttft_raw=ttft,
            )
        )
    return rows
