"""The two workloads the measuring scripts (instructions.py, events.py) run: the Mooncake
conversation replay and the first N requests of scale.yaml, as a Simulation ready to run."""

from __future__ import annotations

import sys
from pathlib import Path

from kvsim.api import load
from kvsim.sim.simulation import Simulation
from kvsim.workload.mooncake import read_mooncake

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_TRACE = ROOT.parent / "shared" / "traces" / "mooncake" / "conversation_trace.jsonl"


def simulation(workload: str, trace: Path = DEFAULT_TRACE, requests: int = 20_000) -> Simulation:
    """``replay`` (the trace, parsed before the run) or ``scale`` (``requests`` of it); a
    missing trace exits 2 naming it."""
    if workload == "replay":
        if not trace.exists():
            print(f"trace not found: {trace} (pass --trace PATH)", file=sys.stderr)
            sys.exit(2)
        sc = load(ROOT / "scenarios" / "mooncake-conversation.yaml", {"workload.path": str(trace)})
        return Simulation(sc, requests=list(read_mooncake(trace, sc.workload.block_tokens)))
    sc = load(ROOT / "benchmarks" / "scale.yaml", {"workload.requests": requests})
    return Simulation(sc)
