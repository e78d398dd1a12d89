"""Seeded synthetic workloads, emitted as the same Request records the trace readers give.

The model: sessions arrive by a Poisson, constant-rate or bursty (gamma) process, or are
all due at t = 0 (``closed``: the simulation sends them as ``workload.concurrency``
allows, kvsim.sim.simulation); a session has one turn, or a drawn number of turns
separated by exponential think times.
A first turn's prompt is [system prompt] + [document prefix] + fresh text; a later turn's
prompt is the previous prompt + the previous answer + fresh text, so its prefix grows turn
by turn. Block ids follow the prefix rule: a block gets a shared id only when all tokens
up to its end are shared (system prompt, document prefix, or the session's earlier
prompt); any block holding fresh text gets a new id.

"Fixed-length streams with a chosen reuse fraction" are ``prompt_tokens: fixed`` with
``documents: {count, fraction}``. Randomness comes from named streams (arrivals, sessions,
prompt and output lengths, system prompts, documents, tenants), drawn before the clock
starts;
ids are assigned as requests are
emitted in arrival order, so a million requests need not sit in memory at once.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from kvsim.config.schema import (
    BurstyArrivals,
    ChoiceDist,
    ClosedArrivals,
    ConstantArrivals,
    FixedDist,
    GeometricDist,
    IntDist,
    LogNormalDist,
    PoissonArrivals,
    SyntheticWorkload,
    UniformDist,
)
from kvsim.errors import InputError
from kvsim.rng import stream
from kvsim.workload.request import MAX_ARRIVAL_S, MAX_BLOCKS, Request


def sample(dist: IntDist, rng: np.random.Generator, n: int) -> np.ndarray:
    """``n`` positive integers from an integer distribution record."""
    if isinstance(dist, FixedDist):
        return np.full(n, dist.value, dtype=np.int64)
    if isinstance(dist, UniformDist):
        return rng.integers(dist.low, dist.high + 1, size=n)
    if isinstance(dist, LogNormalDist):
        with np.errstate(over="ignore"):  # a huge sigma overflows to inf: clipped to max
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
    arrivals: PoissonArrivals | ConstantArrivals | BurstyArrivals | ClosedArrivals,
    rng: np.random.Generator,
    n: int,
) -> np.ndarray:
    """``n`` gaps (s) between successive arrivals of the process (``closed``: none, every
    request is due at once; ``workload.concurrency`` paces them in the simulation)."""
    if isinstance(arrivals, ClosedArrivals):
        return np.zeros(n)
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


def dist_max(dist: IntDist) -> int:
    """The largest value a distribution can draw (geometric: its 99.99th percentile)."""
    if isinstance(dist, FixedDist):
        return dist.value
    if isinstance(dist, UniformDist):
        return dist.high
    if isinstance(dist, LogNormalDist):
        return dist.max
    if isinstance(dist, ChoiceDist):
        return max(dist.values)
    return int(np.ceil(np.log(1e-4) / np.log1p(-1.0 / dist.mean))) if dist.mean > 1 else 1


class SharedIds:
    """Block ids of shared prefixes, fixed by position (so they are known before any
    request is generated): system prompt ``sys`` (or -1), document ``doc`` (or -1), block
    ``i``. Fresh (unshared) ids start at :attr:`first_fresh`."""

    def __init__(self, cfg: SyntheticWorkload) -> None:
        self.block = cfg.block_tokens
        self.n_sys = cfg.system_prompts.count if cfg.system_prompts else 0
        self.sys_tokens = int(cfg.system_prompts.tokens) if cfg.system_prompts else 0
        self.n_doc = cfg.documents.count if cfg.documents else 0
        frac = cfg.documents.fraction if cfg.documents else 0.0
        self.max_doc_tokens = int(frac * dist_max(cfg.prompt_tokens))
        self.stride = (self.sys_tokens + self.max_doc_tokens) // self.block + 1
        self.first_fresh = (self.n_sys + 1) * (self.n_doc + 1) * self.stride

    def id(self, sys: int, doc: int, i: int) -> int:
        return ((sys + 1) * (self.n_doc + 1) + doc + 1) * self.stride + i

    def prefix(self, sys: int, doc: int, doc_tokens: int) -> list[int]:
        """Ids of the blocks lying wholly inside [system prompt][document prefix]."""
        head = self.sys_tokens if sys >= 0 else 0
        out = []
        for i in range((head + doc_tokens) // self.block):
            end = (i + 1) * self.block
            out.append(self.id(sys, -1, i) if end <= head else self.id(sys, doc, i))
        return out

    def prestored(self) -> list[int]:
        """Every block of every document at its longest (with each system prompt, and
        without one), plus every system prompt's own blocks."""
        ids: set[int] = set()
        for sys in range(-1, self.n_sys):
            ids.update(self.prefix(sys, -1, 0))
            for doc in range(self.n_doc):
                ids.update(self.prefix(sys, doc, self.max_doc_tokens))
        return sorted(ids)


def prestored_blocks(cfg: SyntheticWorkload) -> list[int]:
    """Blocks the remote store holds before the run starts (``workload.prestored``)."""
    return SharedIds(cfg).prestored() if cfg.prestored else []


def _schedule(cfg: SyntheticWorkload, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Turns per session and the arrival time of every turn (session-major order).

    Sessions keep arriving until the next one would start after the ``requests``-th
    earliest turn, so the first ``requests`` turns by time form a steady stream (not a
    burst of session starts followed by a thin tail of late turns)."""
    n = cfg.requests
    r_sessions = stream(seed, "sessions")
    r_arrivals = stream(seed, "arrivals")
    if cfg.sessions is None:
        return np.ones(n, dtype=np.int64), np.cumsum(interarrivals(cfg.arrivals, r_arrivals, n))
    if isinstance(cfg.arrivals, ClosedArrivals):  # (kvsim.config.checks refuses it first)
        raise InputError("arrivals process closed has no session arrivals", where="workload")
    chunk = max(1024, n // 4)
    room = 4 * n + 1_000_000  # turns drawn per chunk at most (long sessions: fewer of them)
    turns_parts, time_parts = [], []
    clock, total = 0.0, 0
    while True:
        turns = np.minimum(sample(cfg.sessions.turns, r_sessions, chunk), n)
        if turns.sum() > room:
            turns = turns[: max(1, int(np.searchsorted(np.cumsum(turns), room)))]
        starts = clock + np.cumsum(interarrivals(cfg.arrivals, r_arrivals, len(turns)))
        clock = float(starts[-1])
        first = np.repeat(np.cumsum(turns) - turns, turns)  # index of each session's turn 0
        gaps = r_sessions.exponential(cfg.sessions.think_time, size=int(turns.sum()))
        gaps[first == np.arange(len(first))] = 0.0
        cum = np.cumsum(gaps)
        time_parts.append(np.repeat(starts, turns) + cum - cum[first])
        turns_parts.append(turns)
        total += int(turns.sum())
        if total >= n:
            nth = np.partition(np.concatenate(time_parts), n - 1)[n - 1]
            if clock > nth:
                break
        if not clock <= MAX_ARRIVAL_S:  # also inf and NaN, where this loop would never end
            raise _too_late(clock)
    return np.concatenate(turns_parts), np.concatenate(time_parts)


def _too_late(t: float) -> InputError:
    return InputError(
        f"requests would arrive as late as {t:g} s; kvsim keeps arrival times below "
        f"{MAX_ARRIVAL_S:g} s (136 years): raise the rate (or shorten sessions.think_time)",
        where="workload.arrivals",
    )


def generate(cfg: SyntheticWorkload, seed: int) -> Iterator[Request]:
    """Requests of a synthetic workload, in arrival order."""
    n = cfg.requests
    B = cfg.block_tokens
    turns, times = _schedule(cfg, seed)
    n_sessions = len(turns)
    session_of = np.repeat(np.arange(n_sessions), turns)
    turn_of = np.arange(len(session_of)) - np.repeat(np.cumsum(turns) - turns, turns)
    # one stream per quantity, drawn in session order: a session's draws do not depend on
    # how many sessions the schedule needed (which the arrival rate decides)
    new_tokens = sample(cfg.prompt_tokens, stream(seed, "prompt_tokens"), len(session_of))
    out_tokens = sample(cfg.output_tokens, stream(seed, "output_tokens"), len(session_of))
    sys_of = np.full(n_sessions, -1, dtype=np.int64)
    if cfg.system_prompts is not None:
        sp = cfg.system_prompts
        u = stream(seed, "system_prompts").random((n_sessions, 2))
        picked = np.minimum((u[:, 1] * sp.count).astype(np.int64), sp.count - 1)
        sys_of = np.where(u[:, 0] < sp.share, picked, -1)
    doc_of = np.full(n_sessions, -1, dtype=np.int64)
    if cfg.documents is not None:
        d = cfg.documents
        u = stream(seed, "documents").random((n_sessions, 2))
        cdf = np.cumsum(_popularity(d.count, d.popularity, d.zipf_s))
        picked = np.minimum(np.searchsorted(cdf, u[:, 1], side="right"), d.count - 1)
        doc_of = np.where(u[:, 0] < d.share, picked, -1)
    tenant_of = np.zeros(n_sessions, dtype=np.int64)
    if cfg.tenants is not None and cfg.tenants.count > 1:
        t = cfg.tenants
        w = np.ones(t.count) if t.weights is None else np.asarray(t.weights, dtype=float)
        tenant_of = stream(seed, "tenants").choice(t.count, size=n_sessions, p=w / w.sum())
    order = np.lexsort((turn_of, session_of, times))[:n]
    latest = float(times[order[-1]]) if len(order) else 0.0
    if not latest <= MAX_ARRIVAL_S:
        raise _too_late(latest)
    doc_fraction = cfg.documents.fraction if cfg.documents else 0.0
    shared = SharedIds(cfg)
    fresh = shared.first_fresh
    prefixes: dict[tuple[int, int, int], list[int]] = {}
    history: dict[int, tuple[int, int, list[int]]] = {}  # session -> (prompt, answer, ids)
    remaining = np.bincount(session_of[order], minlength=n_sessions).tolist()
    sys_blocks = shared.sys_tokens // B  # a system prompt's whole blocks: its public prefix
    multi = cfg.sessions is not None

    rid = 0
    max_tokens = MAX_BLOCKS * B
    for lo in range(0, len(order), _CHUNK):
        # plain lists, a chunk at a time: indexing numpy arrays one element at a time is
        # slow, and lists of every request at once would take ~4x the arrays' memory
        idx = order[lo : lo + _CHUNK]
        sess = session_of[idx]
        session_l, time_l = sess.tolist(), times[idx].tolist()
        new_l, out_l = new_tokens[idx].tolist(), out_tokens[idx].tolist()
        turn_l = turn_of[idx].tolist()
        sys_l, doc_l, tenant_l = (
            sys_of[sess].tolist(),
            doc_of[sess].tolist(),
            tenant_of[sess].tolist(),
        )
        for k in range(len(session_l)):
            s = session_l[k]
            new = new_l[k]
            sys_id = sys_l[k]
            if s in history:
                prompt, answer, ids = history[s]
                length = prompt + answer + new
                block_ids = ids[: prompt // B]
            else:
                doc_id = doc_l[k]
                doc = min(int(doc_fraction * new), shared.max_doc_tokens) if doc_id >= 0 else 0
                length = (shared.sys_tokens if sys_id >= 0 else 0) + new
                key = (sys_id, doc_id, doc)
                head = prefixes.get(key)
                if head is None:
                    head = prefixes[key] = shared.prefix(sys_id, doc_id, doc)
                block_ids = list(head)
            if length > max_tokens:  # a session's prompts grow turn by turn
                raise InputError(
                    f"generated request {rid} (turn {turn_l[k] + 1} of a session) has "
                    f"{length} tokens: {-(-length // B)} blocks of {B}; kvsim handles up to "
                    f"{MAX_BLOCKS} blocks per prompt (lower prompt_tokens or sessions.turns, "
                    "or raise block_tokens)",
                    where="workload",
                )
            need = -(-length // B) - len(block_ids)
            block_ids.extend(range(fresh, fresh + need))
            fresh += need
            answer_tokens = out_l[k]
            remaining[s] -= 1
            if remaining[s] > 0:
                history[s] = (length, answer_tokens, block_ids)
            else:
                history.pop(s, None)
            yield Request(
                rid,
                time_l[k],
                length,
                answer_tokens,
                tuple(block_ids),
                s if multi else -1,
                tenant_l[k],
                sys_blocks if sys_id >= 0 else 0,
                remaining[s] == 0,
            )
            rid += 1


_CHUNK = 1 << 16  # requests whose fields are unpacked into lists at a time
