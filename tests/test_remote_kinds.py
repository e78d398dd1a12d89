"""Remote store kinds (issue 27): ``remote.kind: kv_server | object_store | shared_nvme``.

GET times by hand (kvsim/physics/client.py, equation (1); docs/data-path.md, "Remote store
kinds"), the kind profiles the loader starts from, the per-request price, the lookup order
`kvsim validate` prints, and the default kind (kv_server) unchanged."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import yaml

from kvsim import api
from kvsim.cli import main
from kvsim.config.loader import load_scenario, scenario_from_dict
from kvsim.config.schema import Remote, lookup_order
from kvsim.physics.client import Client, client_rate, get_seconds, op_interval, put_rate
from kvsim.profiles import remote_kind_path
from kvsim.results.records import usd_per_hour
from kvsim.workload.request import Request

ROOT = Path(__file__).resolve().parent.parent
QS = str(ROOT / "scenarios" / "quickstart.yaml")
PAPER = str(ROOT / "scenarios" / "paper" / "base.yaml")  # remote hits at once (prestored)
# one 256-token chunk of GLM-5 KV (the default profile): 256 x 51,168 B
CHUNK = 256 * 51_168  # 13,099,008 B


def lone_get(remote: dict, ops: int, node: dict | None = None) -> tuple[float, float, dict]:
    """(remote_get_s, load_s, summary) of a lone GET of ``ops`` whole chunks on the default
    profile (sync loading, no local tiers): a prompt of ops x 256 + 1 tokens is stored by a
    first request, then read back by a second at 100 s (the last token is always computed:
    ops x 256 tokens are read)."""
    tokens = ops * 256 + 1
    sc = scenario_from_dict(
        {
            "name": "get",
            "cluster": {"load_policy": "sync"},
            "node": node or {},
            "remote": remote,
            "tiers": {
                "gpu": {"capacity": "0 B"},
                "host": {"enabled": False},
                "nvme": {"enabled": False},
            },
            "workload": {
                "kind": "synthetic",
                "requests": 1,
                "arrivals": {"process": "constant", "rate": "1/s"},
                "prompt_tokens": {"dist": "fixed", "value": tokens},
            },
        }
    )
    ids = tuple(range(-(-tokens // 512)))
    reqs = [Request(0, 0.0, tokens, 1, ids), Request(1, 100.0, tokens, 1, ids)]
    res = api.run(sc, requests=reqs)
    row = res.requests.iloc[1]
    assert row.tokens_remote == ops * 256
    return float(row.remote_get_s), float(row.load_s), res.summary


# ---- the object store ------------------------------------------------------------------


def test_object_store_op_interval_by_hand():
    """A 13,099,008 B chunk (c), 16 connections of 100 MB/s, 20 ms to the first byte of each
    ranged GET, a 1 TB/s service and a 5 GB/s copy:
    t_s = c / 1e12 = 0.0131 ms, t_c = c / 5e9 = 2.6198 ms, t_n = c / 1e8 = 130.990 ms.
    - depth 1 (W = 16): the window, (20 + 0.0131 + 2.6198 + 130.990) / 16 = 9.6014 ms/op
      (above t_n / 16 = 8.187 ms);
    - depth 4 (W = 64): the window falls to 2.400 ms; the connections' rate binds:
      t_n / 16 = c / (16 x 100 MB/s) = 8.1869 ms/op.
    With the server and the copy negligible, depth 1 is the textbook (r + c/b) / N."""
    t_s, t_c, t_n = CHUNK / 1e12, CHUNK / 5e9, CHUNK / 1e8
    one = Client(16, 20e-3, 1, 5e9, 1e8)
    assert op_interval(CHUNK, one, 1e12, 0.0) == pytest.approx((20e-3 + t_s + t_c + t_n) / 16)
    assert op_interval(CHUNK, one, 1e12, 0.0) == pytest.approx(9.6014e-3, rel=1e-4)
    four = Client(16, 20e-3, 4, 5e9, 1e8)
    assert op_interval(CHUNK, four, 1e12, 0.0) == pytest.approx(t_n / 16)
    assert get_seconds(10, CHUNK, four, 1e12, 0.0) == pytest.approx(10 * CHUNK / 1.6e9)
    # the textbook form: no server time, no copy
    bare = Client(16, 20e-3, 1, math.inf, 1e8)
    assert op_interval(CHUNK, bare, math.inf, 0.0) == pytest.approx((20e-3 + t_n) / 16)
    # null connection_bandwidth: exactly the KV server's equation, bit for bit
    kv = Client(1, 100e-6, 4, 5e9)
    t_s = 0.277e-3 + CHUNK / 1.9e9
    assert op_interval(CHUNK, kv, 1.9e9, 0.277e-3) == max(
        t_s, CHUNK / 5e9, (100e-6 + t_s + CHUNK / 5e9) / 4
    )
    assert put_rate(CHUNK, kv, 1.9e9, 0.277e-3) == math.inf


@pytest.mark.parametrize("ops", [1, 8, 64])
def test_object_store_get_through_the_simulator(ops):
    """The shipped object store (kvsim/profiles/remote/object_store.yaml) with 16 connections
    of depth 1, 100 MB/s each, 20 ms first byte: one unsharded GET of ``ops`` chunks takes
    T = t0 + ops x 9.6014 ms (the window above) + the path's latency once (the NIC's 50 us
    one way and PCIe's 10 us); remote_get_s leaves out t0 (30 ms, the first byte of the first
    GET), which load_s includes. The servers' 1 TB/s, the NIC (800 GB/s) and the issuing
    rank's own 50 GB/s link are far above the client's 13.1 MB / 9.6 ms = 1.36 GB/s."""
    remote = {
        "kind": "object_store",
        "client": {"connections": 16, "connection_bandwidth": "100 MB/s", "round_trip": "20 ms"},
    }
    got, load, s = lone_get(remote, ops)
    per_op = (20e-3 + CHUNK / 1e12 + CHUNK / 5e9 + CHUNK / 1e8) / 16
    assert got == pytest.approx(ops * per_op + 60e-6, rel=1e-6)
    assert load >= 30e-3 + got  # t0 first (then the hand-off to the other ranks)
    # operations: the second request read ``ops`` chunks; the first put ops x 256 + 1
    # tokens, i.e. ops chunks and one of a single token
    assert s["remote_get_ops"] == ops
    assert s["remote_put_ops"] == ops + 1


def test_more_connections_pull_faster_until_the_copy_binds():
    """N connections of 100 MB/s at 20 ms, depth 1: the window binds, c x N / 153.62 ms
    (r + t_s + t_c + t_n = 20 + 0.013 + 2.620 + 130.990 ms), doubling with N: 0.682, 1.364,
    2.729 GB/s for 8, 16, 32; at 64 it would be 5.458 GB/s, past the one copy's 5 GB/s,
    which binds (t_c = 2.620 ms per op)."""
    cycle = 20e-3 + CHUNK / 1e12 + CHUNK / 5e9 + CHUNK / 1e8
    for n in (8, 16, 32):
        rate = client_rate(CHUNK, Client(n, 20e-3, 1, 5e9, 1e8), 1e12, 0.0)
        assert rate == pytest.approx(CHUNK * n / cycle)
        assert rate < n * 1e8  # never past N x the per-connection rate
    assert client_rate(CHUNK, Client(64, 20e-3, 1, 5e9, 1e8), 1e12, 0.0) == pytest.approx(5e9)


# ---- the shared NVMe store -------------------------------------------------------------

# per rank, 8 servers (one per rank of the default profile's PCP8 node) at 2.5 GB/s each:
# 20 GB/s in all; a node whose host-to-GPU link is 8 x 1 GB/s = 8 GB/s
NVME_REMOTE = {"kind": "shared_nvme", "sharding": "per_rank", "bandwidth": "2.5 GB/s"}
SLOW_PCIE = {"h2d_per_gpu": "1 GB/s"}


@pytest.mark.parametrize("ops", [2, 16])
def test_shared_nvme_get_through_gpudirect_skips_the_host_to_gpu_link(ops):
    """GPUDirect (the shared_nvme default): the GET's path is the servers and the NIC only.
    ops x 13,099,008 B over 8 servers at 2.5 GB/s (20 GB/s; the NIC is 8 x 100 GB/s):
    T = bytes / 20 GB/s + 50 us (the NIC's latency; no PCIe latency), whatever the
    host-to-GPU link (1 GB/s per GPU here). The client does not bind: no copy (t_c = 0), a
    shard c/8 = 1.637 MB, t_s = 0.655 ms, window (0.1 + 0.655) / 64 ms: 139 GB/s per rank."""
    got, _, _ = lone_get(NVME_REMOTE, ops, SLOW_PCIE)
    assert got == pytest.approx(ops * CHUNK / 20e9 + 50e-6, rel=1e-6)


@pytest.mark.parametrize("ops", [2, 16])
def test_shared_nvme_get_through_host_memory_pays_the_slower_pcie(ops):
    """``remote.path: bounce``: NIC, then the host-to-GPU link (8 GB/s here, below the
    servers' 20 GB/s): T = bytes / 8 GB/s + 60 us (NIC 50 us + PCIe 10 us). The client
    copies now (10 GB/s, the profile's): c/8 / max(0.164 ms, (0.1 + 0.655 + 0.164) / 64 ms)
    = 10 GB/s per rank, 80 GB/s for the 8, above 8 GB/s."""
    got, _, _ = lone_get({**NVME_REMOTE, "path": "bounce"}, ops, SLOW_PCIE)
    assert got == pytest.approx(ops * CHUNK / 8e9 + 60e-6, rel=1e-6)
    # with a fast PCIe (the profile's 50 GB/s per GPU: 400 GB/s) the servers bind again
    fast, _, _ = lone_get({**NVME_REMOTE, "path": "bounce"}, ops)
    assert fast == pytest.approx(ops * CHUNK / 20e9 + 60e-6, rel=1e-6)


def test_gpudirect_removes_the_client_copy_from_the_cap():
    """The client's cap with and without the copy: the shipped shared_nvme client (8 x 8 in
    flight, 100 us, 10 GB/s copy) on 50 GB/s servers, whole chunks: with the copy,
    c / max(1.310 ms, (0.1 + 0.262 + 1.310) / 64) = 10 GB/s; without (GPUDirect),
    c / ((0.1 + 0.262) / 64 ms) = 2.316 TB/s."""
    cl = Client(8, 100e-6, 8, 10e9)
    assert client_rate(CHUNK, cl, 50e9, 0.0) == pytest.approx(10e9)
    direct = Client(8, 100e-6, 8, math.inf)
    assert client_rate(CHUNK, direct, 50e9, 0.0) == pytest.approx(
        CHUNK / ((100e-6 + CHUNK / 50e9) / 64)
    )


# ---- the kind profiles and the loader ----------------------------------------------------


def test_set_remote_kind_starts_from_the_kind_profile():
    """`--set remote.kind=object_store` alone: the remote section is the shipped object
    store's, with the scenario's own remote fields (quickstart: 8 servers per rank, a 2 s
    timeout) on top; the rest of the scenario is untouched."""
    base = load_scenario(QS)
    sc = load_scenario(QS, ["remote.kind=object_store"])
    shipped = yaml.safe_load(remote_kind_path("object_store").read_text())["remote"]
    assert sc.remote.kind == "object_store"
    assert sc.remote.t0 == pytest.approx(0.030)
    assert sc.remote.client.connection_bandwidth == pytest.approx(88e6)
    assert sc.remote.client.connections == shipped["client"]["connections"] == 64
    assert sc.remote.bandwidth == pytest.approx(1e12)
    assert (sc.remote.servers, sc.remote.sharding, sc.remote.timeout) == (8, "per_rank", 2.0)
    assert sc.tiers == base.tiers and sc.node == base.node
    # a scenario field over the kind's
    sc = load_scenario(QS, ["remote.kind=object_store", "remote.t0=80 ms"])
    assert sc.remote.t0 == pytest.approx(0.080)
    nv = load_scenario(QS, ["remote.kind=shared_nvme"])
    assert nv.remote.gpudirect and nv.remote.bandwidth == pytest.approx(50e9)


def test_an_error_in_a_kind_profile_field_points_at_its_line():
    """Origins: a field the kind profile wrote is reported at its line there, named as the
    package file wherever kvsim is installed; a cross check the user's own field causes
    names that field (and the --set that gave it)."""
    from kvsim.config.loader import remote_kind_layer
    from kvsim.errors import InputError

    layer, origins = remote_kind_layer(
        {"remote": {"servers": 1}}, {}, {"remote": {"kind": "shared_nvme"}}
    )
    assert layer["remote"]["kind"] == "shared_nvme"
    assert origins[("remote", "path")].startswith("kvsim/profiles/remote/shared_nvme.yaml:")
    with pytest.raises(InputError) as e:
        load_scenario(QS, ["remote.kind=shared_nvme", "node.gpudirect_rdma=false"])
    assert str(e.value).startswith("--set node.gpudirect_rdma=false: node.gpudirect_rdma:")
    assert "remote.path: bounce" in str(e.value)


def test_every_kind_profile_is_valid_on_every_shipped_profile():
    for kind in ("kv_server", "object_store", "shared_nvme"):
        for profile in ("b300-pcp8-glm5", "h100-tp8-llama2-70b", "h200-tp8-glm5"):
            sc = api.profile_scenario(profile, [f"remote.kind={kind}"])
            assert sc.remote.kind == kind


def test_the_kv_server_profile_is_the_default_store():
    """kvsim/profiles/remote/kv_server.yaml holds today's store (the default profile's
    remote section, value for value; its explicit path: bounce is kv_server's default)."""
    shipped = Remote.model_validate(
        yaml.safe_load(remote_kind_path("kv_server").read_text())["remote"]
    )
    default = api.profile_scenario("b300-pcp8-glm5").remote
    assert shipped.model_dump(exclude={"path"}) == default.model_dump(exclude={"path"})
    assert not shipped.gpudirect and not default.gpudirect


def test_kv_server_default_is_unchanged():
    """Regression check: saying remote.kind: kv_server changes nothing (the same summary,
    bit for bit), and a kv_server run counts operations without pricing them."""
    from kvsim.results.records import json_ready

    over = ["workload.requests=300"]
    a = json_ready(api.run(PAPER, over).summary)
    b = json_ready(api.run(PAPER, [*over, "remote.kind=kv_server"]).summary)
    assert a == b  # (NaN as None: equal)
    assert a["tier_read_bytes"]["remote"] > 0
    assert a["remote_get_ops"] > 0 and a["remote_put_ops"] > 0


# ---- prices ------------------------------------------------------------------------------


def test_per_request_price_by_hand():
    """An object store at 10 GETs and 2 PUTs a second, $0.0004 and $0.005 per 1,000:
    3,600 x (10 x 0.0004 + 2 x 0.005) / 1,000 = $0.0504 an hour (nothing else priced).
    A kv_server is never charged per request."""
    cost = {"object_store_get_per_1k": 0.0004, "object_store_put_per_1k": 0.005}
    sc = load_scenario(QS, ["remote.kind=object_store", f"cost={cost}"])
    assert usd_per_hour(sc, 10.0, 2.0) == pytest.approx(0.0504)
    assert usd_per_hour(sc) == 0.0
    kv = load_scenario(QS, [f"cost={cost}"])
    assert usd_per_hour(kv, 10.0, 2.0) == 0.0


def test_usd_per_hour_includes_the_measured_request_rate():
    """The summary prices the run's operations at their rate over the whole run (the
    simulation's end time, warm-up included: the store bills every request):
    usd_per_hour = 3.6 x (get_ops / end x 0.0004 + put_ops / end x 0.005), only request
    prices being set. The counters are the summary's ``remote_get_ops``/``remote_put_ops``."""
    from kvsim.results.records import collect
    from kvsim.sim.simulation import Simulation

    cost = {"object_store_get_per_1k": 0.0004, "object_store_put_per_1k": 0.005}
    sc = load_scenario(PAPER, ["workload.requests=300", "remote.kind=object_store", f"cost={cost}"])
    out = Simulation(sc).run()
    s = collect(out, sc).summary
    gets, puts = s["remote_get_ops"], s["remote_put_ops"]
    assert gets > 0 and puts > 0
    assert (gets, puts) == (out.tiers["remote"]["get_ops"], out.tiers["remote"]["put_ops"])
    want = 3.6 * (gets / out.end_time * 0.0004 + puts / out.end_time * 0.005)
    assert s["usd_per_hour"] == pytest.approx(want, rel=1e-12)


# ---- validate ----------------------------------------------------------------------------


def test_validate_prints_the_lookup_order(capsys):
    assert main(["validate", QS, "--set", "remote.kind=shared_nvme"]) == 0
    out = capsys.readouterr().out
    assert "lookup order: gpu -> host -> nvme -> remote (shared_nvme)" in out
    sc = load_scenario(QS, ["tiers.nvme.enabled=false", "remote.enabled=false"])
    assert lookup_order(sc) == ["gpu", "host"]
    sc = load_scenario(QS, ["cluster.engines=2", "tiers.peer.enabled=true"])
    assert lookup_order(sc) == ["gpu", "host", "nvme", "peer", "remote (kv_server)"]


# ---- a session resuming on another engine --------------------------------------------


def test_a_session_resuming_elsewhere_reads_the_shared_store_not_its_old_host_tier():
    """Two engines, round robin: turn 1 (engine 0) computes 8,193 tokens (16 full blocks
    and one of a single token) and stores them in its host tier and the shared NVMe store;
    turn 2 (100 s later, engine 1) extends the same prompt to 9,217 tokens (its block 16 is
    full now: another block id). Engine 1's own tiers are empty and the peer tier is off, so
    the 16 x 512 = 8,192 reusable tokens come from the shared store, none from a host tier,
    and 9,217 - 8,192 = 1,025 are computed. The GET lands by GPUDirect: engine 1's
    host-to-GPU link moves nothing."""
    first, second = 8193, 9217  # 16 full blocks + 1 token; then 2 more blocks + 1 token
    sc = scenario_from_dict(
        {
            "name": "resume",
            "cluster": {"engines": 2, "router": "round_robin", "load_policy": "sync"},
            "remote": {"kind": "shared_nvme"},
            "tiers": {"gpu": {"capacity": "0 B"}, "nvme": {"enabled": False}},
            "workload": {
                "kind": "synthetic",
                "requests": 1,
                "arrivals": {"process": "constant", "rate": "1/s"},
                "prompt_tokens": {"dist": "fixed", "value": first},
            },
        }
    )
    ids1 = tuple(range(17))
    ids2 = (*range(16), 100, 101, 102)
    reqs = [
        Request(0, 0.0, first, 1, ids1, session=7, last_turn=False),
        Request(1, 100.0, second, 1, ids2, session=7),
    ]
    res = api.run(sc, requests=reqs)
    df = res.requests
    t1, t2 = df.iloc[0], df.iloc[1]
    assert (t1.engine, t2.engine) == (0, 1)
    assert t2.tokens_host == 0 and t2.tokens_peer == 0
    assert t2.tokens_remote == 16 * 512
    assert t2.tokens_compute == second - 16 * 512
    assert t2.bytes_remote == pytest.approx(16 * 512 * 51_168)
    assert res.summary["link_utilisation"]["h2d"]["bytes"] == 0.0
    assert res.summary["link_utilisation"]["nic_in"]["bytes"] == pytest.approx(t2.bytes_remote)


def test_costmodel_paths_follow_gpudirect_and_the_peer_tier():
    """kvsim costmodel's restore paths (api.tier_bandwidths), by hand on quickstart's node
    (8 GPUs x 50 GB/s PCIe = 400 GB/s into HBM, 8 x 800 Gb/s = 800 GB/s of NIC): the
    shared NVMe store's one-server path is its server's 50 GB/s by GPUDirect (no 10 GB/s
    client copy, no PCIe); through host memory (bounce) the client's copy binds it; the
    peer tier is the NIC and PCIe, 400 GB/s."""
    gds = api.tier_bandwidths(
        load_scenario(QS, ["remote.kind=shared_nvme", "tiers.peer.enabled=true"])
    )
    assert gds["remote (one server)"] == (pytest.approx(50e9), pytest.approx(2e-3))
    assert gds["peer"][0] == pytest.approx(400e9)
    bounce = api.tier_bandwidths(
        load_scenario(QS, ["remote.kind=shared_nvme", "remote.path=bounce"])
    )
    assert bounce["remote (one server)"][0] < 12e9  # the 10 GB/s copy (and its window) binds
    assert "peer" not in bounce
