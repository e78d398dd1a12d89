"""The Results value: the per-request DataFrame and the summary dict.

The engines record one row per request in the run's columns (:mod:`kvsim.sim.rows`; kept
column by column in a :class:`~kvsim.sim.rows.RowTable`); this module turns them into a
pandas DataFrame and the summary dict (its keys are a contract: see README.md, Outputs).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from kvsim.catalogue.calibrated import scenario_notes
from kvsim.config.schema import Scenario, prompt_bounds
from kvsim.errors import InputError
from kvsim.results.metrics import QUANTILES, percentile, ratio, sources, spans_overlap
from kvsim.results.provenance import provenance
from kvsim.results.timeseries import steady_state
from kvsim.results.uncertainty import bound_keys, mser5, percentile_cis, ratio_ci
from kvsim.rng import stream
from kvsim.sim.rows import COLUMN_NAMES as COLUMN_NAMES  # re-exported: the column contract
from kvsim.sim.rows import COLUMNS as COLUMNS
from kvsim.sim.rows import RowTable
from kvsim.sim.simulation import SimOutput
from kvsim.version import __version__
from kvsim.workload import open_workload


@dataclass
class Results:
    """Outcome of one run: ``requests`` (one row per finished request) and ``summary``."""

    requests: pd.DataFrame
    summary: dict[str, Any]
    scenario: Scenario
    engines: list[dict[str, Any]] = field(default_factory=list)
    # per engine: its GPU work as flat [start, end, ...] spans (float64 arrays, from
    # SimOutput.activity), for timeseries.parquet's gpu_busy_frac; only these are kept, and
    # compactly: a kept Results must not hold the run's every span as Python floats
    activity: list[dict[str, Any]] = field(default_factory=list, repr=False)
    # the access log (run --record-accesses: kvsim.results.accesses), or None
    accesses: pd.DataFrame | None = field(default=None, repr=False)

    def __repr__(self) -> str:
        s = self.summary
        return (
            f"Results({s['scenario']!r}, requests={s['requests']}, "
            f"ttft_p99_s={s['ttft_p99_s']:.4g})"
        )


def frame(rows: RowTable) -> pd.DataFrame:
    """The per-request DataFrame, sorted by request id.

    Each column is copied once, into id order, and the frame takes the copies as they are:
    a million rows then peak at two copies of the table (the run's and the frame's), not
    the three that building (consolidated) and then sorting a frame make."""
    order = np.argsort(rows.column("id"), kind="stable")
    data: dict[str, Any] = {}
    for name in rows.names:  # the run's columns (kvsim.sim.rows: its tiers')
        col = rows.column(name)
        if isinstance(col, list):  # text: a list again, so pandas infers its dtype as before
            data[name] = [col[i] for i in order.tolist()]
        else:
            data[name] = col[order]
    df = pd.DataFrame(data, copy=False)
    df["decision"] = df["decision"].astype("category")
    df["drop_reason"] = df["drop_reason"].astype(str)
    return df


def rows_where(df: pd.DataFrame, mask: Any) -> pd.DataFrame:
    """``df[mask]``, without copying the rows where it need not: ``df`` itself when the
    mask keeps every row, a slice when it keeps one run of rows (the requests after a
    warm-up, in id order). A million-row frame filtered five ways would otherwise be
    copied five times over."""
    keep = np.asarray(mask, dtype=bool)
    if keep.all():
        return df
    kept = np.flatnonzero(keep)
    if len(kept) and kept[-1] - kept[0] + 1 == len(kept):
        return df.iloc[kept[0] : kept[-1] + 1]
    return df[mask]


def summarize(
    df: pd.DataFrame, out: SimOutput, sc: Scenario, warmup: float | None = None
) -> dict[str, Any]:
    """The summary dict (the contract keys, plus diagnostics). ``warmup``: the seconds
    left out (the scenario's, or what ``auto`` found)."""
    if warmup is None:
        warmup = 0.0 if sc.run.warmup == "auto" else sc.run.warmup
    measured = rows_where(df, ~df["warmup"])
    everyone = rows_where(measured, measured["decision"] != "dropped")  # cluster throughput
    measured = rows_where(measured, in_prompt_range(measured, sc))  # run.prompt_range
    out_of_range = int((~df["warmup"]).sum()) - len(measured)
    if len(measured) == 0 and out_of_range:
        raise InputError(
            f"no measured request has a prompt in {sc.run.prompt_range} tokens (all "
            f"{out_of_range} lie outside it: {prompt_spread(df[~df['warmup']])})",
            where="run.prompt_range",
        )
    m = rows_where(measured, measured["decision"] != "dropped")
    df = rows_where(df, df["decision"] != "dropped")  # the clock and the engines saw these
    ttft = m["ttft_s"].to_numpy()
    first, lo, hi = window(df, warmup)
    span = max(hi - lo, 0.0)
    engines = sc.cluster.engines
    act = out.activity
    stepping = sum(spans_overlap(a["steps"], lo, hi) for a in act)
    busy = sum(spans_overlap(a["gpu"], lo, hi) for a in act)
    blocked = sum(spans_overlap(a["blocked"], lo, hi) for a in act)
    copying = sum(spans_overlap(a["copy"], lo, hi, union=True) for a in act)
    prompt = float(m["input_tokens"].sum())
    served = float(everyone["input_tokens"].sum())  # (= prompt without a prompt range)
    src = {s: float(m[f"tokens_{s}"].sum()) for s in sources(m.columns)}
    got = m[(m["remote_get_s"] > 0) & (m["retries"] == 0)]  # one GET per row
    intervals = ttft_intervals(m, sc.seed)  # each pair beside the value it bounds
    summary: dict[str, Any] = {
        "scenario": sc.name,
        "seed": sc.seed,
        "kvsim_version": __version__,
        "profile": str(sc.profile),
        "load_policy": sc.cluster.load_policy.name,
        "engines": engines,
        "requests": len(m),
        "requests_warmup": int(df["warmup"].sum()),
        "requests_unfinished": out.unfinished,
        # closed-loop clients: requests whose send a full window of requests held back
        **({"requests_held": out.held} if sc.workload.concurrency is not None else {}),
        "requests_dropped": int((measured["decision"] == "dropped").sum()),
        "requests_rerouted": int((measured["retries"] > 0).sum()),
        "prompt_range": sc.run.prompt_range,
        "requests_out_of_range": out_of_range,
        "duration_s": hi - first,
        "warmup_s": warmup,
        "ttft_mean_s": float(ttft.mean()) if ttft.size else float("nan"),
        **{f"ttft_p{q}_s": percentile(ttft, q) for q in QUANTILES},
        **{k: v for k, v in intervals.items() if k.startswith("ttft_")},
        "ttft_max_s": float(ttft.max()) if ttft.size else float("nan"),
        **cold_warm(m),
        "queue_wait_mean_s": float(m["queue_wait_s"].mean()) if len(m) else float("nan"),
        "queue_wait_p99_s": percentile(m["queue_wait_s"].to_numpy(), 99),
        "load_mean_s": float(m["load_s"].mean()) if len(m) else float("nan"),
        "compute_mean_s": float(m["compute_s"].mean()) if len(m) else float("nan"),
        "store_mean_s": float(m["store_s"].mean()) if len(m) else float("nan"),
        "frontend_mean_s": float(m["frontend_s"].mean()) if len(m) else float("nan"),
        **restore_parts(m),
        **handoff_summary(m),
        **colocated_summary(m, everyone, out, first, hi, span),
        "mean_queue_length": ratio(sum(e["queue_area"] for e in out.engines), hi),
        "engine_busy_frac": ratio(stepping, engines * span),
        "gpu_busy_frac": ratio(busy, engines * span),
        "gpu_copy_busy_frac": ratio(copying, engines * span),
        "engine_blocked_frac": ratio(blocked, engines * span),
        "prompt_tokens_per_s": ratio(served, span),
        "requests_per_s": ratio(len(everyone), span),
        **prices(sc, ratio(served, span), *remote_op_rates(out)),
        "hit_ratio": ratio(prompt - src["compute"], prompt),
        **{k: v for k, v in intervals.items() if k.startswith("hit_ratio_")},
        "token_source_frac": {s: ratio(v, prompt) for s, v in src.items()},
        # remote.ssd: of the remote tokens, those read off the servers' own SSDs
        **(
            {"remote_ssd_token_frac": ratio(float(m["remote_ssd_tokens"].sum()), prompt)}
            if "ssd" in out.tiers.get("remote", {})
            else {}
        ),
        "recomputed_tokens": int(m["recomputed_tokens"].sum()),
        "preemptions": int(m["preemptions"].sum()),
        "preempted_tokens": int(m["preempted_tokens"].sum()),
        "gpu_recompute_frac": gpu_recompute_frac(m),
        "tier_read_bytes": {  # per tier (its bytes_<tier> column; none read from GPU)
            "gpu": 0.0,
            **{c[len("bytes_") :]: float(m[c].sum()) for c in m.columns if c.startswith("bytes_")},
        },
        "tier_write_bytes": {name: t["write_bytes"] for name, t in out.tiers.items()},
        "tier_dropped_on_backlog": {
            name: t["dropped_on_backlog"]
            for name, t in out.tiers.items()
            if "dropped_on_backlog" in t and name != "gpu"
        },
        "link_utilisation": link_utilisation(out.links, out.end_time),
        "remote_get_bw": ratio(float(got["bytes_remote"].sum()), float(got["remote_get_s"].sum())),
        "remote_get_ops": int(out.tiers.get("remote", {}).get("get_ops", 0)),
        "remote_put_ops": int(out.tiers.get("remote", {}).get("put_ops", 0)),
        "remote_stalled_requests": int(m["stalled"].sum()),
        "remote_timeouts": int(m["timed_out"].sum()),
        "decisions": {str(k): int(v) for k, v in m["decision"].value_counts().sort_index().items()},
        "timing_extrapolations": out.timing_extrapolations,
        "tiers": out.tiers,
    }
    if out.faults:
        summary["faults"] = out.faults
    notes = scenario_notes(sc)  # a composed profile beside a calibrated one (issue 39)
    if notes:
        summary["profile_notes"] = notes
    tenants = sorted(measured["tenant"].unique())
    if len(tenants) > 1 or out.tenancy.get("deletions") or out.tenancy.get("ttl_retention_max_s"):
        summary["tenants"] = tenant_summary(m, out, tenants)
    # is the measured window still filling? (GPU busy or queue wait rising across it)
    summary["steady_state"] = steady_state(m, act, sc.run.timeseries_window, engines, hi)
    # last: what produced the run (code, core, packages, input files' SHA-256)
    summary["provenance"] = provenance(sc)
    if out.tier_kinds:  # a tier kind given in Python (docs/extending.md): not in the files
        summary["provenance"]["tier_kinds"] = dict(out.tier_kinds)
    return summary


def window(df: pd.DataFrame, warmup: float) -> tuple[float, float, float]:
    """The measured window of a run's rows that were not dropped: (first arrival, start,
    end); it starts at max(warm-up, first arrival) and ends at the last first token
    (background puts may run on after it), or, when the requests decode (engine.mode
    colocated: an ``e2e_s`` column), at the last token out."""
    first = float(df["arrival_s"].min()) if len(df) else 0.0
    hi = float(df["finish_s"].max()) if len(df) else first
    if "e2e_s" in df.columns and len(df):
        hi = max(hi, float((df["arrival_s"] + df["e2e_s"]).max()))
    return first, max(warmup, first), hi


def in_prompt_range(df: pd.DataFrame, sc: Scenario) -> Any:
    """Which rows' prompts (``input_tokens``) lie in ``run.prompt_range`` (every row when
    it is unset): a boolean Series aligned with ``df``."""
    if sc.run.prompt_range is None:
        return pd.Series(True, index=df.index)
    lo, hi = prompt_bounds(sc.run.prompt_range)
    tokens = df["input_tokens"]
    return (tokens >= lo) & (tokens <= hi) if hi is not None else tokens >= lo


def prompt_spread(df: pd.DataFrame) -> str:
    """The prompts' lengths as a reader checks a range against them: "prompts of 310 to
    78,000 tokens"."""
    tokens = df["input_tokens"]
    return f"prompts of {int(tokens.min()):,} to {int(tokens.max()):,} tokens"


def cold_warm(m: pd.DataFrame) -> dict[str, Any]:
    """Cold (the first request of a session or of a shared prefix) and warm (later ones)
    measured requests: how many, and their TTFT p50 and p95."""
    warm = m["warm"].to_numpy(dtype=bool)
    ttft = m["ttft_s"].to_numpy()
    out: dict[str, Any] = {
        "requests_cold": int((~warm).sum()),
        "requests_warm": int(warm.sum()),
    }
    for name, values in (("cold", ttft[~warm]), ("warm", ttft[warm])):
        for q in (50, 95):
            out[f"ttft_{name}_p{q}_s"] = percentile(values, q)
    return out


RESTORE_PARTS = ("lookup", "queue", "read", "h2d")


def restore_parts(m: pd.DataFrame) -> dict[str, float]:
    """Mean and p95 of each part of the restore time (``restore_<part>_s``) over the
    measured requests that restored (decision restore or fallback); NaN when none did."""
    r = m[m["decision"].isin(("restore", "fallback"))]
    out: dict[str, float] = {}
    for part in RESTORE_PARTS:
        values = r[f"restore_{part}_s"].to_numpy()
        out[f"restore_{part}_mean_s"] = float(values.mean()) if values.size else float("nan")
        out[f"restore_{part}_p95_s"] = percentile(values, 95)
    return out


def handoff_summary(m: pd.DataFrame) -> dict[str, Any]:
    """cluster.handoff only (its columns are there): the measured requests' hand-offs to the
    decode pool, mean and p99 of ``handoff_s`` over those completed, the bytes moved, and
    how many were not completed (lost with their engine, or in flight at run.max_time)."""
    if "handoff_s" not in m.columns:
        return {}
    t = m["handoff_s"].to_numpy(dtype=float)
    done = t[~np.isnan(t)]
    return {
        "handoff_mean_s": float(done.mean()) if done.size else float("nan"),
        "handoff_p99_s": percentile(done, 99),
        "handoff_bytes": float(m["handoff_bytes"].sum()),
        "handoff_incomplete": int(t.size - done.size),
    }


def colocated_summary(
    m: pd.DataFrame, everyone: pd.DataFrame, out: SimOutput, first: float, hi: float, span: float
) -> dict[str, Any]:
    """engine.mode colocated only (its columns are there): the measured requests' time per
    output token (over those with two tokens or more), end-to-end latency and inter-token
    latency (p99 over every gap of every measured request), the output tokens the cluster
    made per second, the time-average of requests on the engines (arrived, last token not
    out: Little's law's L, from the first arrival to the last token) and the KV swapped."""
    if "e2e_s" not in m.columns:
        return {}
    tpot = m["tpot_s"].to_numpy(dtype=float)
    tpot = tpot[~np.isnan(tpot)]
    e2e = m["e2e_s"].to_numpy(dtype=float)
    itl = np.empty(0)
    if out.itl_s is not None and len(out.itl_s):
        itl = out.itl_s[np.isin(out.itl_ids, m["id"].to_numpy())]
    area = sum(e.get("resident_area", 0.0) for e in out.engines)
    return {
        "tpot_mean_s": float(tpot.mean()) if tpot.size else float("nan"),
        "tpot_p50_s": percentile(tpot, 50),
        "tpot_p99_s": percentile(tpot, 99),
        "e2e_mean_s": float(e2e.mean()) if e2e.size else float("nan"),
        "e2e_p50_s": percentile(e2e, 50),
        "e2e_p99_s": percentile(e2e, 99),
        "itl_p99_s": percentile(itl, 99),
        "output_tokens_per_s": ratio(float(everyone["output_tokens"].sum()), span),
        "mean_resident_requests": ratio(area, hi - first),
        "swapped_bytes": float(m["swapped_bytes"].sum()),
    }


def gpu_recompute_frac(m: pd.DataFrame) -> float:
    """The share of the measured requests' GPU compute time spent on recomputed tokens:
    sum of gpu_compute_s x recomputed / computed tokens over sum of gpu_compute_s (each
    request's time split by its tokens); 0 when there was none. A preempted request's time
    covers its preempted attempts too, whose tokens (``preempted_tokens``) count on both
    sides: as tokens computed, and as lost work."""
    gpu = m["gpu_compute_s"].to_numpy(dtype=float)
    computed = m["tokens_compute"].to_numpy(dtype=float)
    again = m["recomputed_tokens"].to_numpy(dtype=float)
    if "preempted_tokens" in m:
        lost = m["preempted_tokens"].to_numpy(dtype=float)
        computed = computed + lost
        again = again + lost
    share = np.divide(again, computed, out=np.zeros_like(again), where=computed > 0)
    return ratio(float((gpu * share).sum()), float(gpu.sum()))


def link_utilisation(links: dict[str, dict[str, float]], end: float) -> dict[str, Any]:
    """Per kind of link (an engine's ``e3.h2d`` is kind ``h2d``, server ``remote2`` kind
    ``remote``): the mean and largest busy fraction over the whole run, and bytes moved."""
    kinds: dict[str, list[dict[str, float]]] = {}
    for name, counters in links.items():
        kind = name.split(".", 1)[1] if name.startswith("e") and "." in name else name
        # a group of servers' links (``remote*``: remote_group; ``remote_ssd*``)
        kind = kind[:-1] + "_group" if kind.endswith("*") else kind.rstrip("0123456789") or kind
        kinds.setdefault(kind, []).append(counters)
    return {
        kind: {
            "busy_frac": ratio(sum(c["busy_s"] for c in group), len(group) * end),
            "busy_frac_max": ratio(max(c["busy_s"] for c in group), end),
            "bytes": sum((c["bytes"] for c in group), 0.0),
        }
        for kind, group in sorted(kinds.items())
    }


HOURS_PER_MONTH = 730.0


def remote_op_rates(out: SimOutput) -> tuple[float, float]:
    """Remote GET and put operations per second over the run (warm-up included: the
    store bills every request), for the per-request prices."""
    r = out.tiers.get("remote", {})
    end = out.end_time
    return ratio(r.get("get_ops", 0), end), ratio(r.get("put_ops", 0), end)


def usd_per_hour(sc: Scenario, get_ops_per_s: float = 0.0, put_ops_per_s: float = 0.0) -> float:
    """What the scenario's layout costs per hour at its ``cost:`` prices (NaN without
    them): engines, the host and NVMe tiers' capacities on every engine, and the remote
    store's servers and memory; for an object store also its requests, at the given
    operation rates (one request per chunk operation; 0 before a run)."""
    c = sc.cost
    if c is None:
        return float("nan")
    engines, t, rc = sc.cluster.engines, sc.tiers, sc.remote
    gb_hour = 1e-9 / HOURS_PER_MONTH
    usd = engines * c.gpu_node_hour
    if t.host.enabled:
        usd += engines * t.host.capacity * gb_hour * c.dram_gb_month
    if t.nvme.enabled:
        usd += engines * t.nvme.capacity * gb_hour * c.nvme_gb_month
    if rc.enabled:
        usd += rc.servers * (
            c.remote_server_hour + rc.capacity * gb_hour * c.remote_memory_gb_month
        )
        if rc.kind == "object_store":  # per 1,000 requests, at the rates measured
            usd += 3.6 * (
                get_ops_per_s * c.object_store_get_per_1k
                + put_ops_per_s * c.object_store_put_per_1k
            )
    return usd


def prices(
    sc: Scenario,
    prompt_tokens_per_s: float,
    get_ops_per_s: float = 0.0,
    put_ops_per_s: float = 0.0,
) -> dict[str, float]:
    """usd_per_hour (an object store's requests at the operation rates measured), and
    usd_per_million_prompt_tokens at the throughput measured."""
    usd = usd_per_hour(sc, get_ops_per_s, put_ops_per_s)
    served = prompt_tokens_per_s * 3600.0 / 1e6  # million prompt tokens an hour
    per_m = usd / served if served > 0 and math.isfinite(usd) else float("nan")
    if math.isinf(per_m):  # never an infinite (or null) cost: refused, naming the prices
        raise InputError(
            f"${usd:.3g} an hour over {prompt_tokens_per_s:.3g} prompt tokens a second "
            "overflows the price per million prompt tokens",
            where="cost",
        )
    return {"usd_per_hour": usd, "usd_per_million_prompt_tokens": per_m}


def ttft_intervals(m: pd.DataFrame, seed: int) -> dict[str, float | None]:
    """95% intervals of TTFT p50 and p99 and of the hit ratio (hit prompt tokens over
    prompt tokens, a ratio of sums, within [0, 1]) by a stationary block bootstrap of the
    measured requests in arrival order (kvsim.results.uncertainty), as two numbers beside
    each value (:func:`~kvsim.results.uncertainty.bound_keys`): ``ttft_p50_s_lo``,
    ``ttft_p50_s_hi``, ``ttft_p99_s_lo``, ``ttft_p99_s_hi``, ``hit_ratio_lo``,
    ``hit_ratio_hi``; None under 20 requests."""
    m = m.sort_values("arrival_s", kind="stable")
    cis = percentile_cis(m["ttft_s"].to_numpy(), (50, 99), stream(seed, "ttft_ci"))
    prompt = m["input_tokens"].to_numpy(dtype=float)
    hits = prompt - m["tokens_compute"].to_numpy(dtype=float)
    out: dict[str, float | None] = {}
    for q in (50, 99):
        out.update(bound_keys(f"ttft_p{q}_s", cis[q]))
    # (the stream keeps its name: the same draws, so the same bounds as before)
    out.update(bound_keys("hit_ratio", ratio_ci(hits, prompt, stream(seed, "hit_ratio_ci"))))
    return out


def tenant_summary(m: pd.DataFrame, out: SimOutput, tenants: list[int]) -> dict[str, Any]:
    """Per tenant: requests, TTFT percentiles, hit ratio, bytes held per tier at the end,
    and how long its deleted blocks took to be gone (explicit/session deletions, TTL)."""
    stored = out.tenancy.get("stored_bytes", {})
    retention = out.tenancy.get("ttl_retention_max_s", {})
    out_t: dict[str, Any] = {}
    for t in tenants:
        g = m[m["tenant"] == t]
        prompt = float(g["input_tokens"].sum())
        gone = [d["gone_after_s"] for d in out.tenancy.get("deletions", []) if d["tenant"] == t]
        out_t[str(int(t))] = {
            "requests": len(g),
            "ttft_p50_s": percentile(g["ttft_s"].to_numpy(), 50),
            "ttft_p99_s": percentile(g["ttft_s"].to_numpy(), 99),
            "hit_ratio": ratio(prompt - float(g["tokens_compute"].sum()), prompt),
            "stored_bytes": stored.get(int(t), {}),
            "deletions": len(gone),
            "deletion_gone_after_max_s": max(gone) if gone else None,
            "ttl_idle_max_s": retention.get(int(t)),
        }
    return out_t


def collect(out: SimOutput, scenario: Scenario) -> Results:
    """Results from a finished run (InputError when nothing was left to measure)."""
    if out.arrived == 0:
        first = _first_arrival(scenario) if scenario.run.max_time is not None else None
        if first is not None:  # the clock stopped before the workload's first request
            raise InputError(
                f"run.max_time: no request arrived within {scenario.run.max_time:g} s "
                f"(the first arrives at {first:g} s)"
            )
        raise InputError("workload: no requests to simulate (check workload.window and limit)")
    df = frame(out.rows)
    if len(df) == 0:
        raise InputError(f"run.max_time: no request finished within {scenario.run.max_time:g} s")
    warmup = scenario.run.warmup
    if warmup == "auto":
        warmup = auto_warmup(df)
        df["warmup"] = df["arrival_s"] < warmup
    if df["warmup"].all():
        raise InputError(
            f"run.warmup: all {out.arrived} requests arrived during the "
            f"{warmup:g} s warm-up; nothing is left to measure"
        )
    gpu = [{"gpu": np.asarray(a["gpu"], dtype=np.float64)} for a in out.activity]
    return Results(df, summarize(df, out, scenario, warmup), scenario, out.engines, gpu)


def auto_warmup(df: pd.DataFrame) -> float:
    """Seconds of warm-up (``run.warmup: auto``): MSER-5 on two series in arrival order,
    the requests' TTFT (queues filling) and their hit fraction (caches filling); the later
    cut wins. Dropped requests are left out. 0 when neither finds a transient."""
    done = df[df["decision"] != "dropped"].sort_values("arrival_s", kind="stable")
    if len(done) < 20:
        return 0.0
    hit = 1.0 - done["tokens_compute"].to_numpy() / done["input_tokens"].to_numpy()
    cut = max(mser5(done["ttft_s"].to_numpy()), mser5(hit))
    return float(done["arrival_s"].iloc[cut]) if cut > 0 else 0.0


def _first_arrival(scenario: Scenario) -> float | None:
    """When the scenario's workload has a first request (after shaping), its arrival."""
    try:
        first = next(open_workload(scenario.workload, scenario.seed), None)
    except InputError:
        return None
    return None if first is None else first.arrival


def json_ready(value: Any) -> Any:
    """Summary values as plain JSON types (NaN -> None)."""
    if isinstance(value, dict):
        return {str(k): json_ready(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_ready(v) for v in value]
    if isinstance(value, (np.floating, float)):
        f = float(value)
        return f if np.isfinite(f) else None
    if isinstance(value, np.integer):
        return int(value)
    return value
