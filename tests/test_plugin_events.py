"""Exact events for eviction plugins, and schedulers that rank after a lookup (issue 29).

The traces are hand-made (the toy scenario of tests/conftest.py: 100-token blocks of
100 kB, a serial engine, one engine; a request's blocks enter GPU HBM when it finishes),
so each event list below is worked out by hand in its test's docstring. A recording
policy (an LRU that writes every event it hears to a file) stands on the GPU tier."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from test_plugins import BLOCK, EXAMPLES, run_cli, scenario

RECORDER = '''
import json
from collections import OrderedDict
from kvsim.plugins import EvictionPolicy, SchedulingPolicy, register

LOG = {log!r}


def note(*event):
    with open(LOG, "a") as fh:
        fh.write(json.dumps(event) + "\\n")


@register("rec_lru")
class Recorder(EvictionPolicy):
    """An LRU (uses: hits and refreshes) that logs each event, one call per block."""

    def __init__(self):
        self.order = OrderedDict()

    def inserted(self, block):
        note("inserted", block.key)
        self.order[block.key] = None

    def hit(self, block):
        note("hit", block.key)
        self.order.move_to_end(block.key)

    def refreshed(self, block):
        note("refreshed", block.key)
        self.order.move_to_end(block.key)

    def removed(self, key, reason):
        note("removed", key, reason)
        self.order.pop(key, None)

    def victim(self, tier):
        return next(iter(self.order))


@register("rec_batch")
class BatchRecorder(Recorder):
    """The same policy through the batch methods (one call per run of events)."""

    def inserted_many(self, blocks):
        for b in blocks:
            self.inserted(b)

    def hit_many(self, blocks):
        for b in blocks:
            self.hit(b)

    def refreshed_many(self, blocks):
        for b in blocks:
            self.refreshed(b)

    def removed_many(self, keys, reason):
        for k in keys:
            self.removed(k, reason)


@register("rec_evict")
class EvictRecorder(Recorder):
    """The same LRU naming its victims with evict(): it forgets them itself, and hears
    no removal of them (it still hears deletions and expiries)."""

    def evict(self, tier):
        key, _ = self.order.popitem(last=False)
        note("evict", key)
        return key


@register("rec_old")
class OldRecorder(EvictionPolicy):
    """Written before reasons: removed(key) only."""

    def __init__(self):
        self.order = OrderedDict()

    def inserted(self, block):
        self.order[block.key] = None

    def hit(self, block):
        self.order.move_to_end(block.key)

    def removed(self, key):
        note("removed", key)
        self.order.pop(key, None)

    def victim(self, tier):
        return next(iter(self.order))


@register("most_cached")
class MostCached(SchedulingPolicy):
    """Longest cached prefix first, asked again at each pick (as lpm)."""

    dynamic = True

    def priority(self, request, engine):
        return -request.cached_tokens


@register("most_cached_once")
class MostCachedOnce(MostCached):
    """The same, asked only when a request joins the queue."""

    dynamic = False


@register("log_cached")
class LogCached(SchedulingPolicy):
    """fcfs, logging the cached tokens each priority call sees."""

    def priority(self, request, engine):
        note("priority", request.id, request.cached_tokens)
        return request.arrival
'''


def recorder(tmp_path: Path) -> tuple[Path, Path]:
    """The recording plugin file and its log."""
    log = tmp_path / "events.jsonl"
    plugin = tmp_path / "recorder.py"
    plugin.write_text(RECORDER.format(log=str(log)))
    return plugin, log


def events(log: Path) -> list[list]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


# GPU HBM of 2.5 blocks (holds two); a TTL of 4 s (swept every second); tenant 0 deleted
# at 8 s
ROWS = [(0, [1, 2]), (1, [1, 3]), (7, [5]), (9, [5])]
SECTIONS = {
    "tiers": {"gpu": {"capacity": f"{2.5 * BLOCK:.0f} B"}},
    "tenancy": {"ttl": "4 s", "deletions": [{"tenant": 0, "at": "8 s"}]},
}
# worked out by hand (ROWS, SECTIONS):
# - 0 s, [1, 2]: the lookup finds nothing; stored at its end (about 0.3 s): 1, 2 inserted
# - 1 s, [1, 3]: the lookup hits 1; stored: 1 again (refreshed, not hit), 3 needs room:
#   the LRU's victim is 2 (1 was used since), evicted; then 3 inserted
# - the TTL sweep at 6 s removes what was last used at or before 2 s: 1, 3 (used at about
#   1.2 s), expired, in the order they were first stamped
# - 7 s, [5]: nothing found; 5 inserted; 8 s: tenant 0 deleted, 5 with it
# - 9 s, [5]: nothing found (deleted); 5 inserted again
EXPECTED = [
    ["inserted", 1],
    ["inserted", 2],
    ["hit", 1],
    ["refreshed", 1],
    ["removed", 2, "evicted"],
    ["inserted", 3],
    ["removed", 1, "expired"],
    ["removed", 3, "expired"],
    ["inserted", 5],
    ["removed", 5, "deleted"],
    ["inserted", 5],
]


@pytest.mark.parametrize("policy", ["rec_lru", "rec_batch"])
def test_hits_refreshes_and_removals_with_their_reasons(tmp_path, policy):
    """The events of ROWS/SECTIONS, worked out by hand above: a hit only for the lookup,
    a refresh for the block stored again, and each removal's reason (evicted, expired by
    the TTL, deleted with its tenant). The batch methods hear the same events in the
    same order as the one-block methods."""
    plugin, log = recorder(tmp_path)
    path = scenario(tmp_path, ROWS, plugins=[str(plugin)], **SECTIONS)
    rows = run_cli(path, tmp_path / "out", "--set", f"tiers.gpu.eviction={policy}")
    assert events(log) == EXPECTED
    assert rows["tokens_gpu"].tolist() == [0, 100, 0, 0]  # the hit at 1 s


def test_a_removed_without_a_reason_is_still_called(tmp_path):
    """A plugin written before reasons (``removed(self, key)``) hears every removal."""
    plugin, log = recorder(tmp_path)
    path = scenario(tmp_path, ROWS, plugins=[str(plugin)], **SECTIONS)
    run_cli(path, tmp_path / "out", "--set", "tiers.gpu.eviction=rec_old")
    assert events(log) == [["removed", k] for k in (2, 1, 3, 5)]


def test_a_policy_that_evicts_hears_no_removal_of_its_victims(tmp_path):
    """``evict(tier)`` instead of ``victim(tier)``: the same events as EXPECTED, but the
    victim (2, at 1 s) is named by evict() when room is needed (after the refresh that
    came before it) and never told back as removed; expiries and deletions still are."""
    plugin, log = recorder(tmp_path)
    path = scenario(tmp_path, ROWS, plugins=[str(plugin)], **SECTIONS)
    rows = run_cli(path, tmp_path / "out", "--set", "tiers.gpu.eviction=rec_evict")
    expected = [e if e != ["removed", 2, "evicted"] else ["evict", 2] for e in EXPECTED]
    assert events(log) == expected
    assert rows["tokens_gpu"].tolist() == [0, 100, 0, 0]


def test_an_eviction_policy_needs_victim_or_evict():
    from kvsim.plugins import EvictionPolicy, RegistrationError, registered

    class OnlyEvict(EvictionPolicy):
        def evict(self, tier):
            return next(iter(tier))

    class Neither(EvictionPolicy):
        pass

    with registered("only_evict_x", OnlyEvict):
        pass
    refused = pytest.raises(RegistrationError, match=r"does not define victim\(\) or evict\(\)")
    with refused, registered("neither_x", Neither):
        pass


# ---- schedulers after a lookup ----------------------------------------------------------

# one engine, GPU HBM of 8 blocks, host memory of 100 (never full). Chain A (1, 2, 3, 4,
# 90) is computed first; C (6 blocks) and B (11, 12, 91) push it down to host memory;
# then, while a one-block request computes, seven requests queue, each ending in a block
# of its own (never cached). P and S find 5 blocks of A, Q finds 5 when it joins and 7
# once P (which extends A by 21, 22, 23) is stored: a scheduler asked only when Q joins
# ranks it after S (same 5 blocks, later arrival), lpm and a dynamic one before S
LPM_ROWS = [(0, [1, 2, 3, 4, 90]), (10, list(range(500, 506))), (20, [11, 12, 91])]
LPM_ROWS += [(30, [600])]
LPM_ROWS += [
    (30.001, [11, 301]),
    (30.002, [1, 2, 3, 4, 90, 21, 22, 23, 310]),  # P
    (30.003, [1, 2, 3, 4, 90, 312]),  # S
    (30.004, [1, 2, 3, 4, 90, 21, 22, 311]),  # Q
    (30.005, [1, 2, 306]),
    (30.006, [11, 12, 304]),
    (30.007, [400, 401]),
]
# under async Q does not extend P's chain (Q = A + a block of its own): a request back
# from its restore keeps the blocks it restored, where lpm would count P's blocks stored
# since
LPM_ASYNC = [row if row[0] != 30.004 else (30.004, [1, 2, 3, 4, 90, 311]) for row in LPM_ROWS]
LPM_TIERS = {
    "gpu": {"capacity": f"{8.5 * BLOCK:.0f} B"},
    # (write_queue null: a block demoted into host memory is readable at once)
    "host": {
        "enabled": True,
        "capacity": f"{100 * BLOCK:.0f} B",
        "t0": "1 ms",
        "write_queue": None,
    },
}


@pytest.mark.parametrize(("load", "rows"), [("sync", LPM_ROWS), ("async", LPM_ASYNC)])
def test_a_dynamic_plugin_ranking_by_cached_tokens_is_lpm(tmp_path, load, rows):
    """A plugin scheduler with ``dynamic = True`` ranking by ``-cached_tokens`` gives the
    same per-request results as the built-in ``lpm``, under sync and async.

    The two rankings are equal here, at every pick: lpm ranks by the blocks of a
    request's prefix its engine's local tiers hold (ties in arrival order) and the plugin
    by its cached tokens (ties in arrival order), which are those blocks times 100
    tokens when (a) there is no remote store (lpm does not look there, the lookup does),
    (b) each prompt ends in a block of its own, so no prompt is ever wholly cached (the
    last token always computed would otherwise cut one token off the longest ones), and
    (c) the queue stays under 128 (lpm falls back to fcfs above), and (d) a block
    demoted into host memory is readable at once (``write_queue: null``: lpm counts a
    block whose write is still in flight, the lookup does not). Under async a request
    back from its restore keeps the blocks it restored, which are still its engine's
    whole local prefix (host memory evicts nothing, and under async no queued request
    extends another's chain: LPM_ASYNC). Under sync, Q's cached prefix grows while it
    waits, which only a dynamic scheduler sees (a static one differs from lpm there:
    checked). The one-block request keeps the engine busy while the seven queue, so the
    order matters: it differs from fcfs (checked)."""
    plugin, _ = recorder(tmp_path)
    path = scenario(
        tmp_path,
        rows,
        plugins=[str(plugin)],
        tiers=LPM_TIERS,
        cluster={"load_policy": load},
    )
    out = {}
    for name in ("lpm", "most_cached", "fcfs", "most_cached_once"):
        out[name] = run_cli(path, tmp_path / name, "--set", f"engine.scheduler={name}")
    pd.testing.assert_frame_equal(out["lpm"], out["most_cached"])
    assert not out["lpm"]["ttft_s"].equals(out["fcfs"]["ttft_s"])
    if load == "sync":  # Q's prefix grew while it waited
        assert not out["lpm"]["ttft_s"].equals(out["most_cached_once"]["ttft_s"])
    assert (out["lpm"]["tokens_host"] > 0).sum() >= 2  # restores from host (async: away)


def test_a_scheduler_sees_cached_tokens_under_sync(tmp_path):
    """Under sync a request's priority is computed when it joins the queue, before its
    engine's lookup: it now sees the cached tokens a side-effect-free lookup finds (the
    second request, [1, 3], arriving after [1, 2] is stored: 100 tokens), not 0."""
    plugin, log = recorder(tmp_path)
    rows = [(0, [1, 2]), (1, [1, 3]), (2, [7])]
    tiers = {"gpu": {"capacity": f"{10.5 * BLOCK:.0f} B"}}
    path = scenario(tmp_path, rows, plugins=[str(plugin)], tiers=tiers)
    run_cli(path, tmp_path / "out", "--set", "engine.scheduler=log_cached")
    assert events(log) == [["priority", 0, 0], ["priority", 1, 100], ["priority", 2, 0]]


# ---- examples/s3fifo.py: its parameter changes what it evicts -----------------------------


class _Blocks:
    """The one thing a plugin store asks of the simulation's hooks: each block's record."""

    now = 0.0

    def block(self, key, nbytes, shards=1):
        from kvsim.plugins import Block

        return Block(key, float(nbytes), 0, float("nan"), None, -1, 0.0)


def _s3fifo_evictions(small_frac: float) -> list[int]:
    """Blocks of 1 byte in a 4-byte store: 1, 2, 3, 4 stored, 1 hit, then 5, 2, 6, 7."""
    from kvsim.cache.delegated import Delegated
    from kvsim.plugins import load_plugins, make
    from kvsim.sim.hooks import EvictionHook

    spec = str(EXAMPLES / "s3fifo.py")
    load_plugins([spec])
    policy, plugin = make("eviction", "s3fifo", [spec], {"small_frac": small_frac})
    store = Delegated(4.0, EvictionHook(_Blocks(), policy, plugin, "eviction", "s3fifo", "t", 1))
    out: list[int] = []
    for k in (1, 2, 3, 4):
        store.insert_many([k], [1.0])
    store.touch([1])
    for k in (5, 2, 6, 7):
        out += store.insert_many([k], [1.0])[0]
    return out


def test_s3fifo_small_queue_share_decides_its_victims():
    """Worked by hand (examples/s3fifo.py; blocks of 1 byte, a 4-byte store).

    small_frac 0.5 (the small queue's share: 2 bytes). 5 needs room: the small queue
    (1, 2, 3, 4: 4 bytes) is over its share: 1, hit, moves to the main queue; 2, never
    hit, is evicted (its key kept as a ghost). 2 comes back: 3 is evicted, and 2, a
    ghost, goes to the main queue (1, 2). 6: 4 is evicted. 7: the small queue (5, 6) is
    at its share: 5 is evicted. An LRU would evict 2, 3, 4 and then 1 (unused since its
    hit).

    small_frac 0.9 (3.6 bytes). 5 needs room: 1 moves to the main queue; the small queue
    (2, 3, 4: 3 bytes) is now under its share, so the main queue gives its oldest block:
    1, whose hit was spent on the move. 2 is still held (stored again: no eviction). 6:
    the small queue (2, 3, 4, 5) is over its share: 2 is evicted; 7: 3 is evicted."""
    assert _s3fifo_evictions(0.5) == [2, 3, 4, 5]
    assert _s3fifo_evictions(0.9) == [1, 2, 3]
