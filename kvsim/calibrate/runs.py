"""A measurement row as a kvsim run, and the runs of a set of rows at given constants.

What this module owns: :func:`row_requests` (a row's workload: ``n`` prompts of the row's
length, each its cached prefix and its own blocks, after a warm-up request that puts the
prefix where the row says it is), :func:`row_overrides` (how the row's clients send them
and where its prefix sits), :func:`simulate_row` (the row's TTFT statistic on a loaded
scenario) and :func:`simulate_rows` (a scenario loaded at some constants' values, every
row run on it: what worker processes run).

A row's run, on the scenario as the user wrote it (its engines, tiers, policies):

- at t = 0 a warm-up request of the cached prefix's whole blocks (a row's cached tokens
  are rounded down to whole blocks: an engine caches whole blocks), as vLLM's and
  SGLang's benchmarks send one before measuring; the measured requests start once it is
  long over, :data:`GAP` (at least 60 s, 100 x its lone time), and its record is left
  out of the statistic (by request id);
- ``n`` prompts of the row's length: the prefix's blocks, then blocks of their own; all
  due at once with a concurrency (a closed loop: ``workload.concurrency``) or no cap, or
  at Poisson times at the row's rate (a stream named after the file's digest and the
  row, under the scenario's seed: the same arrivals at every evaluation);
- ``n`` is 1 for one request at a time (every request then sees the same idle engine),
  else the row's request count, at most ``max_requests``;
- ``tier: host``: the GPU prefix cache is 0 bytes and the host tier writes through, so
  the warm-up's blocks are in host memory only (as vLLM's offloading benchmarks measure
  CPU hits: GPU prefix caching off); ``tier: gpu``: as the scenario is.

The statistic is the mean (or median) TTFT of the measured requests; the tokens each
tier served them say where kvsim found the prefix (the residual plot's tier).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from kvsim import api
from kvsim.calibrate.rows import Row
from kvsim.config.schema import Scenario
from kvsim.errors import InputError
from kvsim.physics.step import scenario_lone_seconds
from kvsim.results.records import frame
from kvsim.rng import stream
from kvsim.sim.simulation import Simulation
from kvsim.workload.request import Request

FAR = 10**12  # block ids far from any a scenario generates
GAP = 60.0  # s: the least gap between the warm-up and the measured requests
SOURCES = ("gpu", "host", "nvme", "peer", "remote")


@dataclass(frozen=True)
class Outcome:
    """A row's simulated TTFT statistic (s) and the tier that served most of its cached
    tokens ("none": none were served from a tier)."""

    seconds: float
    served: str


def row_requests(sc: Scenario, row: Row, max_requests: int) -> tuple[list[Request], float]:
    """The row's requests and when the measured ones start (see the module docstring)."""
    bt = sc.workload.block_tokens
    blocks = -(-row.prompt_tokens // bt)
    cached = min(row.cached_tokens // bt, blocks - 1)
    prefix = tuple(range(FAR, FAR + cached))
    reqs: list[Request] = []
    at = 0.0
    if cached:
        reqs.append(Request(0, 0.0, cached * bt, 1, prefix))
        at = max(GAP, 100.0 * scenario_lone_seconds(sc)(cached * bt, 0))
    n = n_measured(row, max_requests)
    if row.rate is not None:
        rng = stream(sc.seed, f"calibrate {row.digest} {row.where.rsplit(':', 1)[-1]}")
        times = at + np.cumsum(rng.exponential(1.0 / row.rate, n))
    else:
        times = np.full(n, at)
    base = FAR + cached
    own = blocks - cached
    for i in range(n):
        ids = prefix + tuple(range(base + i * own, base + (i + 1) * own))
        reqs.append(Request(len(reqs), float(times[i]), row.prompt_tokens, 1, ids))
    return reqs, at


def row_overrides(sc: Scenario, row: Row, at: float) -> dict[str, Any]:
    """The row's clients and prefix placement as overrides of the scenario."""
    over: dict[str, Any] = {
        "workload.concurrency": row.concurrency,
        "run.warmup": f"{at!r} s",  # (the warm-up request's records are left out by id)
        "run.max_time": None,
        "run.prompt_range": None,
    }
    if row.tier == "host":
        if not sc.tiers.host.enabled:
            raise InputError(
                "tier host: the scenario's host tier is disabled (tiers.host.enabled), so no "
                "row can find its prefix in host memory",
                where=row.where,
            )
        over["tiers.gpu.capacity"] = "0 GB"
        over["tiers.host.write_policy"] = "write_through"
    return over


def simulate_row(sc: Scenario, row: Row, max_requests: int) -> Outcome:
    """The row's TTFT statistic on the loaded scenario ``sc``."""
    reqs, at = row_requests(sc, row, max_requests)
    run_sc = api.load(sc, row_overrides(sc, row, at))
    # the simulation's records only: a run's summary (api.run) costs more than the run
    df = frame(Simulation(run_sc, requests=reqs).run().rows)
    measured = df[df["id"].to_numpy() >= len(reqs) - n_measured(row, max_requests)]
    ttft = measured["ttft_s"].to_numpy(dtype=float)
    if len(ttft) == 0 or not np.isfinite(ttft).all():
        lost = int((~np.isfinite(ttft)).sum()) if len(ttft) else len(reqs)
        raise InputError(
            f"kvsim dropped {lost} of the row's {len(ttft)} requests on this scenario (a "
            "request larger than the engine can hold?)",
            where=row.where,
        )
    value = float(np.mean(ttft)) if row.statistic == "mean" else float(np.median(ttft))
    served = {t: float(measured[f"tokens_{t}"].sum()) for t in SOURCES if f"tokens_{t}" in df}
    top = max(served, key=lambda t: served[t]) if served else "none"
    return Outcome(value, top if served.get(top, 0.0) > 0 else "none")


def simulate_rows(
    scenario: str,
    overrides: Sequence[str],
    seed: int | None,
    rows: Sequence[Row],
    max_requests: int,
) -> list[Outcome]:
    """Every row's outcome on the scenario file loaded with ``overrides`` (the
    constants' values among them): what one evaluation, or one worker's share of it,
    runs."""
    sc = api.load(scenario, list(overrides), seed)
    return [simulate_row(sc, row, max_requests) for row in rows]


def n_measured(row: Row, max_requests: int) -> int:
    """The measured requests a row's run simulates."""
    return 1 if row.lone else min(row.requests, max_requests)


def cost(row: Row, max_requests: int) -> float:
    """A row's relative run time (its simulated requests), to share rows among workers."""
    n = n_measured(row, max_requests)
    return n * max(1.0, math.log2(max(row.prompt_tokens, 2)))
