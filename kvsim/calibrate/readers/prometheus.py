"""The Prometheus reader: a scrape of vLLM's ``/metrics`` (text exposition) as one row.

What a scrape tells, summed over its label sets (engines): the requests that got a first
token and their mean TTFT (``vllm:time_to_first_token_seconds`` ``_count`` and ``_sum``;
its ``_bucket`` lines give a median, interpolated within a bucket as Prometheus'
``histogram_quantile`` does, so only as fine as the buckets), the mean prompt
(``vllm:request_prompt_tokens`` ``_sum / _count``, else ``vllm:prompt_tokens_total`` per
request) and the share of prompt tokens found cached (``vllm:prefix_cache_hits_total``
over ``vllm:prefix_cache_queries_total``; a KV connector's hits, CPU offloading or a remote
store, in ``vllm:external_prefix_cache_hits_total``): the row's cached tokens are that
share of its mean prompt.

What it cannot tell: how the clients sent the requests (give ``--concurrency N`` or
``--rate R``); where a connector's hits came from (give ``--tier host``); the spread of
prompt lengths (only their mean); anything before the counters started (they are
cumulative since the server started: scrape a server restarted for the run, and leave
other traffic out). vLLM times its TTFT from when the engine received the request, after
the API server parsed and tokenized it, so a scrape's TTFT is shorter than a client's by
that much (kvsim's includes the frontend: engine.frontend).
"""

from __future__ import annotations

import math
import re
from collections import defaultdict

from kvsim.calibrate.rows import Given, Row, make_row
from kvsim.errors import InputError

TTFT = "vllm:time_to_first_token_seconds"
_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+\S+)?\s*$")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def looks_like(text: str) -> bool:
    """A text exposition with vLLM's TTFT histogram in it."""
    return TTFT + "_count" in text or TTFT + "_bucket" in text


def samples(path: str, text: str) -> list[tuple[str, dict[str, str], float, int]]:
    """(name, labels, value, line) of every sample line; InputError naming the line of
    one that is not a sample."""
    out = []
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        if m is None:
            raise InputError(
                "not a Prometheus text exposition line (NAME{LABELS} VALUE)",
                where=f"{path}:{n}",
            )
        try:
            value = float(m.group(3))
        except ValueError:
            raise InputError(f"not a sample value: {m.group(3)!r}", where=f"{path}:{n}") from None
        out.append((m.group(1), dict(_LABEL.findall(m.group(2) or "")), value, n))
    return out


def read(path: str, text: str, given: Given) -> list[Row]:
    """One row from a scrape (see the module docstring)."""
    total: dict[str, float] = defaultdict(float)
    buckets: dict[float, float] = defaultdict(float)
    models: set[str] = set()
    first = 0
    for name, labels, value, line in samples(path, text):
        if name.startswith(TTFT):
            first = first or line
            if "model_name" in labels:
                models.add(labels["model_name"])
        if name == TTFT + "_bucket":
            le = labels.get("le", "")
            try:
                buckets[float(le)] += value
            except ValueError:
                raise InputError(
                    f"bucket bound le={le!r} is not a number", where=f"{path}:{line}"
                ) from None
        else:
            total[name] += value
    where = f"{path}:{first or 1}"
    if TTFT + "_count" not in total:
        raise InputError(
            f"not a scrape of vLLM's /metrics: no {TTFT}_count (a vLLM server's TTFT histogram)",
            where=path,
        )
    if len(models) > 1:
        raise InputError(
            f"the scrape holds several models ({', '.join(sorted(models))}): one row is one "
            "model's traffic",
            where=where,
        )
    count = total[TTFT + "_count"]
    if not count >= 1:
        raise InputError(f"{TTFT}_count is {count:g}: no request got a first token", where=where)
    if given.statistic == "mean":
        ttft: float = total[TTFT + "_sum"] / count
    else:
        ttft = median(buckets, count, where)
    if total.get("vllm:request_prompt_tokens_count", 0) >= 1:
        prompt = total["vllm:request_prompt_tokens_sum"] / total["vllm:request_prompt_tokens_count"]
    elif "vllm:prompt_tokens_total" in total:
        prompt = total["vllm:prompt_tokens_total"] / count
    else:
        raise InputError(
            "no prompt lengths: neither vllm:request_prompt_tokens nor vllm:prompt_tokens_total",
            where=where,
        )
    queries = total.get("vllm:prefix_cache_queries_total", 0.0)
    local = total.get(
        "vllm:prefix_cache_hits_total", total.get("vllm:gpu_prefix_cache_hits_total", 0.0)
    )
    external = total.get("vllm:external_prefix_cache_hits_total", 0.0)
    if given.cached_tokens is not None:
        cached = given.cached_tokens
    elif queries > 0:
        cached = math.floor(prompt * (local + external) / queries)
    else:
        raise InputError(
            "no vllm:prefix_cache_queries_total: the scrape does not say how much was cached "
            "(give --cached-tokens N)",
            where=where,
        )
    tier = given.tier
    if external > 0 and local > 0 and min(local, external) > 0.1 * (local + external):
        raise InputError(
            f"the cached tokens came from the GPU prefix cache ({local:,.0f}) and a KV "
            f"connector ({external:,.0f}) alike: one row has one tier",
            where=where,
        )
    if external > local:
        if tier is None:
            raise InputError(
                "the cached tokens came from a KV connector (vllm:external_prefix_cache_hits): "
                "give --tier host for CPU offloading",
                where=where,
            )
    else:
        tier = "gpu"
    if given.concurrency is None and given.rate is None:
        raise InputError(
            "a scrape does not say how the clients sent the requests: give --concurrency N "
            "or --rate R",
            where=where,
        )
    return [
        make_row(
            source=path,
            where=where,
            fmt="prometheus",
            prompt_tokens=prompt,
            cached_tokens=cached,
            ttft_s=ttft,
            statistic=given.statistic,
            concurrency=given.concurrency,
            rate=given.rate,
            requests=round(count),
            tier=tier,
            ttft_name=TTFT,
        )
    ]


def median(buckets: dict[float, float], count: float, where: str) -> float:
    """The median from cumulative buckets, linear within the bucket that holds it
    (Prometheus' histogram_quantile)."""
    if not buckets:
        raise InputError(f"no {TTFT}_bucket lines for a median", where=where)
    target = count / 2
    lo_bound, lo_count = 0.0, 0.0
    for le in sorted(buckets):
        c = buckets[le]
        if c >= target:
            if math.isinf(le):
                return lo_bound  # the highest finite bound, as histogram_quantile does
            span = c - lo_count
            return lo_bound + (le - lo_bound) * ((target - lo_count) / span if span else 1.0)
        lo_bound, lo_count = le, c
    raise InputError("the buckets never reach half of the count", where=where)
