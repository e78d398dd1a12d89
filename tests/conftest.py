"""Shared test helpers: a toy scenario with round numbers, request builders, and stand-ins
for finished requests (records the per-request table reads by its declared sources)."""

from __future__ import annotations

import copy
import os
import signal
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from kvsim.config.loader import deep_merge, scenario_from_dict
from kvsim.config.schema import Scenario
from kvsim.sim.job import Job
from kvsim.sim.rows import DEFAULT, Column
from kvsim.workload.request import Request

# A shell starts a background job (`cmd &`, nohup) with SIGINT ignored; every process it
# starts inherits that, and kvsim respects it (kvsim/interrupts.py: an ignored SIGINT
# stays ignored). The tests that send SIGINT stand for a user at a terminal: give this
# process, and so the processes the tests start, a terminal's default.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

ROOT = Path(__file__).resolve().parent.parent
SCENARIOS = ROOT / "scenarios"
SHARED_TRACES = ROOT.parent / "shared" / "traces"
# property and fuzz tests run this many times their usual examples (KVSIM_FUZZ_SCALE=20
# for a thorough run before a release; CI runs the default)
FUZZ_SCALE = int(os.environ.get("KVSIM_FUZZ_SCALE", "1"))


def examples(n: int) -> int:
    """Hypothesis examples for a test that runs ``n`` by default."""
    return n * FUZZ_SCALE


# Round numbers for hand computation: 1,000 B per token, 100-token blocks, prefill time
# t(new, cached) = 0.1 s + (new - 1) ms whatever is cached, no latencies, 1 MB/s remote,
# instant GPU-to-host staging, T0 all waited by the request (t0_engine 0). The engine is
# serial (one whole prompt per step); batching tests ask for ``engine: chunked``.
TOY: dict[str, Any] = {
    "name": "toy",
    "profile": "b300-pcp8-glm5",
    "seed": 0,
    "node": {
        "h2d_latency": "0 s",
        "nvme_latency": "0 s",
        "network_latency": "0 s",
        "d2h_per_gpu": "1 EB/s",
        "nvlink_per_gpu": "1 EB/s",
        # copies into HBM take no SM time (the schema's default; the default profile's
        # LMCache copy kernel is tested in tests/test_copy_engine.py)
        "copy_engine": "dma",
    },  # staging before puts and the NVLink hand-off: negligible unless a test sets them
    "model": {"name": "toy", "kv_bytes_per_token": "1000 B"},
    "timing": {
        "new_tokens": [1, 1001],
        "cached_tokens": [0, 1000],
        "seconds": [[0.1, 0.1], [1.1, 1.1]],
    },
    "tiers": {
        "gpu": {"capacity": "0 B"},
        "host": {"enabled": False, "t0_engine": "0 s"},
        "nvme": {"enabled": False, "t0_engine": "0 s"},
    },
    "remote": {
        "enabled": False,
        "bandwidth": "1 MB/s",
        "op_overhead": "0 s",
        "t0": "500 ms",
        "t0_engine": "0 s",
        "capacity": "1 GB",
    },
    "cluster": {"engines": 1, "load_policy": "sync"},
    "engine": {"batching": "serial"},
    "run": {"warmup": "0 s"},  # hand-computed cases measure every request
    "workload": {
        "kind": "synthetic",
        "requests": 1,
        "block_tokens": 100,
        "arrivals": {"process": "constant", "rate": "1/s"},
        "prompt_tokens": {"dist": "fixed", "value": 100},
    },
}


def toy(**sections: Any) -> Scenario:
    """The toy scenario with some sections deep-merged over it."""
    return scenario_from_dict(deep_merge(copy.deepcopy(TOY), sections))


MD1_SERVICE = 0.31  # seconds: every 16,384-token prompt, whatever is cached


def md1(seed: int, rate: float, requests: int, warmup: str) -> Scenario:
    """One serial engine, no cache tier, Poisson arrivals at ``rate`` per second, every
    prompt 16,384 tokens served in exactly MD1_SERVICE: an M/D/1 queue."""
    d = MD1_SERVICE
    return toy(
        seed=seed,
        timing={
            "new_tokens": [1, 16384],
            "cached_tokens": [0, 1],
            "seconds": [[0.02, 0.02], [d, d]],
        },
        workload={
            "requests": requests,
            "arrivals": {"process": "poisson", "rate": f"{rate}/s"},
            "prompt_tokens": {"dist": "fixed", "value": 16384},
        },
        run={"warmup": warmup},
    )


def req(rid: int, t: float, tokens: int, ids: list[int] | tuple[int, ...]) -> Request:
    return Request(rid, t, tokens, 1, tuple(ids))


def shared_trace(*parts: str) -> Path:
    """A file under ../shared/traces, or skip the test with the reason."""
    p = SHARED_TRACES.joinpath(*parts)
    if not p.exists():
        pytest.skip(f"public trace not present: {p} (see traces/README.md)")
    return p


def record(values: dict[str, Any]) -> SimpleNamespace:
    """A stand-in for a finished request whose sources hold ``values`` (by source path,
    kvsim.sim.rows: ``req.id``, ``queue_wait``; per-tier lists by name)."""
    rec = SimpleNamespace(req=SimpleNamespace())
    for path, v in values.items():
        obj = rec
        *parents, last = path.split(".")
        for p in parents:
            obj = getattr(obj, p)
        setattr(obj, last, v)
    # what the row table reads: Job.record()'s fields (those not given: None)
    rec.record = lambda: tuple(getattr(rec, f, None) for f in Job.RECORD)
    return rec


def record_sources(
    value: Callable[[Column], Any], tiers: int = 5, cols: tuple[Column, ...] = DEFAULT
) -> dict[str, Any]:
    """A value for every source of the columns ``cols`` (per-tier lists of ``tiers``,
    tokens one longer: the computed last), and the restore time behind ``load_s``, each
    drawn by ``value(column)``."""
    out: dict[str, Any] = {"load_s": value(Column("load_s", "d", ""))}
    for col in cols:
        src = col.source
        if col.derived is not None:
            continue
        if isinstance(src, tuple):
            name = src[0]
            if name not in out:
                n = tiers + 1 if name == "tokens" else tiers
                out[name] = [value(col) for _ in range(n)]
        else:
            out[src] = value(col)
    return out
