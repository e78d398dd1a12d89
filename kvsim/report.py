"""Plain-text views of results for the terminal (the CLI's printing, kept out of the core)."""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from typing import Any

from kvsim.results.uncertainty import read_bounds
from kvsim.units import fmt_bandwidth, fmt_bytes, fmt_duration


def columns(rows: Sequence[Sequence[str]], left: Collection[int]) -> list[str]:
    """Rows of cells as aligned text lines, two spaces apart: the columns in ``left``
    left-aligned (names, units, kinds), the others right-aligned (numbers)."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return [
        "  ".join(
            c.ljust(w) if i in left else c.rjust(w)
            for i, (c, w) in enumerate(zip(row, widths, strict=True))
        ).rstrip()
        for row in rows
    ]


def _pct(x: float) -> str:
    """A fraction as a percentage: one decimal, or two significant digits when that
    would round a nonzero share to 0.0% (or a share short of all to 100.0%)."""
    if not isinstance(x, (int, float)) or not math.isfinite(x):
        return "n/a"
    p = 100 * x
    if abs(p) < 1e-9:  # float noise of sums of spans (6e-15%): nothing
        p = 0.0
    if 0 < abs(p) < 0.0001:  # no exponents: too small to read as a number
        return "<0.0001%" if p > 0 else ">-0.0001%"
    if 0 < abs(p) < 0.05:
        return f"{p:.2g}%"
    if 99.95 <= p < 100:
        return f"{p:.6g}%"
    return f"{p:.1f}%"


def _t(x: Any) -> str:
    return fmt_duration(x) if isinstance(x, (int, float)) and math.isfinite(x) else "n/a"


def _interval(s: dict[str, Any], name: str) -> str:
    """The 95% interval of the time ``name`` (its ``_lo``/``_hi`` keys) as printed."""
    bounds = read_bounds(s, name)
    if bounds is None:
        return "n/a (under 20 requests)"
    return f"{_t(bounds[0])} .. {_t(bounds[1])}"


def _pct_interval(s: dict[str, Any], name: str) -> str:
    """A fraction's 95% interval after it ("  (95% interval 61.5% .. 65.6%)"), or nothing
    without one (under 20 requests)."""
    bounds = read_bounds(s, name)
    if bounds is None:
        return ""
    return f"  (95% interval {_pct(bounds[0])} .. {_pct(bounds[1])})"


def _cost_row(s: dict[str, Any]) -> list[tuple[str, str]]:
    """The layout's price, when the scenario has a cost: section."""
    usd = s.get("usd_per_hour")
    if not (isinstance(usd, float) and math.isfinite(usd)):
        return []
    per_m = s["usd_per_million_prompt_tokens"]
    return [("cost", f"${usd:,.2f}/h   ${per_m:,.4g} per million prompt tokens at this load")]


def _slo_rows(s: dict[str, Any]) -> list[tuple[str, str]]:
    """With an SLO (``kvsim run --slo``): met or missed, each term's value and verdict,
    and the goodput (requests/s within every per-request bound)."""
    if "slo" not in s:
        return []
    terms = []
    for key in (k for k in s if k.startswith("slo_met_")):
        metric = key[len("slo_met_") :]
        v = s.get(metric)
        shown = _t(v) if metric.endswith("_s") else f"{v:.4g}" if isinstance(v, float) else v
        terms.append(f"{metric} {shown} {'pass' if s[key] else 'FAIL'}")
    return [
        ("SLO", f"{s['slo']}: {'met' if s['slo_met'] else 'MISSED'}"),
        ("SLO terms", "   ".join(terms)),
        (
            "goodput",
            f"{s['goodput_rps']:.3g} requests/s within every bound "
            f"({_pct(s['goodput_frac'])} of the measured requests)",
        ),
    ]


def _cold_warm_row(s: dict[str, Any]) -> list[tuple[str, str]]:
    """TTFT of cold requests (the first of a session or shared prefix) and warm ones,
    when the summary has them."""
    if "requests_cold" not in s:
        return []
    return [
        (
            "cold / warm",
            f"cold {s['requests_cold']}: p50 {_t(s.get('ttft_cold_p50_s'))} "
            f"p95 {_t(s.get('ttft_cold_p95_s'))}   warm {s.get('requests_warm', 0)}: "
            f"p50 {_t(s.get('ttft_warm_p50_s'))} p95 {_t(s.get('ttft_warm_p95_s'))}",
        )
    ]


def _count(x: Any) -> str:
    return f"{x:,.0f}" if isinstance(x, (int, float)) and math.isfinite(x) else "n/a"


def _restore_rows(s: dict[str, Any]) -> list[tuple[str, str]]:
    """The restore time's parts (means over requests that restored; their p95 are in the
    summary) and the recomputed tokens, when the summary has them (and, for the parts,
    some request restored); the preemptions, when there were any."""
    rows = []
    parts = ("lookup", "queue", "read", "h2d")
    means = [s.get(f"restore_{p}_mean_s") for p in parts]
    if all(isinstance(m, (int, float)) and math.isfinite(m) for m in means):
        rows.append(
            (
                "restore parts",
                "   ".join(f"{p} {_t(m)}" for p, m in zip(parts, means, strict=True))
                + "   (means)",
            )
        )
    if "recomputed_tokens" in s:
        rows.append(
            (
                "recomputed",
                f"{_count(s['recomputed_tokens'])} tokens   "
                f"{_pct(s.get('gpu_recompute_frac', float('nan')))} of GPU compute time",
            )
        )
    if s.get("preemptions"):  # engine.preemption: recompute, and some request was preempted
        rows.append(
            (
                "preempted",
                f"{_count(s['preemptions'])} times   "
                f"{_count(s.get('preempted_tokens'))} tokens computed and lost",
            )
        )
    return rows


def _handoff_rows(s: dict[str, Any]) -> list[tuple[str, str]]:
    """The P/D hand-offs to the decode pool (cluster.handoff); none without them."""
    if "handoff_mean_s" not in s:
        return []
    decode = (s.get("link_utilisation") or {}).get("decode", {})
    text = (
        f"mean {_t(s['handoff_mean_s'])}   p99 {_t(s['handoff_p99_s'])}   "
        f"{fmt_bytes(s['handoff_bytes'])} to the decode pool   "
        f"its link busy {_pct(decode.get('busy_frac', 0.0))}"
    )
    if s.get("handoff_incomplete"):
        text += f"   incomplete {s['handoff_incomplete']}"
    return [("P/D hand-off", text)]


def _decode_rows(s: dict[str, Any]) -> list[tuple[str, str]]:
    """Co-located serving (engine.mode colocated): decode latencies and output rate; none
    in prefill mode."""
    if "tpot_p50_s" not in s:
        return []
    rows = [
        (
            "decode",
            f"TPOT p50 {_t(s['tpot_p50_s'])}   p99 {_t(s['tpot_p99_s'])}   "
            f"ITL p99 {_t(s['itl_p99_s'])}   {s['output_tokens_per_s']:,.0f} output tokens/s",
        ),
        (
            "end to end",
            f"mean {_t(s['e2e_mean_s'])}   p50 {_t(s['e2e_p50_s'])}   p99 {_t(s['e2e_p99_s'])}"
            f"   {s['mean_resident_requests']:.3g} requests resident (mean)",
        ),
    ]
    if s.get("swapped_bytes"):
        rows.append(("swapped", f"{fmt_bytes(s['swapped_bytes'])} of KV out to host and back"))
    return rows


def _ranges_rows(s: dict[str, Any]) -> list[tuple[str, str]]:
    """The prediction ranges of a run on a composed profile (kvsim/experiments/predict.py):
    a row per figure, its range over the catalogue's assumptions and what it is sensitive
    to; none without them."""
    ranges = s.get("prediction_ranges")
    if not isinstance(ranges, dict) or not ranges:
        return []
    rows = []
    for name, r in ranges.items():
        is_time = name.endswith("_s")
        show = _t if is_time else _pct
        sens = ", ".join(r.get("sensitive_to") or []) or "nothing by more than 10%"
        label = name.removesuffix("_s").replace("_", " ")
        rows.append(
            (
                f"range: {label}",
                f"{show(s.get(name))} (range {show(r['lo'])} .. {show(r['hi'])}; "
                f"sensitive to {sens})",
            )
        )
    return rows


def summary_table(s: dict[str, Any]) -> str:
    """The run summary as an aligned table."""
    src = s["token_source_frac"]
    rb = s["tier_read_bytes"]
    rows = [
        (
            "requests",
            f"{s['requests']}  (warm-up {s['requests_warmup']} before {_t(s['warmup_s'])}, "
            f"unfinished {s['requests_unfinished']}"
            # closed-loop clients: due by the end, never sent (workload.concurrency)
            + (f", held {s['requests_held']}" if "requests_held" in s else "")
            + ")",
        ),
        ("simulated time", _t(s["duration_s"])),
        (
            "TTFT",
            f"mean {_t(s['ttft_mean_s'])}   p50 {_t(s['ttft_p50_s'])}   "
            f"p90 {_t(s['ttft_p90_s'])}   p95 {_t(s.get('ttft_p95_s'))}   "
            f"p99 {_t(s['ttft_p99_s'])}   max {_t(s['ttft_max_s'])}",
        ),
        *_cold_warm_row(s),
        (
            "95% intervals",
            f"p50 {_interval(s, 'ttft_p50_s')}   p99 {_interval(s, 'ttft_p99_s')}   "
            "(block bootstrap of this run's requests)",
        ),
        *_ranges_rows(s),
        ("queue wait", f"mean {_t(s['queue_wait_mean_s'])}   p99 {_t(s['queue_wait_p99_s'])}"),
        (
            "GPU busy",
            f"{_pct(s['gpu_busy_frac'])} compute   {_pct(s.get('gpu_copy_busy_frac', 0.0))} "
            f"copy engines   (steps held by restores and lookups: "
            f"{_pct(s['engine_blocked_frac'])})",
        ),
        (
            "throughput",
            f"{s['prompt_tokens_per_s']:,.0f} prompt tokens/s   "
            f"{s['requests_per_s']:.3g} requests/s",
        ),
        ("hit ratio", _pct(s["hit_ratio"]) + _pct_interval(s, "hit_ratio")),
        *_restore_rows(s),
        *_handoff_rows(s),
        *_decode_rows(s),
        *_cost_row(s),
        *_slo_rows(s),
        ("tokens by source", "   ".join(f"{k} {_pct(v)}" for k, v in src.items())),
        ("bytes read", "   ".join(f"{k} {fmt_bytes(v)}" for k, v in rb.items() if k != "gpu")),
    ]
    if s["tier_read_bytes"]["remote"] > 0:
        rows.append(
            (
                "remote GET",
                f"{fmt_bandwidth(s['remote_get_bw'])} achieved   "
                f"stalled {s['remote_stalled_requests']}   "
                f"timed out {s['remote_timeouts']}",
            )
        )
    ssd = (s.get("tiers") or {}).get("remote", {}).get("ssd")
    if ssd is not None:  # remote.ssd: the servers' own SSDs below their DRAM
        rows.append(
            (
                "remote SSD",
                f"tokens {_pct(s.get('remote_ssd_token_frac', 0.0))}   "
                f"shard reads {ssd['reads']:,}   read {fmt_bytes(ssd['read_bytes'])}   "
                f"demoted {ssd['demotions_in']:,} ({fmt_bytes(ssd['write_bytes'])})   "
                f"holds {fmt_bytes(ssd['used_bytes'])} of {fmt_bytes(ssd['capacity_bytes'])}",
            )
        )
    if s.get("requests_dropped") or s.get("requests_rerouted"):
        rows.append(
            (
                "engine failures",
                f"rerouted {s.get('requests_rerouted', 0)}   "
                f"dropped {s.get('requests_dropped', 0)}",
            )
        )
    if s.get("faults"):
        rows.append(
            (
                "faults",
                "   ".join(f"{f['kind']} {f['event']} {_t(f['at'])}" for f in s["faults"]),
            )
        )
    for t, v in (s.get("tenants") or {}).items():
        held = ", ".join(f"{k} {fmt_bytes(b)}" for k, b in v["stored_bytes"].items()) or "nothing"
        gone = v.get("deletion_gone_after_max_s")
        rows.append(
            (
                f"tenant {t}",
                f"{v['requests']} requests   TTFT p50 {_t(v['ttft_p50_s'])}   "
                f"p99 {_t(v['ttft_p99_s'])}   hit {_pct(v['hit_ratio'])}   holds {held}"
                + (
                    f"   deletions {v['deletions']} (gone within {_t(gone)})"
                    if gone is not None
                    else ""
                ),
            )
        )
    if s.get("timing_extrapolations"):
        rows.append(
            (
                "note",
                f"{s['timing_extrapolations']} prefill times extrapolated beyond the timing table",
            )
        )
    rows += [("note", line) for line in s.get("profile_notes") or []]
    head = (
        f"kvsim {s['kvsim_version']} | scenario {s['scenario']} | seed {s['seed']} | "
        f"profile {s['profile']} | {s['engines']} engine(s) | {s['load_policy']} loading"
    )
    width = max(len(k) for k, _ in rows)
    lines = [head, "-" * len(head)]
    lines += [f"{k:<{width}}  {v}" for k, v in rows]
    return "\n".join(lines)


def stats_table(st: dict[str, Any]) -> str:
    """``kvsim trace stats`` as an aligned table."""
    rows = [
        ("requests", f"{st['requests']:,}"),
        ("duration", _t(st["duration_s"])),
        ("arrival rate", f"{st['rate_per_s']:.3g} requests/s" if st["rate_per_s"] else "n/a"),
        ("mean input tokens", f"{st['mean_input_tokens']:,.1f}"),
        ("mean output tokens", f"{st['mean_output_tokens']:,.1f}"),
        ("prefix reuse (unlimited cache)", _pct(st["prefix_reuse_ratio"])),
        (
            "blocks (unique)",
            f"{st['blocks']:,} ({st['unique_blocks']:,}) of {st['block_tokens']} tokens",
        ),
    ]
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)
