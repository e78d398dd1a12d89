"""Benchmark: what co-located serving (``engine.mode: colocated``) costs in wall time.

    python benchmarks/colocated.py [--requests N] [--repeat K]

Runs scenarios/colocated.yaml twice per round in one process, alternating: as shipped
(co-located: every request decodes its output, one token a step) and with ``engine.mode:
prefill`` (the same workload, prefill only), and prints each simulation's wall time, its
engine steps and the ratio colocated / prefill (best of the rounds). The co-located run
does more work by design (every output token is a step's chunk), so the ratio is the price
of the mode, not a slowdown of the prefill path: prefill-mode speed is measured against the
tree before the change (benchmarks/README.md, "Issue 42"). Speeds depend on the machine;
this is not a test.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from kvsim import compiled
from kvsim.api import load
from kvsim.sim.simulation import Simulation

ROOT = Path(__file__).resolve().parent.parent


def one(mode: str, requests: int) -> tuple[float, int]:
    """Seconds to simulate the scenario in ``mode``, and its engine steps."""
    sc = load(
        ROOT / "scenarios" / "colocated.yaml",
        {"workload.requests": requests, "engine.mode": mode},
    )
    sim = Simulation(sc)
    t0 = time.perf_counter()
    sim.run()
    wall = time.perf_counter() - t0
    return wall, sum(e.steps for e in sim.engines)


def main() -> None:
    ap = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    ap.add_argument("--requests", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    best = {"prefill": float("inf"), "colocated": float("inf")}
    steps = {"prefill": 0, "colocated": 0}
    for _ in range(args.repeat):
        for mode in ("prefill", "colocated"):
            wall, n = one(mode, args.requests)
            best[mode] = min(best[mode], wall)
            steps[mode] = n
            print(f"  {mode:9s} {wall:7.3f} s  {n:,} steps")
    core = "compiled" if compiled() else "pure Python"
    print(
        f"scenarios/colocated.yaml, {args.requests:,} requests, {core} core, best of "
        f"{args.repeat}: prefill {best['prefill']:.3f} s ({steps['prefill']:,} steps), "
        f"colocated {best['colocated']:.3f} s ({steps['colocated']:,} steps); ratio "
        f"{best['colocated'] / best['prefill']:.2f}, per step "
        f"{best['colocated'] / steps['colocated'] / (best['prefill'] / steps['prefill']):.2f}"
    )


if __name__ == "__main__":
    main()
