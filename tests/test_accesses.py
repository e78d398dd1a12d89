"""``kvsim run --record-accesses``: the access log (accesses.parquet) against the run's own
counters, the integrity of its event stream, and a replay of it that gives back the run's
GPU hit ratios (kvsim.results.accesses, kvsim.analysis.replay.replay_accesses)."""

from __future__ import annotations

import json
from collections import defaultdict

import numpy as np
import pandas as pd
import pytest

from kvsim import api
from kvsim.analysis.replay import replay_accesses
from kvsim.cli import main
from kvsim.config.pools import pools
from kvsim.results.accesses import COLUMNS
from kvsim.results.records import json_ready

from conftest import SCENARIOS, toy

QUICK = str(SCENARIOS / "quickstart.yaml")
SMALL = ["workload.requests=300", "run.warmup=0s"]
LOCAL = ("gpu", "host", "nvme")
# small tiers, so that every tier hits, misses and evicts within 600 requests
TIGHT = ("tiers.gpu.capacity=4 GB", "tiers.host.capacity=6 GB")


def _run(*sets: str, requests: int = 300):
    r = api.run(
        QUICK, [f"workload.requests={requests}", "run.warmup=0s", *sets], record_accesses=True
    )
    assert r.accesses is not None
    return r


def _count(df: pd.DataFrame, tier: str, event: str, engine: int | None = None) -> int:
    m = (df["tier"] == tier) & (df["event"] == event)
    if engine is not None:
        m &= df["engine"] == engine
    return int(m.sum())


def _bytes(df: pd.DataFrame, tier: str, event: str, engine: int | None = None) -> float:
    m = (df["tier"] == tier) & (df["event"] == event)
    if engine is not None:
        m &= df["engine"] == engine
    return float(df.loc[m, "bytes"].sum())


@pytest.fixture(scope="module")
def quick():
    """Quickstart (4 engines, all four tiers, a per-rank remote store on 8 servers,
    mirrored), 600 requests, small tiers so that every tier hits, misses and evicts."""
    return _run(*TIGHT, "tiers.nvme.capacity=8 GB", "remote.capacity=2 GB", requests=600)


def test_lookup_rows_are_the_summarys_hits_and_misses(quick):
    df, tiers = quick.accesses, quick.summary["tiers"]
    assert set(tiers) == {"gpu", "host", "nvme", "remote"}
    for t, d in tiers.items():
        assert d["hits"] > 0 and d["misses"] > 0, t  # every tier is exercised
        assert _count(df, t, "hit") == d["hits"], t
        assert _count(df, t, "miss") == d["misses"], t
        for e in d["engines"]:
            assert _count(df, t, "hit", e["engine"]) == e["hits"], (t, e)
            assert _count(df, t, "miss", e["engine"]) == e["misses"], (t, e)


def test_store_rows_are_the_summarys_evictions_and_writes(quick):
    """write_bytes of a local tier is the bytes of blocks new to its stores (a refresh
    writes nothing): the insert rows' bytes. The remote store mirrors its 8 servers: the
    log holds shard 0's events, the summary counts every server's."""
    df, tiers = quick.accesses, quick.summary["tiers"]
    for t in LOCAL:
        d = tiers[t]
        assert _count(df, t, "evict") == d["evictions"], t
        assert _bytes(df, t, "insert") == pytest.approx(d["write_bytes"], rel=1e-12), t
        for e in d["engines"]:
            n = e["engine"]
            assert _count(df, t, "evict", n) == e["evictions"], (t, n)
            assert _bytes(df, t, "insert", n) == pytest.approx(e["write_bytes"], rel=1e-12)
    r = tiers["remote"]
    servers = r["servers"]
    assert servers == r["shards"] == 8
    assert r["evictions"] > 0
    assert _count(df, "remote", "evict") * servers == r["evictions"]
    assert _bytes(df, "remote", "insert") * servers == pytest.approx(r["write_bytes"], rel=1e-12)
    # the store's own events carry engine -1; its lookups the engine that asked
    own = df[(df["tier"] == "remote") & ~df["event"].isin(["hit", "miss"])]
    assert (own["engine"] == -1).all()
    asked = df[(df["tier"] == "remote") & df["event"].isin(["hit", "miss"])]
    assert set(asked["engine"]) == {0, 1, 2, 3}


def test_unsharded_remote_store_logs_every_block_once():
    """One whole-block server: its rows are the summary's counts one for one."""
    r = _run(
        *TIGHT,
        "remote.sharding=none",
        "remote.servers=1",
        "remote.capacity=4 GB",
        "tiers.nvme.enabled=false",
        requests=600,
    )
    df, d = r.accesses, r.summary["tiers"]["remote"]
    assert d["evictions"] > 0
    assert _count(df, "remote", "evict") == d["evictions"]
    assert _bytes(df, "remote", "insert") == pytest.approx(d["write_bytes"], rel=1e-12)
    assert _count(df, "remote", "hit") == d["hits"] > 0


def _replay_check(df: pd.DataFrame) -> dict[str, int]:
    """Walk the log's store events as sets of held keys per store and check each row
    against them: an insert is new, a refresh, evict, delete or expire is held, and a
    hit is held (a lookup hit is a block its tier holds). Returns rows per event."""
    held: dict[tuple[int, str], set[int]] = defaultdict(set)
    sizes: dict[tuple[int, str, int], float] = {}
    seen: dict[str, int] = defaultdict(int)
    for eng, tier, key, nbytes, event in zip(
        df["engine"].tolist(),
        df["tier"].astype(str).tolist(),
        df["key"].tolist(),
        df["bytes"].tolist(),
        df["event"].astype(str).tolist(),
        strict=True,
    ):
        seen[event] += 1
        if tier == "peer":
            continue  # another engine's host store: no store of the asking engine
        store = (-1 if tier == "remote" else eng, tier)
        s = held[store]
        if event == "insert":
            assert key not in s, (store, key)
            s.add(key)
            sizes[(*store, key)] = nbytes
        elif event in ("refresh", "evict", "delete", "expire"):
            assert key in s, (store, key, event)
            if event != "refresh":
                s.discard(key)
        elif event == "hit":
            assert key in s, (store, key)
            # a lookup row's bytes: what the block takes in that tier, as stored
            assert nbytes == pytest.approx(sizes[(*store, key)], rel=1e-12)
    return dict(seen)


def test_the_event_stream_is_consistent(quick):
    seen = _replay_check(quick.accesses)
    assert seen["evict"] > 0 and seen["refresh"] > 0 and seen["hit"] > 0


def test_requests_are_attributed():
    """A lookup's rows carry its request; admissions (inserts into HBM) too; a put that
    lands later carries -1."""
    r = _run()
    df = r.accesses
    lookups = df[df["event"].isin(["hit", "miss"])]
    assert (lookups["request"] >= 0).all()
    assert set(lookups["request"]) == set(r.requests["id"])
    gpu_in = df[(df["tier"] == "gpu") & (df["event"] == "insert")]
    assert (gpu_in["request"] >= 0).all()
    remote_in = df[(df["tier"] == "remote") & (df["event"] == "insert")]
    assert len(remote_in) and (remote_in["request"] == -1).all()


def test_peer_lookups_are_logged_as_tier_peer():
    r = _run(
        "tiers.peer.enabled=true",
        "tiers.gpu.capacity=4 GB",
        "tiers.host.capacity=20 GB",
        "tiers.nvme.enabled=false",
        requests=600,
    )
    df, d = r.accesses, r.summary["tiers"]["peer"]
    assert _count(df, "peer", "hit") == d["hits"] > 0
    assert _count(df, "peer", "miss") == d["misses"]
    _replay_check(df)


def test_ttl_gives_expire_rows():
    r = _run("tenancy.ttl=30s", "tenancy.isolation=none")
    df = r.accesses
    seen = _replay_check(df)
    assert seen.get("expire", 0) > 0
    assert (df.loc[df["event"] == "expire", "request"] == -1).all()


def test_rows_are_in_time_order_and_typed(quick):
    df = quick.accesses
    assert list(df.columns) == list(COLUMNS)
    assert np.all(np.diff(df["time"].to_numpy()) >= 0)  # simulation order
    assert df["engine"].dtype == np.int32
    assert df["key"].dtype == np.int64 and df["request"].dtype == np.int64
    assert df["time"].dtype == np.float64 and df["bytes"].dtype == np.float64


def test_cli_writes_accesses_parquet_deterministically(tmp_path, capsys):
    frames = []
    for name in ("a", "b"):
        out = tmp_path / name
        args = ["run", QUICK, "--quiet", "--out", str(out), "--record-accesses"]
        for s in SMALL:
            args += ["--set", s]
        assert main(args) == 0
        df = pd.read_parquet(out / "accesses.parquet")
        assert list(df.columns) == list(COLUMNS)
        assert df["tier"].astype(str).isin(["gpu", "host", "nvme", "remote"]).all()
        frames.append(df)
    pd.testing.assert_frame_equal(frames[0], frames[1])
    assert len(frames[0]) > 10_000
    # the folder is the run's: running again without the flag replaces it whole
    args = ["run", QUICK, "--quiet", "--out", str(tmp_path / "a")]
    for s in SMALL:
        args += ["--set", s]
    assert main(args) == 0
    assert not (tmp_path / "a" / "accesses.parquet").exists()


def test_record_accesses_needs_out(tmp_path, capsys):
    assert main(["run", QUICK, "--quiet", "--record-accesses"]) == 2
    err = capsys.readouterr().err
    assert "--record-accesses" in err and "--out" in err
    assert "Traceback" not in err


def test_no_log_unless_asked_and_recording_changes_nothing():
    sets = ["workload.requests=200", "run.warmup=0s", *TIGHT]
    plain = api.run(QUICK, sets)
    assert plain.accesses is None
    rec = api.run(QUICK, sets, record_accesses=True)
    assert len(rec.accesses) > 0
    a, b = dict(plain.summary), dict(rec.summary)
    a.pop("provenance", None), b.pop("provenance", None)
    assert json.dumps(json_ready(a)) == json.dumps(json_ready(b))  # NaN prices compare
    pd.testing.assert_frame_equal(plain.requests, rec.requests)


# ---- the must-show: a replay of the recorded stream gives the run's GPU hit ratio ------

# One serial engine, GPU tier only (the toy: 1,000 B a token, 100-token blocks): chat
# sessions sharing system prompts, so that the capacity decides what hits.
GPU_ONLY = {
    "workload": {
        "requests": 200,
        "arrivals": {"process": "poisson", "rate": "0.3/s"},
        "sessions": {"turns": {"dist": "geometric", "mean": 4}, "think_time": "20 s"},
        "system_prompts": {"count": 6, "tokens": 1500, "share": 0.9},
        "prompt_tokens": {"dist": "lognormal", "median": 800, "sigma": 0.8, "max": 8000},
        "output_tokens": {"dist": "fixed", "value": 100},
    },
}


@pytest.mark.parametrize("capacity", [4_000_000, 16_000_000, 32_000_000])
def test_lru_replay_of_the_gpu_stream_gives_the_runs_hit_ratio(capacity):
    """The stream the GPU tier saw (lookups, stores), replayed through a fresh built-in
    LRU store of the run's capacity, hits exactly the blocks the run hit. The working KV
    never presses the cache: the node's KV pool leaves ``slack`` beyond the cache's
    capacity for running requests and restores, and even every prompt of the run at once
    fits in it, so the engine never reserves room in (evicts from) the GPU tier; its
    evictions all come from storing blocks, which the replay does too."""
    sc = toy(tiers={"gpu": {"capacity": f"{capacity} B"}}, **GPU_ONLY)
    r = api.run(sc, record_accesses=True)
    every_prompt = float(r.requests["input_tokens"].sum()) * sc.model.kv_bytes
    assert every_prompt <= pools(sc).slack
    g = r.summary["tiers"]["gpu"]
    hits, misses = g["hits"], g["misses"]
    [row] = replay_accesses(r.accesses, "gpu", None, "lru", [float(capacity)])
    assert (row["hit_blocks"], row["miss_blocks"]) == (hits, misses)
    assert row["hit_ratio"] == hits / (hits + misses)
    # the capacity matters here: the cache evicts and the hit ratio is neither 0 nor 1
    assert g["evictions"] > 0 and 0 < hits < hits + misses


def test_the_three_capacities_give_different_hit_ratios():
    """The must-show's three runs are three different outcomes (more room, more hits)."""
    ratios = []
    for capacity in (4_000_000, 16_000_000, 32_000_000):
        sc = toy(tiers={"gpu": {"capacity": f"{capacity} B"}}, **GPU_ONLY)
        g = api.run(sc).summary["tiers"]["gpu"]
        ratios.append(g["hits"] / (g["hits"] + g["misses"]))
    assert ratios[0] < ratios[1] < ratios[2]


def test_a_plugin_stores_events_are_logged_too():
    """A plugin eviction policy (examples/python_lru.py, a Delegated store) is watched
    like the built-ins."""
    plugin = str(SCENARIOS.parent / "examples" / "python_lru.py")
    r = _run(
        *TIGHT,
        f"plugins=[{plugin}]",
        "tiers.gpu.eviction=python_lru",
        "tiers.host.eviction=python_lru",
        requests=400,
    )
    df = r.accesses
    for t in ("gpu", "host"):
        d = r.summary["tiers"][t]
        assert _count(df, t, "evict") == d["evictions"] > 0
        assert _bytes(df, t, "insert") == pytest.approx(d["write_bytes"], rel=1e-12)
    _replay_check(df)
