"""The Python entry points: load a scenario, run it, get Results back (no files written)."""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from kvsim.config.dump import scenario_to_dict
from kvsim.config.loader import apply_overrides, load_scenario, scenario_from_dict, validate
from kvsim.config.schema import MooncakeWorkload, Scenario, SyntheticWorkload
from kvsim.errors import InputError
from kvsim.physics.client import Client, get_rate
from kvsim.physics.costmodel import CostModel
from kvsim.physics.step import scenario_lone_seconds
from kvsim.results.records import Results, collect
from kvsim.sim.simulation import Progress, Simulation
from kvsim.sim.tiers import KINDS, Tier
from kvsim.workload.request import Request

Overrides = Sequence[str] | Mapping[str, Any] | None


def load(
    scenario: Scenario | str | os.PathLike[str],
    overrides: Overrides = None,
    seed: int | None = None,
) -> Scenario:
    """A validated Scenario from a path (or a Scenario, with overrides applied)."""
    if isinstance(scenario, Scenario):
        if not overrides and seed is None:
            return scenario
        data = scenario_to_dict(scenario)
        if overrides:
            _no_new_profile(overrides)
            apply_overrides(data, {}, overrides, label="overrides: ")
        if seed is not None:
            apply_overrides(data, {}, {"seed": seed}, label="seed=")
        return validate(data, {}, "overrides")
    return load_scenario(scenario, overrides, seed)


def _no_new_profile(overrides: Mapping[str, Any] | Sequence[str]) -> None:
    """A loaded Scenario has its profile's values merged in: a ``profile`` override would
    rename it and change nothing else (a silent wrong answer). Refused: the profile is
    chosen where the scenario file is loaded (``load(path, overrides)``, as ``--set``)."""
    for key in overrides:
        text = str(key)
        if text.split("=", 1)[0].split(".", 1)[0].strip() == "profile":
            raise InputError(
                "a loaded scenario has its profile's values merged in already (a new "
                "profile would change its name only); set profile where the scenario file "
                "is loaded: load(PATH, overrides)",
                where=f"overrides: {text}",
            )


def run(
    scenario: Scenario | str | os.PathLike[str],
    overrides: Overrides = None,
    seed: int | None = None,
    *,
    progress: Progress | None = None,
    requests: Iterable[Request] | None = None,
    record_accesses: bool = False,
    tier_kinds: Sequence[type[Tier] | Tier] = KINDS,
) -> Results:
    """Run one scenario and return its Results.

    ``requests`` replaces the scenario's workload (any iterable of Request in time order);
    ``progress`` is called with the number of requests finished since its last call
    (None or False: no progress); ``record_accesses``: keep the access log as
    ``Results.accesses`` (a DataFrame, :mod:`kvsim.results.accesses`; written as
    accesses.parquet by :func:`kvsim.results.runfolder.write_results`); ``tier_kinds``:
    the tier kinds, the five built-in ones then a user's (:mod:`kvsim.sim.tiers`;
    docs/extending.md, "Adding a tier kind").
    """
    if progress is False:  # "no progress", as the CLI's --quiet
        progress = None
    if progress is not None and not callable(progress):
        raise TypeError(
            f"progress: expected None or a function called with the number of requests "
            f"finished, got {type(progress).__name__}"
        )
    sc = load(scenario, overrides, seed)
    sim = Simulation(
        sc,
        requests=requests,
        progress=progress,
        record_accesses=record_accesses,
        tier_kinds=tier_kinds,
    )
    results = collect(sim.run(), sc)
    if sim.recorder is not None:
        results.accesses = sim.recorder.frame()
    return results


def expected_requests(sc: Scenario) -> int | None:
    """How many requests a run will see, when that is cheap to know (for progress bars)."""
    w = sc.workload
    if w.window.start > 0 or w.window.end is not None:
        return None
    n: int | None = None
    if isinstance(w, SyntheticWorkload):
        n = w.requests
    else:
        try:
            with Path(w.path).open("rb") as fh:
                n = sum(1 for line in fh if line.strip())
        except OSError:
            return None
        if not isinstance(w, MooncakeWorkload):
            n -= 1  # CSV header
    return min(n, w.limit) if w.limit else n


def cost_model(
    sc: Scenario,
    tokens: int = 16384,
    t0: float | None = None,
    kv_bytes: float | None = None,
    rate: float | None = None,
) -> CostModel:
    """The two-term cost model of a scenario's remote tier (any term may be overridden);
    R = tokens / t(tokens) of one cold request alone on the scenario's engine."""
    lone = scenario_lone_seconds(sc)
    return CostModel(
        kv_bytes=kv_bytes if kv_bytes is not None else sc.model.kv_bytes,
        rate=rate if rate is not None else tokens / lone(tokens, 0),
        t0=t0 if t0 is not None else sc.remote.t0,
        reference_tokens=tokens,
    )


def tier_bandwidths(sc: Scenario) -> dict[str, tuple[float, float]]:
    """(bandwidth, T0) of each restore path of one engine, alone on its links. The remote
    store is given both ways: one whole-block server, and (with PCP ranks) per-rank shards
    on ``pcp`` servers in parallel (its configured sharding is one of the two)."""
    node, rc = sc.node, sc.remote
    out: dict[str, tuple[float, float]] = {}
    h2d = node.h2d_per_gpu * node.gpus
    if sc.tiers.host.enabled:
        out["host"] = (h2d, sc.tiers.host.t0)
    if sc.tiers.nvme.enabled:
        out["nvme"] = (min(h2d, node.nvme_read_per_drive * node.nvme_drives), sc.tiers.nvme.t0)
    s = sc.model.kv_bytes
    chunk = rc.chunk_tokens * s
    nic = node.nic_per_gpu * node.gpus
    ranks = min(node.pcp, rc.servers) if rc.sharding == "per_rank" else node.pcp
    # the server (payload rate and per-op cost) and the ranks' store clients (remote.client:
    # kvsim.physics.client), whichever binds: one client with whole chunks on one server,
    # or every rank's client with its shard of each chunk on its own server
    client = Client.of(rc.client)
    into = h2d  # into HBM over PCIe from host memory ...
    if rc.gpudirect:  # ... or by GPUDirect RDMA from the NIC: no host link, no client copy
        client = replace(client, copy_bandwidth=math.inf)
        into = math.inf
    bw, op = rc.bandwidth, rc.op_overhead
    unsharded = get_rate(chunk, 1, 1, node.pcp, False, client, bw, op)
    sharded = get_rate(chunk, 1, ranks, node.pcp, True, client, bw, op) if node.pcp > 1 else 0.0
    out["remote (one server)"] = (min(unsharded, nic, into), rc.t0)
    if node.pcp > 1:  # without context parallelism there are no ranks to shard over
        out[f"remote (per rank, {ranks} servers)"] = (min(sharded, nic, into), rc.t0)
    if sc.tiers.peer.enabled:  # another engine's host DRAM: its NIC out, this NIC in, PCIe
        out["peer"] = (min(nic, h2d), sc.tiers.peer.t0)
    return out


def profile_scenario(profile: str, overrides: Overrides = None) -> Scenario:
    """A scenario that is only a profile (with a one-request placeholder workload)."""
    placeholder = {
        "kind": "synthetic",
        "requests": 1,
        "prompt_tokens": {"dist": "fixed", "value": 16384},
        "arrivals": {"process": "constant", "rate": "1/s"},
    }
    return scenario_from_dict(
        {"name": profile, "profile": profile, "workload": placeholder},
        overrides,
        label=f"--profile {profile}",
    )
