"""The realistic write path (issue 25): staging buffers, blocks readable once landed,
promotion NVMe -> host on a hit. Every number is worked out by hand.

The toy scenario (conftest) with one GPU per node: 1,000 B per token, 100-token blocks
(0.1 MB), computing ``n`` new tokens takes 0.1 s + (n - 1) ms, so a 1,000-token prompt
takes 1.099 s and one with 999 tokens cached 0.1 s.
"""

from __future__ import annotations

import pytest

from kvsim import api
from kvsim.cache.eviction import BlockStore
from kvsim.cache.local import HOST, LocalCache
from kvsim.cache.writes import Writes
from kvsim.config.schema import LocalTier
from kvsim.kernel.pipe import Pipe
from kvsim.sim.simulation import Simulation

from conftest import req, toy

MB = 1e6
# kv_per_gpu: one GPU cannot hold the profile's weights; these tests are about the write
# path, not HBM pools
ONE_GPU = {"gpus": 1, "pcp": 1, "kv_per_gpu": "150 GB"}


def rows(res):
    return {int(r.id): r for r in res.requests.itertuples()}


# ---- a block is readable from a tier only once its write has landed ---------------------


def test_a_queued_block_holds_its_room_and_is_unreadable_until_its_write_lands():
    """GPU holds 1 MB, host 1 MB, the GPU-to-host link moves 1 MB/s. A (ten 0.1 MB blocks)
    is admitted at t = 0; B's admission evicts it into host: a 1 MB write queued at 0
    that lands at 1 MB / 1 MB/s = 1.0 s. Until then host already counts its 1 MB (the
    slot is taken when the write is queued) and lists every block of A as in flight."""
    now = [0.0]
    writes = Writes(
        lambda: now[0],
        Pipe("d2h", 1 * MB),
        ranks=1,
        pipes=(None, None, None),
        via_d2h=(False, True, False),  # into host: the GPU-to-host copy
        queues=(None, 5e9, None),
        block=(False, True, False),
    )
    local = LocalCache(BlockStore(1 * MB), BlockStore(1 * MB), None, writes=writes)
    a, b = list(range(10)), list(range(10, 20))
    local.admit(a, [0.1 * MB] * 10)
    local.admit(b, [0.1 * MB] * 10)
    assert local.host is not None
    assert local.host.used == pytest.approx(1 * MB)  # charged while queued
    pending = local.in_flight(HOST, 0.5)
    assert pending is not None and all(pending[k] == pytest.approx(1.0) for k in a)
    assert local.in_flight(HOST, 1.0) is None  # landed: every write is in
    # the staging buffer: 5 GB on a 1 MB/s link is 5,000 s of work; 1 s is queued
    assert writes.limit[HOST] == pytest.approx(5000.0)
    assert writes.stall() == 0.0


def landing_ttft(arrive: float, **host) -> tuple[float, int]:
    """A (1,000 tokens) computes 0 -> 1.099 s and stays in HBM (1 MB). B computes
    2 -> 3.099 s; its admission evicts A into host: 1 MB over the 1 MB/s GPU-to-host link,
    queued at 3.099 s, landing at 4.099 s. C asks for A's prompt at ``arrive``; host to
    GPU moves 2 MB/s. Returns C's TTFT and the tokens it read from host."""
    sc = toy(
        node={**ONE_GPU, "d2h_per_gpu": "1 MB/s", "h2d_per_gpu": "2 MB/s"},
        tiers={
            "gpu": {"capacity": "1 MB"},
            "host": {"enabled": True, "capacity": "1 GB", "t0": "0 s", **host},
        },
    )
    a, b = list(range(10)), list(range(10, 20))
    reqs = [req(0, 0.0, 1000, a), req(1, 2.0, 1000, b), req(2, arrive, 1000, a)]
    r = rows(api.run(sc, requests=reqs))[2]
    return r.ttft_s, r.tokens_host


def test_a_block_is_not_read_from_a_tier_before_its_write_lands():
    # at 3.5 s A's write is still on the link (it lands at 4.099 s): A is not in host
    # yet and no longer in HBM, so C computes its 1,000 tokens: 1.099 s
    assert landing_ttft(3.5) == (pytest.approx(1.099), 0)
    # at 4.5 s it has landed: 999 tokens (0.999 MB) at 2 MB/s = 0.4995 s, then one
    # token, 0.1 s
    assert landing_ttft(4.5) == (pytest.approx(0.4995 + 0.1), 999)
    # the optimistic write path (write_queue: null) read it while it was still queued
    assert landing_ttft(3.5, write_queue=None) == (pytest.approx(0.4995 + 0.1), 999)


# ---- the staging buffer bounds the writes ------------------------------------------------


def test_the_default_staging_buffer_is_lmcaches_local_cpu_buffer():
    """5 GB (LMCache's ``max_local_cpu_size`` default), for host and NVMe alike."""
    field = LocalTier.model_fields["write_queue"]
    assert field.default == "5 GB"
    sc = toy(tiers={"host": {"enabled": True, "capacity": "1 GB", "t0": "0 s"}})
    assert sc.tiers.host.write_queue == pytest.approx(5e9)
    assert sc.tiers.nvme.write_queue == pytest.approx(5e9)


def staging_finishes(queue) -> list[float]:
    """Seven 1,000-token prompts at t = 0 with 1 MB of KV per token: each prompt is 1 GB,
    computes in 1.099 s and (no HBM room, no host tier) falls to NVMe, whose drive writes
    100 MB/s: 10 s a prompt. The default staging buffer holds 5 GB, 50 s of writing."""
    sc = toy(
        node={**ONE_GPU, "nvme_drives": 1, "nvme_write_per_drive": "100 MB/s"},
        model={"kv_bytes_per_token": "1 MB"},
        tiers={"nvme": {"enabled": True, "capacity": "100 GB", "t0": "0 s", "write_queue": queue}},
    )
    reqs = [req(i, 0.0, 1000, range(10 * i, 10 * i + 10)) for i in range(7)]
    sim = Simulation(sc, requests=reqs)
    res = api.collect(sim.run(), sc)
    return [round(r.finish_s, 6) for r in rows(res).values()]


def test_the_default_staging_buffer_bounds_writes():
    """Prompt k (1-based) ends at 1.099 k s and its 10 s write lands at 1.099 + 10 k s
    (the link is never idle after 1.099 s). After the fifth (5.495 s) the queue runs to
    51.099 s: 45.604 s ahead, under 50 s. After the sixth (6.594 s) it runs to 61.099 s:
    54.505 s ahead, so the engine waits 4.505 s, until 11.099 s, and the seventh ends at
    12.198 s instead of 7.693 s."""
    assert staging_finishes("5 GB") == [1.099, 2.198, 3.297, 4.396, 5.495, 6.594, 12.198]
    assert staging_finishes(None)[-1] == pytest.approx(7.693)  # unbounded: nobody waits


def test_the_schema_default_is_the_bound_used():
    """Leaving write_queue out gives the 5 GB bound (the same finishes)."""
    sc = toy(
        node={**ONE_GPU, "nvme_drives": 1, "nvme_write_per_drive": "100 MB/s"},
        model={"kv_bytes_per_token": "1 MB"},
        tiers={"nvme": {"enabled": True, "capacity": "100 GB", "t0": "0 s"}},
    )
    reqs = [req(i, 0.0, 1000, range(10 * i, 10 * i + 10)) for i in range(7)]
    res = api.run(sc, requests=reqs)
    assert rows(res)[6].finish_s == pytest.approx(12.198)


# ---- promotion NVMe -> host on a hit -----------------------------------------------------


def promotion(promote: bool, path: str = "bounce"):
    """HBM holds 1 MB, host 2 MB; the drives read 2 MB/s. A, B, C, D (1 MB each, 10 s
    apart) push each other down: after D, HBM holds D, host B and C, NVMe A. E asks for A
    at 40 s: 999 tokens from NVMe, 0.999 MB at 2 MB/s = 0.4995 s, then one token (0.1 s).
    With promotion, A's ten blocks are also stored into host when the read ends (host
    evicts B, the oldest, into NVMe); E's admission then evicts D from HBM into host,
    which evicts C: host ends with A and D. Without it, D's arrival evicts B: host ends
    with C and D."""
    sc = toy(
        node={**ONE_GPU, "nvme_drives": 1, "nvme_read_per_drive": "2 MB/s"},
        tiers={
            "gpu": {"capacity": "1 MB"},
            "host": {"enabled": True, "capacity": "2 MB", "t0": "0 s"},
            "nvme": {
                "enabled": True,
                "capacity": "1 GB",
                "t0": "0 s",
                "promote": promote,
                "path": path,
            },
        },
    )
    fams = [list(range(10 * f, 10 * f + 10)) for f in range(4)]
    reqs = [req(i, 10.0 * i, 1000, ids) for i, ids in enumerate(fams)]
    reqs.append(req(4, 40.0, 1000, fams[0]))
    sim = Simulation(sc, requests=reqs)
    res = api.collect(sim.run(), sc)
    host = sim.engines[0].local.host
    assert host is not None
    return rows(res)[4], res.summary, set(host.blocks)


def test_promotion_moves_a_block_up_from_nvme_into_host():
    a, c, d = set(range(10)), set(range(20, 30)), set(range(30, 40))
    row, s, held = promotion(True)
    assert row.ttft_s == pytest.approx(0.4995 + 0.1)
    assert row.tokens_nvme == 999
    assert held == a | d
    host = s["tiers"]["host"]
    assert host["promoted_in"] == 10
    # through the host bounce buffer: the bytes were already in host memory
    assert host["promoted_bytes_in"] == pytest.approx(1 * MB)
    links = s["link_utilisation"]
    assert links["d2h"]["bytes"] == pytest.approx(4 * MB)  # demotions of A, B, C, D only
    assert links["nvme_write"]["bytes"] == pytest.approx(3 * MB)  # A, then B, then C
    # host stored A, B, C, D (demoted) and A (promoted)
    assert s["tier_write_bytes"]["host"] == pytest.approx(5 * MB)

    row, s, held = promotion(False)
    assert row.ttft_s == pytest.approx(0.4995 + 0.1)
    assert held == c | d
    assert s["tiers"]["host"]["promoted_in"] == 0
    assert s["tier_write_bytes"]["host"] == pytest.approx(4 * MB)
    assert s["link_utilisation"]["nvme_write"]["bytes"] == pytest.approx(2 * MB)  # A, B


def test_promotion_under_gds_copies_the_blocks_down_over_d2h():
    """GPUDirect Storage reads straight into HBM: the promoted 1 MB is copied down to host
    over the GPU-to-host link like any write into host."""
    row, s, held = promotion(True, "gds")
    assert row.ttft_s == pytest.approx(0.4995 + 0.1)
    assert set(range(10)) <= held
    assert s["tiers"]["host"]["promoted_in"] == 10
    assert s["tiers"]["host"]["promoted_bytes_in"] == 0.0
    assert s["link_utilisation"]["d2h"]["bytes"] == pytest.approx(5 * MB)


def test_promotion_defaults_on_when_host_and_nvme_exist():
    """null (the default): LMCache and HiCache promote, so kvsim does when both tiers
    exist; the same run as promote: true."""
    sc = toy(
        tiers={
            "host": {"enabled": True, "capacity": "1 MB", "t0": "0 s"},
            "nvme": {"enabled": True, "capacity": "1 GB", "t0": "0 s"},
        }
    )
    assert sc.tiers.nvme.promote is None
    sim = Simulation(sc, requests=[req(0, 0.0, 100, [0])])
    assert sim.engines[0].local.promote
    sc = toy(tiers={"nvme": {"enabled": True, "capacity": "1 GB", "t0": "0 s"}})
    assert not Simulation(sc, requests=[req(0, 0.0, 100, [0])]).engines[0].local.promote
