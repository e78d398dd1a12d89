"""A whole simulation (kvsim.sim.simulation): its tokens add up, its TTFT decomposes, and
it leaves the garbage collector as it found it (toy scenario)."""

import gc

from kvsim import api

from conftest import req, toy
from sim_cases import REMOTE_ON


def test_tokens_add_up_and_ttft_decomposes():
    def ids(i):  # a shared first block, a half-shared second, private blocks after that
        n = -(-(250 + 7 * i) // 100)
        return [i % 3, 10 + i % 5, *range(1000 * i, 1000 * i + n - 2)]

    res = api.run(
        toy(cluster={"load_policy": "async"}, **REMOTE_ON),
        requests=[req(i, 0.3 * i, 250 + 7 * i, ids(i)) for i in range(40)],
    )
    df = res.requests
    tok = df[["tokens_gpu", "tokens_host", "tokens_nvme", "tokens_remote", "tokens_compute"]]
    assert (tok.sum(axis=1) == df["input_tokens"]).all()
    assert (df["tokens_compute"] >= 1).all()
    lhs = df["queue_wait_s"] + df["load_s"] + df["compute_s"] + df["store_s"]
    assert (lhs - df["ttft_s"]).abs().max() < 1e-9


def test_a_run_puts_the_garbage_collector_back_as_it_found_it():
    # run() collects less often while it runs; the caller's settings come back after,
    # and a caller who switched automatic collection off keeps it off
    before = gc.get_threshold()
    try:
        for setting in ((700, 10, 10), (0, 10, 10)):
            gc.set_threshold(*setting)
            api.run(toy(), requests=[req(0, 0.0, 300, [1, 2, 3])])
            assert gc.get_threshold() == setting
    finally:
        gc.set_threshold(*before)
