"""Routers: the cache-affinity rule, checked against a plain restatement of it."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvsim.cache.eviction import LRU
from kvsim.cache.local import LocalCache
from kvsim.sim.router import CacheAffinity, LeastLoaded, RoundRobin, make_router


class Stub:
    """An engine as a router sees it: an index, a load and local tiers."""

    def __init__(self, index: int, outstanding: int, gpu=(), host=(), nvme=()) -> None:
        self.index = index
        self.outstanding = outstanding
        stores = []
        for keys in (gpu, host, nvme):
            s = LRU(1e9)
            s.insert_many(list(keys), [1.0] * len(keys))
            stores.append(s)
        self.local = LocalCache(*stores)

    def local_prefix_blocks(self, blocks, at_least: int = 0) -> int:
        return self.local.prefix_blocks(blocks, at_least)


def reference(engines: list[Stub], blocks: list[int], slack: int) -> Stub:
    """The rule as the docs state it: among engines at most ``slack`` requests busier than
    the least loaded, the longest local prefix; ties to fewer outstanding, then the
    earlier engine."""

    def prefix(e: Stub) -> int:
        held = set(e.local.gpu.blocks) | set(e.local.host.blocks) | set(e.local.nvme.blocks)
        k = 0
        while k < len(blocks) and blocks[k] in held:
            k += 1
        return k

    least = min(e.outstanding for e in engines)
    eligible = [e for e in engines if e.outstanding <= least + slack]
    return max(eligible, key=lambda e: (prefix(e), -e.outstanding, -engines.index(e)))


def test_longest_prefix_wins_within_slack_and_ties_go_to_the_less_loaded():
    blocks = [1, 2, 3, 4]
    a = Stub(0, 2, gpu=[1, 2])  # prefix 2
    b = Stub(1, 3, host=[1, 2, 3])  # prefix 3, one request busier
    c = Stub(2, 9, nvme=[1, 2, 3, 4])  # prefix 4, but far too busy
    d = Stub(3, 2, gpu=[1], host=[2], nvme=[3])  # prefix 3 over all tiers, as loaded as a
    assert CacheAffinity([a, b, c, d], slack=4).pick(blocks) is d
    assert CacheAffinity([a, b, c, d], slack=0).pick(blocks) is d
    assert CacheAffinity([a, b, c, d], slack=7).pick(blocks) is c
    assert CacheAffinity([a, b], slack=0).pick(blocks) is a  # b is busier than slack allows


def test_a_gap_in_the_prefix_ends_it():
    # e holds blocks 1 and 3 but not 2: its prefix is 1, so f (prefix 2) wins
    e = Stub(0, 0, gpu=[1, 3, 4])
    f = Stub(1, 0, host=[1, 2])
    assert CacheAffinity([e, f], slack=0).pick([1, 2, 3, 4]) is f


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 5),
            st.lists(st.integers(0, 7), max_size=6),
            st.lists(st.integers(0, 7), max_size=6),
            st.lists(st.integers(0, 7), max_size=6),
        ),
        min_size=1,
        max_size=6,
    ),
    st.lists(st.integers(0, 7), max_size=8),
    st.integers(0, 3),
)
def test_cache_affinity_picks_what_the_rule_says(spec, blocks, slack):
    engines = [Stub(i, load, g, h, n) for i, (load, g, h, n) in enumerate(spec)]
    assert CacheAffinity(engines, slack).pick(blocks) is reference(engines, blocks, slack)


def test_round_robin_and_least_loaded():
    engines = [Stub(0, 3), Stub(1, 1), Stub(2, 1)]
    rr = RoundRobin(engines)
    assert [rr.pick([]).index for _ in range(4)] == [0, 1, 2, 0]
    assert LeastLoaded(engines).pick([]).index == 1


def test_bad_router_settings_are_refused():
    with pytest.raises(ValueError, match="slack must be >= 0"):
        CacheAffinity([Stub(0, 0)], slack=-1)
    with pytest.raises(ValueError, match="choose one of"):
        make_router("random", [Stub(0, 0)])
    with pytest.raises(ValueError, match="at least one engine"):
        make_router("round_robin", [])
