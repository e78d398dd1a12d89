"""Seeded synthetic workloads, emitted as the same Request records the trace readers give.

The model: sessions arrive by a Poisson, constant-rate or bursty (gamma) process; a
session has one turn, or a drawn number of turns separated by exponential think times.
A first turn's prompt is [system prompt] + [document prefix] + fresh text; a later turn's
prompt is the previous prompt + the previous answer + fresh text, so its prefix grows turn
by turn. Block ids follow the prefix rule: a block gets a shared id only when all tokens
up to its end are shared (system prompt, document prefix, or the session's earlier
prompt); any block holding fresh text gets a new id.

"Fixed-length streams with a chosen reuse fraction" are ``prompt_tokens: fixed`` with
``documents: {count, fraction}``. Randomness comes from named streams (arrivals, sessions,
lengths, prefixes), drawn before the clock starts; ids are assigned as requests are
emitted in arrival order, so a million requests need not sit in memory at once.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import numpy as np

from kvsim.config.schema import (
    BurstyArrivals,
    ChoiceDist,
    ConstantArrivals,
    FixedDist,
    GeometricDist,
    IntDist,
    LogNormalDist,
    PoissonArrivals,
    SyntheticWorkload,
    UniformDist,
)
from kvsim.rng import stream
from kvsim.workload.request import Request


def sample(dist: IntDist, rng: np.random.Generator, n: int) -> np.ndarray:
    """``n`` positive integers from an integer distribution record."""
    if isinstance(dist, FixedDist):
        return np.full(n, dist.value, dtype=np.int64)
    if isinstance(dist, UniformDist):
        return rng.integers(dist.low, dist.high + 1, size=n)
    if isinstance(dist, LogNormalDist):
        x = np.rint(dist.median * np.exp(dist.sigma * rng.standard_normal(n)))
        return np.clip(x, dist.min, dist.max).astype(np.int64)
    if isinstance(dist, GeometricDist):
        return rng.geometric(1.0 / dist.mean, size=n).astype(np.int64)
    if isinstance(dist, ChoiceDist):
        w = None
        if dist.weights is not None:
            w = np.asarray(dist.weights, dtype=float)
            w = w / w.sum()
        return rng.choice(np.asarray(dist.values, dtype=np.int64), size=n, p=w)
    raise TypeError(f"unknown distribution {dist!r}")  # pragma: no cover


def interarrivals(
    arrivals: PoissonArrivals | ConstantArrivals | BurstyArrivals, rng: np.random.Generator, n: int
) -> np.ndarray:
    """``n`` gaps (s) between successive arrivals of the process."""
    mean = 1.0 / arrivals.rate
    if isinstance(arrivals, PoissonArrivals):
        return rng.exponential(mean, size=n)
    if isinstance(arrivals, ConstantArrivals):
        return np.full(n, mean)
    shape = 1.0 / arrivals.cv**2
    return rng.gamma(shape, mean / shape, size=n)


def _popularity(count: int, kind: str, s: float) -> np.ndarray:
    if kind == "uniform":
        return np.full(count, 1.0 / count)
    w = 1.0 / np.arange(1, count + 1) ** s
    return w / w.sum()


def generate(cfg: SyntheticWorkload, seed: int) -> Iterator[Request]:
    """Requests of a synthetic workload, in arrival order."""
    n = cfg.requests
    B = cfg.block_tokens
    r_sessions = stream(seed, "sessions")
    # turns per session, until there are at least n turns
    if cfg.sessions is not None:
        chunks, total = [], 0
        while total < n:
            t = sample(cfg.sessions.turns, r_sessions, max(1024, n // 4))
            chunks.append(t)
            total += int(t.sum())
        turns = np.concatenate(chunks)
        turns = turns[: int(np.searchsorted(np.cumsum(turns), n)) + 1]
    else:
        turns = np.ones(n, dtype=np.int64)
    n_sessions = len(turns)
    starts = np.cumsum(interarrivals(cfg.arrivals, stream(seed, "arrivals"), n_sessions))
    session_of = np.repeat(np.arange(n_sessions), turns)
    turn_of = np.arange(len(session_of)) - np.repeat(np.cumsum(turns) - turns, turns)
    times = starts[session_of]
    if cfg.sessions is not None and cfg.sessions.think_time > 0:
        gaps = r_sessions.exponential(cfg.sessions.think_time, size=len(session_of))
        gaps[turn_of == 0] = 0.0
        first = np.cumsum(turns) - turns
        cum = np.cumsum(gaps)
        times = times + cum - np.repeat(cum[first], turns)
    lengths = stream(seed, "lengths")
    new_tokens = sample(cfg.prompt_tokens, lengths, len(session_of))
    out_tokens = sample(cfg.output_tokens, lengths, len(session_of))
    r_prefix = stream(seed, "prefixes")
    sys_of = np.full(n_sessions, -1, dtype=np.int64)
    if cfg.system_prompts is not None:
        sp = cfg.system_prompts
        use = r_prefix.random(n_sessions) < sp.share
        sys_of[use] = r_prefix.integers(0, sp.count, size=int(use.sum()))
    doc_of = np.full(n_sessions, -1, dtype=np.int64)
    if cfg.documents is not None:
        d = cfg.documents
        doc_of = r_prefix.choice(
            d.count, size=n_sessions, p=_popularity(d.count, d.popularity, d.zipf_s)
        )
    order = np.lexsort((turn_of, session_of, times))[:n]
    sys_tokens = cfg.system_prompts.tokens if cfg.system_prompts else 0
    doc_fraction = cfg.documents.fraction if cfg.documents else 0.0
    fresh = itertools.count()
    shared: dict[tuple[int, int, int], int] = {}
    history: dict[int, tuple[int, int, list[int]]] = {}  # session -> (prompt, answer, ids)
    remaining = np.bincount(session_of[order], minlength=n_sessions)

    for rid, idx in enumerate(order.tolist()):
        s = int(session_of[idx])
        new = int(new_tokens[idx])
        if s in history:
            prompt, answer, ids = history[s]
            keep = prompt // B
            length = prompt + answer + new
            block_ids = ids[:keep]
            block_ids.extend(next(fresh) for _ in range(-(-length // B) - keep))
        else:
            sys_id, doc_id = int(sys_of[s]), int(doc_of[s])
            doc = int(doc_fraction * new) if doc_id >= 0 else 0
            head = sys_tokens if sys_id >= 0 else 0
            length = head + new
            block_ids = []
            for i in range(-(-length // B)):
                end = (i + 1) * B
                if end <= head:
                    key = (sys_id, -1, i)
                elif end <= head + doc:
                    key = (sys_id, doc_id, i)
                else:
                    block_ids.append(next(fresh))
                    continue
                bid = shared.get(key)
                if bid is None:
                    bid = shared[key] = next(fresh)
                block_ids.append(bid)
        answer_tokens = int(out_tokens[idx])
        remaining[s] -= 1
        if remaining[s] > 0:
            history[s] = (length, answer_tokens, block_ids)
        else:
            history.pop(s, None)
        yield Request(
            rid,
            float(times[idx]),
            length,
            answer_tokens,
            tuple(block_ids),
            s if cfg.sessions is not None else -1,
        )
