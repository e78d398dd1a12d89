"""The request record inside the simulator (kvsim.sim.job.Job): a fresh attempt, a new
attempt after its engine failed, a dropped request, and the record it makes (the columns
kvsim.sim.rows declares, read off the job by name), worked by hand on one request."""

import math

from kvsim.cache.local import COMPUTED, GPU, HOST, NVME, PEER, REMOTE
from kvsim.sim.job import LOADING, NEW, Job
from kvsim.sim.rows import RowTable
from kvsim.workload.request import Request

from conftest import req
from sim_cases import one_remote_get

PARTS = ("restore_lookup_s", "restore_queue_s", "restore_read_s", "restore_h2d_s")


def record(job: Job) -> dict:
    """The job's record, by column name (what a run's table keeps of it)."""
    table = RowTable()
    table.add(job)
    return {name: table.column(name)[0] for name in table.names}


def test_a_new_job_starts_with_nothing_done():
    """Arrived at 10 s: submitted and enqueued then, no start, nothing read or computed."""
    job = Job(req(3, 10.0, 250, [1, 2, 3]), False, (1, 2, 3))
    assert job.state == NEW
    assert job.submitted == job.enqueued == 10.0
    assert math.isnan(job.start) and math.isnan(job.begin)
    assert job.tokens == [0] * 6 and job.bytes == [0.0] * 5 and job.tier_s == [0.0] * 5
    assert job.decision == "cold" and job.retries == 0 and job.reserved == 0.0
    assert job.holders == [] and job.peers == {}
    assert job.restore is None and job.fetch is None and job.puts is None


def test_a_new_attempt_keeps_what_earlier_attempts_read_and_lost():
    """An engine failed under the job: it is reset for a new attempt. Its tokens, times
    and state start over; the bytes it read, its retries and its lost time stay (they
    are over all attempts)."""
    job = Job(req(0, 2.0, 300, [1, 2, 3]), False, (1, 2, 3))
    job.state = LOADING
    job.tokens[REMOTE] = 200
    job.tier_s[REMOTE] = 0.7
    job.bytes[REMOTE] = 2e5
    job.src = [REMOTE, REMOTE]
    job.load_s = 0.7
    job.decision = "restore"
    job.retries = 1
    job.lost_s = 0.9
    job.reset()
    assert job.state == NEW and job.load_s == 0.0 and job.decision == "cold"
    assert job.tokens == [0] * 6 and job.tier_s == [0.0] * 5 and job.src == []
    assert job.submitted == job.enqueued == 2.0
    assert job.bytes[REMOTE] == 2e5 and job.retries == 1 and job.lost_s == 0.9


def test_the_row_is_the_record_in_column_order():
    """Arrived at 10 s, started 10.25 s, finished 12 s: TTFT 2 s. It waited 0.2 s for its
    prefetch and restored for 0.5 s: load 0.7 s (prefetch, then restore), of which the
    prefetch is its own column. Per-tier fields go by tier code: 100 tokens from host,
    200 from NVMe, 50 from a peer, 300 remote, 49 computed, 10 on the GPU."""
    job = Job(Request(5, 10.0, 709, 4, (1,), session=8), True, (1,), warm=True)
    job.served_by = 2
    job.finish = 12.0
    job.start = 10.25
    job.queue_wait = 0.25
    job.load_s = 0.5
    job.prefetch_s = 0.2
    job.compute_s = 1.05
    job.tokens = [0] * 6
    for tier, n in ((GPU, 10), (HOST, 100), (NVME, 200), (REMOTE, 300), (PEER, 50)):
        job.tokens[tier] = n
    job.tokens[COMPUTED] = 49
    job.bytes[NVME] = 2e5
    job.tier_s[HOST] = 0.1
    job.steps = 3
    job.decision = "restore"
    d = record(job)
    assert (d["id"], d["session"], d["engine"], d["arrival_s"]) == (5, 8, 2, 10.0)
    assert d["finish_s"] == 12.0 and d["ttft_s"] == 2.0
    assert d["load_s"] == 0.5 + 0.2 and d["load_prefetch_s"] == 0.2
    assert d["queue_wait_s"] == 0.25 and d["compute_s"] == 1.05
    assert (d["input_tokens"], d["output_tokens"]) == (709, 4)
    assert (d["tokens_gpu"], d["tokens_host"], d["tokens_nvme"]) == (10, 100, 200)
    assert (d["tokens_remote"], d["tokens_peer"], d["tokens_compute"]) == (300, 50, 49)
    assert d["bytes_nvme"] == 2e5 and d["bytes_host"] == 0.0
    assert d["load_host_s"] == 0.1 and d["load_nvme_s"] == 0.0
    assert d["decision"] == "restore" and d["drop_reason"] == ""
    assert d["warmup"] and d["warm"] and d["steps"] == 3


def test_a_dropped_job_keeps_the_bytes_it_read():
    """Dropped after a remote GET of 100 kB on an engine that failed: no times or tokens,
    decision 'dropped', engine -1; the 100 kB it read stay in its row."""
    job = Job(req(0, 0.0, 300, [1, 2, 3]), False, (1, 2, 3))
    job.tokens[REMOTE] = 100
    job.bytes[REMOTE] = 1e5
    job.stalled = job.timed_out = True
    job.drop("no engine up")
    d = record(job)
    assert d["engine"] == -1 and d["decision"] == "dropped" and d["drop_reason"] == "no engine up"
    assert math.isnan(d["ttft_s"]) and math.isnan(d["load_s"]) and math.isnan(d["load_remote_s"])
    assert d["tokens_remote"] == 0 and d["bytes_remote"] == 1e5
    assert not d["stalled"] and not d["timed_out"] and d["steps"] == 0


def test_a_jobs_row_in_a_run_adds_up():
    """The one-remote-GET case (tests/sim_cases.py), sync: A's 300 tokens are 299 remote
    and 1 computed, its TTFT is queue + load + compute (0 + 0.799 + 0.1), and its row's
    tokens sum to its prompt."""
    a = one_remote_get("sync").requests.set_index("id").loc[1]
    assert a.tokens_remote + a.tokens_compute + a.tokens_gpu == a.input_tokens == 300
    assert math.isclose(a.ttft_s, a.queue_wait_s + a.load_s + a.compute_s + a.store_s)
    assert math.isclose(a.ttft_s, 0.899)


# ---- from tests/test_measurements.py -------------------------------------------------------


def test_a_dropped_request_has_no_parts():
    job = Job(req(0, 0.0, 100, [1]), False, (1,))
    job.drop("gone")
    d = record(job)
    assert all(math.isnan(d[p]) for p in PARTS) and math.isnan(d["gpu_compute_s"])
    assert d["recomputed_tokens"] == 0


def test_the_record_returns_its_declared_fields_in_order():
    """Job.record() and DecodeJob.record() are the fields RECORD names, in its order (the
    row table finds each column's source by name in RECORD): a field read off by getattr
    equals the record's entry at its name's position, on jobs whose fields all differ."""
    from kvsim.sim.decoding import DecodeJob

    for kind in (Job, DecodeJob):
        job = kind(req(7, 2.5, 1000, [4, 5]), True, (4, 5))
        for i, name in enumerate(kind.RECORD):  # a distinct value in every plain field
            value = getattr(job, name)
            if isinstance(value, float):
                setattr(job, name, 1000.0 + i)
            elif isinstance(value, bool):
                setattr(job, name, not value)
            elif isinstance(value, int):
                setattr(job, name, 1000 + i)
        assert len(set(kind.RECORD)) == len(kind.RECORD)
        got = job.record()
        assert len(got) == len(kind.RECORD)
        for name, value in zip(kind.RECORD, got, strict=True):
            assert value is getattr(job, name) or value == getattr(job, name), name
