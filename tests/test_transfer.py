"""Transfer engines (tiers.peer.transfer, remote.transfer; kvsim/physics/transfer.py): a
read's setup, its batches of operations and the operations' software, worked by hand; then
a peer read and a remote GET in whole runs (the toy scenario of tests/test_peer_tier.py:
999,000 B over 8 MB/s NICs, peer T0 10 ms)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from kvsim import api
from kvsim.physics.transfer import operations, transfer_seconds, transfer_terms

from conftest import req, toy

NIC = 8e6  # B/s
T0 = 0.010  # s: tiers.peer.t0


def engine(**kw: float) -> SimpleNamespace:
    te = {"setup": 1e-3, "per_batch": 40e-6, "batch": 256, "per_op": 1e-6, "threads": 4}
    te.update(op_tokens=16, **kw)
    return SimpleNamespace(**te)


def test_a_transfer_engines_time_for_n_blocks_by_hand():
    """Llama-70B-like: 80 layers, K and V split: 160 operations a 16-token block. A read
    of 1,024 tokens (64 blocks) on one rank: 10,240 operations in 40 batches of 256;
    delay 1 ms + 40 x 40 us = 2.6 ms; the operations' software 10,240 x 1 us / 4 threads
    = 2.56 ms; 335.5 MB over a 50 GB/s link take 6.71 ms: link-bound,
    2.6 + 6.71 = 9.31 ms."""
    te = engine()
    nbytes = 1024 * 327_680
    assert operations(te, 1024, 1, 160) == 10_240
    delay, cap = transfer_terms(te, 1024, nbytes, 1, 160)
    assert delay == pytest.approx(2.6e-3)
    assert cap == pytest.approx(nbytes / 2.56e-3)
    assert transfer_seconds(te, 1024, nbytes, 50e9, 1, 160) == pytest.approx(2.6e-3 + nbytes / 50e9)


def test_small_operations_cap_the_rate():
    """The same read split 8 ways by tensor parallelism is 4 KiB an operation (each rank
    moves 1/8 of the bytes with as many operations): 41.9 MB a rank over its 50 GB/s
    link would take 0.84 ms, its 10,240 operations 2.56 ms: bound by the operations, at
    nbytes / 2.56 ms; one thread is 4x slower."""
    te = engine()
    nbytes = 1024 * 327_680  # all 8 ranks' bytes; they move at once, each its part
    rank = transfer_seconds(te, 1024, nbytes / 8, 50e9, 1, 160)
    assert rank == pytest.approx(2.6e-3 + 2.56e-3)
    one = transfer_seconds(engine(threads=1), 1024, nbytes / 8, 50e9, 1, 160)
    assert one == pytest.approx(2.6e-3 + 4 * 2.56e-3)
    # context parallelism splits the blocks: 4 ranks, 16 blocks each
    assert operations(te, 1024, 4, 160) == 16 * 160
    assert transfer_terms(te, 0, 0.0, 1, 160) == (0.0, float("inf"))


def peer_scenario(**transfer: object):
    return toy(
        node={"gpus": 8, "pcp": 1, "nic_per_gpu": "1 MB/s", "h2d_per_gpu": "2 MB/s"},
        cluster={"engines": 2, "router": "round_robin", "load_policy": "sync"},
        tiers={
            "host": {"enabled": True, "capacity": "1 GB", "t0": "0 s", "write_queue": None},
            "peer": {
                "enabled": True,
                "t0": "10 ms",
                **({"transfer": transfer} if transfer else {}),
            },
        },
    )


def peer_read(sc):
    reqs = [req(0, 0.0, 1000, range(10)), req(1, 10.0, 1000, range(10))]
    return api.run(sc, requests=reqs).requests.set_index("id").loc[1]


def test_a_peer_read_through_a_transfer_engine():
    """999 tokens (10 blocks of 100) read from the other engine's host: 4 operations a
    block, 40 in 4 batches of 10. Setup 5 ms + 4 x 1 ms = 9 ms before the first byte;
    the operations' software 40 x 100 us = 4 ms, the bytes 999,000 / 8 MB/s = 124.9 ms:
    link-bound, 10 ms (T0) + 9 ms + 124.9 ms. At 10 ms an operation the software takes
    400 ms: the read moves at 999,000 B / 0.4 s."""
    te = {"setup": "5 ms", "per_batch": "1 ms", "batch": 10, "threads": 1, "op_tokens": 100}
    plain = peer_read(peer_scenario())
    assert plain.load_peer_s == pytest.approx(T0 + 999_000 / NIC)
    fast = peer_read(peer_scenario(**te, per_op="100 us", ops_per_block=4))
    assert fast.tokens_peer == 999
    assert fast.load_peer_s == pytest.approx(T0 + 9e-3 + 999_000 / NIC)
    slow = peer_read(peer_scenario(**te, per_op="10 ms", ops_per_block=4))
    assert slow.load_peer_s == pytest.approx(T0 + 9e-3 + 0.4)


def test_a_remote_get_through_a_transfer_engine():
    """A remote GET of 999 tokens (1 MB/s server): 10 operations (one a block), one batch:
    a 2 ms setup and 1 ms batch before the first byte, then the server's 0.999 s."""
    base = {
        "remote": {"enabled": True, "t0": "0 s"},
        "node": {"pcp": 1},
    }
    reqs = [req(0, 0.0, 1000, range(10)), req(1, 10.0, 1000, range(10))]
    te = {
        "setup": "2 ms",
        "per_batch": "1 ms",
        "per_op": "1 us",
        "op_tokens": 100,
        "ops_per_block": 1,
    }
    plain = api.run(toy(**base), requests=reqs).requests.set_index("id").loc[1]
    sc = toy(remote={**base["remote"], "transfer": te}, node={"pcp": 1})
    with_te = api.run(sc, requests=reqs).requests.set_index("id").loc[1]
    assert plain.tokens_remote == with_te.tokens_remote == 999
    assert with_te.load_remote_s == pytest.approx(plain.load_remote_s + 3e-3)
