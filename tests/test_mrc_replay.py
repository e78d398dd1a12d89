"""Cache-curve replays that agree with the run (issue 39, point 1).

- A recorded stream's replay finds, per lookup, the blocks the store holds within the
  located prefix (held here, or found by the run in another tier): so FIFO's holes in a
  chain, which a lower tier fills, stay hits, and the replay at the run's capacity and
  policy gives back the run's per-tier counters exactly (the must-show, through the CLI:
  lru, fifo and a plugin policy at three capacities each).
- Edited recorded files (negative, NaN or infinite bytes, rows out of time order) and
  ``--capacities 1000`` (no unit) on a recorded stream exit 2 with one line naming the
  file and row, or the option; nothing is written.
- ``trace mrc TRACE --run DIR`` puts the run's GPU-tier figure beside the trace's curve
  at the run's capacity and says why they may differ.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvsim.analysis import replay, streams
from kvsim.cli import main

from conftest import ROOT, SCENARIOS, examples

SAMPLE_SC = str(SCENARIOS / "mooncake-sample.yaml")  # 800 chat requests, 2 engines, 4 tiers
SAMPLE = str(ROOT / "traces" / "sample_chat.jsonl")
LFU = str(ROOT / "examples" / "lfu.py")
GB = (5, 10, 20)  # GPU tier capacities per engine: every one evicts


def cli(argv: list[str]) -> tuple[int, str, str]:
    """(exit code, stdout, stderr less plugin notices) of ``kvsim ARGV``."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main(argv)
        except SystemExit as e:
            rc = e.code if isinstance(e.code, int) else 1
    lines = [x for x in err.getvalue().splitlines() if not x.startswith("kvsim: importing plugin")]
    return rc, out.getvalue(), "\n".join(lines)


def record(out: Path, policy: str, gb: int, *extra: str) -> dict:
    """Run the sample with the GPU tier's policy and capacity, recording accesses; the
    summary."""
    rc, _, err = cli(
        [
            "run", SAMPLE_SC, "--set", f"tiers.gpu.capacity={gb} GB",
            "--set", f"tiers.gpu.eviction={policy}", *extra,
            "--record-accesses", "--out", str(out), "--quiet",
        ]
    )  # fmt: skip
    assert rc == 0, err
    return json.loads((out / "summary.json").read_text())


def replayed(run: Path, policy: str, gb: int, *extra: str) -> dict:
    """``kvsim trace mrc RUN --policy P --capacities 'N GB' --json``: the row at N GB."""
    rc, out, err = cli(
        ["trace", "mrc", str(run), "--policy", policy, "--capacities", f"{gb} GB", "--json",
         *extra]
    )  # fmt: skip
    assert rc == 0, err
    (row,) = [r for r in json.loads(out) if r["capacity_bytes"] == gb * 1e9]
    return row


def holes(run: Path) -> int:
    """GPU hit rows after a GPU miss row of the same lookup: blocks after a hole in the
    GPU tier's chain (a replay that counts the held prefix alone misses each of them)."""
    df = pd.read_parquet(run / "accesses.parquet")
    gpu = df[(df["tier"] == "gpu") & df["event"].isin(["hit", "miss"])]
    n = 0
    for _, rows in gpu.groupby(["request", "time"], sort=False):
        ev = rows["event"].astype(str).tolist()
        if "miss" in ev:
            n += ev[ev.index("miss") :].count("hit")
    return n


# ---- the must-show: a recorded-stream replay equal to the run -------------------------


@pytest.mark.parametrize(
    "policy, extra",
    [("lru", ()), ("fifo", ()), ("lfu", ("--plugin", LFU))],
    ids=["lru", "fifo", "lfu-plugin"],
)
def test_replay_of_the_recorded_gpu_stream_equals_the_run(tmp_path, policy, extra):
    """For each policy at three GPU capacities: run with --record-accesses, replay its
    accesses.parquet with ``kvsim trace mrc``, and the hits and misses are the run's
    ``tiers.gpu`` counters exactly."""
    seen = []
    for gb in GB:
        run = tmp_path / f"{policy}-{gb}"
        g = record(run, policy, gb, *extra)["tiers"]["gpu"]
        assert g["evictions"] > 0  # the capacity decides what is held
        row = replayed(run, policy, gb, *extra)
        assert (row["hit_blocks"], row["miss_blocks"]) == (g["hits"], g["misses"]), gb
        assert row["hit_ratio"] == g["hits"] / (g["hits"] + g["misses"])
        seen.append((g["hits"], holes(run)))
    assert len({h for h, _ in seen}) == 3  # three different outcomes
    if policy == "fifo":  # the defect's case is there: blocks after holes, counted as hits
        assert all(n > 0 for _, n in seen), seen


def test_held_prefix_alone_would_miss_the_fifo_runs_counts(tmp_path):
    """The old rule (count the held prefix of each lookup) on the same file gives fewer
    hits than the run: the test above can fail for that defect."""
    run = tmp_path / "fifo"
    g = record(run, "fifo", 10)["tiers"]["gpu"]
    (stream,) = streams.accesses_streams(run, "gpu", 0)
    stream.located = None  # the held prefix only, as a trace's lookups
    (prefix,) = replay.replay(stream, "fifo", [10e9])
    engine0 = next(e for e in g["engines"] if e["engine"] == 0)
    assert prefix["hit_blocks"] < engine0["hits"]
    (rule,) = replay.replay(streams.accesses_streams(run, "gpu", 0)[0], "fifo", [10e9])
    assert rule["hit_blocks"] == engine0["hits"]


# ---- the rule by hand ------------------------------------------------------------------


def frame(rows: list[tuple]) -> pd.DataFrame:
    df = pd.DataFrame(rows, columns=list(streams.COLUMNS))
    return df.astype({"engine": "int32", "key": "int64", "request": "int64"})


# engine 0, blocks of 10 B. r1 stores chain (1, 2, 3) in gpu; 2 is then deleted from gpu
# and lives in host. r2 asks (1, 2, 3): gpu 1 hit, 2 miss (host hit), 3 hit after the
# hole. r3 asks (1, 4, 3): 4 is nowhere, so 3 (held in gpu) is past the located prefix:
# a miss in every tier.
HOLES = [
    (0.0, 0, "gpu", 1, 10.0, "miss", 1),
    (0.0, 0, "gpu", 2, 10.0, "miss", 1),
    (0.0, 0, "gpu", 3, 10.0, "miss", 1),
    (0.0, 0, "host", 1, 10.0, "miss", 1),
    (0.0, 0, "host", 2, 10.0, "miss", 1),
    (0.0, 0, "host", 3, 10.0, "miss", 1),
    (0.1, 0, "gpu", 1, 10.0, "insert", 1),
    (0.1, 0, "gpu", 2, 10.0, "insert", 1),
    (0.1, 0, "gpu", 3, 10.0, "insert", 1),
    (0.2, 0, "host", 2, 10.0, "insert", -1),
    (0.2, 0, "gpu", 2, 10.0, "delete", -1),
    (0.3, 0, "gpu", 1, 10.0, "hit", 2),
    (0.3, 0, "gpu", 2, 10.0, "miss", 2),
    (0.3, 0, "gpu", 3, 10.0, "hit", 2),
    (0.3, 0, "host", 2, 10.0, "hit", 2),
    (0.4, 0, "gpu", 1, 10.0, "hit", 3),
    (0.4, 0, "gpu", 4, 10.0, "miss", 3),
    (0.4, 0, "gpu", 3, 10.0, "miss", 3),
    (0.4, 0, "host", 4, 10.0, "miss", 3),
    (0.4, 0, "host", 3, 10.0, "miss", 3),
]


def test_a_block_after_a_hole_another_tier_fills_is_a_hit():
    df = frame(HOLES)
    (row,) = replay.replay_accesses(df, "gpu", 0, "lru", [1000.0])
    # r2: 1 and 3 (3 after the hole host fills); r3: 1 only (3 past the located prefix)
    assert (row["hit_blocks"], row["miss_blocks"]) == (3, 6)
    assert (row["hit_blocks"], row["miss_blocks"]) == (
        int(((df["tier"] == "gpu") & (df["event"] == "hit")).sum()),
        int(((df["tier"] == "gpu") & (df["event"] == "miss")).sum()),
    )
    for policy in ("fifo", "opt"):
        (row,) = replay.replay_accesses(df, "gpu", 0, policy, [1000.0])
        assert row["hit_blocks"] == 3, policy
    (host,) = replay.replay_accesses(df, "host", 0, "lru", [1000.0])
    assert (host["hit_blocks"], host["miss_blocks"]) == (1, 5)  # r1 3 misses, r2 1 hit, r3 2


def test_located_marks_only_blocks_found_in_another_tier():
    df = frame(HOLES)
    tiers = df["tier"].astype(str).to_numpy()
    ev = df["event"].astype(str).to_numpy()
    got = streams.lookup_located(
        tiers, ev == "hit", np.isin(ev, ["hit", "miss"]), df["key"].to_numpy(),
        df["request"].to_numpy(), df["time"].to_numpy(),
    )  # fmt: skip
    # only r2's gpu miss of block 2 (a host hit of the same lookup)
    assert np.flatnonzero(got).tolist() == [12]


# ---- bad recorded files and capacities --------------------------------------------------


def _written(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    frame(HOLES).to_parquet(run / "accesses.parquet")
    return run


@pytest.mark.parametrize(
    "column, row, value, fragment",
    [
        ("bytes", 5, -10.0, "bytes is -10.0"),
        ("bytes", 7, math.nan, "bytes is nan"),
        ("bytes", 2, math.inf, "bytes is inf"),
        ("time", 9, 0.05, "rows out of time order"),
        ("time", 3, math.nan, "time is nan"),
    ],
)
@pytest.mark.parametrize("command", ["mrc", "reuse"])
def test_a_bad_recorded_file_exits_2_naming_file_and_row(
    tmp_path, column, row, value, fragment, command
):
    df = frame(HOLES)
    df.loc[row, column] = value
    path = tmp_path / "accesses.parquet"
    df.to_parquet(path)
    plot = tmp_path / "curve.png"
    rc, out, err = cli(["trace", command, str(path), "--plot", str(plot)])
    assert rc == 2, err
    assert err.startswith("kvsim: error: ") and "\n" not in err and "Traceback" not in err
    assert f"{path}: row {row}: " in err and fragment in err, err
    assert out == "" and not plot.exists()


def test_a_non_numeric_bytes_column_exits_2(tmp_path):
    df = frame(HOLES)
    df["bytes"] = df["bytes"].astype(str)
    path = tmp_path / "accesses.parquet"
    df.to_parquet(path)
    rc, _, err = cli(["trace", "mrc", str(path)])
    assert rc == 2 and "column bytes" in err and str(path) in err and "\n" not in err, err


@pytest.mark.parametrize("text", ["1000", "10 GB,1000", "nan", "-1 GB"])
def test_recorded_capacities_need_a_unit(tmp_path, text):
    run = _written(tmp_path)
    plot = tmp_path / "curve.png"
    rc, out, err = cli(["trace", "mrc", str(run), "--capacities", text, "--plot", str(plot)])
    assert rc == 2, err
    assert err.startswith("kvsim: error: --capacities: ") and "\n" not in err, err
    assert out == "" and not plot.exists()
    rc, out, _ = cli(["trace", "mrc", str(run), "--capacities", "1000 B", "--json"])
    assert rc == 0 and json.loads(out)[0]["capacity_bytes"] == 1000.0


def test_a_good_file_still_replays_through_reuse_and_mrc(tmp_path):
    run = _written(tmp_path)
    assert cli(["trace", "reuse", str(run), "--json"])[0] == 0
    rc, out, _ = cli(["trace", "mrc", str(run), "--capacities", "1 kB", "--json"])
    assert rc == 0 and json.loads(out)[0]["hit_blocks"] == 3


# ---- a trace's curve beside a run (--run) -----------------------------------------------


def test_a_traces_curve_beside_the_run(tmp_path):
    """One engine, the sample trace: the curve at the run's GPU capacity, the run's own
    counts beside it, and the note on why a run can differ."""
    run = tmp_path / "run"
    rc, _, err = cli(
        ["run", SAMPLE_SC, "--set", "cluster.engines=1", "--set", "tiers.gpu.capacity=10 GB",
         "--out", str(run), "--quiet"]
    )  # fmt: skip
    assert rc == 0, err
    g = json.loads((run / "summary.json").read_text())["tiers"]["gpu"]
    rc, out, err = cli(["trace", "mrc", SAMPLE, "--run", str(run), "--points", "4", "--json"])
    assert rc == 0, err
    rows = json.loads(out)
    (at,) = [r for r in rows if "run" in r]
    assert at["capacity_tokens"] == int(10e9 // 51168)  # the profile's KV bytes per token
    assert at["policy"] == "lru"  # the run's GPU policy, as none was asked
    assert (at["run"]["hit_blocks"], at["run"]["miss_blocks"]) == (g["hits"], g["misses"])
    assert "overlap in time" in err and f"found {g['hits']:,} of" in err
    # the same point without --run: the curve itself is not changed by the comparison
    rc, out, _ = cli(["trace", "mrc", SAMPLE, "--capacities", str(at["capacity_tokens"]),
                      "--json"])  # fmt: skip
    assert json.loads(out)[0]["hit_ratio"] == at["hit_ratio"]
    rc, out, _ = cli(["trace", "mrc", SAMPLE, "--run", str(run), "--policy", "fifo"])
    assert rc == 0
    assert "A run can differ from its trace's curve" in out
    assert "the run's policy is lru: --policy lru replays it" in out
    rc, out, err = cli(["trace", "mrc", SAMPLE, "--run", str(run), "--block-tokens", "256"])
    assert rc == 2 and "--run: the run's blocks are 512 tokens" in err and "\n" not in err
    assert out == ""


def test_run_refused_where_it_cannot_compare(tmp_path):
    recorded = _written(tmp_path)
    for argv, fragment in [
        (["trace", "mrc", str(recorded), "--run", str(recorded)], "--run: "),
        (["trace", "mrc", SAMPLE, "--run", str(tmp_path / "nope")], "not a run folder"),
        (["trace", "mrc", SAMPLE, "--run", str(recorded)], "no summary.json"),
    ]:
        rc, out, err = cli(argv)
        assert rc == 2 and fragment in err and "\n" not in err, (argv, err)
        assert out == ""


# ---- fuzz: edited recorded files --------------------------------------------------------

CELLS = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([-1.0, -1e-300, 0.0, 1e308, math.nan, -math.inf]),
)


@settings(
    max_examples=examples(40), deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)  # fmt: skip
@given(
    edits=st.lists(
        st.tuples(st.sampled_from(["time", "bytes"]), st.integers(0, len(HOLES) - 1), CELLS),
        max_size=3,
    ),
    swap=st.none() | st.tuples(st.integers(0, len(HOLES) - 1), st.integers(0, len(HOLES) - 1)),
    command=st.sampled_from(["mrc", "reuse"]),
)
def test_any_edited_recorded_file_replays_or_is_refused_in_one_line(tmp_path, edits, swap, command):
    """Cells of time and bytes set to anything, two rows swapped: ``trace mrc``/``reuse``
    either replay (exit 0) or refuse with one line naming the file (exit 2), never a
    traceback; a refused file names the row when a value is bad."""
    df = frame(HOLES)
    for column, row, value in edits:
        df.loc[row, column] = value
    if swap is not None:
        order = list(range(len(df)))
        order[swap[0]], order[swap[1]] = order[swap[1]], order[swap[0]]
        df = df.iloc[order].reset_index(drop=True)
    path = tmp_path / "edited.parquet"
    df.to_parquet(path)
    rc, out, err = cli(["trace", command, str(path), "--json"])
    times = df["time"].to_numpy(dtype=float)
    sizes = df["bytes"].to_numpy(dtype=float)
    ok = (
        np.isfinite(times).all() and (times >= 0).all() and (np.diff(times) >= 0).all()
        and np.isfinite(sizes).all() and (sizes >= 0).all()
    )  # fmt: skip
    if ok:
        assert rc == 0, err
        json.loads(out)
    else:
        assert rc == 2, err
        assert err.startswith(f"kvsim: error: {path}: row ") and "\n" not in err, err
        assert out == ""
