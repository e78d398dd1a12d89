"""Prefetches into host memory (kvsim.sim.prefetch.Fetch): what lands when a flow ends or
is stopped early, on stand-in flows; and whole runs (moved here from
tests/test_write_path.py) of wait_complete, best_effort, timeout and on_session prefetches
from NVMe, hand-computed (toy scenario, one GPU per node)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from kvsim import api
from kvsim.cache.local import HOST
from kvsim.sim.prefetch import Fetch, Part

from conftest import req, toy
from sim_cases import pure_only

# kv_per_gpu: the KV pool the profile gave before HBM pools (as in tests/test_write_path.py)
ONE_GPU = {"gpus": 1, "pcp": 1, "kv_per_gpu": "150 GB"}


def rows(res):
    return {int(r.id): r for r in res.requests.itertuples()}


# ---- Fetch on stand-in flows ---------------------------------------------------------


class Fabric:
    def __init__(self):
        self.cancelled = []

    def cancel(self, flow):
        self.cancelled.append(flow)
        flow.state = "aborted"


# what a Fetch reads of the run: the tiers read through prefetches (NVMe, remote) and the
# direct ones among them (NVMe)
RUN = SimpleNamespace(prefetched=[False, False, True, True, False], fetched=[2])
NO_ROUTES = [(), (), (), (), ()]


def flow(state: str, size: float = 1000.0, remaining: float = 0.0):
    return SimpleNamespace(state=state, size=size, remaining=remaining)


def fetch(parts, done=None):
    """A Fetch over stand-in flows: ``parts`` (flow, keys); each block 100 B. Returns
    (fetch, what landed in host, the fabric)."""
    landed: list[tuple[list, list]] = []
    engine = SimpleNamespace(
        fetch_routes=NO_ROUTES,
        local=SimpleNamespace(prefetched=lambda k, s: landed.append((k, s))),
    )
    fabric = Fabric()
    ctx = SimpleNamespace(run=RUN, fabric=fabric)
    # nothing below host to fetch: no flow is started, and it is over at once
    f = Fetch(engine, ctx, None, [1], [100.0], [HOST], done or (lambda _: None))
    assert f.over and f.parts == []
    f.over = False
    f.parts = [Part(fl, list(keys), [100.0] * len(keys)) for fl, keys in parts]
    return f, landed, fabric


@pure_only
def test_a_fetch_of_nothing_below_host_is_over_at_once():
    calls = []
    engine = SimpleNamespace(fetch_routes=NO_ROUTES, local=None)
    ctx = SimpleNamespace(run=RUN, fabric=None)
    f = Fetch(engine, ctx, None, [1, 2], [100.0, 50.0], [HOST, HOST], calls.append)
    assert f.over and f.parts == []
    f.stop()
    f.expired(None)
    assert calls == []  # over before it began: the engine is not told again


@pure_only
def test_a_stopped_flow_lands_the_share_of_its_blocks_it_moved_in_prefix_order():
    """Four blocks; the flow moved 450 of its 1,000 B (45%): int(4 x 0.45) = 1 whole
    block lands, the first. A flow that never started (remaining = size) lands none; a
    finished one is neither cancelled nor landed again (it landed when it ended)."""
    active = flow("active", remaining=550.0)
    waiting = flow("waiting", remaining=1000.0)
    finished = flow("finished")
    f, landed, fabric = fetch([(active, [1, 2, 3, 4]), (waiting, [5, 6]), (finished, [7])])
    f.stop()
    assert landed == [([1], [100.0])]
    assert fabric.cancelled == [active, waiting]
    assert f.over and f.parts == []
    f.stop()  # a second stop does nothing
    assert len(fabric.cancelled) == 2


@pure_only
def test_a_fetch_stopped_without_landing_lands_nothing():
    """The engine failed: the flows are cancelled, none of what they moved lands."""
    active = flow("active", remaining=100.0)  # 90% moved
    f, landed, fabric = fetch([(active, [1, 2, 3, 4])])
    f.stop(land=False)
    assert landed == [] and fabric.cancelled == [active]


@pure_only
def test_the_engine_hears_once_every_flow_is_in():
    """Two flows: the first ends (all its blocks land; the other still runs: no word);
    the second ends: its blocks land and ``done`` is called, once. An expiry after that
    changes nothing."""
    calls = []
    one, two = flow("active", remaining=500.0), flow("active", remaining=500.0)
    f, landed, _ = fetch([(one, [1, 2]), (two, [3])], done=calls.append)
    one.state = "finished"
    f._in(one)
    assert landed == [([1, 2], [100.0, 100.0])] and calls == []
    two.state = "finished"
    f._in(two)
    assert landed[1] == ([3], [100.0]) and calls == [f] and f.over
    f.expired(None)
    assert calls == [f] and len(landed) == 2


@pure_only
def test_a_timeout_goes_with_what_has_arrived_and_tells_the_engine():
    """prefetch.timeout: expiry stops the flow (3 of 10 blocks moved: 3 land) and calls
    ``done`` once."""
    calls = []
    fl = flow("active", remaining=700.0)
    f, landed, _ = fetch([(fl, list(range(10)))], done=calls.append)
    f.expired(None)
    assert landed == [([0, 1, 2], [100.0] * 3)] and calls == [f]


# ---- whole runs (from tests/test_write_path.py) ------------------------------------------


def prefetch_ttft(policy: str, busy: bool = False, **prefetch) -> float:
    """A's ten blocks (1 MB) sink to NVMe (host holds 1 MB, and B pushes A out); at 20 s
    C asks for A's prompt again. The drives read 4 MB/s: C's 1 MB takes 0.25 s to fetch
    into host (or, with no prefetch, 0.24975 s to restore its 999 tokens directly); host
    to HBM is 50 GB/s; computing one token takes 0.1 s, 1,000 tokens 1.099 s."""
    sc = toy(
        node={**ONE_GPU, "nvme_drives": 1, "nvme_read_per_drive": "4 MB/s"},
        tiers={
            "host": {"enabled": True, "capacity": "1 MB", "t0": "0 s"},
            "nvme": {"enabled": True, "capacity": "1 GB", "t0": "0 s"},
        },
        prefetch={"policy": policy, **prefetch},
    )
    a, b = list(range(10)), list(range(10, 20))
    reqs = [req(0, 0.0, 1000, a), req(1, 5.0, 1000, b)]
    if busy:  # D keeps the engine busy from 19 s until 20.099 s
        reqs.append(req(3, 19.0, 1000, range(30, 40)))
    reqs.append(req(2, 20.0, 1000, a))
    res = api.run(sc, requests=reqs)
    return rows(res)[2].ttft_s


def test_prefetch_wait_complete_against_best_effort():
    h2d = 0.999e6 / 50e9  # the 999 cached tokens from host into HBM
    assert prefetch_ttft("none") == pytest.approx(0.24975 + 0.1)
    # C waits for its prefetch, then restores from host
    assert prefetch_ttft("wait_complete") == pytest.approx(0.25 + h2d + 0.1)
    # the engine is idle when C arrives: best effort takes what has arrived (nothing)
    assert prefetch_ttft("best_effort") == pytest.approx(1.099)
    # D (arrived at 19 s) keeps the engine busy until 20.099 s: by then the prefetch has
    # moved 0.099 s x 4 MB/s = 0.396 MB, so three whole blocks land; C restores them and
    # computes 700 tokens (0.799 s)
    ttft = prefetch_ttft("best_effort", busy=True)
    assert ttft == pytest.approx(0.099 + 0.3e6 / 50e9 + 0.1 + 0.699)


def test_prefetch_timeout_goes_with_what_has_arrived():
    """After 0.1 s, 40% of the 1 MB has moved: four blocks land in host, C restores them
    and computes the other 600 tokens (0.699 s)."""
    ttft = prefetch_ttft("timeout", timeout="100 ms")
    assert ttft == pytest.approx(0.1 + 0.4e6 / 50e9 + 0.699)
    # a timeout longer than the fetch is wait_complete
    assert prefetch_ttft("timeout", timeout="1 s") == pytest.approx(prefetch_ttft("wait_complete"))


def test_prefetch_on_session_brings_a_turns_kv_up_to_host():
    """A 2 MB turn leaves its first ten blocks in NVMe (host holds 1 MB): at the turn's
    end they are fetched back into host, 1 MB over the drives' read link. (The optimistic
    write path, ``write_queue: null``: the blocks are readable from NVMe as soon as their
    write is queued, at the turn's end; with a staging buffer they are still in flight.)"""
    from kvsim.workload.request import Request

    sc = toy(
        node={**ONE_GPU, "nvme_drives": 1, "nvme_read_per_drive": "4 MB/s"},
        tiers={
            "host": {"enabled": True, "capacity": "1 MB", "t0": "0 s"},
            "nvme": {"enabled": True, "capacity": "1 GB", "t0": "0 s", "write_queue": None},
        },
        prefetch={"on_session": True},
    )
    turn = Request(0, 0.0, 2000, 1, tuple(range(20)), session=7, last_turn=False)
    res = api.run(sc, requests=[turn])
    host = res.summary["tiers"]["host"]
    assert host["prefetched_bytes_in"] == pytest.approx(1e6)
    assert res.summary["link_utilisation"]["nvme"]["bytes"] == pytest.approx(1e6)
