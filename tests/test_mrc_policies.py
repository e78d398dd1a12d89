"""Miss-ratio curves of many eviction policies on one replayed stream (kvsim.analysis):
the LRU replay against the one-pass curve, Belady's ``opt`` against every other policy and
against an exhaustive search, recorded access streams against the counts in them, reuse
distances by hand, and the ``kvsim trace mrc --policy`` / ``kvsim trace reuse`` commands."""

from __future__ import annotations

import functools
import json
from collections import OrderedDict

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvsim.analysis import replay, reuse, streams
from kvsim.analysis.mrc import miss_ratio_curve
from kvsim.cli import main
from kvsim.plugins import canonical, load_plugins
from kvsim.workload.mooncake import read_mooncake
from kvsim.workload.request import Request

from conftest import ROOT, examples

SAMPLE = ROOT / "traces" / "sample_chat.jsonl"
LFU = canonical(str(ROOT / "examples" / "lfu.py"))
COST = canonical(str(ROOT / "examples" / "cost_aware.py"))

# documents whose chains share prefixes (an id at depth i means one prefix up to block i)
DOCS = ((0, 1, 2, 3), (0, 1, 4, 5), (0, 6, 7), (8, 9, 10), (8, 9, 11, 12))

PYTHON_LRU = '''
from collections import OrderedDict
from kvsim.plugins import EvictionPolicy, register

@register("test_py_lru")
class PyLRU(EvictionPolicy):
    """LRU in Python; newest=True evicts the most recently used instead (MRU)."""
    def __init__(self, newest: bool = False) -> None:
        self.order = OrderedDict()
        self.newest = newest
    def inserted(self, block):
        self.order[block.key] = None
    def hit(self, block):
        self.order.move_to_end(block.key)
    def refreshed(self, block):
        self.order.move_to_end(block.key)
    def removed(self, key, reason=None):
        self.order.pop(key, None)
    def victim(self, tier):
        return next(reversed(self.order)) if self.newest else next(iter(self.order))
'''


@pytest.fixture(scope="module")
def py_lru(tmp_path_factory):
    path = tmp_path_factory.mktemp("plugin") / "py_lru.py"
    path.write_text(PYTHON_LRU, encoding="utf-8")
    spec = canonical(str(path))
    load_plugins([spec])
    return spec


def chain_requests(picks: list[tuple[int, int]], block: int) -> list[Request]:
    """Requests reading DOCS[d][:n], every block full (equal sizes)."""
    out = []
    for i, (d, n) in enumerate(picks):
        doc = DOCS[d % len(DOCS)]
        n = 1 + n % len(doc)
        out.append(Request(i, float(i), n * block, 1, doc[:n]))
    return out


PICKS = st.lists(st.tuples(st.integers(0, 4), st.integers(0, 3)), min_size=1, max_size=14)


# ---- LRU: the replay is the one-pass curve ----------------------------------------------


def test_lru_replay_equals_the_one_pass_curve_on_the_sample():
    """Exact: the same hit tokens (so the same float) and the same blocks found, at
    capacities from one block to beyond the working set."""
    curve = miss_ratio_curve(read_mooncake(SAMPLE), 512)
    stream = streams.trace_stream(read_mooncake(SAMPLE), 512)
    caps = [512, 3000, 512 * 40, 100_000, 512 * 600, 512 * 3000, 10**9]
    for row in replay.replay(stream, "lru", caps):
        c = row["capacity"]
        assert row["hit_ratio"] == curve.hit_ratio(c), c
        assert row["hit_blocks"] == curve.hit_blocks(c), c
        assert row["hit_blocks"] + row["miss_blocks"] == curve.asked_blocks


@settings(max_examples=examples(40), deadline=None)
@given(picks=PICKS)
def test_lru_replay_equals_the_curve_with_partial_blocks(picks):
    """Prompts that end mid-block (a document's last block is smaller), every capacity.
    Each key keeps one size, as a trace's block ids do (the one-pass curve takes a
    block's first size for good, where a store takes the size it is stored with)."""
    block = 3
    reqs = []
    for k, (d, n) in enumerate(picks):
        doc = DOCS[d]
        n = 1 + n % len(doc)
        tokens = n * block if n < len(doc) else n * block - d % block  # the whole doc: short
        reqs.append(Request(k, float(k), tokens, 1, doc[:n]))
    curve = miss_ratio_curve(reqs, block)
    caps = list(range(0, 14 * block))
    for row in replay.replay(streams.trace_stream(reqs, block), "lru", caps):
        assert row["hit_ratio"] == curve.hit_ratio(row["capacity"])
        assert row["hit_blocks"] == curve.hit_blocks(row["capacity"])


# ---- opt: Belady's bound ----------------------------------------------------------------


def brute_force_hits(reqs: list[Request], capacity_blocks: int) -> int:
    """The most blocks found over every keep/evict decision: each block stored may be
    kept out (bypass), put in free room, or put in place of any held block; a lookup
    finds the longest held prefix of its chain."""
    ops: list[tuple[str, object]] = []
    for r in reqs:
        ops.append(("lookup", r.hash_ids))
        ops += [("store", k) for k in r.hash_ids]

    @functools.cache
    def best(i: int, held: frozenset) -> int:
        if i == len(ops):
            return 0
        kind, x = ops[i]
        if kind == "lookup":
            h = 0
            for k in x:
                if k not in held:
                    break
                h += 1
            return h + best(i + 1, held)
        if x in held:
            return best(i + 1, held)
        options = [best(i + 1, held)]  # keep it out
        if len(held) < capacity_blocks:
            options.append(best(i + 1, held | {x}))
        else:
            options += [best(i + 1, (held - {v}) | {x}) for v in held]
        return max(options)

    return best(0, frozenset())


@settings(max_examples=examples(60), deadline=None)
@given(picks=st.lists(st.tuples(st.integers(0, 4), st.integers(0, 3)), max_size=8),
       cap=st.integers(1, 4))  # fmt: skip
def test_opt_equals_the_exhaustive_optimum(picks, cap):
    block = 2
    reqs = chain_requests(picks, block)
    (row,) = replay.replay(streams.trace_stream(reqs, block), "opt", [cap * block])
    assert row["hit_blocks"] == brute_force_hits(reqs, cap)


def test_opt_hand_computed():
    """Chains A=(0,1), B=(2,), A, B, A with room for two blocks: LRU finds nothing after
    B evicts 0 (the oldest) and A evicts 2 ...; Belady keeps A's (0, 1) and keeps B out:
    A's later two lookups find 2 blocks each."""
    block = 1
    chains = [(0, 1), (2,), (0, 1), (2,), (0, 1)]
    reqs = [Request(i, float(i), len(c), 1, c) for i, c in enumerate(chains)]
    stream = streams.trace_stream(reqs, block)
    (opt,) = replay.replay(stream, "opt", [2])
    (lru,) = replay.replay(stream, "lru", [2])
    assert opt["hit_blocks"] == 4 and opt["miss_blocks"] == 8 - 4
    assert lru["hit_blocks"] == 0
    # tokens: a whole prompt found still computes its last token: 2 x (2 - 1) of 8
    assert opt["hit_ratio"] == pytest.approx(2 / 8)


@settings(max_examples=examples(40), deadline=None)
@given(picks=PICKS, cap=st.integers(1, 8))
def test_opt_never_below_any_policy(picks, cap, py_lru):
    """Blocks found: Belady's at least every other policy's on the same stream (all
    blocks the same size, where it is the optimum)."""
    block = 4
    stream = streams.trace_stream(chain_requests(picks, block), block)
    (opt,) = replay.replay(stream, "opt", [cap * block])
    others = [
        replay.PolicySpec("lru"),
        replay.PolicySpec("fifo"),
        replay.PolicySpec("test_py_lru", None, (py_lru,)),
        replay.PolicySpec("test_py_lru", {"newest": True}, (py_lru,)),
        replay.PolicySpec("lfu", None, (LFU,)),
        replay.PolicySpec("cost_aware", None, (COST,)),
    ]
    load_plugins([LFU, COST])
    for p in others:
        (row,) = replay.replay(stream, p, [cap * block], recompute=lambda d: 1.0 + d)
        assert opt["hit_blocks"] >= row["hit_blocks"], p
        assert opt["hit_blocks"] + opt["miss_blocks"] == row["hit_blocks"] + row["miss_blocks"]


def test_a_python_lru_plugin_replays_as_the_built_in(py_lru):
    """The Delegated store with a Python LRU finds exactly what the built-in does (equal
    blocks and a partial last one); its parameter reaches it (MRU finds something else)."""
    stream = streams.trace_stream(read_mooncake(SAMPLE), 512)
    caps = [512 * 40, 512 * 600]
    plugin = replay.PolicySpec("test_py_lru", None, (py_lru,))
    assert replay.replay(stream, plugin, caps) == replay.replay(stream, "lru", caps)
    mru = replay.PolicySpec("test_py_lru", {"newest": True}, (py_lru,))
    assert replay.replay(stream, mru, caps) != replay.replay(stream, "lru", caps)


# ---- recorded streams -------------------------------------------------------------------

# One GPU tier of 200 B (two 100-byte blocks) under LRU, written by hand; engine 1 has a
# stream of its own, and a delete (an engine failure) empties key 1 on engine 0.
#   r1 (1,2): miss miss; insert 1, 2              held 1 2
#   r2 (1,3): hit 1, miss 3; refresh 1, insert 3, evict 2 (the least recent)   held 1 3
#   r3 (1,2): hit 1, miss 2; refresh 1, insert 2, evict 3                      held 1 2
#   r4 (1,2): hit hit; refresh 1, 2
#   delete 1                                       held 2
#   r5 (1,2): miss miss (2 is held, but past the first missing block); insert 1, refresh 2
# engine 0: 4 hits, 6 misses; engine 1: r10 (1): miss, insert; r11 (1): hit, refresh.
HAND = [
    (0.0, 0, "gpu", 1, 100.0, "miss", 1),
    (0.0, 0, "gpu", 2, 100.0, "miss", 1),
    (0.1, 0, "gpu", 1, 100.0, "insert", 1),
    (0.1, 0, "gpu", 2, 100.0, "insert", 1),
    (0.2, 1, "gpu", 1, 100.0, "miss", 10),
    (0.2, 0, "gpu", 1, 100.0, "hit", 2),
    (0.2, 0, "gpu", 3, 100.0, "miss", 2),
    (0.3, 1, "gpu", 1, 100.0, "insert", 10),
    (0.3, 0, "gpu", 1, 100.0, "refresh", 2),
    (0.3, 0, "gpu", 3, 100.0, "insert", 2),
    (0.3, 0, "gpu", 2, 100.0, "evict", 2),
    (0.4, 0, "gpu", 1, 100.0, "hit", 3),
    (0.4, 0, "gpu", 2, 100.0, "miss", 3),
    (0.4, 1, "gpu", 1, 100.0, "hit", 11),
    (0.5, 0, "gpu", 1, 100.0, "refresh", 3),
    (0.5, 0, "gpu", 2, 100.0, "insert", 3),
    (0.5, 0, "gpu", 3, 100.0, "evict", 3),
    (0.5, 1, "gpu", 1, 100.0, "refresh", 11),
    (0.6, 0, "gpu", 1, 100.0, "hit", 4),
    (0.6, 0, "gpu", 2, 100.0, "hit", 4),
    (0.7, 0, "gpu", 1, 100.0, "refresh", 4),
    (0.7, 0, "gpu", 2, 100.0, "refresh", 4),
    (0.8, 0, "gpu", 1, 100.0, "delete", -1),
    (0.9, 0, "gpu", 1, 100.0, "miss", 5),
    (0.9, 0, "gpu", 2, 100.0, "miss", 5),
    (1.0, 0, "gpu", 1, 100.0, "insert", 5),
    (1.0, 0, "gpu", 2, 100.0, "refresh", 5),
    (1.1, -1, "remote", 7, 300.0, "insert", -1),
    (1.2, 0, "remote", 7, 300.0, "hit", 6),
]


def frame(rows) -> pd.DataFrame:
    df = pd.DataFrame(rows, columns=list(streams.COLUMNS))
    return df.astype({"engine": "int32", "key": "int64", "request": "int64"})


def counts(df: pd.DataFrame, tier: str, engine: int | None = None) -> tuple[int, int]:
    sel = df[(df["tier"] == tier) & ((df["engine"] == engine) if engine is not None else True)]
    return int((sel["event"] == "hit").sum()), int((sel["event"] == "miss").sum())


def test_recorded_lru_stream_replays_to_its_own_counts(tmp_path):
    df = frame(HAND)
    path = tmp_path / "accesses.parquet"
    df.to_parquet(path)
    for engine in (0, 1, None):
        (row,) = replay.replay_accesses(path, "gpu", engine, "lru", [200.0])
        hits, misses = counts(df, "gpu", engine)
        assert (row["hit_blocks"], row["miss_blocks"]) == (hits, misses), engine
        assert row["hit_ratio"] == hits / (hits + misses)
    assert (hits, misses) == (5, 7)  # by hand: engine 0 4 + 6, engine 1 1 + 1


def test_recorded_stream_at_other_capacities_and_opt():
    """By hand (engine 0): one block holds nothing useful (0 hits); unlimited finds 1 in
    r2, 2 in r3 and r4 (5); Belady at 200 B keeps 3 out in r2 (never asked again) and
    finds 5 too."""
    df = frame(HAND)
    rows = replay.replay_accesses(df, "gpu", 0, "lru", [100.0, 200.0, 1000.0])
    assert [r["hit_blocks"] for r in rows] == [0, 4, 5]
    assert [r["miss_blocks"] for r in rows] == [10, 6, 5]
    (opt,) = replay.replay_accesses(df, "gpu", 0, "opt", [200.0])
    assert opt["hit_blocks"] == 5


def test_remote_is_one_shared_store():
    (row,) = replay.replay_accesses(frame(HAND), "remote", None, "lru", [300.0])
    assert (row["hit_blocks"], row["miss_blocks"]) == (1, 0)
    with pytest.raises(Exception, match="shared by every engine"):
        replay.replay_accesses(frame(HAND), "remote", 0, "lru", [300.0])


def test_a_request_looking_up_again_is_two_lookups():
    """Hit/miss rows of one request that ask a key again start a new lookup."""
    rows = [
        (0.0, 0, "gpu", 1, 1.0, "miss", 1),
        (0.0, 0, "gpu", 2, 1.0, "miss", 1),
        (0.0, 0, "gpu", 1, 1.0, "miss", 1),
        (0.0, 0, "gpu", 2, 1.0, "miss", 1),
    ]
    (stream,) = streams.accesses_streams(frame(rows), "gpu")
    assert [(k, s, e) for k, s, e in stream.ops()] == [(0, 0, 2), (0, 2, 4)]


@settings(max_examples=examples(40), deadline=None)
@given(picks=PICKS, cap=st.integers(1, 6))
def test_recorded_lru_stream_written_by_an_independent_lru(picks, cap):
    """Rows written by an OrderedDict LRU (not kvsim's store) replay to the same counts."""
    size = 10.0
    held: OrderedDict[int, None] = OrderedDict()
    rows = []
    for r in chain_requests(picks, 1):
        t = float(r.id)
        found = 0
        for k in r.hash_ids:
            if k not in held:
                break
            found += 1
        for i, k in enumerate(r.hash_ids):
            rows.append((t, 0, "gpu", k, size, "hit" if i < found else "miss", r.id))
        for k in r.hash_ids[:found]:
            held.move_to_end(k)
        for k in r.hash_ids:
            if k in held:
                held.move_to_end(k)
                rows.append((t, 0, "gpu", k, size, "refresh", r.id))
                continue
            held[k] = None
            rows.append((t, 0, "gpu", k, size, "insert", r.id))
            while len(held) > cap:
                old, _ = held.popitem(last=False)
                rows.append((t, 0, "gpu", old, size, "evict", r.id))
    df = frame(rows)
    (row,) = replay.replay_accesses(df, "gpu", None, "lru", [cap * size])
    assert (row["hit_blocks"], row["miss_blocks"]) == counts(df, "gpu")


# ---- reuse distances --------------------------------------------------------------------


def test_reuse_distances_by_hand():
    """(1, 2), (3,), (1, 2): blocks 1 and 2 come back after 3 distinct blocks each (the
    other two and themselves): both in the [2, 4) bin; 1, 2, 3 first uses."""
    reqs = [Request(i, float(i), len(c), 1, c) for i, c in enumerate([(1, 2), (3,), (1, 2)])]
    h = reuse.reuse_histogram([streams.trace_stream(reqs, 1)])
    assert h.bins == [0, 2] and h.cold == 3
    # a recorded stream counts stores as uses: 1 stored, 2 stored, 1 asked: distance 2
    rows = [
        (0.0, 0, "host", 1, 1.0, "insert", -1),
        (0.0, 0, "host", 2, 1.0, "insert", -1),
        (0.0, 0, "host", 1, 1.0, "hit", 1),
        (0.0, 0, "host", 1, 1.0, "hit", 2),
    ]
    h = reuse.reuse_histogram(streams.accesses_streams(frame(rows), "host"))
    assert h.bins == [1, 1] and h.cold == 0  # distance 2, then 1 (asked right after)


# ---- the commands -----------------------------------------------------------------------


def test_mrc_policies_command(tmp_path, capsys):
    assert main(["trace", "mrc", str(SAMPLE), "--json", "--points", "6"]) == 0
    legacy = json.loads(capsys.readouterr().out)
    argv = ["trace", "mrc", str(SAMPLE), "--json", "--points", "6", "--policy", "lru,fifo"]
    assert main([*argv, "--policy", "opt"]) == 0
    rows = json.loads(capsys.readouterr().out)
    by = {p: [r for r in rows if r["policy"] == p] for p in ("lru", "fifo", "opt")}
    assert [(r["capacity_tokens"], r["hit_ratio"]) for r in by["lru"]] == [
        (p["capacity_tokens"], p["hit_ratio"]) for p in legacy
    ]
    for p in ("fifo", "opt"):  # the same capacities; unlimited: the same for every policy
        assert [r["capacity_tokens"] for r in by[p]] == [r["capacity_tokens"] for r in by["lru"]]
        assert by[p][-1]["hit_ratio"] == by["lru"][-1]["hit_ratio"]
    plot = tmp_path / "mrc.png"
    assert main(["trace", "mrc", str(SAMPLE), "--policy", "lru,opt", "--plot", str(plot)]) == 0
    out = capsys.readouterr().out
    assert "opt" in out and "Belady" in out and plot.stat().st_size > 10_000


def test_mrc_plugin_with_parameters_command(capsys, py_lru):
    argv = ["trace", "mrc", str(SAMPLE), "--json", "--capacities", "20480,307200"]
    assert main([*argv, "--plugin", py_lru, "--policy", "lru,test_py_lru(newest=false)"]) == 0
    rows = json.loads(capsys.readouterr().out)
    lru = [r["hit_blocks"] for r in rows if r["policy"] == "lru"]
    mine = [r["hit_blocks"] for r in rows if r["policy"] == "test_py_lru(newest=False)"]
    assert lru == mine and len(lru) == 3  # two capacities and unlimited


def test_mrc_and_reuse_on_a_recorded_stream(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    frame(HAND).to_parquet(run / "accesses.parquet")
    argv = ["trace", "mrc", str(run), "--capacities", "100 B,200 B,1 kB", "--json"]
    assert main([*argv, "--policy", "lru,opt", "--engine", "0"]) == 0
    rows = json.loads(capsys.readouterr().out)
    got = {(r["policy"], r["capacity_bytes"]): r["hit_blocks"] for r in rows}
    assert got == {
        ("lru", 100.0): 0,
        ("lru", 200.0): 4,
        ("lru", 1000.0): 5,
        ("lru", None): 5,
        ("opt", 100.0): 3,
        ("opt", 200.0): 5,
        ("opt", 1000.0): 5,
        ("opt", None): 5,
    }  # fmt: skip  (opt in one block keeps 1 and keeps the rest out: r2, r3, r4 find it)
    assert main(["trace", "mrc", str(run / "accesses.parquet"), "--points", "4"]) == 0
    assert "blocks found / blocks asked" in capsys.readouterr().out
    plot = tmp_path / "reuse.png"
    assert main(["trace", "reuse", str(run), "--tier", "gpu", "--plot", str(plot)]) == 0
    assert "cold (first use)" in capsys.readouterr().out
    assert main(["trace", "reuse", str(SAMPLE), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows[-1]["low"] is None and sum(r["share"] for r in rows) == pytest.approx(1.0)
