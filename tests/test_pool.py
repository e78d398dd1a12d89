"""An engine's HBM working pool and its restore slots (kvsim.sim.pool.WorkingPool): the
bytes it holds, what it takes from the GPU prefix cache beyond its slack, and its slots,
on a stand-in cache; and three whole runs (moved here from tests/test_batching.py) where
the slots and the pool hold restores back."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from test_batching import prompt, rows, two_host_hits

from kvsim import api
from kvsim.sim.metrics import Metrics
from kvsim.sim.pool import WorkingPool
from kvsim.sim.simulation import Simulation

from conftest import toy
from sim_cases import pure_only


class Local:
    """A stand-in LocalCache: what the pool reads (gpu.reserved) and calls (reserve,
    gpu.unreserve), with the request the metrics collector named as the cause at each
    reserve."""

    def __init__(self, metrics=None):
        self.gpu = SimpleNamespace(reserved=0.0, unreserve=self._unreserve)
        self.metrics = metrics
        self.reserves: list[tuple[float, int | None]] = []

    def reserve(self, n):
        self.gpu.reserved += n
        who = self.metrics.cause if self.metrics is not None else None
        self.reserves.append((n, who))

    def _unreserve(self, n):
        self.gpu.reserved -= n


def job(rid=0):
    return SimpleNamespace(reserved=0.0, req=SimpleNamespace(id=rid))


QUIET = Metrics()  # a collector no listener hears block events from


@pure_only
def test_working_kv_beyond_the_slack_is_reserved_in_the_gpu_tier_and_given_back():
    """Pool 1,000 B, slack 300 B. A takes 400: 100 over the slack is reserved in the GPU
    tier. B takes 500: 900 held, 600 over (500 more reserved). A goes back: 500 held, 200
    over (400 given back). B is dropped (its engine failed): nothing held or reserved."""
    local = Local()
    pool = WorkingPool(local, 1000.0, 300.0, 2)
    a, b = job(1), job(2)
    assert pool.fits(1000.0) and not pool.fits(1000.5)
    pool.take(a, 400.0, QUIET)
    assert (pool.used, a.reserved, local.gpu.reserved) == (400.0, 400.0, 100.0)
    pool.take(b, 500.0, QUIET)
    assert (pool.used, local.gpu.reserved) == (900.0, 600.0)
    assert pool.fits(100.0) and not pool.fits(101.0)
    pool.release(a)
    assert (pool.used, a.reserved, local.gpu.reserved) == (500.0, 0.0, 200.0)
    pool.release(a)  # nothing held: nothing changes
    assert (pool.used, local.gpu.reserved) == (500.0, 200.0)
    pool.drop([b])
    assert (pool.used, b.reserved, local.gpu.reserved) == (0.0, 0.0, 0.0)


@pure_only
def test_working_kv_within_the_slack_reserves_nothing():
    local = Local()
    pool = WorkingPool(local, 1000.0, 300.0, 1)
    pool.take(job(), 300.0, QUIET)
    assert local.gpu.reserved == 0.0 and local.reserves == []


@pure_only
def test_a_restore_needs_a_free_slot_and_room():
    """Two slots, pool 1,000 B with 600 held: a restore of 400 fits, one of 401 does not;
    with both slots taken none fits, and a freed slot lets one in again."""
    pool = WorkingPool(Local(), 1000.0, 1000.0, 2)
    pool.take(job(), 600.0, QUIET)
    assert pool.can_restore(400.0) and not pool.can_restore(401.0)
    pool.take_slot()
    pool.take_slot()
    assert pool.inflight == 2 and not pool.can_restore(0.0)
    pool.free_slot()
    assert pool.inflight == 1 and pool.can_restore(400.0)


@pure_only
def test_a_remainder_under_a_byte_is_an_empty_pool():
    """A takes 1 MB + 0.1 B, B 0.2 B. A back leaves (1e6 + 0.3) - (1e6 + 0.1) ~ 0.2 B
    (float rounding of B's bytes), under a byte: the pool reads empty; B back would
    leave -0.2 B, and stays at 0."""
    pool = WorkingPool(Local(), 2e6, 0.0, 1)
    a, b = job(), job()
    pool.take(a, 1e6 + 0.1, QUIET)
    pool.take(b, 0.2, QUIET)
    pool.release(a)
    assert pool.used == 0.0
    pool.release(b)
    assert pool.used == 0.0


@pure_only
def test_what_a_reservation_evicts_is_logged_as_the_takers():
    """With a listener of block events (an access log), the reservation runs with the
    taker's id as the collector's cause, and -1 after it."""
    metrics = Metrics(listeners=[SimpleNamespace(blocks=True)])
    local = Local(metrics)
    pool = WorkingPool(local, 1000.0, 0.0, 1)
    pool.take(job(7), 250.0, metrics)
    assert local.reserves == [(250.0, 7)]
    assert metrics.cause == -1


# ---- whole runs (from tests/test_batching.py) ---------------------------------------------


def test_max_inflight_restores_holds():
    c, d = two_host_hits(max_inflight_restores=1)
    assert c.load_s == pytest.approx(1.0)
    assert d.load_s == pytest.approx(1.0)
    # D was looked at and set aside at 10; its restore started when C's was in (11)
    assert d.start_s == pytest.approx(10.0)
    assert d.queue_wait_s == pytest.approx(1.0)
    assert d.finish_s == pytest.approx(12.0 + 0.1)


def test_a_working_pool_too_small_for_two_restores_admits_one_at_a_time():
    """The node's KV pool holds 8 x 250 kB = 2 MB (HBM pools, tests/test_pools.py): a
    restore holds its request's 1,001 tokens (1.001 MB) until the request is done, so the
    second restore (2.002 MB together) waits for the first request to finish."""
    c, d = two_host_hits(gpu="1.5 MB", node={"kv_per_gpu": "250 kB"})
    assert c.load_s == pytest.approx(1.0) and d.load_s == pytest.approx(1.0)
    assert d.finish_s == pytest.approx(c.finish_s + 1.0 + 0.1)


def test_reservations_evict_and_are_given_back():
    """A restore's reservation evicts what the GPU tier held (demoted to host), and every
    reservation is released when its request finishes. The KV pool (8 x 187.5 kB) is the
    prefix cache's 1.5 MB: all working KV evicts cached blocks (HBM pools)."""
    sc = toy(
        tiers={
            "gpu": {"capacity": "1.5 MB"},
            "host": {"enabled": True, "capacity": "1 GB", "t0": "0 s"},
        },
        node={"h2d_per_gpu": "0.125 MB/s", "kv_per_gpu": "187.5 kB"},
        cluster={"load_policy": "async"},
    )
    reqs = [prompt(0, 0.0, 1000, 0), prompt(1, 1.0, 1000, 100), prompt(2, 10.0, 1001, 0)]
    sim = Simulation(sc, requests=reqs)
    res = api.collect(sim.run(), sc)
    gpu = sim.engines[0].local.gpu
    assert gpu.reserved == 0 and sim.engines[0].pool.inflight == 0
    assert gpu.used <= gpu.capacity
    c = rows(res)[2]
    # B pushed A's five oldest blocks to host; C restores them, its reservation evicting
    assert c.tokens_host == 500 and c.tokens_gpu == 500
    assert sim.engines[0].local.demotions[1] >= 5


def test_requests_behind_one_the_pool_refused_are_not_looked_up():
    """Ten cold 1,000-token prompts (ten 100-token blocks each) due at once, chunked
    batching; the node's KV pool (8 x 150 kB = 1.2 MB at 1 kB a token) holds one prompt
    at a time. Each step admits the queue's head, looks up the next one and finds it does
    not fit; the eight behind it wait unlooked (vLLM's scheduler stops at the first request
    it cannot allocate). So the GPU tier counts 10 admitted lookups and 9 refused ones:
    190 block misses. Looking every waiting request up each step (the defect) counted
    10 x (10 + 9 + 8 + ... + 1) = 550. The requests' times are the same either way: one
    prompt after the other, 1.099 s each."""
    sc = toy(node={"kv_per_gpu": "150 kB"}, engine={"batching": "chunked"})
    reqs = [prompt(i, 0.0, 1000, 1000 * i) for i in range(10)]
    res = api.run(sc, requests=reqs)
    gpu = res.summary["tiers"]["gpu"]
    assert (gpu["hits"], gpu["misses"]) == (0, 190)
    ttft = rows(res)
    assert [ttft[i].ttft_s for i in range(10)] == pytest.approx(
        [1.099 * (i + 1) for i in range(10)]
    )
