"""Benchmark: replay the Mooncake conversation trace on the default 8-engine, 4-tier
scenario and report simulated requests and SimPy events per wall-clock second, next to a
bare SimPy M/D/c queue (the textbook process-per-customer model) run in the same process
as a yardstick. The ratio is the figure to quote; absolute speeds depend on the machine.
Runs alternate (kvsim, then the yardstick), and two ratios are printed: the best kvsim run
against the best yardstick run, and the median over the pairs, which a shared machine
whose speed drifts within minutes moves less.

    python benchmarks/replay.py [--trace PATH] [--repeat N] [--plugin-lru]

``--plugin-lru`` also replays it with ``examples/python_lru.py`` (the built-in LRU written
as a plugin) on the GPU, host and NVMe tiers and reports the slow-down: what calling a
Python-written eviction policy from the core costs.
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from pathlib import Path

import numpy as np
import simpy
from workloads import DEFAULT_TRACE, ROOT

from kvsim import compiled
from kvsim.api import load
from kvsim.results.records import collect
from kvsim.sim.simulation import Simulation
from kvsim.workload.mooncake import read_mooncake


def events_scheduled(env: simpy.Environment) -> int:
    """Events SimPy scheduled so far (reads SimPy's internal event-id counter)."""
    return next(env._eid)


PLUGIN_LRU = {
    "plugins": [str(ROOT / "examples" / "python_lru.py")],
    **{f"tiers.{t}.eviction": "python_lru" for t in ("gpu", "host", "nvme")},
}


def bench_kvsim(trace: Path, extra: dict | None = None) -> dict[str, float]:
    overrides = {"workload.path": str(trace), **(extra or {})}
    sc = load(ROOT / "scenarios" / "mooncake-conversation.yaml", overrides)
    requests = list(read_mooncake(trace, sc.workload.block_tokens))  # parse outside the clock
    gc.collect()
    t = time.perf_counter()
    sim = Simulation(sc, requests=requests)
    out = sim.run()
    sim_wall = time.perf_counter() - t
    results = collect(out, sc)
    total_wall = time.perf_counter() - t
    return {
        "requests": len(out.rows),
        "events": events_scheduled(sim.env),
        "sim_wall_s": sim_wall,
        "with_collect_wall_s": total_wall,
        "ttft_p99_s": results.summary["ttft_p99_s"],
    }


def bench_mdc(customers: int, servers: int = 8, rho: float = 0.5, seed: int = 0) -> dict:
    """Bare SimPy M/D/c: one process per customer, a Resource of ``servers``."""
    service = 1.0
    rate = rho * servers / service
    gaps = np.random.default_rng(seed).exponential(1 / rate, customers).tolist()
    env = simpy.Environment()
    res = simpy.Resource(env, capacity=servers)
    waits: list[float] = []

    def customer(env: simpy.Environment):
        arrive = env.now
        with res.request() as req:
            yield req
            waits.append(env.now - arrive)
            yield env.timeout(service)

    def source(env: simpy.Environment):
        for g in gaps:
            yield env.timeout(g)
            env.process(customer(env))

    gc.collect()
    t = time.perf_counter()
    env.process(source(env))
    env.run()
    wall = time.perf_counter() - t
    return {"requests": len(waits), "events": events_scheduled(env), "sim_wall_s": wall}


def main() -> None:
    ap = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    ap.add_argument(
        "--trace",
        type=Path,
        default=DEFAULT_TRACE,
        help="the Mooncake conversation trace (default: %(default)s)",
    )
    ap.add_argument(
        "--repeat", type=int, default=3, help="runs of each (in pairs); the best is reported"
    )
    ap.add_argument(
        "--plugin-lru", action="store_true", help="also time the LRU written as a plugin"
    )
    args = ap.parse_args()
    if not args.trace.exists():
        print(f"trace not found: {args.trace} (pass --trace PATH)", file=sys.stderr)
        sys.exit(2)
    # each kvsim run is followed by a yardstick run, so that a pair sees the same machine
    # (a shared VM's speed drifts within minutes); the best of each is reported as well
    pairs = []
    for _ in range(args.repeat):
        kr = bench_kvsim(args.trace)
        pairs.append((kr, bench_mdc(kr["requests"])))
    k = min((kr for kr, _ in pairs), key=lambda r: r["sim_wall_s"])
    m = min((mr for _, mr in pairs), key=lambda r: r["sim_wall_s"])
    paired = sorted(
        (kr["requests"] / kr["sim_wall_s"]) / (mr["requests"] / mr["sim_wall_s"])
        for kr, mr in pairs
    )
    print(f"trace: {args.trace}; " + ("compiled core" if compiled() else "pure-Python core"))
    for name, r in (("kvsim 8 engines, 4 tiers", k), ("bare SimPy M/D/8", m)):
        print(
            f"{name:<26} {r['requests']:>7} requests  {r['events']:>8} events  "
            f"{r['sim_wall_s']:6.3f} s  {r['requests'] / r['sim_wall_s']:>9,.0f} req/s  "
            f"{r['events'] / r['sim_wall_s']:>10,.0f} events/s"
        )
    print(
        f"kvsim incl. building results: {k['with_collect_wall_s']:.3f} s "
        f"({k['requests'] / k['with_collect_wall_s']:,.0f} req/s)"
    )
    print(
        f"ratio kvsim / M/D/8 (requests per second): "
        f"{(k['requests'] / k['sim_wall_s']) / (m['requests'] / m['sim_wall_s']):.3f}"
    )
    print(
        f"paired ratio (each kvsim run / the M/D/8 run after it): median "
        f"{float(np.median(paired)):.3f}, range {paired[0]:.3f} to {paired[-1]:.3f} "
        f"over {len(paired)} pairs"
    )
    if args.plugin_lru:
        p = min(
            (bench_kvsim(args.trace, PLUGIN_LRU) for _ in range(args.repeat)),
            key=lambda r: r["sim_wall_s"],
        )
        same = "same" if p["ttft_p99_s"] == k["ttft_p99_s"] else "DIFFERENT"
        print(
            f"python_lru plugin on gpu/host/nvme: {p['sim_wall_s']:.3f} s, "
            f"{p['sim_wall_s'] / k['sim_wall_s']:.2f}x the built-in lru ({same} TTFT p99)"
        )


if __name__ == "__main__":
    main()
