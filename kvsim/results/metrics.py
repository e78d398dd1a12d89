"""Metric names and definitions in one place, and the pure functions behind them.

Measured requests are the finished ones that did not arrive during the warm-up. The
measurement window runs from max(warm-up, first arrival) to the last request's first token
(background puts may go on after it). Percentiles are linear-interpolated (numpy's
default).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

SOURCES = ("gpu", "host", "nvme", "remote", "peer", "compute")


def sources(columns: Iterable[str]) -> list[str]:
    """The token sources of a per-request table, in its column order: each tier's
    (``tokens_<tier>``: the built-in ones, :data:`SOURCES`, and a user's tier kind's) and
    ``compute``."""
    return [c[len("tokens_") :] for c in columns if c.startswith("tokens_")]


QUANTILES = (50, 90, 95, 99)

# every key of Results.summary; the numeric scalars among them can be SLO metrics
METRICS: dict[str, str] = {
    "scenario": "scenario name",
    "seed": "seed of the run",
    "kvsim_version": "kvsim version that produced the run",
    "profile": "hardware/model profile",
    "load_policy": "sync | async | recompute | auto",
    "engines": "prefill engines",
    "requests": "measured requests",
    "requests_warmup": "requests that arrived during the warm-up (simulated, not measured)",
    "requests_unfinished": "requests still in the system at run.max_time",
    "requests_held": "with workload.concurrency only: requests due by the end of the run "
    "(run.max_time) that were never sent, waiting for one of the requests in flight to finish",
    "duration_s": "first arrival to the last request's first token (engine.mode colocated: its "
    "last token)",
    "warmup_s": "seconds of warm-up left out: run.warmup, or with auto the transient "
    "MSER-5 found (on TTFT and hit fraction in arrival order)",
    "ttft_mean_s": "mean time to first token (prefill end - arrival)",
    **{f"ttft_p{q}_s": f"{q}th percentile of TTFT" for q in QUANTILES},
    **{
        f"ttft_p{q}_s_{end}": f"{word} end of the 95% interval of ttft_p{q}_s (null under "
        "20 requests): a stationary block bootstrap of the measured requests in arrival "
        "order (so a trace replay has one too)"
        for q in (50, 99)
        for end, word in (("lo", "low"), ("hi", "high"))
    },
    "ttft_max_s": "largest TTFT",
    "requests_cold": "measured requests that were cold: the first of their session (the "
    "first arrival with that session id) or, without a session, the first whose first "
    "block had not been seen before in arrival order",
    "requests_warm": "measured requests that were warm (not cold): requests_cold + "
    "requests_warm = requests",
    "ttft_cold_p50_s": "median TTFT of the cold requests",
    "ttft_cold_p95_s": "95th percentile of TTFT of the cold requests",
    "ttft_warm_p50_s": "median TTFT of the warm requests",
    "ttft_warm_p95_s": "95th percentile of TTFT of the warm requests",
    "prompt_range": "run.prompt_range: the measured prompts' token range the request "
    "outcomes cover (LO..HI; null: every prompt); throughput and prices count every request",
    "requests_out_of_range": "measured requests left out of the outcomes by run.prompt_range",
    "queue_wait_mean_s": "mean time in engine queues",
    "queue_wait_p99_s": "99th percentile of the time in engine queues",
    "load_mean_s": "mean time waiting for KV: the wait for a prefetch into host (policies "
    "that wait) plus the restore phase (T0s and transfers)",
    "compute_mean_s": "mean prefill compute time",
    "store_mean_s": "mean GPU-to-host staging time before puts",
    "frontend_mean_s": "mean time in the frontend (engine.frontend: API server, tokenizer, "
    "prefix hashing before the engine, the first token's way out after it; 0 without one)",
    **{
        f"restore_{part}_{stat}_s": f"{word} of restore_{part}_s (the restore's {what}) "
        "over the measured requests that restored (decision restore or fallback)"
        for part, what in (
            ("lookup", "critical tier's T0 and path latency"),
            ("queue", "waiting: bandwidth shared, stalls, other tiers"),
            ("read", "unloaded transfer time, bottleneck not the host-to-GPU link"),
            ("h2d", "unloaded host-to-GPU time, decode and hand-off"),
        )
        for stat, word in (("mean", "mean"), ("p95", "95th percentile"))
    },
    "handoff_mean_s": "cluster.handoff only: mean time of the measured requests' completed "
    "hand-offs of their KV to the decode pool (handoff_s: from the prefill's end to the last "
    "byte received, its latency included; not part of TTFT)",
    "handoff_p99_s": "cluster.handoff only: 99th percentile of handoff_s over the completed "
    "hand-offs",
    "handoff_bytes": "cluster.handoff only: bytes the measured requests' hand-offs moved to "
    "the decode pool (each the prompt's whole KV)",
    "handoff_incomplete": "cluster.handoff only: measured requests whose hand-off did not "
    "complete (lost with a failed engine, or in flight when run.max_time stopped the run)",
    "tpot_mean_s": "engine.mode colocated only: mean time per output token after the first "
    "(tpot_s: (last token - first token) / (output_tokens - 1)) over the measured requests "
    "with two output tokens or more",
    "tpot_p50_s": "engine.mode colocated only: median tpot_s (as tpot_mean_s)",
    "tpot_p99_s": "engine.mode colocated only: 99th percentile of tpot_s (as tpot_mean_s)",
    "e2e_mean_s": "engine.mode colocated only: mean end-to-end latency of the measured "
    "requests (e2e_s: arrival to the last token out)",
    "e2e_p50_s": "engine.mode colocated only: median e2e_s",
    "e2e_p99_s": "engine.mode colocated only: 99th percentile of e2e_s",
    "itl_p99_s": "engine.mode colocated only: 99th percentile of the inter-token latencies "
    "(gaps between successive tokens) of every measured request, pooled",
    "output_tokens_per_s": "engine.mode colocated only: output tokens the cluster made (the "
    "first included) / the measurement window, which runs to the last token out",
    "mean_resident_requests": "engine.mode colocated only: time-average of requests on the "
    "engines (arrived, last token not out), from the first arrival to the last token, "
    "integrated by the engines (Little's L: requests_per_s x e2e_mean_s)",
    "swapped_bytes": "engine.mode colocated only: bytes of the measured requests' KV swapped "
    "to host memory and back (engine.preemption swap; both directions counted)",
    "mean_queue_length": "time-average requests waiting in engine queues (summed over engines, "
    "from time 0, warm-up included), integrated by the engines",
    "engine_busy_frac": "time engines spend in steps (waits for synchronous restores, "
    "lookups, compute and staging) in the window / (engines x window): the server "
    "utilisation of queueing theory",
    "gpu_busy_frac": "GPU (SM) work of engine steps in the window / (engines x window)",
    "gpu_copy_busy_frac": "time the copy engines move KV (restores into HBM, staging out of "
    "it) in the window / (engines x window)",
    "engine_blocked_frac": "time engine steps waited for synchronous restores or lookup "
    "work (GPU idle) / (engines x window)",
    "prompt_tokens_per_s": "measured prompt tokens / window",
    "requests_per_s": "measured requests / window",
    "usd_per_hour": "what the layout costs per hour at the scenario's cost: prices (engines, "
    "host and NVMe capacity, remote servers and memory, an object store's requests at the "
    "run's operation rate; NaN without a cost: section)",
    "usd_per_million_prompt_tokens": "usd_per_hour / million prompt tokens an hour served at "
    "the measured throughput (at this load, not at capacity)",
    "remote_get_ops": "remote GET operations over the whole run, warm-up included (one per "
    "chunk, per shard: an object store's billed GET requests)",
    "remote_put_ops": "remote put operations over the whole run, warm-up included (one per "
    "chunk on each server written: an object store's billed PUT requests)",
    "hit_ratio": "prompt tokens served from any cache tier / all prompt tokens",
    **{
        f"hit_ratio_{end}": f"{word} end of the 95% interval of hit_ratio (a ratio of sums; "
        "null under 20 requests): the same stationary block bootstrap of the measured "
        "requests in arrival order; within [0, 1]"
        for end, word in (("lo", "low"), ("hi", "high"))
    },
    "token_source_frac": "per source (gpu, host, nvme, remote, peer, compute): its prompt tokens "
    "/ all",
    "remote_ssd_token_frac": "with remote.ssd only: prompt tokens read off the remote "
    "servers' own SSDs (remote_ssd_tokens, part of token_source_frac's remote) / all",
    "recomputed_tokens": "measured prompt tokens computed again: in blocks computed (or "
    "prestored) before anywhere in the cluster, since evicted, out of the lookup's reach "
    "or skipped by the load policy",
    "preemptions": "times measured requests were preempted (engine.preemption: recompute; "
    "0 under hold): their KV freed when a running request's next chunk did not fit the KV "
    "pool, computed again later",
    "preempted_tokens": "prompt tokens the measured requests' preempted attempts computed: "
    "work lost (outside token_source_frac's compute)",
    "gpu_recompute_frac": "share of the measured requests' GPU compute time (gpu_compute_s) "
    "spent on recomputed tokens: sum of gpu_compute_s x recomputed / computed tokens over "
    "sum of gpu_compute_s (a preempted request's preempted_tokens count as both)",
    "tier_read_bytes": "bytes read per tier by the measured requests' restores (GPU hits "
    "move none; as stored, after a codec)",
    "tier_write_bytes": "bytes stored into each tier over the whole run, warm-up included "
    "(not refreshes; as stored, after a codec): GPU the prompts it admits, host and NVMe "
    "their demotions, write-throughs and prefetches, remote the puts that landed",
    "tier_dropped_on_backlog": "per host/NVMe tier: blocks not written because the write "
    "queue into it was full (on_backlog: drop)",
    "link_utilisation": "per kind of link (h2d, d2h, nvme, nvme_write, nic_in, nic_out, "
    "client, remote, remote_group; decode: the decode pool's receive link, cluster.handoff): "
    "busy_frac (mean over the links of that kind of busy time / simulated time, warm-up "
    "included), busy_frac_max (the busiest one) and bytes given to them; d2h is rank 0's "
    "GPU-to-host link, standing for every rank's",
    "remote_get_bw": "remote bytes read / time in remote GETs after T0, over the requests "
    "that read any: the GET bandwidth achieved under the run's load",
    "remote_stalled_requests": "measured requests with a stalled remote GET",
    "remote_timeouts": "measured requests whose remote GETs the client timeout abandoned",
    "decisions": "requests per decision (cold, gpu, restore, skipped, fallback; dropped "
    "requests are counted in requests_dropped)",
    "timing_extrapolations": "prefill times read beyond the timing table",
    "tiers": "per-tier counters over the whole run, warm-up included (tier_read_bytes "
    "counts the measured requests only: the two agree with no warm-up): capacity, use, "
    "evictions, demotions, puts; hits and "
    "misses (blocks the lookup asked the tier for that it held in the usable prefix, or "
    "not); and per engine (engines: engine, hits, misses, evictions, read_bytes, "
    "write_bytes; peer: served_bytes), which sum to the tier's totals; with remote.ssd, "
    "remote's ssd: the servers' own SSDs' capacity_bytes, used_bytes, blocks and evictions "
    "(shards), demotions_in and write_bytes (shards their DRAM evicted, written down), reads "
    "and read_bytes (shards GETs read off them), promoted (shards stored back into DRAM)",
    "slo": "with an SLO only (kvsim run --slo, a sweep's or a suite entry's slo:): its terms, "
    "e.g. ttft_p99_s <= 2 and tpot_p99_s <= 0.05",
    "slo_met": "with an SLO only: whether every term holds on this summary; slo_met_<metric> "
    "says it per term",
    "goodput_rps": "with an SLO only: measured requests (not dropped, in run.prompt_range) within "
    "every per-request bound of its latency terms (ttft_s, tpot_s, itl_p99_s, e2e_s against the "
    "thresholds) / the window requests_per_s divides by",
    "goodput_frac": "with an SLO only: those requests / the measured requests",
    "provenance": "what produced the run (no clock time): kvsim_version, git_commit and "
    "git_dirty of the checkout kvsim ran from (null for an installed kvsim), core (compiled "
    "or pure), python, platform, packages (versions of kvsim's dependencies) and files "
    "(role, path and sha256 of the scenario file, the files it extends, its profile, timing "
    "table, trace and plugin files)",
}
# a run's own 95% intervals, each as two numbers beside the value it bounds (the one form
# of an interval for scripts: kvsim.results.uncertainty.bound_keys): value -> its keys
INTERVALS: dict[str, tuple[str, str]] = {
    v: (f"{v}_lo", f"{v}_hi") for v in ("ttft_p50_s", "ttft_p99_s", "hit_ratio")
}
# the summary keys only a co-located run has (engine.mode colocated)
COLOCATED_METRICS = (
    "tpot_mean_s",
    "tpot_p50_s",
    "tpot_p99_s",
    "e2e_mean_s",
    "e2e_p50_s",
    "e2e_p99_s",
    "itl_p99_s",
    "output_tokens_per_s",
    "mean_resident_requests",
    "swapped_bytes",
)
# an older kvsim's summary key of each: a [low, high] list (read back, never written)
LEGACY_INTERVALS = {
    "ttft_p50_ci_s": "ttft_p50_s",
    "ttft_p99_ci_s": "ttft_p99_s",
    "hit_ratio_ci": "hit_ratio",
}
NUMERIC = tuple(
    k
    for k in METRICS
    if k
    not in {
        "scenario",
        "kvsim_version",
        "profile",
        "load_policy",
        "prompt_range",
        "token_source_frac",
        *(key for pair in INTERVALS.values() for key in pair),  # bounds, not outcomes
        "tier_read_bytes",
        "tier_write_bytes",
        "tier_dropped_on_backlog",
        "link_utilisation",
        "decisions",
        "tiers",
        "provenance",
        "requests_held",  # (only in closed-loop runs: not a metric every run has)
        # (only with an SLO: kvsim.experiments.slo)
        "slo",
        "slo_met",
        "goodput_rps",
        "goodput_frac",
        # (only with cluster.handoff)
        "handoff_mean_s",
        "handoff_p99_s",
        "handoff_bytes",
        "handoff_incomplete",
        *COLOCATED_METRICS,  # (only with engine.mode colocated)
    }
)


def percentile(values: Sequence[float] | np.ndarray, q: float) -> float:
    """The q-th percentile (0..100), linear interpolation; NaN for no values."""
    a = np.asarray(values, dtype=float)
    if a.size == 0:
        return float("nan")
    return float(np.percentile(a, q))


def spans_overlap(spans: Sequence[float], lo: float, hi: float, union: bool = False) -> float:
    """Length inside [lo, hi] of the intervals in a flat [start, end, start, end, ...]
    list; ``union`` counts time covered by overlapping intervals once."""
    a = np.asarray(spans, dtype=float).reshape(-1, 2)
    if a.size == 0 or hi <= lo:
        return 0.0
    starts = np.maximum(a[:, 0], lo)
    ends = np.minimum(a[:, 1], hi)
    keep = ends > starts
    starts, ends = starts[keep], ends[keep]
    if not union or starts.size == 0:
        return float((ends - starts).sum())
    order = np.argsort(starts, kind="stable")
    starts, ends = starts[order], np.maximum.accumulate(ends[order])
    # an interval adds what lies past the furthest end before it
    prev = np.concatenate(([lo], ends[:-1]))
    return float(np.clip(ends - np.maximum(starts, prev), 0.0, None).sum())


def ratio(num: float, den: float) -> float:
    """num / den, or 0.0 when den is 0."""
    return float(num) / float(den) if den else 0.0
