"""The two workloads the measuring scripts (instructions.py, events.py) run: the Mooncake
conversation replay (by default from ``../shared/traces/mooncake/`` beside the checkout)
and the first N requests of scale.yaml, as a Simulation ready to run; and their shared
command-line arguments."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from kvsim.api import load
from kvsim.errors import InputError
from kvsim.sim.simulation import Simulation
from kvsim.workload.mooncake import read_mooncake

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_TRACE = ROOT.parent / "shared" / "traces" / "mooncake" / "conversation_trace.jsonl"


def positive(text: str) -> int:
    n = int(text)
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {n}")
    return n


def arguments(ap: argparse.ArgumentParser) -> None:
    """The workload's arguments: which one, how many requests, which trace."""
    ap.add_argument("workload", choices=["replay", "scale"])
    ap.add_argument("--requests", type=positive, default=20_000, help="scale: requests to run")
    ap.add_argument("--trace", type=Path, default=DEFAULT_TRACE, help="replay: the trace")


def simulation(workload: str, trace: Path = DEFAULT_TRACE, requests: int = 20_000) -> Simulation:
    """``replay`` (the trace, parsed before the run) or ``scale`` (``requests`` of it); a
    missing or malformed trace exits 2 with one line naming it."""
    try:
        if workload == "replay":
            if not trace.is_file():
                print(f"trace not found: {trace} (pass --trace PATH)", file=sys.stderr)
                sys.exit(2)
            sc = load(
                ROOT / "scenarios" / "mooncake-conversation.yaml", {"workload.path": str(trace)}
            )
            return Simulation(sc, requests=list(read_mooncake(trace, sc.workload.block_tokens)))
        sc = load(ROOT / "benchmarks" / "scale.yaml", {"workload.requests": requests})
        return Simulation(sc)
    except InputError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
