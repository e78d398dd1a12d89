"""Where policy names become policies (kvsim.sim.hooks): built-in names give the built-in
classes, the blocks plugins see (depth, parent, recompute seconds, per-rank shards), and
the guard rails each hook puts on a plugin's answers, on plain objects standing in for
plugins (the examples and the guard rails through the CLI are in tests/test_plugins.py).
Toy scenario: 100-token blocks of 1,000 B a token; t(new) = 0.1 s + (new - 1) ms."""

from __future__ import annotations

import contextlib
import math
from types import SimpleNamespace

import numpy as np
import pytest
import simpy

from kvsim.cache.eviction import LRU, SecondHit
from kvsim.cache.local import HOST, NVME, REMOTE
from kvsim.config.schema.policies import PolicyRef
from kvsim.plugins.failures import PluginError
from kvsim.sim.constants import Constants
from kvsim.sim.hooks import (
    MAX_DEPTH,
    Hook,
    Hooks,
    LoadHook,
    PrefetchHook,
    RouterHook,
    SchedulerHook,
)
from kvsim.sim.policy import LOAD_POLICIES

from conftest import toy

# the built-in tiers' names by code (a run's Constants.names)
NAMES = ("gpu", "host", "nvme", "remote", "peer")


def hooks() -> Hooks:
    return Hooks(Constants(toy()), simpy.Environment())


def ref(name: str) -> PolicyRef:
    return PolicyRef(name=name)


class Stub:
    """A stand-in plugin: each method returns what it was given, or raises it."""

    def __init__(self, **answers):
        self.answers = answers

    def __getattr__(self, name):
        if name not in self.__dict__.get("answers", {}):
            raise AttributeError(name)
        got = self.answers[name]

        def method(*args):
            if isinstance(got, BaseException):
                raise got
            return got(*args) if callable(got) else got

        return method


# ---- built-in names ------------------------------------------------------------------


def test_builtin_names_give_the_builtin_policies():
    """No plugin is made for a built-in name: lru is the compiled LRU, admission 'all' is
    no gate, the load policy is the core's own, prefetch and scheduler need no hook."""
    h = hooks()
    assert type(h.store(ref("lru"), 1e6, "gpu")) is LRU
    assert h.gate(ref("all"), 1e6, "host") is None
    assert h.load_policy(ref("async")) is LOAD_POLICIES["async"]
    assert h.prefetch(ref("best_effort")) is None
    assert h.scheduler(ref("sjf")) is None
    assert h.made == []  # nothing to give a SimView


def test_second_hit_remembers_as_many_keys_as_the_tier_holds_blocks():
    """A 1 MB tier holds ten 100 kB blocks: a ghost list of 10 keys; a tier smaller than
    a block still remembers one."""
    h = hooks()
    gate = h.gate(ref("second_hit"), 1e6, "host")
    assert isinstance(gate, SecondHit) and gate.limit == 10
    assert h.gate(ref("second_hit"), 5e4, "host").limit == 1


# ---- what plugins see of a block ----------------------------------------------------


def test_a_blocks_depth_and_parent_come_from_the_first_request_to_show_it():
    """(10, 11, 12): depths 0, 1, 2, each block's parent the one before. (10, 13): 13 is
    at depth 1 under 10; 10 keeps what it was first given."""
    h = hooks()
    h.depths = {}
    h.note((10, 11, 12))
    h.note((10, 13))
    assert h.depths == {10: (0, None), 11: (1, 10), 12: (2, 11), 13: (1, 10)}


def test_a_block_as_a_plugin_sees_it():
    """Block 11 (depth 1, after 10), 100 kB: its recompute cost is one lone 100-token
    prefill, 0.1 + 0.099 = 0.199 s (the toy's time ignores cached tokens). Per-rank shards
    (2 a block): store key 23 is shard 1 of block 11, its parent shard 1 of block 10,
    10 x 2 + 1 = 21. An unseen key has depth -1, no cost and no parent."""
    h = hooks()
    h.depths = {}
    h.note((10, 11))
    b = h.block(11, 1e5)
    assert (b.key, b.nbytes, b.depth, b.parent, b.tenant) == (11, 1e5, 1, 10, -1)
    assert b.recompute_s == pytest.approx(0.199)
    assert b.now == 0.0
    s = h.block(23, 5e4, shards=2)
    assert (s.key, s.depth, s.parent) == (23, 1, 21)
    assert h.block(10, 1e5).parent is None
    unseen = h.block(99, 1e5)
    assert unseen.depth == -1 and unseen.parent is None and math.isnan(unseen.recompute_s)


def test_recompute_seconds_for_a_plugin_take_a_depth_in_range():
    h = hooks()
    assert h.plugin_recompute_s(3) == pytest.approx(0.199)
    assert h.plugin_recompute_s(np.int64(0)) == pytest.approx(0.199)
    assert math.isnan(h.plugin_recompute_s(-1))
    for bad in (-2, MAX_DEPTH + 1, 1.5, True, "3"):
        with pytest.raises(ValueError, match="depth is a block's place"):
            h.plugin_recompute_s(bad)


# ---- guard rails -------------------------------------------------------------------


def test_a_plugins_exception_is_one_plugin_error_naming_the_method():
    hook = Hook(Stub(setup=KeyError("x")), "p.py", "router", "mine")
    with pytest.raises(PluginError, match=r"setup\(\) raised") as e:
        hook.call("setup")
    assert "plugin p.py (router 'mine')" in str(e.value)
    with pytest.raises(PluginError, match=r"it has no method route\(\)"):
        hook.call("route")
    assert hook.call("route", optional=True) is None


def test_a_prefetch_answer_must_be_a_block_count_within_the_prefix():
    """Three blocks below host in the usable prefix: 0 to 3 is an answer (a NumPy int
    too); 4, -1, 2.0 and True are not."""
    src = [NVME, REMOTE, NVME]
    job = SimpleNamespace()
    for got, ok in ((0, 0), (3, 3), (np.int64(2), 2)):
        assert PrefetchHook(Stub(fetch_blocks=got), "p", "f", NAMES).fetch_blocks(job, src) == ok
    for got, rule in (
        (4, "more blocks than the 3 in the usable prefix"),
        (-1, "never negative"),
        (2.0, "expected an int"),
        (True, "expected an int"),
    ):
        with pytest.raises(PluginError, match=rule):
            PrefetchHook(Stub(fetch_blocks=got), "p", "f", NAMES).fetch_blocks(job, src)


def test_a_plugin_is_told_its_sources_by_tier_name():
    seen = []
    hook = PrefetchHook(Stub(fetch_blocks=lambda view, src: seen.append(src) or 0), "p", "f", NAMES)
    hook.fetch_blocks(SimpleNamespace(), [HOST, NVME, REMOTE])
    assert seen == [["host", "nvme", "remote"]]


def test_a_load_policys_flags_must_be_true_or_false():
    policy = Stub(restore_blocks=0)
    policy.blocking = 1  # a number, not a bool
    with pytest.raises(PluginError, match="its attribute blocking broke a rule"):
        LoadHook(policy, "p", "l", NAMES)
    policy.blocking = np.bool_(False)
    hook = LoadHook(policy, "p", "l", NAMES)
    assert hook.blocking is False and hook.lower_tiers is True  # the default


def test_a_load_policy_that_asks_the_estimate_beyond_the_hit_is_stopped():
    """A hit of 2 blocks: estimate(0..2) is asked of the engine; estimate(3) stops the run
    even when the plugin catches what it was given."""
    asked = []

    def estimate(k):
        asked.append(k)
        return 0.1 * k

    def sneaky(view, src, est):
        with contextlib.suppress(Exception):
            est(3)
        return 1

    ok = LoadHook(Stub(restore_blocks=lambda view, src, est: est(2) and 2), "p", "l", NAMES)
    assert ok.restore_blocks([HOST, HOST], estimate) == 2 and asked == [2]
    with pytest.raises(PluginError, match=r"called estimate\(3\)"):
        LoadHook(Stub(restore_blocks=sneaky), "p", "l", NAMES).restore_blocks(
            [HOST, HOST], estimate
        )
    assert asked == [2]  # the engine's estimate never saw 3


def test_a_route_must_name_an_engine_that_is_up():
    """Engines 0 and 2 are up: index 2 gives engine 2; index 1 is refused."""
    engines = [SimpleNamespace(index=0), SimpleNamespace(index=2)]
    h = SimpleNamespace(engine_view=lambda e: e)
    job = SimpleNamespace()
    assert RouterHook(h, Stub(route=2), "p", "r").route(job, engines) is engines[1]
    with pytest.raises(
        PluginError, match=r"engine 1, which is not an engine that is up \(\[0, 2\]\)"
    ):
        RouterHook(h, Stub(route=1), "p", "r").route(job, engines)


def test_a_priority_must_be_a_finite_number():
    h = SimpleNamespace(engine_view=lambda e: e)
    job = SimpleNamespace()
    for got, want in ((2.5, 2.5), (np.float32(-1.0), -1.0), (7, 7.0)):
        assert SchedulerHook(h, Stub(priority=got), "p", "s").bind(None)(job) == want
    for got in (math.nan, math.inf, True, "1", 10**400):
        with pytest.raises(PluginError, match="expected a finite number"):
            SchedulerHook(h, Stub(priority=got), "p", "s").bind(None)(job)
