"""Rules across a scenario's fields (:func:`cross_checks`): a tier larger than the memory
it lives in, a per-rank store on a node without ranks, a prefetch with nowhere to go, a
fault naming a server the scenario lacks. Each is reported as (field path, message), so
that the loader can point at the line that wrote the field.
"""

from __future__ import annotations

from typing import Any

from kvsim.config import pools
from kvsim.config.schema import (
    MAX_USD_PER_HOUR,
    ChoiceDist,
    ClosedArrivals,
    LogNormalDist,
    Scenario,
    ServerDown,
    SlowLink,
    StallBurst,
    SyntheticWorkload,
    UniformDist,
)
from kvsim.physics.timing import TimingTable


def cross_checks(sc: Scenario) -> list[tuple[tuple[Any, ...], str]]:
    """Rules across fields, as (field path, message) pairs; empty when all hold."""
    out: list[tuple[tuple[Any, ...], str]] = []
    n = sc.node
    if n.pcp > n.gpus or n.gpus % n.pcp:
        out.append((("node", "pcp"), f"must divide gpus ({n.gpus}), got {n.pcp}"))
    out += pools.checks(sc)  # weights, reserve, KV pool, prefix cache, largest prompt
    if sc.model.kv_bytes_per_token is None and sc.model.kv_layout is None:
        out.append((("model",), "give kv_bytes_per_token or kv_layout"))
    out += _timing_checks(sc)
    out += _engine_checks(sc)
    out += _peer_checks(sc)
    h = sc.cluster.handoff
    if h.enabled and h.bandwidth is None:
        out.append(
            (
                ("cluster", "handoff", "bandwidth"),
                "the hand-off needs the decode pool's receive bandwidth (e.g. 400 GB/s: one "
                "8-GPU decode node with a 400 Gb/s NIC per GPU)",
            )
        )
    out += _cost_checks(sc)
    ten = sc.tenancy
    if ten.quota:  # kept by the built-in stores' bookkeeping (a ttl: by plugins' too)
        tiers = [("tiers", t) for t in ("gpu", "host", "nvme")] + [("remote",)]
        for where in tiers:
            tier = sc.remote if where == ("remote",) else getattr(sc.tiers, where[1])
            if tier.eviction.name not in ("lru", "fifo"):
                rule = "quotas"
                out.append(
                    (
                        (*where, "eviction"),
                        f"tenancy {rule} need a built-in eviction policy (lru | fifo); "
                        f"{tier.eviction.name!r} is a plugin's",
                    )
                )
    if sc.tiers.host.enabled and sc.tiers.host.capacity > n.host_dram:
        out.append((("tiers", "host", "capacity"), "exceeds the node's host_dram"))
    nvme_cap = n.nvme_drives * n.nvme_drive_capacity
    pf = sc.prefetch
    if pf.policy.name != "none" or pf.on_session:
        what = ("prefetch", "policy" if pf.policy.name != "none" else "on_session")
        if not sc.tiers.host.enabled:
            out.append((what, "prefetches into host memory, and the host tier is disabled"))
        elif not sc.tiers.nvme.enabled and not sc.remote.enabled:
            out.append((what, "fetches from NVMe or the remote store; both are disabled"))
    if pf.policy.name == "timeout" and pf.timeout is None:
        out.append((("prefetch", "timeout"), "policy timeout needs a timeout (e.g. 200 ms)"))
    if sc.tiers.nvme.path == "gds" and not sc.tiers.nvme.enabled:
        out.append((("tiers", "nvme", "path"), "gds reads from the NVMe tier, which is disabled"))
    if sc.tiers.nvme.promote:
        if not sc.tiers.nvme.enabled:
            out.append(
                (("tiers", "nvme", "promote"), "promotes from NVMe; the NVMe tier is disabled")
            )
        elif not sc.tiers.host.enabled:
            out.append(
                (("tiers", "nvme", "promote"), "promotes into host; the host tier is disabled")
            )
    if sc.tiers.nvme.enabled:
        if n.nvme_drives == 0:
            out.append((("tiers", "nvme", "enabled"), "the node has no NVMe drives"))
        elif sc.tiers.nvme.capacity > nvme_cap:
            out.append(
                (
                    ("tiers", "nvme", "capacity"),
                    f"exceeds the node's drives ({nvme_cap / 1e12:.4g} TB)",
                )
            )
    w = sc.workload
    if isinstance(w, SyntheticWorkload):
        dists = [("prompt_tokens", w.prompt_tokens), ("output_tokens", w.output_tokens)]
        if w.sessions is not None:
            dists.append(("sessions.turns", w.sessions.turns))
        for name, d in dists:
            where = ("workload", *name.split("."))
            if isinstance(d, UniformDist) and d.low > d.high:
                out.append(((*where, "high"), "must be >= low"))
            if isinstance(d, LogNormalDist) and d.min > d.max:
                out.append(((*where, "max"), "must be >= min"))
            if (
                isinstance(d, ChoiceDist)
                and d.weights is not None
                and (len(d.weights) != len(d.values) or sum(d.weights) <= 0)
            ):
                out.append(((*where, "weights"), "need one weight per value, sum > 0"))
    out += _remote_kind_checks(sc)
    if sc.remote.ssd.enabled and not sc.remote.enabled:
        out.append((("remote", "ssd", "enabled"), "needs the remote tier (remote.enabled: true)"))
    if sc.remote.enabled and sc.remote.sharding == "per_rank" and n.pcp == 1:
        out.append((("remote", "sharding"), "per_rank needs ranks: node.pcp is 1"))
    if isinstance(w, SyntheticWorkload) and w.prestored and not sc.remote.enabled:
        out.append((("workload", "prestored"), "needs the remote tier (remote.enabled: true)"))
    if isinstance(w, SyntheticWorkload) and isinstance(w.arrivals, ClosedArrivals):
        if w.concurrency is None:
            out.append(
                (
                    ("workload", "concurrency"),
                    "arrivals process closed sends as fast as this many requests in flight "
                    "allow: set it (e.g. 8)",
                )
            )
        if w.sessions is not None:
            out.append(
                (
                    ("workload", "sessions"),
                    "arrivals process closed starts every session at t = 0, so every first "
                    "turn would be sent before any second one: give the sessions an arrival "
                    "rate (process: poisson, constant or bursty) and cap it with "
                    "workload.concurrency",
                )
            )
    for i, f in enumerate(sc.faults):
        where = ("faults", i)
        if f.until is not None and f.until <= f.at:
            out.append(((*where, "until"), "must be after at"))
        if isinstance(f, ServerDown | StallBurst) and not sc.remote.enabled:
            out.append(((*where, "kind"), f"{f.kind} needs the remote tier"))
        if isinstance(f, ServerDown) and f.server >= sc.remote.servers:
            out.append(((*where, "server"), f"no server {f.server} (servers: {sc.remote.servers})"))
        if isinstance(f, SlowLink):
            if f.target == "remote" and not sc.remote.enabled:
                out.append(((*where, "target"), "remote: the remote tier is disabled"))
            if f.target in ("host", "nvme") and not getattr(sc.tiers, f.target).enabled:
                out.append(((*where, "target"), f"{f.target}: that tier is disabled"))
            if f.server is not None and (f.target != "remote" or f.server >= sc.remote.servers):
                out.append(((*where, "server"), "names no remote server of this scenario"))
        engine = getattr(f, "engine", None)
        if engine is not None and engine >= sc.cluster.engines:
            out.append(((*where, "engine"), f"no engine {engine} (engines: {sc.cluster.engines})"))
        if isinstance(f, StallBurst) and f.until is None:
            out.append(((*where, "until"), "a stall burst needs an end"))
    ten = sc.tenancy
    if ten.ttl is not None and ten.ttl < 1.0:
        out.append((("tenancy", "ttl"), "must be at least 1 s (expiry is checked every ttl/4)"))
    if ten.isolation == "none":
        if ten.quota:
            out.append((("tenancy", "quota"), "per-tenant quotas need isolation: tenant"))
        if ten.deletions:
            out.append((("tenancy", "deletions"), "deleting a tenant needs isolation: tenant"))
    if isinstance(w, SyntheticWorkload) and w.tenants is not None and w.tenants.weights is not None:
        tw = w.tenants.weights
        if len(tw) != w.tenants.count or sum(tw) <= 0:
            out.append((("workload", "tenants", "weights"), "need one weight per tenant, sum > 0"))
    if "remote" in sc.tenancy.quota and not sc.remote.enabled:
        out.append((("tenancy", "quota", "remote"), "the remote tier is disabled"))
    if w.window.end is not None and w.window.end <= w.window.start:
        out.append((("workload", "window", "end"), "must be after window.start"))
    return out


def _remote_kind_checks(sc: Scenario) -> list[tuple[tuple[Any, ...], str]]:
    """What a remote store kind cannot do (docs/data-path.md, "Remote store kinds")."""
    rc = sc.remote
    if not rc.enabled:
        return []
    out: list[tuple[tuple[Any, ...], str]] = []
    if rc.path == "gpudirect" and rc.kind == "object_store":
        out.append(
            (
                ("remote", "path"),
                "gpudirect: an object store answers over HTTP into host memory; use bounce "
                "(or null)",
            )
        )
    elif rc.gpudirect and not sc.node.gpudirect_rdma:
        out.append(  # named where the user said it (remote.path often comes from the kind)
            (
                ("node", "gpudirect_rdma"),
                f"false: no NIC path into HBM, and the {rc.kind} store reads by GPUDirect "
                "RDMA (remote.path: gpudirect); set remote.path: bounce (through host memory)",
            )
        )
    if rc.gpudirect and rc.codec is not None and rc.codec.on == "cpu":
        out.append(
            (
                ("remote", "codec", "on"),
                "cpu: a GPUDirect GET lands in HBM, out of the CPU's reach; decode on the gpu "
                "or set remote.path: bounce",
            )
        )
    return out


def _cost_checks(sc: Scenario) -> list[tuple[tuple[Any, ...], str]]:
    """The layout's price per hour (as kvsim.results.records.usd_per_hour adds it up)
    must stay below MAX_USD_PER_HOUR: past it the prices are a typo, and the hourly or
    per-token cost could overflow to infinity. Reported at the price of the largest
    part."""
    c = sc.cost
    if c is None:
        return []
    engines, t, rc = sc.cluster.engines, sc.tiers, sc.remote
    gb_hour = 1e-9 / 730.0
    parts = [("gpu_node_hour", f"{engines} engine(s)", engines * c.gpu_node_hour)]
    if t.host.enabled:
        what = f"tiers.host.capacity on {engines} engine(s)"
        parts.append(("dram_gb_month", what, engines * t.host.capacity * gb_hour * c.dram_gb_month))
    if t.nvme.enabled:
        what = f"tiers.nvme.capacity on {engines} engine(s)"
        parts.append(("nvme_gb_month", what, engines * t.nvme.capacity * gb_hour * c.nvme_gb_month))
    if rc.enabled:
        mem = rc.servers * rc.capacity * gb_hour * c.remote_memory_gb_month
        parts.append(("remote_memory_gb_month", f"remote.capacity on {rc.servers} server(s)", mem))
        parts.append(
            ("remote_server_hour", f"{rc.servers} server(s)", rc.servers * c.remote_server_hour)
        )
    total = sum(usd for _, _, usd in parts)
    if total <= MAX_USD_PER_HOUR:  # (False for an overflow to inf or NaN)
        return []
    inf = float("inf")
    name, what, usd = max(parts, key=lambda p: p[2] if p[2] == p[2] else inf)
    shown = f"${usd:.3g}" if usd < inf else "more than any float holds"
    return [
        (
            ("cost", name),
            f"prices the layout ({what}) at {shown} an hour, past any real plan "
            f"(at most ${MAX_USD_PER_HOUR:g} an hour in all): a typo?",
        )
    ]


def _peer_checks(sc: Scenario) -> list[tuple[tuple[Any, ...], str]]:
    """The peer tier reads other engines' host tiers: it needs two engines and a host
    tier; its engine part of T0 is at most T0; layer-wise loading needs it to stream."""
    peer = sc.tiers.peer
    if not peer.enabled:
        return []
    out: list[tuple[tuple[Any, ...], str]] = []
    where = ("tiers", "peer", "enabled")
    if sc.cluster.engines < 2:
        out.append((where, "a peer tier needs at least two engines (cluster.engines is 1)"))
    if not sc.tiers.host.enabled:
        out.append(
            (where, "a peer tier reads other engines' host tiers, and the host tier is disabled")
        )
    if peer.t0_engine > peer.t0:
        out.append(
            (("tiers", "peer", "t0_engine"), f"is larger than t0 ({peer.t0:g} s): lower it too")
        )
    if sc.engine.layerwise and sc.cluster.load_policy.name != "recompute" and not peer.streams:
        out.append(
            (
                ("engine", "layerwise"),
                "the peer tier cannot stream layer by layer (tiers.peer.streams: false): set "
                "engine.layerwise: false, tiers.peer.enabled: false, or tiers.peer.streams: "
                "true if its connector loads layer by layer",
            )
        )
    return out


def _timing_checks(sc: Scenario) -> list[tuple[tuple[Any, ...], str]]:
    """One time model: a roofline, or a complete grid (which must be a valid table)."""
    t = sc.timing
    grid = (t.new_tokens, t.cached_tokens, t.seconds)
    given = [g is not None for g in grid]
    if t.roofline is not None:
        if any(given):
            return [(("timing", "roofline"), "give a roofline or a table, not both")]
        if sc.node.hbm_bandwidth_per_gpu is None:
            return [(("node", "hbm_bandwidth_per_gpu"), "the roofline step model needs it")]
        r = t.roofline
        if r.ops is None and r.achievable_flops is None:
            return [
                (
                    ("timing", "roofline", "achievable_flops"),
                    "missing: the roofline needs it (or `ops`, the per-operation model)",
                )
            ]
        if r.ops is not None and r.ops.expert_flops_per_token > r.linear_flops_per_token:
            return [
                (
                    ("timing", "roofline", "ops", "expert_flops_per_token"),
                    f"exceeds linear_flops_per_token ({r.linear_flops_per_token:g}): the "
                    "experts' FLOPs are part of the linear FLOPs",
                )
            ]
        return []
    if not all(given):
        names = ("new_tokens", "cached_tokens", "seconds")
        missing = [n for n, g in zip(names, given, strict=True) if not g]
        return [(("timing",), f"give roofline, a table, or the grid ({', '.join(missing)})")]
    try:
        TimingTable(t.new_tokens or [], t.cached_tokens or [], t.seconds or [], t.scale)
    except ValueError as e:  # the table refuses itself; report it at its field
        field, _, reason = str(e).partition(": ")
        return [(("timing", field), reason)]
    return []


def _colocated_checks(sc: Scenario) -> list[tuple[tuple[Any, ...], str]]:
    """engine.mode colocated (docs/engine-model.md, "Co-located serving"): vLLM's rule that
    a step's token budget holds a token for every request it may take; swap only there."""
    e = sc.engine
    if e.mode != "colocated":
        if e.preemption == "swap":
            return [
                (
                    ("engine", "preemption"),
                    "swap moves decoding requests' KV to host memory: it needs engine.mode "
                    "colocated (prefill mode: hold | recompute)",
                )
            ]
        return []
    out: list[tuple[tuple[Any, ...], str]] = []
    if e.batching == "serial":
        out.append((("engine", "batching"), "colocated decoding needs chunked batching"))
    elif e.max_batched_tokens < e.max_batch_requests:
        out.append(
            (
                ("engine", "max_batched_tokens"),
                f"{e.max_batched_tokens} is smaller than engine.max_batch_requests "
                f"({e.max_batch_requests}): under engine.mode colocated every request in a "
                "step takes at least one token of the budget (vLLM refuses this too)",
            )
        )
    if sc.cluster.handoff.enabled:
        out.append(
            (
                ("cluster", "handoff", "enabled"),
                "a P/D hand-off ships the KV to a decode pool: not with engine.mode "
                "colocated, which decodes on the same engine",
            )
        )
    return out


def _engine_checks(sc: Scenario) -> list[tuple[tuple[Any, ...], str]]:
    out: list[tuple[tuple[Any, ...], str]] = []
    e = sc.engine
    block = sc.workload.block_tokens
    if e.batching == "chunked" and e.max_batched_tokens < block:
        out.append(
            (
                ("engine", "max_batched_tokens"),
                f"is smaller than a block ({block} tokens, workload.block_tokens)",
            )
        )
    out += _colocated_checks(sc)
    tiers = [("tiers", "host"), ("tiers", "nvme"), ("remote",)]
    for where in tiers:
        tier = sc.remote if where == ("remote",) else getattr(sc.tiers, where[1])
        if tier.t0_engine > tier.t0:
            out.append(((*where, "t0_engine"), f"is larger than t0 ({tier.t0:g} s): lower it too"))
    r = sc.timing.roofline
    if r is not None and r.experts_per_token > r.experts:
        out.append((("timing", "roofline", "experts_per_token"), f"exceeds experts ({r.experts})"))
    if r is not None:
        g = sc.node.gpus
        if r.tp * sc.node.pcp > g or g % (r.tp * sc.node.pcp):
            out.append(
                (
                    ("timing", "roofline", "tp"),
                    f"tp x node.pcp ({r.tp} x {sc.node.pcp}) must divide node.gpus ({g})",
                )
            )
        if r.pp > 1 and r.ops is None:
            out.append((("timing", "roofline", "pp"), "pipeline stages need `ops`"))
        elif r.pp > 1 and g % (r.tp * sc.node.pcp * r.pp):
            out.append(
                (
                    ("timing", "roofline", "pp"),
                    f"tp x node.pcp x pp ({r.tp} x {sc.node.pcp} x {r.pp}) must divide "
                    f"node.gpus ({g})",
                )
            )
        for name in ("ep", "dense_weight_shards", "expert_weight_shards"):
            v = getattr(r, name)
            if v is not None and (v > g or g % v):
                out.append((("timing", "roofline", name), f"must divide node.gpus ({g}), got {v}"))
    if e.layerwise:
        if sc.model.kv_layout is None:
            out.append((("engine", "layerwise"), "needs model.kv_layout (its layer count)"))
        if sc.cluster.load_policy.name != "recompute":
            for where in tiers:
                tier = sc.remote if where == ("remote",) else getattr(sc.tiers, where[1])
                if tier.enabled and not tier.streams:
                    name = ".".join(where)
                    out.append(
                        (
                            ("engine", "layerwise"),
                            f"the {where[-1]} tier cannot stream layer by layer ({name}.streams: "
                            f"false): set engine.layerwise: false, {name}.enabled: false, or "
                            f"{name}.streams: true if its connector loads layer by layer",
                        )
                    )
    return out
