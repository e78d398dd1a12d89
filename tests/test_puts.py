"""Puts to the remote store (kvsim.sim.puts): the staging copy before a put holds the
engine (toy scenario: 1,000 B/token, 100-token blocks, t = 0.1 s + (new - 1) ms)."""

import pytest

from kvsim import api

from conftest import req, toy
from sim_cases import by_id


@pytest.mark.parametrize(
    ("sharding", "pcp", "expected"), [("none", 8, 0.3), ("per_rank", 8, 0.0375)]
)
def test_staging_before_a_put_holds_the_engine(sharding, pcp, expected):
    # 300 kB to put; unsharded, one rank copies it all at 1 MB/s: 0.3 s; per rank, 8 ranks
    # copy 37.5 kB each in parallel: 0.0375 s. TTFT includes it; GPU busy does not.
    sc = toy(
        node={"d2h_per_gpu": "1 MB/s", "pcp": pcp},
        remote={"enabled": True, "sharding": sharding, "servers": 8},
    )
    r = by_id(api.run(sc, requests=[req(0, 0.0, 300, [1, 2, 3])]))[0]
    assert r.store_s == pytest.approx(expected)
    assert r.ttft_s == pytest.approx(0.399 + expected)
    # blocks already stored are not staged again
    r2 = by_id(api.run(sc, requests=[req(0, 0.0, 300, [1, 2, 3]), req(1, 5.0, 300, [1, 2, 3])]))[1]
    assert r2.store_s == 0.0
