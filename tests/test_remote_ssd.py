"""The remote store's own SSDs below its servers' DRAM (``remote.ssd``; docs/data-path.md,
"The store's own SSD"): demotion in the DRAM's eviction order, a GET that reads an SSD and
then the network one after the other, the SSD's read link shared by concurrent GETs,
writes readable once landed, promotion, prefetches and the load policy's estimate, all by
hand on the toy scenario (1,000 B per token, 100-token blocks, a 1 MB/s server, T0 0.5 s,
a prefill of n tokens 0.1 s + (n - 1) ms); the mirrored store; and the section absent or
disabled giving the same results bit for bit."""

from __future__ import annotations

import json

import pytest
from test_remote_kinds import lone_get

from kvsim import api
from kvsim.cache.eviction import LRU
from kvsim.cache.remote import RemoteStore
from kvsim.cache.store_ssd import StoreSsd
from kvsim.config.schema import lookup_order
from kvsim.kernel.fabric import Link
from kvsim.kernel.pipe import Pipe
from kvsim.sim.simulation import Simulation

from conftest import req, toy

# a 2 MB/s SSD per server, written at 1 GB/s (demotions land within a millisecond), 20 ms
# to the first byte of each read
SSD = {"enabled": True, "read_bandwidth": "2 MB/s", "write_bandwidth": "1 GB/s", "latency": "20 ms"}
ONE_GPU = {"gpus": 1, "pcp": 1, "kv_per_gpu": "150 GB"}


def store(capacity: str, **ssd) -> dict:
    """The toy's remote section, on, with ``capacity`` of DRAM and an SSD below it."""
    return {"remote": {"enabled": True, "capacity": capacity, "ssd": {**SSD, **ssd}}}


def rows(res) -> dict:
    return {int(r.id): r for r in res.requests.itertuples()}


# ---- one GET ------------------------------------------------------------------------------


def test_one_get_from_the_stores_ssd_by_hand():
    """P (t = 0) computes blocks 1-3 (0.399 s) and puts them: they land at 0.699 s in a
    server whose DRAM holds nothing (0 B), so all three go down to its SSD (written by
    0.6993 s). A (t = 10) reads its 299 cached tokens from there: T0 0.5 s, then the
    SSD's 20 ms and 299 kB at 2 MB/s (0.1495 s), then 299 kB over the 1 MB/s server
    (0.299 s), one after the other: load 0.9685 s, then one token, 0.1 s."""
    res = api.run(
        toy(**store("0 B")), requests=[req(0, 0.0, 300, [1, 2, 3]), req(1, 10.0, 300, [1, 2, 3])]
    )
    a = rows(res)[1]
    assert a.load_s == pytest.approx(0.5 + 0.02 + 0.1495 + 0.299)
    assert a.remote_get_s == pytest.approx(0.02 + 0.1495 + 0.299)
    assert a.remote_ssd_s == pytest.approx(0.02 + 0.1495)
    assert a.ttft_s == pytest.approx(0.9685 + 0.1)
    assert a.tokens_remote == a.remote_ssd_tokens == 299
    # the restore's parts: T0 and the SSD's latency; the two transfers alone
    assert a.restore_lookup_s == pytest.approx(0.52)
    assert a.restore_read_s == pytest.approx(0.1495 + 0.299)
    assert a.restore_queue_s == 0.0
    ssd = res.summary["tiers"]["remote"]["ssd"]
    assert ssd["demotions_in"] == 3 and ssd["write_bytes"] == pytest.approx(300e3)
    assert ssd["reads"] == 3 and ssd["read_bytes"] == pytest.approx(299e3)
    assert ssd["blocks"] == 3 and ssd["used_bytes"] == pytest.approx(300e3)
    assert res.summary["remote_ssd_token_frac"] == pytest.approx(299 / 600)
    assert rows(res)[0].remote_ssd_tokens == 0 and rows(res)[0].remote_ssd_s == 0.0


def test_the_dram_part_moves_first_then_the_ssd_is_read_then_its_bytes_move():
    """The server's DRAM holds 200 kB: P's put of blocks 1-3 keeps 2 and 3 and demotes 1.
    A reads 2 and 3 (199 kB) from DRAM (0.199 s), then block 1's 100 kB off the SSD (20 ms
    + 0.05 s), then over the network (0.1 s): 0.369 s after T0."""
    res = api.run(
        toy(**store("200 kB")), requests=[req(0, 0.0, 300, [1, 2, 3]), req(1, 10.0, 300, [1, 2, 3])]
    )
    a = rows(res)[1]
    assert a.remote_get_s == pytest.approx(0.199 + 0.02 + 0.05 + 0.1)
    assert a.remote_ssd_s == pytest.approx(0.07)
    assert a.tokens_remote == 299 and a.remote_ssd_tokens == 100


def test_the_same_get_from_dram_alone_pays_no_ssd():
    """A store whose DRAM holds everything never touches its SSD: A's GET is the 0.299 s
    it always was, and nothing was demoted."""
    res = api.run(
        toy(**store("1 GB")), requests=[req(0, 0.0, 300, [1, 2, 3]), req(1, 10.0, 300, [1, 2, 3])]
    )
    a = rows(res)[1]
    assert a.remote_get_s == pytest.approx(0.299) and a.remote_ssd_tokens == 0
    ssd = res.summary["tiers"]["remote"]["ssd"]
    assert ssd["demotions_in"] == ssd["reads"] == ssd["blocks"] == 0


def test_two_gets_at_once_share_the_ssds_read_bandwidth():
    """Two engines, each restoring 299 kB off the same server's SSD at t = 10 (a 1 GB/s
    server, so that the SSD is what binds): alone a GET takes 20 ms + 299 kB / 2 MB/s +
    299 kB / 1 GB/s = 0.169799 s; together each gets 1 MB/s of the SSD (598 kB in
    0.299 s) and half the server's link (598 kB in 0.598 ms): 0.319598 s."""

    def get_s(both: bool) -> list[float]:
        sc = toy(
            cluster={"engines": 2, "router": "round_robin"},
            remote={"enabled": True, "capacity": "0 B", "bandwidth": "1 GB/s", "ssd": SSD},
        )
        reqs = [
            req(0, 0.0, 300, [1, 2, 3]),
            req(1, 0.0, 300, [4, 5, 6]),
            req(2, 10.0, 300, [1, 2, 3]),
        ]
        if both:
            reqs.append(req(3, 10.0, 300, [4, 5, 6]))
        res = api.run(sc, requests=reqs)
        return [r.remote_get_s for r in res.requests.itertuples() if r.id >= 2]

    assert get_s(False) == pytest.approx([0.02 + 0.1495 + 0.000299])
    assert get_s(True) == pytest.approx([0.02 + 0.299 + 0.000598] * 2)


def test_at_the_defaults_a_16k_get_off_the_ssd_adds_its_latency_and_read():
    """The default profile's one Valkey-like server, a lone unsharded GET of 64 chunks
    (16,384 tokens of GLM-5, 838,336,512 B): from DRAM it takes what it always did; with
    the server's DRAM at 0 B and its SSD at the defaults (12 GB/s, 300 us) the SSD's part
    comes first: 0.3 ms + 838,336,512 B / 12 GB/s = 70.16 ms more."""
    dram, _, _ = lone_get({}, 64)
    ssd, _, s = lone_get({"capacity": "0 B", "ssd": {"enabled": True}}, 64)
    assert ssd - dram == pytest.approx(300e-6 + 16384 * 51168 / 12e9)
    assert s["tiers"]["remote"]["ssd"]["read_bytes"] == pytest.approx(16384 * 51168)


# ---- demotion -----------------------------------------------------------------------------


def demoted(eviction: str, ssd_capacity: str = "2 TiB") -> tuple[list, list, dict]:
    """The server's DRAM holds 200 kB (two blocks). P puts 1-3 (1 goes down); S (t = 3)
    reads block 2 (a hit: under LRU 2 is now the newest); Q (t = 5) puts 4 and 5, which
    push out the two oldest. (DRAM keys, SSD keys in eviction order, the SSD's figures.)"""
    sc = toy(
        remote={
            "enabled": True,
            "capacity": "200 kB",
            "eviction": eviction,
            "ssd": {**SSD, "capacity": ssd_capacity, "eviction": "fifo"},
        }
    )
    reqs = [req(0, 0.0, 300, [1, 2, 3]), req(1, 3.0, 100, [2]), req(2, 5.0, 200, [4, 5])]
    sim = Simulation(sc, requests=reqs)
    sim.run()
    remote = sim.remote
    assert remote is not None and remote.ssd is not None
    return remote.stores[0].keys(), remote.ssd.stores[0].keys(), remote.ssd.stats(False)


@pytest.mark.parametrize(("eviction", "order"), [("lru", [1, 3, 2]), ("fifo", [1, 2, 3])])
def test_the_ssd_gets_what_dram_evicts_in_its_eviction_order(eviction, order):
    """LRU: S's hit makes 2 the newest, so Q's puts push out 3, then 2; FIFO ignores the
    hit: 2, then 3. Block 1 went down first, with P's put."""
    dram, ssd, stats = demoted(eviction)
    assert dram == [4, 5]
    assert ssd == order
    assert stats["demotions_in"] == 3 and stats["evictions"] == 0


def test_a_full_ssd_drops_its_oldest():
    """An SSD of 200 kB keeps the last two shards it was given (fifo): 3 and 2; 1 is gone."""
    _, ssd, stats = demoted("lru", ssd_capacity="200 kB")
    assert ssd == [3, 2] and stats["evictions"] == 1 and stats["used_bytes"] == pytest.approx(2e5)


def test_a_hit_after_demotion_is_an_ssd_hit():
    """After ``demoted("lru")``'s three requests, T (t = 20) asks for blocks 1-3, all on
    the SSD now: its 299 tokens are remote and read off the SSD; S's earlier hit on block
    2 was in DRAM (no SSD tokens)."""
    sc = toy(**store("200 kB"))
    reqs = [
        req(0, 0.0, 300, [1, 2, 3]),
        req(1, 3.0, 100, [2]),
        req(2, 5.0, 200, [4, 5]),
        req(3, 20.0, 300, [1, 2, 3]),
    ]
    res = api.run(sc, requests=reqs)
    r = rows(res)
    assert r[1].tokens_remote == 99 and r[1].remote_ssd_tokens == 0
    assert r[3].tokens_remote == r[3].remote_ssd_tokens == 299
    assert r[3].remote_get_s == pytest.approx(0.02 + 0.1495 + 0.299)
    s = res.summary
    assert s["tiers"]["remote"]["ssd"]["reads"] == 3
    assert s["remote_ssd_token_frac"] == pytest.approx(299 / (300 + 100 + 200 + 300))


def test_a_demoted_shard_is_readable_once_its_write_lands():
    """The SSD writes 100 kB/s: P's three blocks, demoted at 0.699 s, land at 1.699, 2.699
    and 3.699 s. A (t = 2) finds block 1 only: 100 tokens off the SSD (20 ms + 0.05 s +
    0.1 s after T0), the other 200 computed (0.1 + 0.199 s). It puts nothing: the SSD
    holds the rest already."""
    sc = toy(**store("0 B", write_bandwidth="100 kB/s"))
    res = api.run(sc, requests=[req(0, 0.0, 300, [1, 2, 3]), req(1, 2.0, 300, [1, 2, 3])])
    a = rows(res)[1]
    assert a.tokens_remote == a.remote_ssd_tokens == 100 and a.tokens_compute == 200
    assert a.load_s == pytest.approx(0.5 + 0.02 + 0.05 + 0.1)
    assert a.ttft_s == pytest.approx(0.67 + 0.1 + 0.199)
    assert res.summary["remote_put_ops"] == 2  # P's three blocks: two 256-token chunks


# ---- promotion, prefetch, the load policy ---------------------------------------------------


@pytest.mark.parametrize("promote", [False, True])
def test_promotion_brings_what_a_get_read_back_into_dram(promote):
    """DRAM holds one block (100 kB): after P, block 3 is in DRAM, 1 and 2 on the SSD. A
    (t = 10) reads 3 from DRAM (99 kB, 0.099 s), then 1 and 2 off the SSD (20 ms + 0.1 s)
    and over the network (0.2 s): 0.419 s. With promotion, 1 then 2 go back into DRAM
    when A's GET ends (2 stays; 3 goes down to the SSD, 1 is there already), so B
    (t = 20) reads 2 from DRAM (0.1 s) and 1 and 3 off the SSD (20 ms + 0.0995 s, then
    0.199 s): 0.4185 s; without, B's GET is A's again."""
    sc = toy(**store("100 kB", promote=promote))
    reqs = [req(0, 0.0, 300, [1, 2, 3]), req(1, 10.0, 300, [1, 2, 3]), req(2, 20.0, 300, [1, 2, 3])]
    res = api.run(sc, requests=reqs)
    r = rows(res)
    assert r[1].remote_get_s == pytest.approx(0.099 + 0.02 + 0.1 + 0.2)
    assert r[1].remote_ssd_tokens == 200
    ssd = res.summary["tiers"]["remote"]["ssd"]
    if promote:
        assert r[2].remote_get_s == pytest.approx(0.1 + 0.02 + 0.0995 + 0.199)
        assert r[2].remote_ssd_tokens == 199
        assert ssd["promoted"] == 4 and ssd["demotions_in"] == 3
    else:
        assert r[2].remote_get_s == pytest.approx(r[1].remote_get_s)
        assert r[2].remote_ssd_tokens == 200
        assert ssd["promoted"] == 0 and ssd["demotions_in"] == 2


def test_a_prefetch_reads_the_ssd_before_the_network_brings_it_into_host():
    """prefetch wait_complete with a 300 kB host tier: B's blocks push P's out of host; C
    (t = 20) asks for P's again, which only the store's SSD holds. Its prefetch into host
    moves whole blocks (300 kB): T0, 20 ms, 0.15 s off the SSD, 0.3 s over the network:
    0.97 s; then 299 kB from host at 50 GB/s and one token (0.1 s)."""
    sc = toy(
        node=ONE_GPU,
        tiers={"host": {"enabled": True, "capacity": "300 kB", "t0": "0 s"}},
        prefetch={"policy": "wait_complete"},
        **store("0 B"),
    )
    reqs = [req(0, 0.0, 300, [1, 2, 3]), req(1, 5.0, 300, [4, 5, 6]), req(2, 20.0, 300, [1, 2, 3])]
    res = api.run(sc, requests=reqs)
    c = rows(res)[2]
    assert c.load_prefetch_s == pytest.approx(0.5 + 0.02 + 0.15 + 0.3)
    assert c.ttft_s == pytest.approx(0.97 + 299e3 / 50e9 + 0.1)
    assert c.tokens_host == 299 and c.remote_ssd_tokens == 0  # restored from host
    assert res.summary["tiers"]["remote"]["ssd"]["reads"] == 3


@pytest.mark.parametrize("ssd", [False, True])
def test_the_auto_policy_prices_the_ssd_read(ssd):
    """auto, T0 0, a 2 MB/s server: from DRAM 999 tokens take 0.4995 s, and restoring
    (then one token, 0.1 s) beats computing 1,000 tokens (1.099 s). Off a 1 MB/s SSD the
    GET takes 0.999 s more: every prefix restored costs more than it saves, so auto
    computes all of it."""
    remote = {"enabled": True, "t0": "0 s", "bandwidth": "2 MB/s", "capacity": "1 GB"}
    if ssd:
        remote.update(capacity="0 B", ssd={**SSD, "read_bandwidth": "1 MB/s", "latency": "0 s"})
    sc = toy(cluster={"load_policy": "auto"}, remote=remote)
    ids = list(range(10))
    a = rows(api.run(sc, requests=[req(0, 0.0, 1000, ids), req(1, 10.0, 1000, ids)]))[1]
    if ssd:
        assert a.decision == "skipped" and a.tokens_compute == 1000
        assert a.ttft_s == pytest.approx(1.099)
    else:
        assert a.decision == "restore" and a.ttft_s == pytest.approx(0.4995 + 0.1)


# ---- the store ------------------------------------------------------------------------------


def ssd_store(ranks: int, mirror: bool, dram: float, ssd: float) -> RemoteStore:
    """A per-rank store of ``ranks`` servers with an SSD each (landed at once: the clock
    stays at 0 and the write links are fast)."""
    links = [Link(f"r{k}", 1e9) for k in range(ranks)]
    disks = StoreSsd(
        [LRU(ssd) for _ in range(ranks)],
        [Link(f"s{k}", 1e9) for k in range(ranks)],
        [Pipe(f"w{k}", 1e18) for k in range(ranks)],
        lambda: 1.0,
    )
    r = RemoteStore([LRU(dram) for _ in range(ranks)], links, per_rank=True, ranks=ranks, ssd=disks)
    if not mirror:
        r.unmirror()
    return r


def test_a_mirrored_store_with_ssds_behaves_like_one_index_per_server():
    """Shards of 10 B, DRAM 25 B (two shards) and SSD 45 B (four) a server: the mirrored
    store (one index for four servers) and four indexes see the same blocks, send the same
    GETs to DRAM and SSD, and keep the same figures; a lost server loses its SSD too. The
    puts: 1, 2; 3 (1 goes down); 4 (1 is on the SSD: not put again; 2 goes down); 5, 6, 7
    (3, 4, 5 go down, and the full SSD drops 1)."""
    a, b = ssd_store(4, True, 25, 45), ssd_store(4, False, 25, 45)
    assert a.mirrored and not b.mirrored
    for blocks in ([1, 2], [3], [1, 4], [5, 6, 7]):
        for r in (a, b):
            batch = r.missing(blocks, [40.0] * len(blocks))
            r.reserve(batch)
            r.land(batch)
        assert [a.has(x) for x in range(9)] == [b.has(x) for x in range(9)]
        assert a.ssd.stats(True) == b.ssd.stats(False)  # type: ignore[union-attr]
    held = [x for x in range(9) if a.has(x)]
    assert held == [2, 3, 4, 5, 6, 7]  # 6 and 7 in DRAM, the rest on the SSDs
    assert a.split(held, [10] * len(held))[:2] == b.split(held, [10] * len(held))[:2]
    dram, disk, reads, on_ssd = b.split(held, [10] * len(held))
    assert dram == dict.fromkeys(range(4), 20) and disk == dict.fromkeys(range(4), 40)
    assert on_ssd == [True] * 4 + [False] * 2 and len(reads) == 16
    # nothing held on an SSD is put again; what the SSD dropped is
    assert not a.missing([2, 3, 4], [40.0] * 3) and not b.missing([2, 3, 4], [40.0] * 3)
    assert a.missing([1], [40.0]).count() == b.missing([1], [40.0]).count() == 4
    a.lose(2)
    b.lose(2)
    assert not a.mirrored
    assert a.shard_prefixes([2, 3]) == b.shard_prefixes([2, 3]) == [2, 2, 0, 2]
    assert len(a.ssd.stores[2]) == len(b.ssd.stores[2]) == 0  # type: ignore[union-attr]
    assert [a.has(x) for x in range(9)] == [b.has(x) for x in range(9)] == [False] * 9


def test_validate_says_where_the_ssd_is():
    sc = toy(**store("1 GB"))
    assert lookup_order(sc)[-1] == "remote (kv_server, its SSD below its DRAM)"
    assert lookup_order(toy(remote={"enabled": True}))[-1] == "remote (kv_server)"


# ---- off by default ---------------------------------------------------------------------------


def test_the_section_absent_or_disabled_gives_the_same_results_bit_for_bit():
    """quickstart (its remote store per rank, mirrored, and all four tiers) with no
    ``remote.ssd``, and with one that is disabled but otherwise set: every request
    column and every summary figure the same, and no SSD column ever above 0."""
    base = ["workload.requests=600", "run.warmup=30 s"]
    absent = api.run("scenarios/quickstart.yaml", base)
    off = api.run(
        "scenarios/quickstart.yaml",
        [
            *base,
            "remote.ssd.enabled=false",
            "remote.ssd.read_bandwidth=1 MB/s",
            "remote.ssd.latency=1 s",
            "remote.ssd.capacity=1 GB",
            "remote.ssd.promote=true",
        ],
    )
    assert absent.requests.equals(off.requests)

    def figures(summary: dict) -> str:  # (NaN prices compare equal as text)
        return json.dumps({k: v for k, v in summary.items() if k != "provenance"}, default=str)

    assert figures(absent.summary) == figures(off.summary)
    assert "ssd" not in absent.summary["tiers"]["remote"]
    assert "remote_ssd_token_frac" not in absent.summary
    assert (absent.requests["remote_ssd_tokens"] == 0).all()
    assert (absent.requests["remote_ssd_s"] == 0).all()
