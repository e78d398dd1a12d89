"""Cases shared by the simulator's test files (test_restore, test_lookup, test_puts, ...):
the "one remote GET" scenario, run once per load policy and kept for every test that
reads it."""

from __future__ import annotations

import functools

import pytest

import kvsim
from kvsim import api
from kvsim.results.records import Results

from conftest import req, toy

# a unit test that drives a simulator module with stand-in objects (a namespace for a job,
# a node or a flow): the compiled core's classes check their arguments' types and refuse
# them, so it runs on the pure-Python core only (README's test command; .ci/run's first
# part); tests/test_build.py compares the two cores' results on whole runs
pure_only = pytest.mark.skipif(
    kvsim.compiled(), reason="drives the module with stand-in objects the compiled core refuses"
)

REMOTE_ON = {"remote": {"enabled": True}}


def by_id(results: Results) -> dict:
    """The per-request rows by request id."""
    return {int(r.id): r for r in results.requests.itertuples()}


@functools.cache
def one_remote_get(policy: str) -> Results:
    """P computes blocks 1-3 and puts them (300 kB at 1 MB/s, landed by t = 0.699).
    A (t = 10) restores 299 tokens remotely: T0 0.5 s + 0.299 s, then computes 1 token.
    B (t = 10.1) is cold: 200 tokens, 0.299 s. Run once per load policy (the results are
    shared: read them, never change them)."""
    reqs = [req(0, 0.0, 300, [1, 2, 3]), req(1, 10.0, 300, [1, 2, 3]), req(2, 10.1, 200, [7, 8])]
    sc = toy(cluster={"load_policy": policy}, **REMOTE_ON)
    return api.run(sc, requests=reqs)
