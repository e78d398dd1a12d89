"""The lookup and the plan (kvsim.sim.lookup): the load policy's cut on the one remote GET
case (toy scenario: 1,000 B/token, 100-token blocks, remote 1 MB/s with T0 = 0.5 s)."""

import pytest

from kvsim import api

from conftest import req, toy
from sim_cases import by_id, one_remote_get


def test_recompute_policy_ignores_lower_tiers():
    r = by_id(one_remote_get("recompute"))
    assert r[1].tokens_remote == 0 and r[1].tokens_compute == 300
    assert r[1].ttft_s == pytest.approx(0.399)


def test_auto_policy_recomputes_when_the_restore_is_slower():
    # restoring 299 tokens costs 0.5 + 0.299 s + 0.1 s; recompute costs 0.399 s
    r = by_id(one_remote_get("auto"))
    assert r[1].decision == "skipped" and r[1].ttft_s == pytest.approx(0.399)


def test_auto_policy_restores_when_it_pays():
    # 1000-token prompt: recompute 1.099 s; restore 0.5 + 0.999 + 0.1 -> recompute still
    # wins at 1 MB/s, but at 10 MB/s restore is 0.5 + 0.0999 + 0.1 = 0.6999 s
    ids = list(range(1, 11))
    reqs = [req(0, 0.0, 1000, ids), req(1, 10.0, 1000, ids)]
    sc = toy(cluster={"load_policy": "auto"}, remote={"enabled": True, "bandwidth": "10 MB/s"})
    r = by_id(api.run(sc, requests=reqs))
    assert r[1].decision == "restore" and r[1].ttft_s == pytest.approx(0.6999)
