"""TTFT's parts: every wait a request goes through is in exactly one of them.

``lost_s + queue_wait_s + load_s + compute_s + store_s == ttft_s`` for every request under
every policy: each prefetch policy (none, best_effort, wait_complete, timeout, a plugin's
that waits or not), load policy (sync, async, recompute, auto, a plugin's blocking or
not), batching mode, layer-wise loading, scheduler, preemption, tenancy rule and fault.
``load_s`` holds the wait for a prefetch into host (``load_prefetch_s``) as well as the
restore.
"""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvsim import plugins
from kvsim.results.records import collect
from kvsim.sim.simulation import Simulation
from kvsim.workload.request import Request

from conftest import examples, req, toy

PARTS = ["lost_s", "queue_wait_s", "load_s", "compute_s", "store_s"]


class WaitAll(plugins.PrefetchPolicy):
    wait = True

    def fetch_blocks(self, request, sources):
        return len(sources)


class FetchHalf(plugins.PrefetchPolicy):
    def fetch_blocks(self, request, sources):
        return len(sources) // 2


class RestoreAllAsync(plugins.LoadPolicy):
    blocking = False

    def restore_blocks(self, request, sources, estimate):
        return len(sources)


class RestoreHalfSync(plugins.LoadPolicy):
    def restore_blocks(self, request, sources, estimate):
        return len(sources) // 2


class Newest(plugins.SchedulingPolicy):
    def priority(self, request, engine):
        return -request.arrival


@contextlib.contextmanager
def policies():
    with (
        plugins.registered("bd_wait_all", WaitAll),
        plugins.registered("bd_fetch_half", FetchHalf),
        plugins.registered("bd_restore_async", RestoreAllAsync),
        plugins.registered("bd_restore_half", RestoreHalfSync),
        plugins.registered("bd_newest", Newest),
    ):
        yield


def check(df, timeout: float | None = None) -> None:
    """The parts sum to TTFT; none is negative; the prefetch wait is part of the load."""
    done = df[df["decision"] != "dropped"]
    for col in [*PARTS, "load_prefetch_s"]:
        assert (done[col] >= -1e-12).all(), col
    gap = (done[PARTS].sum(axis=1) - done["ttft_s"]).abs()
    assert gap.max() < 1e-9, done.loc[gap.idxmax()].to_dict()
    assert (done["load_prefetch_s"] <= done["load_s"] + 1e-12).all()
    if timeout is not None:  # prefetch.policy timeout: waits at most that long, each try
        assert (done["load_prefetch_s"] <= timeout * (done["retries"] + 1) + 1e-9).all()


@st.composite
def cases(draw):
    n = draw(st.integers(1, 30))
    t = 0.0
    reqs = []
    for i in range(n):
        t += draw(st.floats(0, 0.6))
        family = draw(st.integers(0, 3))
        blocks = draw(st.integers(1, 6))
        ids = [family * 100 + k for k in range(blocks)]
        if draw(st.booleans()):
            ids[-1] = 10_000 + i  # a private tail
        tokens = (blocks - 1) * 100 + draw(st.integers(1, 100))
        session = draw(st.integers(-1, 2))
        reqs.append(
            Request(
                i,
                t,
                tokens,
                1,
                tuple(ids),
                session,
                draw(st.integers(0, 2)),  # tenant
                draw(st.integers(0, 2)),  # shared blocks
                session < 0 or draw(st.booleans()),  # last turn
            )
        )
    host = draw(st.sampled_from([True, True, True, False]))
    prefetch = draw(
        st.sampled_from(
            ["none", "best_effort", "wait_complete", "timeout", "bd_wait_all", "bd_fetch_half"]
        )
        if host
        else st.just("none")
    )
    pf: dict = {"policy": prefetch, "on_session": host and draw(st.booleans())}
    if prefetch == "timeout":
        pf["timeout"] = f"{draw(st.integers(1, 800))} ms"
    batching = draw(st.sampled_from(["chunked", "serial"]))
    engine = {
        "batching": batching,
        "max_batched_tokens": draw(st.integers(100, 700)),
        "max_batch_requests": draw(st.integers(1, 6)),
        "long_prefill_token_threshold": draw(st.sampled_from([0, 1, 37, 100, 250])),
        "scheduler": draw(st.sampled_from(["fcfs", "lpm", "sjf", "bd_newest"])),
        "layerwise": draw(st.booleans()),
        "max_inflight_restores": draw(st.sampled_from([None, 1, 2])),
        "preemption": draw(st.sampled_from(["hold", "recompute"])),
    }
    if engine["long_prefill_token_threshold"] == 1:
        engine["max_batched_tokens"] = 100  # a few thousand steps at most
    on_backlog = draw(st.sampled_from(["drop", "block"]))
    sections = {
        "cluster": {
            "engines": draw(st.integers(1, 3)),
            "load_policy": draw(
                st.sampled_from(
                    ["sync", "async", "recompute", "auto", "bd_restore_async", "bd_restore_half"]
                )
            ),
            "router": draw(st.sampled_from(["round_robin", "least_loaded", "cache_affinity"])),
        },
        "engine": engine,
        "prefetch": pf,
        "node": {
            "pcp": draw(st.sampled_from([1, 2, 4])),
            "d2h_per_gpu": draw(st.sampled_from(["1 EB/s", "20 MB/s"])),
        },
        "tiers": {
            "gpu": {"capacity": f"{draw(st.integers(0, 900))} kB"},
            "host": {
                "enabled": host,
                "capacity": f"{draw(st.integers(0, 900))} kB",
                "t0": "10 ms",
                "write_policy": draw(st.sampled_from(["write_back", "write_through"])),
                "write_queue": draw(st.sampled_from([None, "100 kB", "400 kB"])),
                "on_backlog": on_backlog,
            },
            "nvme": {
                "enabled": draw(st.booleans()),
                "capacity": f"{draw(st.integers(0, 2000))} kB",
                "t0": "20 ms",
                "write_policy": draw(st.sampled_from(["write_back", "write_through"])),
            },
        },
        "remote": {
            "enabled": draw(st.booleans()),
            "servers": draw(st.integers(1, 3)),
            "sharding": draw(st.sampled_from(["none", "per_rank"])),
            "capacity": f"{draw(st.integers(0, 3000))} kB",
            "bandwidth": f"{draw(st.integers(1, 50))} MB/s",
            "max_pending_puts": draw(st.integers(0, 4)),
            "write_policy": draw(st.sampled_from(["write_through", "write_back"])),
            "stall": {"probability": draw(st.sampled_from([0.0, 0.3])), "duration": "300 ms"},
        },
        "tenancy": {
            "isolation": draw(st.sampled_from(["tenant", "none"])),
            "shared_prefixes": draw(st.booleans()),
            "delete_on_session_end": draw(st.booleans()),
        },
    }
    if draw(st.booleans()):  # a KV pool of 800 tokens (prompts: 600 at most)
        sections["node"]["kv_per_gpu"] = "100 kB"
    if sections["node"]["pcp"] == 1:
        sections["remote"]["sharding"] = "none"
    if engine["layerwise"]:
        sections["remote"]["streams"] = True
    if not (sections["remote"]["enabled"] or sections["tiers"]["nvme"]["enabled"]):
        sections["prefetch"] = {"policy": "none"}  # nothing to prefetch from
    if draw(st.booleans()):
        sections["remote"]["timeout"] = f"{draw(st.integers(1, 500))} ms"
    if draw(st.booleans()):
        sections["tenancy"]["ttl"] = "1 s"
    faults = []
    for _ in range(draw(st.integers(0, 2))):
        at = draw(st.floats(0, 8))
        kinds = ["slow_link", "engine_down"]
        if sections["remote"]["enabled"]:
            kinds += ["server_down", "stall_burst"]
        kind = draw(st.sampled_from(kinds))
        f: dict = {"kind": kind, "at": f"{at} s", "until": f"{at + draw(st.floats(0.01, 3))} s"}
        if kind == "server_down":
            f["server"] = draw(st.integers(0, sections["remote"]["servers"] - 1))
        elif kind == "slow_link":
            f["target"] = draw(st.sampled_from(["remote", "network"]))
            f["factor"] = draw(st.floats(0.05, 2))
            if not sections["remote"]["enabled"]:
                f["target"] = "network"
        elif kind == "engine_down":
            f["engine"] = draw(st.integers(0, sections["cluster"]["engines"] - 1))
            f["requests"] = draw(st.sampled_from(["reroute", "drop"]))
        else:
            f["probability"] = draw(st.floats(0, 1))
            f["duration"] = f"{draw(st.integers(0, 1000))} ms"
        faults.append(f)
    sections["faults"] = faults
    return sections, reqs


@settings(max_examples=examples(80), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_the_parts_sum_to_ttft_under_every_policy(case):
    sections, reqs = case
    with policies():
        try:
            sc = toy(**sections)
        except Exception as e:  # a combination the schema refuses: not this test's concern
            if type(e).__name__ in ("ValidationError", "InputError"):
                return
            raise
        out = Simulation(sc, requests=reqs).run()
    if all(d == "dropped" for d in out.rows.column("decision")):
        return
    df = collect(out, sc).requests
    pf = sections["prefetch"]
    check(df, pf.get("timeout") and float(pf["timeout"].split()[0]) / 1000)
    if pf["policy"] in ("none", "best_effort", "bd_fetch_half"):
        assert (df["load_prefetch_s"].fillna(0) == 0).all()  # these never wait


def remote_only(prefetch: dict):
    """Host holds three blocks; the third request's prefix is by then only in the remote
    store (1 MB/s, T0 0.5 s): a prefetch of its 299 restorable tokens takes 0.8 s."""
    sc = toy(
        tiers={"host": {"enabled": True, "capacity": "300 kB"}},
        remote={"enabled": True},
        prefetch=prefetch,
    )
    reqs = [req(0, 0.0, 300, [1, 2, 3]), req(1, 2.0, 300, [4, 5, 6]), req(2, 5.0, 300, [1, 2, 3])]
    return collect(Simulation(sc, requests=reqs).run(), sc).requests


@pytest.mark.parametrize(
    ("prefetch", "waited"),
    [
        ({"policy": "wait_complete"}, 0.8),
        ({"policy": "timeout", "timeout": "200 ms"}, 0.2),
        ({"policy": "bd_wait_all"}, 0.8),
        ({"policy": "best_effort"}, 0.0),
    ],
)
def test_a_prefetch_wait_is_part_of_the_load(prefetch, waited):
    """The wait for a prefetch into host (out of the queue) was in no part: the parts fell
    short of TTFT by it and load_mean_s was low. It is now load_s's ``load_prefetch_s``."""
    with policies():
        df = remote_only(prefetch)
    check(df)
    r = df.iloc[2]
    assert r["load_prefetch_s"] == pytest.approx(waited, abs=1e-6)
    assert r["load_s"] >= r["load_prefetch_s"]
    if waited == 0.8:  # all of it came in: a host restore of 299 tokens follows
        assert r["decision"] == "restore" and r["load_s"] > 0.8


def test_summary_load_mean_includes_the_prefetch_wait():
    sc = toy(
        tiers={"host": {"enabled": True, "capacity": "300 kB"}},
        remote={"enabled": True},
        prefetch={"policy": "wait_complete"},
    )
    # three prefixes take turns in a host tier that holds one: each comes from remote
    reqs = [req(i, 2.0 * i, 300, [3 * (i % 3) + k for k in (1, 2, 3)]) for i in range(9)]
    res = collect(Simulation(sc, requests=reqs).run(), sc)
    df = res.requests
    check(df)
    assert df["load_prefetch_s"].sum() > 0
    assert res.summary["load_mean_s"] == pytest.approx(df["load_s"].mean())
    parts = sum(res.summary[f"{p}_mean_s"] for p in ("queue_wait", "load", "compute", "store"))
    assert parts == pytest.approx(res.summary["ttft_mean_s"], rel=1e-9)


def test_a_layerwise_restore_that_times_out_falls_back_to_compute():
    """Regression (found by the property test above): a synchronous layer-wise restore
    whose remote GET times out falls back to compute; the step then streamed nothing,
    and used to crash taking the largest T0 of no tier."""
    sc = toy(
        cluster={"engines": 1, "load_policy": "sync", "router": "round_robin"},
        engine={
            "batching": "chunked",
            "max_batched_tokens": 100,
            "max_batch_requests": 1,
            "layerwise": True,
        },
        node={"pcp": 1, "d2h_per_gpu": "1 EB/s"},
        tiers={"gpu": {"capacity": "0 kB"}, "host": {"enabled": False}, "nvme": {"enabled": False}},
        remote={
            "enabled": True,
            "servers": 1,
            "sharding": "none",
            "capacity": "1 kB",
            "bandwidth": "1 MB/s",
            "max_pending_puts": 1,
            "write_policy": "write_through",
            "streams": True,
            "timeout": "1 ms",
        },
        tenancy={"isolation": "tenant"},
    )
    reqs = [
        Request(0, 0.0, 1, 1, (0,), session=-1),
        Request(1, 0.0, 1, 1, (0,), session=0),
        Request(2, 0.0, 2, 1, (0,), session=0),
    ]
    out = Simulation(sc, requests=reqs).run()
    df = collect(out, sc).requests
    assert list(df["decision"]) == ["cold", "cold", "fallback"]
    check(df)
    last = df.iloc[2]  # waited for the timed-out GET, then computed the whole prompt
    assert last["load_s"] > 0 and last["compute_s"] > 0
