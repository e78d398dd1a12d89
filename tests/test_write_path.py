"""The write path: every block stored into host or NVMe is a write on a link (hand-computed).

The toy scenario (conftest) has one GPU per node here (``gpus: 1``), so the GPU-to-host
link is the node's; prompts of 100 tokens are one 0.1 MB block and take 0.199 s to
compute, 1,000 tokens ten blocks (1 MB) and 1.099 s.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvsim import api
from kvsim.sim.simulation import Simulation

from conftest import ROOT, examples, req, toy

MB = 1e6
# kv_per_gpu: the KV pool the profile gave before HBM pools (one GPU cannot hold the
# profile's 744 GB of weights; these tests are about the write path, not the pools)
ONE_GPU = {"gpus": 1, "pcp": 1, "kv_per_gpu": "150 GB"}


def rows(res):
    return {int(r.id): r for r in res.requests.itertuples()}


def test_a_demotion_burst_on_the_d2h_link_delays_a_staging_copy():
    """A and B (1 MB each) are staged for the remote store at 1 MB/s; B's admission
    evicts A's 1 MB from HBM, a demotion to host that holds the link 1 s from 4.198 s.
    C (0.1 MB) computes until 4.397 s, but its staging copy waits in line until 5.198 s
    and ends at 5.298 s (0.1 s later than the link alone would allow: 4.497 s)."""
    sc = toy(
        node={**ONE_GPU, "d2h_per_gpu": "1 MB/s"},
        tiers={
            "gpu": {"capacity": "1 MB"},
            "host": {"enabled": True, "capacity": "1 GB", "t0": "0 s"},
        },
        remote={"enabled": True},
    )
    reqs = [
        req(0, 0.0, 1000, range(10)),
        req(1, 0.0, 1000, range(10, 20)),
        req(2, 0.0, 100, [30]),
    ]
    res = api.run(sc, requests=reqs)
    r = rows(res)
    assert r[0].finish_s == pytest.approx(1.099 + 1.0)
    assert r[1].finish_s == pytest.approx(2.099 + 1.099 + 1.0)
    assert r[2].compute_s == pytest.approx(0.199)
    assert r[2].store_s == pytest.approx(5.298 - 4.397)  # 0.1 s copy after 0.801 s in line
    assert r[2].finish_s == pytest.approx(5.298)
    d2h = res.summary["link_utilisation"]["d2h"]
    # staging 1 + 1 + 0.1 MB, demotions: A's 1 MB, then one 0.1 MB block of B at C's end
    assert d2h["bytes"] == pytest.approx(3.2 * MB)


def nvme_backlog(mode: str):
    """Four one-block prompts at time 0, no GPU or host room: each falls to NVMe, a 1 s
    write at 0.1 MB/s; at most 0.05 MB (0.5 s of writing) may wait."""
    sc = toy(
        node={**ONE_GPU, "nvme_drives": 1, "nvme_write_per_drive": "0.1 MB/s"},
        tiers={
            "nvme": {
                "enabled": True,
                "capacity": "1 GB",
                "t0": "0 s",
                "write_queue": "0.05 MB",
                "on_backlog": mode,
            }
        },
    )
    reqs = [req(i, 0.0, 100, [i]) for i in range(4)]
    sim = Simulation(sc, requests=reqs)
    res = api.collect(sim.run(), sc)
    return res, sim.engines[0].local.nvme


def test_nvme_write_backlog_drop():
    """A's write runs 0.199 -> 1.199 s. B ends at 0.398 s with 0.801 s of writing ahead
    (over 0.5 s): dropped; C at 0.597 s (0.602 s ahead): dropped; D at 0.796 s (0.403 s
    ahead): written. Nobody waits."""
    res, nvme = nvme_backlog("drop")
    assert sorted(nvme.keys()) == [0, 3]
    assert res.summary["tier_dropped_on_backlog"] == {"nvme": 2}
    assert [round(r.finish_s, 6) for r in rows(res).values()] == [0.199, 0.398, 0.597, 0.796]
    assert res.summary["tier_write_bytes"]["nvme"] == pytest.approx(0.2 * MB)


def test_nvme_write_backlog_block():
    """The engine waits before its next step until at most 0.5 s of writing is ahead:
    after A (queue to 1.199 s) until 0.699 s; B ends 0.898 s (queue to 2.199 s), waits
    until 1.699 s; C ends 1.898 s, waits until 2.699 s; D ends 2.898 s. All are written."""
    res, nvme = nvme_backlog("block")
    assert sorted(nvme.keys()) == [0, 1, 2, 3]
    assert res.summary["tier_dropped_on_backlog"] == {"nvme": 0}
    finish = [round(r.finish_s, 6) for r in rows(res).values()]
    assert finish == [0.199, 0.898, 1.898, 2.898]
    assert res.summary["engine_blocked_frac"] > 0  # the waits are engine time lost


def host_writes(policy: str, prompts: list[list[int]], **host) -> tuple:
    """Host bytes written and d2h bytes after 1,000-token prompts 10 s apart (HBM 1 MB)."""
    sc = toy(
        node={**ONE_GPU, "d2h_per_gpu": "1 MB/s"},
        tiers={
            "gpu": {"capacity": "1 MB"},
            "host": {
                "enabled": True,
                "capacity": "1 GB",
                "t0": "0 s",
                "write_policy": policy,
                **host,
            },
        },
    )
    reqs = [req(i, 10.0 * i, 1000, ids) for i, ids in enumerate(prompts)]
    res = api.run(sc, requests=reqs)
    s = res.summary
    return s["tier_write_bytes"]["host"], s["link_utilisation"]["d2h"]["bytes"], res


def test_write_back_writes_nothing_until_eviction():
    a, b = list(range(10)), list(range(10, 20))
    assert host_writes("write_back", [a])[:2] == (0.0, 0.0)
    # B evicts A from HBM: A's 1 MB is demoted, B stays in HBM
    assert host_writes("write_back", [a, b])[:2] == (MB, MB)


def test_write_through_writes_at_once_and_evictions_add_nothing():
    a, b = list(range(10)), list(range(10, 20))
    assert host_writes("write_through", [a])[:2] == (MB, MB)
    written, moved, res = host_writes("write_through", [a, b])
    assert (written, moved) == (2 * MB, 2 * MB)  # A's eviction finds it already in host
    host = res.summary["tiers"]["host"]
    assert host["demotions_in"] == 0 and host["written_through_in"] == 20


def test_write_through_selective_writes_a_block_on_its_threshold_hit():
    """A computes the prompt, B and C hit it in HBM: with a threshold of 2 its blocks are
    written to host at C (the second hit), not before; an eviction writes nothing."""
    a = list(range(10))
    assert host_writes("write_through_selective", [a, a])[0] == 0.0
    assert host_writes("write_through_selective", [a, a, a])[0] == MB
    assert host_writes("write_through_selective", [a, a], write_threshold=1)[0] == MB
    b = list(range(10, 20))
    assert host_writes("write_through_selective", [a, b])[0] == 0.0  # A evicted: dropped


def remote_puts(policy: str, prompts: list[list[int]], **remote) -> tuple:
    sc = toy(
        tiers={"gpu": {"capacity": "1 MB"}},
        remote={"enabled": True, "write_policy": policy, **remote},
    )
    reqs = [req(i, 10.0 * i, 1000, ids) for i, ids in enumerate(prompts)]
    res = api.run(sc, requests=reqs)
    return res.summary["tier_write_bytes"]["remote"], rows(res)


def test_remote_write_back_puts_blocks_when_they_leave_the_last_local_tier():
    a, b = list(range(10)), list(range(10, 20))
    put, r = remote_puts("write_back", [a])
    assert put == 0.0 and r[0].store_s == 0.0  # no staging: nothing is put at prefill
    put, r = remote_puts("write_back", [a, b, a])
    assert put >= MB  # B evicted A from HBM (the only local tier): A was put
    assert r[2].tokens_remote == 999  # and C reads it back from the store


def test_remote_write_through_selective_puts_only_hot_blocks():
    a = list(range(10))
    assert remote_puts("write_through_selective", [a, a])[0] == 0.0  # one hit < 2
    assert remote_puts("write_through_selective", [a, a, a])[0] == MB
    assert remote_puts("write_through", [a])[0] == MB


@settings(max_examples=examples(30), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    spec=st.lists(st.tuples(st.integers(1, 350), st.integers(0, 3)), min_size=1, max_size=20),
    host_policy=st.sampled_from(["write_back", "write_through", "write_through_selective"]),
    nvme_policy=st.sampled_from(["write_back", "write_through", "write_through_selective"]),
    remote_policy=st.sampled_from(["write_back", "write_through", "write_through_selective"]),
    gpu_mb=st.sampled_from([0, 0.3, 1]),
    host_mb=st.sampled_from([0.2, 1]),
    queue=st.sampled_from([None, "0.05 MB", "5 GB"]),
    mode=st.sampled_from(["drop", "block"]),
    prefetch=st.sampled_from(["none", "best_effort", "wait_complete"]),
    promote=st.booleans(),
    path=st.sampled_from(["bounce", "gds"]),
)
def test_bytes_written_to_a_tier_are_the_bytes_its_write_link_carried(
    spec,
    host_policy,
    nvme_policy,
    remote_policy,
    gpu_mb,
    host_mb,
    queue,
    mode,
    prefetch,
    promote,
    path,
):
    """Two independent counts: what each store says it stored, and what the links carried.
    Host's stored bytes less what prefetches and promotions through the bounce buffer
    brought, plus the staging copies (the remote store's put bytes under write-through
    policies), are the GPU-to-host link's bytes; prefetches and those promotions moved no
    more than the NVMe and NIC links carried; NVMe's stored bytes are the drives' write
    bytes; the remote store's landed bytes never exceed its puts. Staging buffers (queue
    0.05 MB or the default 5 GB) make blocks readable only once landed; a null queue is
    the optimistic write path."""
    reqs = []
    for i, (tokens, family) in enumerate(spec):
        n = -(-tokens // 100)
        reqs.append(req(i, 0.5 * i, tokens, [family * 100 + k for k in range(n)]))
    slow = {"d2h_per_gpu": "1 MB/s", "nvme_write_per_drive": "0.1 MB/s", "nvme_drives": 1}
    sc = toy(
        node={**ONE_GPU, **slow},
        tiers={
            "gpu": {"capacity": f"{gpu_mb} MB"},
            "host": {
                "enabled": True,
                "capacity": f"{host_mb} MB",
                "t0": "0 s",
                "write_policy": host_policy,
                "write_queue": queue,
                "on_backlog": mode,
            },
            "nvme": {
                "enabled": True,
                "capacity": "1 GB",
                "t0": "0 s",
                "write_policy": nvme_policy,
                "write_queue": queue,
                "on_backlog": mode,
                "promote": promote,
                "path": path,
            },
        },
        remote={"enabled": True, "write_policy": remote_policy, "write_threshold": 1},
        prefetch={"policy": prefetch},
    )
    res = api.run(sc, requests=reqs)
    s = res.summary
    written, links, tiers = s["tier_write_bytes"], s["link_utilisation"], s["tiers"]
    staged = tiers["remote"]["put_bytes"] if remote_policy != "write_back" else 0.0
    # host: demotions and write-throughs (over d2h) + prefetches (over the sources' links)
    fetched = tiers["host"]["prefetched_bytes_in"] + tiers["host"]["promoted_bytes_in"]
    assert links["d2h"]["bytes"] == pytest.approx(written["host"] - fetched + staged)
    # a restore reads all but the prompt's last token (always computed); a promotion
    # stores whole blocks: at most one token (1,000 B) more per promoted block
    extra = 1000.0 * tiers["host"]["promoted_in"]
    assert fetched <= links["nvme"]["bytes"] + links["nic_in"]["bytes"] + extra + 1e-6
    if not promote:
        assert tiers["host"]["promoted_in"] == 0
    if path == "gds":  # promotions went down over D2H: none bypassed the write link
        assert tiers["host"]["promoted_bytes_in"] == 0
    assert links["nvme_write"]["bytes"] == pytest.approx(written["nvme"])
    assert written["remote"] <= tiers["remote"]["put_bytes"] + 1e-6
    for kind, use in links.items():  # writes queued past the end do not count
        assert 0.0 <= use["busy_frac"] <= use["busy_frac_max"] <= 1.0 + 1e-9, kind
    if queue is None or mode == "block":
        assert s["tier_dropped_on_backlog"] == {"host": 0, "nvme": 0}


def codec_restore(codec: dict | None):
    """A (1 MB) falls to host; B reads its 999 tokens back over a 1 MB/s host link."""
    host = {"enabled": True, "capacity": "1 GB", "t0": "0 s"}
    if codec is not None:
        host["codec"] = codec
    sc = toy(node={**ONE_GPU, "h2d_per_gpu": "1 MB/s"}, tiers={"host": host})
    reqs = [req(0, 0.0, 1000, range(10)), req(1, 10.0, 1000, range(10))]
    res = api.run(sc, requests=reqs)
    return rows(res)[1], res.summary


def test_a_codec_halves_the_bytes_and_adds_its_decode_time():
    plain, s0 = codec_restore(None)
    assert plain.ttft_s == pytest.approx(0.999 + 0.1)
    half = {"ratio": 0.5, "encode_bandwidth": "1 GB/s", "decode_bandwidth": "10 MB/s"}
    row, s = codec_restore(half)
    # 0.4995 MB over 1 MB/s, then 0.999 MB of raw KV decoded at 10 MB/s, then one token
    assert row.bytes_host == pytest.approx(0.4995e6)
    assert row.load_host_s == pytest.approx(0.4995 + 0.0999)
    assert row.ttft_s == pytest.approx(0.4995 + 0.0999 + 0.1)
    assert s["tier_write_bytes"]["host"] == pytest.approx(0.5e6)
    assert s0["tier_write_bytes"]["host"] == pytest.approx(1e6)
    # decoding on the GPU is GPU work; on the CPU it is not
    cpu_row, cpu = codec_restore({**half, "on": "cpu"})
    assert cpu_row.ttft_s == pytest.approx(row.ttft_s)
    span = s["duration_s"]
    assert (s["gpu_busy_frac"] - cpu["gpu_busy_frac"]) * span == pytest.approx(0.0999)


def test_a_remote_codec_encodes_before_the_staging_copy():
    """1 MB of raw KV encoded at 4 MB/s (0.25 s), then 0.5 MB copied at 1 MB/s (0.5 s)."""
    codec = {"ratio": 0.5, "encode_bandwidth": "4 MB/s", "decode_bandwidth": "1 GB/s"}
    sc = toy(
        node={**ONE_GPU, "d2h_per_gpu": "1 MB/s"},
        remote={"enabled": True, "codec": codec},
    )
    res = api.run(sc, requests=[req(0, 0.0, 1000, range(10))])
    assert rows(res)[0].store_s == pytest.approx(0.75)
    assert res.summary["tier_write_bytes"]["remote"] == pytest.approx(0.5e6)


def test_a_remote_codec_on_the_cpu_copies_raw_kv_and_encodes_off_the_engines_path():
    """On the CPU the raw 1 MB is copied (1 s at 1 MB/s) and encoded in host memory after
    it: the engine waits for the copy only; the store still holds 0.5 MB."""
    codec = {"ratio": 0.5, "encode_bandwidth": "4 MB/s", "decode_bandwidth": "1 GB/s"}
    sc = toy(
        node={**ONE_GPU, "d2h_per_gpu": "1 MB/s"},
        remote={"enabled": True, "codec": {**codec, "on": "cpu"}},
    )
    res = api.run(sc, requests=[req(0, 0.0, 1000, range(10))])
    assert rows(res)[0].store_s == pytest.approx(1.0)
    assert res.summary["tier_write_bytes"]["remote"] == pytest.approx(0.5e6)
    assert res.summary["link_utilisation"]["d2h"]["bytes"] == pytest.approx(1e6)


def test_a_bare_yaml_on_key_names_where_a_codec_runs(tmp_path):
    """YAML 1.1 reads ``on:`` as the boolean true; the codec takes it as ``on``."""
    from kvsim.config.loader import load_scenario

    path = tmp_path / "codec.yaml"
    path.write_text(
        "extends: " + str(ROOT / "scenarios" / "quickstart.yaml") + "\n"
        "tiers:\n  host:\n    codec: {ratio: 0.5, encode_bandwidth: 1 GB/s, "
        "decode_bandwidth: 1 GB/s, on: cpu}\n",
        encoding="utf-8",
    )
    assert load_scenario(path).tiers.host.codec.on == "cpu"


def test_a_write_back_copy_out_of_hbm_by_a_kernel_is_sm_work():
    """B (t = 10) evicts A's 1 MB from HBM, the only local tier: under write-back it is
    copied out over the GPU-to-host link before its put, by the rank that stores (an
    unsharded store: all of it on one GPU's 0.125 MB/s link, 8 s). A copy kernel holding
    half the SMs does 0.5 x 8 s of SM work; DMA none."""
    from kvsim.sim.simulation import Simulation

    def busy(**node):
        sc = toy(
            node={"d2h_per_gpu": "0.125 MB/s", **node},
            tiers={"gpu": {"capacity": "1 MB"}},
            remote={"enabled": True, "write_policy": "write_back"},
        )
        reqs = [req(i, 10.0 * i, 1000, ids) for i, ids in enumerate([range(10), range(10, 20)])]
        sim = Simulation(sc, requests=reqs)
        sim.run()
        return sim.engines[0].busy

    dma = busy(copy_engine="dma")
    assert busy(copy_engine="kernel", copy_kernel_sm_share=0.5) == pytest.approx(dma + 0.5 * 8)
