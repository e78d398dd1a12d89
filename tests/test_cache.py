"""Block stores, demotion and the remote index, on tiny hand-checked cases."""

from collections import OrderedDict

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kvsim.cache.eviction import FIFO, LRU, POLICIES, make_store
from kvsim.cache.local import LocalCache
from kvsim.cache.remote import RemoteStore
from kvsim.kernel.fabric import Link


def test_lru_evicts_least_recently_used_and_demotes_it():
    gpu, host, nvme = LRU(20), LRU(20), LRU(100)
    cache = LocalCache(gpu, host, nvme)
    cache.admit([1, 2], [10, 10])
    cache.admit([3], [10])  # evicts 1 -> host
    assert gpu.keys() == [2, 3] and host.keys() == [1]
    cache.admit([2, 4], [10, 10])  # 2 refreshed, 4 evicts 3 -> host
    assert gpu.keys() == [2, 4] and host.keys() == [1, 3]
    cache.admit([5], [10])  # evicts 2 -> host, which evicts 1 -> nvme
    assert gpu.keys() == [4, 5] and host.keys() == [3, 2] and nvme.keys() == [1]
    assert cache.demotions == [0, 3, 1]
    assert gpu.evictions == 3 and host.evictions == 1


def test_fifo_ignores_hits():
    s = FIFO(20)
    s.insert_many([1, 2], [10, 10])
    s.touch([1])
    assert s.insert(3, 10) == [(1, 10)]


def test_a_block_larger_than_the_tier_passes_through():
    gpu, host = LRU(5), LRU(50)
    cache = LocalCache(gpu, host, None)
    cache.admit([1], [10])
    assert len(gpu) == 0 and host.keys() == [1]


def test_unknown_policy_lists_the_choices():
    with pytest.raises(ValueError, match="fifo"):
        make_store("mru", 1)
    assert set(POLICIES) == {"lru", "fifo"}


@given(
    cap=st.integers(0, 200),
    ops=st.lists(st.tuples(st.integers(0, 30), st.integers(1, 60)), max_size=200),
    policy=st.sampled_from(sorted(POLICIES)),
)
def test_capacity_is_never_exceeded(cap, ops, policy):
    s = make_store(policy, cap)
    for key, size in ops:
        s.insert(key, size)
        assert s.used <= cap
        assert s.used == pytest.approx(sum(s.sizes().values()))


class ReferenceStore:
    """The eviction order spelled out with an OrderedDict (what the stores' log replaces)."""

    def __init__(self, cap, lru):
        self.cap, self.lru, self.reserved = cap, lru, 0
        self.held = OrderedDict()

    def insert_many(self, keys, sizes):
        out = []
        for key, size in zip(keys, sizes, strict=True):
            if key in self.held:
                if self.lru:
                    self.held.move_to_end(key)
                continue
            room = self.cap - self.reserved
            if size > room:
                out.append((key, size))
                continue
            while sum(self.held.values()) + size > room:
                out.append(self.held.popitem(last=False))
            self.held[key] = size
        return out

    def touch(self, keys):
        for key in keys:
            if self.lru:
                self.held.move_to_end(key)

    def reserve(self, nbytes):
        self.reserved += nbytes
        out = []
        while self.held and sum(self.held.values()) > self.cap - self.reserved:
            out.append(self.held.popitem(last=False))
        return out


def check_against_reference(policy, cap, ops):
    store, ref = make_store(policy, cap), ReferenceStore(cap, policy == "lru")
    for op, keys, n in ops:
        if op == "insert":
            got = store.insert_many(keys, [n] * len(keys))
            assert list(zip(*got, strict=True)) == ref.insert_many(keys, [n] * len(keys))
        elif op == "touch":
            held = [k for k in keys if k in ref.held]
            store.touch(held)
            ref.touch(held)
        elif op == "reserve":
            assert list(zip(*store.reserve(n), strict=True)) == ref.reserve(n)
        elif op == "unreserve":
            store.unreserve(n)
            ref.reserved = max(ref.reserved - n, 0)
        elif op == "remove":
            for k in keys:
                assert store.remove(k) == (ref.held.pop(k, None) is not None)
        else:
            store.clear()
            ref.held.clear()
            ref.reserved = 0
        assert store.keys() == list(ref.held)
        assert store.sizes() == dict(ref.held)
        assert store.used == sum(ref.held.values())


@given(
    policy=st.sampled_from(sorted(POLICIES)),
    cap=st.integers(0, 120),
    ops=st.lists(
        st.tuples(
            st.sampled_from(["insert"] * 4 + ["touch"] * 2 + ["reserve", "unreserve", "remove"]),
            st.lists(st.integers(0, 12), max_size=8),
            st.integers(1, 40),
        )
        | st.just(("clear", [], 0)),
        max_size=60,
    ),
)
def test_stores_evict_exactly_as_an_ordered_dict_would(policy, cap, ops):
    """Eviction order, hits, reservations and removals match an OrderedDict LRU/FIFO."""
    check_against_reference(policy, cap, ops)


@pytest.mark.parametrize("policy", ["lru", "fifo"])
def test_the_eviction_log_stays_exact_when_it_is_compacted(policy):
    """Thousands of hits on a few blocks (the log is rebuilt from its live entries) and a
    long stream of evictions (its head is trimmed) keep the exact order."""
    hot = [("insert", [1, 2, 3], 10)] + [("touch", [3, 1, 2, 1], 0)] * 1500
    stream = [("insert", [k, k + 1], 10) for k in range(0, 6000, 2)]
    mixed = [("remove", [k], 0) if k % 7 == 0 else ("insert", [k % 40], 10) for k in range(5000)]
    check_against_reference(policy, 50, hot + stream + mixed)


def make_remote(shards_present, ranks=2):
    links = [Link(f"r{k}", 1e9) for k in range(ranks)]
    remote = RemoteStore([LRU(1e12) for _ in range(ranks)], links, per_rank=True, ranks=ranks)
    remote.unmirror()  # the ranks are to disagree
    for shard, blocks in enumerate(shards_present):
        for b in blocks:
            server, key = remote.place(b, shard)
            remote.stores[server].insert(key, 1.0)
    return remote


def test_per_rank_prefix_is_each_ranks_own_and_usable_is_the_minimum():
    remote = make_remote([[1, 2, 3], [1, 2, 5]])
    assert remote.shard_prefixes([1, 2, 3]) == [3, 2]
    assert [remote.has(b) for b in (1, 2, 3)] == [True, True, False]


def test_per_rank_places_each_rank_on_its_own_server():
    remote = make_remote([[], []], ranks=2)
    assert {remote.place(b, 0)[0] for b in range(10)} == {0}
    assert {remote.place(b, 1)[0] for b in range(10)} == {1}


def test_unsharded_store_keys_blocks_whole():
    links = [Link("r0", 1e9), Link("r1", 1e9)]
    remote = RemoteStore([LRU(100), LRU(100)], links, per_rank=False, ranks=8)
    batch = remote.missing([4, 5, 6], [10.0, 10.0, 3.0])
    assert batch.keys == {0: [4, 6], 1: [5]} and batch.sizes == {0: [10.0, 3.0], 1: [10.0]}
    assert batch.bytes_by_server() == {0: 13.0, 1: 10.0} and batch.count() == 3
    remote.reserve(batch)
    assert not remote.missing([4, 5, 6], [10.0, 10.0, 3.0])
    remote.land(batch)
    assert remote.has(4) and remote.has(6) and remote.has(5)


def test_a_mirrored_per_rank_store_behaves_like_one_index_per_server():
    def store(mirror):
        links = [Link(f"r{k}", 1e9) for k in range(4)]
        r = RemoteStore([LRU(45) for _ in range(4)], links, per_rank=True, ranks=4)
        if not mirror:
            r.unmirror()
        return r

    a, b = store(True), store(False)
    assert a.mirrored and not b.mirrored
    for blocks in ([1, 2], [3], [1, 4], [5, 6, 7]):
        ba = a.missing(blocks, [40.0] * len(blocks))  # 10 bytes a shard
        bb = b.missing(blocks, [40.0] * len(blocks))
        assert ba.bytes_by_server() == bb.bytes_by_server() and ba.count() == bb.count()
        for r, batch in ((a, ba), (b, bb)):
            r.reserve(batch)
            r.land(batch)
        assert [a.has(x) for x in range(9)] == [b.has(x) for x in range(9)]
        assert a.stats() == b.stats()
    before = a.shard_prefixes([5, 6, 7])
    assert before == b.shard_prefixes([5, 6, 7]) == [3, 3, 3, 3]
    a.lose(2)  # a fault on one server ends the mirroring
    b.lose(2)
    assert not a.mirrored
    assert a.shard_prefixes([5, 6, 7]) == b.shard_prefixes([5, 6, 7]) == [3, 3, 0, 3]
    assert [a.has(x) for x in range(9)] == [b.has(x) for x in range(9)] == [False] * 9
    assert a.stats() == b.stats()
