"""Benchmark: a million-request synthetic workload (multi-turn sessions, 8 engines, all four
tiers; benchmarks/scale.yaml) run to completion, with wall time and peak memory.

    python benchmarks/scale.py [--requests N]

Reports the workload generation (which happens while the clock runs: requests are drawn
as the simulation consumes them), the simulation, building the results, and the peak
resident memory of the process. Speeds depend on the machine; this is not a test.
"""

from __future__ import annotations

import argparse
import resource
import time
from pathlib import Path

from kvsim import compiled
from kvsim.api import load
from kvsim.results.records import collect
from kvsim.sim.simulation import Simulation

HERE = Path(__file__).resolve().parent


def main() -> None:
    ap = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    ap.add_argument("--requests", type=int, default=1_000_000)
    args = ap.parse_args()
    sc = load(HERE / "scale.yaml", {"workload.requests": args.requests})
    t0 = time.perf_counter()
    sim = Simulation(sc)
    out = sim.run()
    t1 = time.perf_counter()
    res = collect(out, sc)
    t2 = time.perf_counter()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    s = res.summary
    print(
        f"scenario {sc.name}: {args.requests:,} requests, {sc.cluster.engines} engines, "
        f"tiers {', '.join(s['tiers'])}; "
        + ("compiled core" if compiled() else "pure-Python core (pip install . compiles it)")
    )
    print(
        f"simulate {t1 - t0:.1f} s ({args.requests / (t1 - t0):,.0f} requests/s), results "
        f"{t2 - t1:.1f} s, total {t2 - t0:.1f} s; peak memory {peak:,.0f} MB"
    )
    print(
        f"simulated {s['duration_s']:,.0f} s; TTFT p50 {s['ttft_p50_s']:.3f} s, p99 "
        f"{s['ttft_p99_s']:.3f} s; tokens by source "
        + ", ".join(f"{k} {100 * v:.1f}%" for k, v in s["token_source_frac"].items())
    )


if __name__ == "__main__":
    main()
