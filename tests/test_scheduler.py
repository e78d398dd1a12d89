"""An engine's waiting queue (kvsim.sim.scheduler.Waiting): fcfs, sjf with aging, lpm
and a plugin's priority, on hand-made queues of stand-in jobs, and two whole runs
(moved here from tests/test_batching.py) that show lpm and sjf's aging in a simulation."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from test_batching import linear, prompt, rows, step_time

from kvsim import api
from kvsim.sim.scheduler import LPM_MAX_QUEUE, Waiting

from conftest import req
from sim_cases import pure_only


def job(arrival: float, tokens: int = 100, cached: int = 0, done: int = 0, name: str = ""):
    """A stand-in for a Job: what the queue reads of one (its request, cached, done)."""
    return SimpleNamespace(
        req=SimpleNamespace(arrival=arrival, input_tokens=tokens),
        cached=cached,
        done=done,
        name=name,
    )


def order(q: Waiting) -> list[str]:
    """The names of the jobs ``q`` gives, popped one by one."""
    return [q.pop().name for _ in range(len(q))]


def no_prefix(_job) -> int:
    return 0


# ---- the queue on its own ------------------------------------------------------------


@pure_only
def test_fcfs_pops_in_arrival_order_whatever_the_push_order():
    q = Waiting("fcfs", 0.0, no_prefix)
    for t, name in ((3.0, "c"), (1.0, "a"), (2.0, "b")):
        q.push(job(t, name=name))
    assert len(q) == 3
    assert q.first() == (1.0, 1.0)  # (key, arrival) of the next one: a's arrival twice
    assert [j.name for j in q.jobs()] == ["a", "b", "c"]  # jobs() does not pop
    assert order(q) == ["a", "b", "c"]
    assert len(q) == 0


@pure_only
def test_fcfs_ties_in_arrival_keep_push_order():
    q = Waiting("fcfs", 0.0, no_prefix)
    for name in "xyz":
        q.push(job(5.0, name=name))
    assert order(q) == ["x", "y", "z"]


@pure_only
def test_sjf_key_is_remaining_over_aging_plus_arrival():
    """aging 100 tokens/s. a: arrives 0, 1,000 tokens, 200 cached: remaining 800, key
    800 / 100 + 0 = 8. b: arrives 5, 400 tokens, none cached, 100 done: remaining 300,
    key 3 + 5 = 8.0 too, later arrival. c: arrives 6, 150 tokens: key 1.5 + 6 = 7.5.
    Order c, a (8, arrival 0), b (8, arrival 5)."""
    q = Waiting("sjf", 100.0, no_prefix)
    a = job(0.0, 1000, cached=200, name="a")
    b = job(5.0, 400, done=100, name="b")
    c = job(6.0, 150, name="c")
    assert q.key(a) == (pytest.approx(8.0), 0.0)
    assert q.key(b) == (pytest.approx(8.0), 5.0)
    assert q.key(c) == (pytest.approx(7.5), 6.0)
    for j in (a, b, c):
        q.push(j)
    assert q.first() == (pytest.approx(7.5), 6.0)
    assert order(q) == ["c", "a", "b"]


@pure_only
def test_sjf_without_aging_is_pure_shortest_first():
    """aging 0: the key is the remaining tokens alone; a late short prompt goes first."""
    q = Waiting("sjf", 0.0, no_prefix)
    q.push(job(0.0, 1000, name="long"))
    q.push(job(100.0, 10, name="short"))
    q.push(job(50.0, 500, cached=400, name="mostly-cached"))  # remaining 100
    assert q.key(q.jobs()[0]) == (10.0, 100.0)
    assert order(q) == ["short", "mostly-cached", "long"]


@pure_only
def test_lpm_takes_the_longest_cached_prefix_ties_in_arrival_order():
    """Prefixes (blocks): a 1, b 3, c 3, d 0; b and c tie at 3 and b arrived first."""
    prefix = {"a": 1, "b": 3, "c": 3, "d": 0}
    q = Waiting("lpm", 0.0, lambda j: prefix[j.name])
    for t, name in ((0.0, "a"), (1.0, "b"), (2.0, "c"), (3.0, "d")):
        q.push(job(t, name=name))
    assert order(q) == ["b", "c", "a", "d"]


@pure_only
def test_lpm_falls_back_to_fcfs_on_a_long_queue():
    """With more than LPM_MAX_QUEUE (128) waiting the prefix is not asked: the first to
    arrive goes first although the last has the longest prefix."""
    asked = []

    def prefix(j):
        asked.append(j.name)
        return 10 if j.name == "last" else 0

    q = Waiting("lpm", 0.0, prefix)
    for i in range(LPM_MAX_QUEUE):
        q.push(job(float(i), name=f"j{i}"))
    q.push(job(1000.0, name="last"))  # 129 waiting
    assert q.pop().name == "j0" and asked == []
    # 128 left: lpm again, and "last" (prefix 10) is the pick
    assert q.pop().name == "last"
    assert len(asked) == LPM_MAX_QUEUE


@pure_only
def test_a_plugin_priority_orders_the_queue_smaller_first_ties_in_arrival():
    """Priority = minus the prompt's tokens (longest first): 300 (-300), then the two of
    200 (-200) in arrival order, then 100."""
    q = Waiting("fcfs", 0.0, no_prefix, custom=lambda j: -j.req.input_tokens)
    for t, n, name in ((0.0, 100, "a"), (1.0, 200, "b"), (2.0, 300, "c"), (3.0, 200, "d")):
        q.push(job(t, n, name=name))
    assert q.key(q.jobs()[0]) == (-300.0, 2.0)
    assert order(q) == ["c", "b", "d", "a"]


@pure_only
def test_a_dynamic_plugin_priority_is_asked_again_at_each_pick():
    """Priority = minus cached tokens. At push every job has 0 cached (order a, b). Before
    the pick, peek finds 500 cached for b: a dynamic policy takes b, a static one a."""

    def peek(j):
        j.cached = 500 if j.name == "b" else 0

    for dynamic, first in ((True, "b"), (False, "a")):
        q = Waiting("fcfs", 0.0, no_prefix, custom=lambda j: -j.cached, dynamic=dynamic, peek=peek)
        q.push(job(0.0, name="a"))
        q.push(job(1.0, name="b"))
        assert q.pop().name == first, dynamic


@pure_only
def test_clear_empties_the_queue():
    q = Waiting("fcfs", 0.0, no_prefix)
    q.push(job(0.0))
    q.clear()
    assert len(q) == 0 and q.jobs() == []


# ---- whole runs (from tests/test_batching.py) ---------------------------------------------


def test_lpm_serves_the_longest_cached_prefix_first():
    """GPU tier large enough: a prompt sharing 9 blocks with what is cached goes before an
    earlier cold one under lpm, after it under fcfs."""
    reqs = [
        prompt(0, 0.0, 1000, 0),  # computes blocks 0-9
        prompt(1, 0.05, 1000, 50),  # cold, arrives while 0 runs
        req(2, 0.06, 1000, [*range(9), 99]),  # 900 tokens cached
    ]
    for sched, first in (("lpm", 2), ("fcfs", 1)):
        sc = linear({"tiers": {"gpu": {"capacity": "1 GB"}}}, max_batch_requests=1, scheduler=sched)
        r = rows(api.run(sc, requests=reqs))
        other = 3 - first
        assert r[first].finish_s < r[other].finish_s, sched


def test_sjf_ages_so_a_long_prompt_is_not_starved():
    """A stream of 100-token prompts every step and one 10k prompt: with aging the long
    one is served within a bounded time; with aging 0 it waits for the stream to end."""
    stream = [prompt(i, 0.001 + i * step_time(100), 100, 1000 + i) for i in range(1, 200)]
    reqs = [prompt(0, 0.0005, 10_000, 10_000), *stream, prompt(999, 0.0, 100, 999)]
    reqs.sort(key=lambda r: r.arrival)
    fair = rows(
        api.run(linear(max_batch_requests=1, scheduler="sjf", sjf_aging=20_000), requests=reqs)
    )
    greedy = rows(
        api.run(linear(max_batch_requests=1, scheduler="sjf", sjf_aging=0), requests=reqs)
    )
    assert greedy[0].finish_s > max(greedy[i].finish_s for i in range(1, 200))
    assert fair[0].finish_s < greedy[0].finish_s / 2
