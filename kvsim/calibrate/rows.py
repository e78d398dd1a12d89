"""A measurement row: one benchmark run's shape and its measured TTFT statistic.

What this module owns: :class:`Row` (what ``kvsim calibrate`` fits to: the prompt, the
cached prefix and where it sits, how the clients sent the requests, how many, and the
measured mean or median TTFT), :class:`Given` (what the command line supplies where a
format does not say it: ``--cached-tokens``, ``--concurrency``, ``--rate``, ``--tier``,
``--statistic``) and :func:`make_row`, which checks a row where it is read and refuses a
bad one with the file and row named (exit 2).

A row's clients are one of: a closed loop of ``concurrency`` clients (``vllm bench serve
--max-concurrency N``), an open loop at ``rate`` requests/s (Poisson; with a concurrency as
well, both, as bench_serving does), or every request sent at once (neither). ``tier`` is
where the cached prefix is when the requests arrive: ``gpu`` (the engine's prefix cache,
vLLM's default) or ``host`` (CPU offloading with the GPU prefix cache off, as vLLM's
offloading benchmarks measure CPU hits); ``none`` for a row with no cached tokens.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from kvsim.errors import InputError, shown

#: where a row's cached prefix is when its requests arrive
TIERS = ("gpu", "host")
#: the TTFT statistics a row may give
STATISTICS = ("mean", "median")
#: prompts longer than this are refused (a typo, not a benchmark)
MAX_PROMPT = 1 << 24


@dataclass(frozen=True)
class Given:
    """What the command line supplies for rows whose file does not say it."""

    cached_tokens: int | None = None
    concurrency: int | None = None
    rate: float | None = None
    tier: str | None = None
    statistic: str = "mean"


@dataclass(frozen=True)
class Row:
    """One measured benchmark run (see the module docstring). ``where`` names the file
    and row (``FILE:LINE``); ``digest`` is the file's SHA-256."""

    source: str
    where: str
    prompt_tokens: int
    cached_tokens: int
    ttft_s: float
    statistic: str
    concurrency: int | None
    rate: float | None
    requests: int
    tier: str
    digest: str
    fmt: str

    @property
    def label(self) -> str:
        """A short name for tables and plots: the file's name and the row."""
        return self.where.rsplit("/", 1)[-1]

    @property
    def lone(self) -> bool:
        """One request at a time on an idle engine (concurrency 1, no rate): every
        request sees the same engine, so one simulated request stands for them all."""
        return self.concurrency == 1 and self.rate is None

    def clients(self) -> str:
        """How the clients sent the requests, in words."""
        parts = []
        if self.concurrency is not None:
            parts.append(f"concurrency {self.concurrency}")
        if self.rate is not None:
            parts.append(f"{self.rate:g}/s")
        return ", ".join(parts) or "all at once"

    def with_digest(self, digest: str) -> Row:
        return replace(self, digest=digest)


def _int(value: Any, name: str, where: str, low: int, high: int = MAX_PROMPT) -> int:
    if isinstance(value, bool):
        raise InputError(f"{name}: expected a whole number, got {shown(value)}", where=where)
    try:
        f = float(value)
    except (TypeError, ValueError):
        raise InputError(
            f"{name}: expected a whole number, got {shown(value)}", where=where
        ) from None
    if not math.isfinite(f) or f != round(f) or not low <= f <= high:
        raise InputError(
            f"{name}: expected a whole number in [{low:,}, {high:,}], got {shown(value)}",
            where=where,
        )
    return int(f)


def number(value: Any, name: str, where: str) -> float:
    """A finite number from a file (a string such as "2048" too); InputError naming it."""
    if isinstance(value, bool) or value is None:
        raise InputError(f"{name}: expected a number, got {shown(value)}", where=where)
    try:
        f = float(value)
    except (TypeError, ValueError):
        raise InputError(f"{name}: expected a number, got {shown(value)}", where=where) from None
    if math.isnan(f):
        raise InputError(f"{name}: expected a number, got {shown(value)}", where=where)
    return f


def make_row(
    *,
    source: str,
    where: str,
    fmt: str,
    prompt_tokens: Any,
    cached_tokens: Any,
    ttft_s: Any,
    statistic: str,
    concurrency: Any,
    rate: Any,
    requests: Any,
    tier: Any,
    ttft_name: str = "ttft",
    ttft_raw: Any = None,
) -> Row:
    """A checked :class:`Row` (``rate`` None or inf: no rate; ``concurrency`` None: no
    cap; ``ttft_raw``: the TTFT as the file wrote it, for messages); InputError naming
    ``where`` and the field for anything kvsim cannot run."""
    p = _int(round(number(prompt_tokens, "prompt tokens", where)), "prompt tokens", where, 1)
    c = _int(cached_tokens, "cached tokens", where, 0)
    if c >= p:
        raise InputError(
            f"cached tokens ({c:,}) must be fewer than the prompt's ({p:,}): the engine "
            "computes at least the prompt's last token",
            where=where,
        )
    raw = ttft_s if ttft_raw is None else ttft_raw
    t = number(ttft_s, ttft_name, where)
    if not 0 < t < math.inf:
        raise InputError(f"{ttft_name}: a TTFT must be > 0, got {shown(raw)}", where=where)
    if statistic not in STATISTICS:
        raise InputError(
            f"statistic: expected one of {', '.join(STATISTICS)}, got {shown(statistic)}",
            where=where,
        )
    n = None if concurrency is None else _int(concurrency, "concurrency", where, 1, 1 << 20)
    r: float | None = None
    if rate is not None:
        r = number(rate, "request rate", where)
        if not r > 0:
            raise InputError(f"request rate: must be > 0, got {shown(rate)}", where=where)
        if math.isinf(r):
            r = None
    count = _int(requests, "requests", where, 1, 1 << 30)
    if c == 0:
        tr = "none"
    else:
        tr = "gpu" if tier is None or tier == "" else str(tier)
        if tr not in TIERS:
            raise InputError(
                f"tier: where the cached prefix is must be one of {', '.join(TIERS)}, got "
                f"{shown(tier)}",
                where=where,
            )
    return Row(source, where, p, c, t, statistic, n, r, count, tr, "", fmt)
