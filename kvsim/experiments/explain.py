"""Why an SLO cannot be met: the value reached, what the slowest requests wait for, and
the compute floor.

When ``kvsim capacity`` (its rate search, ``--minimize``, ``--cheapest``) finds no answer,
it explains the run that came closest with three facts:

- **the value reached**: the SLO's metric there (mean over the replications);
- **the tail's parts**: the requests at or above the metric's percentile (the slowest 1%
  for a p99; for a mean or max, the slowest 1%) and the mean seconds of each part of their
  TTFT. A request's TTFT is exactly ``frontend_s + queue_wait_s + load_s + compute_s +
  store_s + lost_s`` (the engine records it so), so the parts' means sum to the tail's mean
  TTFT: frontend (the API server, tokenizer and hashing before the engine's queue, and the
  first token's way out: engine.frontend), queue (waiting in the engine queue), restore
  (``load_s``: the prefetch wait and the restore of its cached KV), compute (its prefill
  steps, batch-mates included), store (GPU-to-host staging of its blocks before puts) and
  lost (time on engines that failed);
- **the compute floor**: the metric with every request alone on an idle engine. Per
  request, the time the engine's step model (:func:`kvsim.physics.step.scenario_lone_seconds`,
  the pure timing model the engine steps with) takes to compute its computed tokens
  (``tokens_compute``, after its ``input_tokens - tokens_compute`` cached ones) in a batch
  of one, plus its restore on an idle fabric (``restore_lookup_s + restore_read_s +
  restore_h2d_s``, without ``restore_queue_s``); then the metric's percentile (or mean, or
  max) over the requests. No queueing, no batch-mates, no shared links and no staging:
  neither more load headroom nor a bigger tier lowers a request below it (a bigger tier
  could turn computed tokens into hits, which the floor takes as the run had them).

When the floor alone breaks the SLO, the answer says so and names the prompt range
(``--prompt-range 0..HI``) whose floor would meet it, if any. The requests are the ones
the summary measures (after the warm-up, finished, in ``run.prompt_range``).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from kvsim.experiments.slo import SLO
from kvsim.physics.step import scenario_lone_seconds
from kvsim.results.metrics import percentile
from kvsim.results.records import in_prompt_range

# the parts of a TTFT, in the order printed: name -> per-request column
PARTS: dict[str, str] = {
    "frontend": "frontend_s",
    "queue": "queue_wait_s",
    "restore": "load_s",
    "compute": "compute_s",
    "store": "store_s",
    "lost": "lost_s",
}
TAIL_Q = 99.0  # the tail explained for a metric that is not a percentile
# what the slowest requests' dominant part says, when the floor alone meets the SLO
HINTS: dict[str, str] = {
    "frontend": "the frontend dominates the slowest requests (tokenizing long prompts in one "
    "API-server process: engine.frontend.servers, or send token ids)",
    "queue": "queueing dominates the slowest requests: more engines or less load would help",
    "restore": "restores dominate the slowest requests: faster tiers or links would help",
    "compute": "compute dominates the slowest requests, beyond their floor: batch-mates, "
    "recomputed tokens and preempted attempts (engine.preemption: recompute) slow them (more "
    "engines, a larger cache or KV pool)",
    "store": "staging before puts dominates the slowest requests (node.d2h_per_gpu, fewer puts)",
    "lost": "engine failures dominate the slowest requests",
}
CANDIDATES = 200  # prompt lengths tried by floor_range (evenly spaced ranks)
_PCT = re.compile(r"^ttft_(?:(cold|warm)_)?p(\d+)_s$")


def measured(results: Any) -> pd.DataFrame:
    """The requests a run's summary measures: after the warm-up, finished (not dropped)
    and with a prompt in ``run.prompt_range``."""
    df = results.requests
    df = df[~df["warmup"] & (df["decision"] != "dropped")]
    return df[in_prompt_range(df, results.scenario)]


def metric_quantile(metric: str) -> float | None:
    """The percentile a TTFT metric takes (ttft_p99_s -> 99, ttft_cold_p95_s -> 95);
    None for the mean, the max and non-TTFT metrics."""
    m = _PCT.match(metric)
    return float(m.group(2)) if m else None


def explains(metric: str) -> bool:
    """Whether the tail and floor speak to ``metric``: a TTFT statistic (not an end of
    its interval, ``_lo``/``_hi``: :func:`~kvsim.results.uncertainty.bound_keys`)."""
    return metric.startswith("ttft_") and not metric.endswith(("_lo", "_hi"))


@dataclass(frozen=True)
class Tail:
    """The slowest requests of a run (TTFT at or above its ``q``-th percentile): how many,
    the cut, their mean TTFT, each part's mean seconds (:data:`PARTS`; they sum to
    ``ttft_mean``), and their prompt lengths (``prompts``, tokens) and mean computed
    tokens."""

    q: float
    cut: float
    requests: int
    ttft_mean: float
    parts: dict[str, float]
    prompts: np.ndarray = field(repr=False)
    computed_mean: float = math.nan

    def prompt_quantiles(self) -> tuple[int, int, int]:
        """The tail's prompt lengths: 10th percentile, median and 90th percentile (what
        the slow requests typically are, without one short outlier that queued)."""
        a = np.percentile(self.prompts, (10, 50, 90)) if self.prompts.size else [0, 0, 0]
        return int(a[0]), int(a[1]), int(a[2])

    def prompt_text(self) -> str:
        """ "prompts of 78,000 tokens (median; 10-90%: 41,000-110,000)"."""
        lo, mid, hi = self.prompt_quantiles()
        if lo == hi:
            return f"prompts of {mid:,} tokens"
        return f"prompts of {mid:,} tokens (median; 10-90%: {lo:,}-{hi:,})"

    def share(self, part: str) -> float:
        """The part's share of the tail's mean TTFT (0..1; NaN for an empty tail)."""
        return self.parts[part] / self.ttft_mean if self.ttft_mean > 0 else math.nan

    @property
    def dominant(self) -> str:
        """The part that makes up most of the tail's TTFT."""
        return max(self.parts, key=lambda p: self.parts[p])


def tail_parts(df: pd.DataFrame, q: float = TAIL_Q) -> Tail:
    """:class:`Tail` of the requests ``df`` (finished ones: each has a TTFT) with TTFT at
    or above their ``q``-th percentile (linear interpolation, as the summary's)."""
    ttft = df["ttft_s"].to_numpy(dtype=float)
    if ttft.size == 0:
        nan = math.nan
        return Tail(q, nan, 0, nan, dict.fromkeys(PARTS, nan), np.empty(0, np.int64), nan)
    cut = percentile(ttft, q)
    t = df[ttft >= cut]
    return Tail(
        q=q,
        cut=cut,
        requests=len(t),
        ttft_mean=float(t["ttft_s"].mean()),
        parts={p: float(t[c].mean()) if c in t else 0.0 for p, c in PARTS.items()},
        prompts=t["input_tokens"].to_numpy(dtype=np.int64),
        computed_mean=float(t["tokens_compute"].mean()),
    )


def lone_ttft(sc: Any, df: pd.DataFrame) -> np.ndarray:
    """Per request of ``df``: its TTFT alone on an idle engine of ``sc`` (see the module
    docstring): the step model's time for its computed tokens after its cached ones, in a
    batch of one, plus the restore's lookup, read and host-to-GPU parts."""
    lone = scenario_lone_seconds(sc)
    new = df["tokens_compute"].to_numpy(dtype=np.int64)
    cached = df["input_tokens"].to_numpy(dtype=np.int64) - new
    seen: dict[tuple[int, int], float] = {}
    compute = np.empty(len(df), dtype=float)
    for i, key in enumerate(zip(new.tolist(), cached.tolist(), strict=True)):
        if key not in seen:
            seen[key] = lone(*key)
        compute[i] = seen[key]
    restore = sum(
        np.nan_to_num(df[c].to_numpy(dtype=float))
        for c in ("restore_lookup_s", "restore_read_s", "restore_h2d_s")
    )
    return compute + restore


def metric_over(metric: str, ttft: np.ndarray, warm: np.ndarray | None = None) -> float:
    """``metric`` (a TTFT statistic of the summary) computed over per-request TTFTs
    ``ttft`` (``warm``: which are warm, for the cold/warm metrics); NaN for others."""
    m = _PCT.match(metric)
    if m:
        which, q = m.group(1), float(m.group(2))
        if which is not None:
            w = np.zeros(ttft.size, bool) if warm is None else warm.astype(bool)
            ttft = ttft[w] if which == "warm" else ttft[~w]
        return percentile(ttft, q)
    if metric == "ttft_mean_s":
        return float(ttft.mean()) if ttft.size else math.nan
    if metric == "ttft_max_s":
        return float(ttft.max()) if ttft.size else math.nan
    return math.nan


def compute_floor(results: Any, metric: str) -> float:
    """The SLO metric with every measured request alone on an idle engine (NaN for a
    metric that is not a TTFT statistic)."""
    if not explains(metric):
        return math.nan
    df = measured(results)
    return metric_over(metric, lone_ttft(results.scenario, df), df["warm"].to_numpy())


def floor_range(slo: SLO, prompts: np.ndarray, lone: np.ndarray) -> int | None:
    """The largest prompt length HI (rounded down to two significant digits)
    such that the floor over the prompts of at most HI tokens meets ``slo``; None when no
    prompt length does (or every prompt already does)."""
    order = np.argsort(prompts, kind="stable")
    p, t = prompts[order], lone[order]
    best = None
    levels = np.unique(p)
    if levels.size > CANDIDATES:  # prompt lengths at evenly spaced ranks
        levels = np.unique(p[np.linspace(0, p.size - 1, CANDIDATES).astype(int)])
    for hi in levels:
        keep = p <= hi
        if keep.sum() and slo.met({slo.metric: metric_over(slo.metric, t[keep])}):
            best = int(hi)
    if best is None or best >= int(p.max()):
        return None
    step = 10 ** max(len(str(best)) - 2, 0)  # two significant digits, rounded down
    return best // step * step


@dataclass
class RunFacts:
    """What one run says about an SLO: its value, tail, floor, and the per-request
    prompt lengths and lone TTFTs (for :func:`floor_range`)."""

    value: float
    tail: Tail | None
    floor: float
    prompts: np.ndarray = field(repr=False)
    lone: np.ndarray = field(repr=False)
    seed: int = -1


def run_facts(results: Any, slo: SLO) -> RunFacts:
    """:class:`RunFacts` of one run (``results``: a :class:`kvsim.results.records.Results`)."""
    value = results.summary.get(slo.metric)
    value = math.nan if value is None else float(value)
    if not explains(slo.metric):
        empty = np.empty(0)
        return RunFacts(value, None, math.nan, empty, empty, results.scenario.seed)
    df = measured(results)
    q = metric_quantile(slo.metric) or TAIL_Q
    lone = lone_ttft(results.scenario, df)
    floor = metric_over(slo.metric, lone, df["warm"].to_numpy())
    prompts = df["input_tokens"].to_numpy()
    return RunFacts(value, tail_parts(df, q), floor, prompts, lone, results.scenario.seed)


def _mean(xs: list[float]) -> float:
    good = [x for x in xs if math.isfinite(x)]
    return sum(good) / len(good) if good else math.nan


def merge_tails(tails: list[Tail]) -> Tail:
    """The replications' tails as one: parts and TTFT weighted by each tail's requests
    (the pooled tails' means), the cut averaged, the prompts pooled."""
    n = sum(t.requests for t in tails)
    if n == 0:
        return tails[0]

    def w(get: Any) -> float:
        return sum(get(t) * t.requests for t in tails if t.requests) / n

    return Tail(
        q=tails[0].q,
        cut=_mean([t.cut for t in tails]),
        requests=n,
        ttft_mean=w(lambda t: t.ttft_mean),
        parts={p: w(lambda t, p=p: t.parts[p]) for p in PARTS},
        prompts=np.concatenate([t.prompts for t in tails]),
        computed_mean=w(lambda t: t.computed_mean),
    )


def _s(x: float) -> str:
    """Seconds as people read them: 4.1 s, 230 ms."""
    if not math.isfinite(x):
        return "n/a"
    return f"{x:.3g} s" if abs(x) >= 1 or x == 0 else f"{x * 1e3:.3g} ms"


def _value(metric: str, x: float) -> str:
    return _s(x) if metric.endswith("_s") else f"{x:.4g}"


@dataclass
class Explanation:
    """Why an SLO is not met at the closest point a command reached (``where``: "at
    1/1024 of the scenario's load", "with tiers.host.capacity = 8 TB", a layout): the
    value, the tail's parts and the compute floor, over ``facts`` (one per replication)."""

    slo: SLO
    where: str
    facts: list[RunFacts]
    prompt_range: str | None = None

    @property
    def value(self) -> float:
        return _mean([f.value for f in self.facts])

    @property
    def floor(self) -> float:
        return _mean([f.floor for f in self.facts])

    @property
    def tail(self) -> Tail | None:
        tails = [f.tail for f in self.facts if f.tail is not None]
        return merge_tails(tails) if tails else None

    @property
    def floor_fails(self) -> bool:
        """The compute floor alone breaks the SLO: no tier size or load can meet it."""
        return math.isfinite(self.floor) and not self.slo.met({self.slo.metric: self.floor})

    def suggested_range(self) -> int | None:
        """The largest HI of a ``--prompt-range 0..HI`` whose floor meets the SLO (over
        the replications' requests pooled): a bound, not a promise (the floor leaves out
        queueing and batch-mates)."""
        if not self.floor_fails or not self.facts:
            return None
        prompts = np.concatenate([f.prompts for f in self.facts])
        lone = np.concatenate([f.lone for f in self.facts])
        if not prompts.size:
            return None
        return floor_range(self.slo, prompts, lone)

    def lines(self) -> list[str]:
        """The explanation as the commands print it (indented, after their own line)."""
        m, n = self.slo.metric, len(self.facts)
        seeds = ", ".join(str(f.seed) for f in self.facts)
        reps = f"mean of {n} replications, seeds {seeds}" if n > 1 else f"seed {seeds}"
        out = [f"  reached: {m} = {_value(m, self.value)} {self.where}; {reps}"]
        tail = self.tail
        if tail is None:
            out.append(f"  (no TTFT breakdown: the SLO is on {m}, not a TTFT)")
            return out
        if tail.requests:
            slowest = f"{100 - tail.q:g}%"
            parts = ", ".join(
                f"{p} {_s(v)} ({self.share_text(tail, p)})"
                for p, v in sorted(tail.parts.items(), key=lambda kv: -kv[1])
                if v > 0 or p in ("queue", "restore", "compute", "store")
            )
            out.append(
                f"  the slowest {slowest} ({tail.requests} requests, TTFT >= {_s(tail.cut)}, "
                f"mean {_s(tail.ttft_mean)}; {tail.prompt_text()}, "
                f"{tail.computed_mean:,.0f} computed on average): "
                f"{parts}; {tail.dominant} dominates"
            )
        out.append(
            f"  compute floor: {m} = {_value(m, self.floor)} with every request alone on an "
            "idle engine (its computed tokens in a batch of one, its restore on an idle fabric)"
        )
        if not self.floor_fails and math.isfinite(self.floor) and tail.requests:
            out.append(f"  the floor meets the SLO: {HINTS[tail.dominant]}")
        if self.floor_fails:
            hi = self.suggested_range()
            tip = (
                f"; the floor meets it only for prompts of up to {hi:,} tokens: scope the "
                f"SLO with --prompt-range 0..HI, HI at most {_tokens(hi)} (the floor is a "
                "bound: a lower HI leaves room for queueing)"
                if hi
                else "; no prompt range's floor meets it either: relax the SLO"
            )
            longest = (
                f"; the slowest {100 - tail.q:g}% are {tail.prompt_text()}, computing "
                f"for {_s(tail.parts['compute'])} on average"
                if tail.requests
                else ""
            )
            out.append(
                f"  no tier size or load helps: {m} of the prompts alone on an idle engine is "
                f"{_value(m, self.floor)}{longest}{tip}"
            )
        return out

    @staticmethod
    def share_text(tail: Tail, part: str) -> str:
        s = tail.share(part)
        return f"{s:.0%}" if math.isfinite(s) else "n/a"

    def as_json(self) -> dict[str, Any]:
        """The explanation for ``--json`` (seconds; NaN as null)."""
        tail = self.tail

        def num(x: float) -> float | None:
            return x if math.isfinite(x) else None

        out: dict[str, Any] = {
            "slo": str(self.slo),
            "prompt_range": self.prompt_range,
            "where": self.where.strip(),
            "replications": len(self.facts),
            "seeds": [f.seed for f in self.facts],
            "value": num(self.value),
            "compute_floor": num(self.floor),
            "floor_meets_slo": None if not math.isfinite(self.floor) else not self.floor_fails,
        }
        if tail is not None and tail.requests:
            out["tail"] = {
                "quantile": tail.q,
                "requests": tail.requests,
                "ttft_cut_s": num(tail.cut),
                "ttft_mean_s": num(tail.ttft_mean),
                **{f"{p}_mean_s": num(v) for p, v in tail.parts.items()},
                **{f"{p}_share": num(tail.share(p)) for p in tail.parts},
                "dominant": tail.dominant,
                "prompt_tokens_p10_p50_p90": list(tail.prompt_quantiles()),
                "prompt_tokens_min_max": [int(tail.prompts.min()), int(tail.prompts.max())],
                "computed_tokens_mean": num(tail.computed_mean),
            }
        hi = self.suggested_range()
        out["floor_meets_prompts_up_to"] = hi  # tokens (null: none, or every prompt)
        return out


def _tokens(n: int) -> str:
    """A token count as a --prompt-range bound: 32000 -> 32k, 6100 -> 6.1k, 950 -> 950."""
    if n >= 1000 and n % 100 == 0:
        return f"{n / 1000:g}k"
    return str(n)


def explain(slo: SLO, where: str, runs: list[Any]) -> Explanation:
    """An :class:`Explanation` from finished runs (Results), one per replication."""
    scope = runs[0].scenario.run.prompt_range if runs else None
    return Explanation(slo, where, [run_facts(r, slo) for r in runs], scope)
