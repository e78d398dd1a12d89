"""The extension API: the examples in examples/ through the CLI (on whichever core is
installed: CI runs this file on the compiled one too, and tests/test_build.py checks
that the compiled core is the one imported there), through a sweep whose workers are
started with spawn, on a Dask cluster, and the guard rails (one planted misbehaving
plugin per rule).

The traces are hand-made so that each example's effect can be worked out by hand: the
toy scenario (tests/conftest.py) has 100-token blocks of 1,000 B per token (100 kB a
block) and a serial engine, so a request's blocks enter GPU HBM when it finishes."""

from __future__ import annotations

import contextlib
import copy
import io
import json
import os
import subprocess
import sys
import textwrap
from decimal import Decimal
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import yaml

from kvsim import api
from kvsim.cli import main
from kvsim.config.loader import deep_merge
from kvsim.plugins import (
    BUILTIN,
    INTERFACES,
    EvictionPolicy,
    SchedulingPolicy,
    loading,
    names,
    registered,
    registry,
    scope,
)

from conftest import ROOT, SCENARIOS, TOY

EXAMPLES = ROOT / "examples"
BLOCK = 100_000  # bytes of one 100-token block in the toy scenario


# ---- helpers ---------------------------------------------------------------------------


def trace(path: Path, rows: list[tuple[float, list[int]]], block: int = 100) -> Path:
    """A Mooncake trace: (arrival s, hash ids) per request, prompts filling their blocks."""
    with path.open("w") as fh:
        for t, ids in rows:
            fh.write(
                json.dumps(
                    {
                        "timestamp": int(t * 1000),
                        "input_length": len(ids) * block,
                        "output_length": 1,
                        "hash_ids": ids,
                    }
                )
                + "\n"
            )
    return path


def scenario(tmp_path: Path, rows: list[tuple[float, list[int]]], **sections: Any) -> Path:
    """The toy scenario replaying ``rows``, written as a YAML file with the examples as
    plugins (and ``sections`` deep-merged over it)."""
    sc = copy.deepcopy(TOY)
    sc["workload"] = {"kind": "mooncake", "path": "trace.jsonl", "block_tokens": 100}
    sc["plugins"] = [str(p) for p in sorted(EXAMPLES.glob("*.py"))]
    sc = deep_merge(sc, sections)
    trace(tmp_path / "trace.jsonl", rows)
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(sc))
    return path


NOTICE = "kvsim: importing plugin code: "


def one_error(err: str) -> str:
    """The stderr of a refused command: a notice per plugin file imported, then one error
    line (returned), no traceback."""
    lines = err.splitlines()
    assert lines and "Traceback" not in err, err
    assert all(line.startswith(NOTICE) for line in lines[:-1]), err
    assert lines[-1].startswith("kvsim: error: "), err
    return lines[-1]


def run_cli(path: Path, out: Path, *args: str) -> pd.DataFrame:
    """``kvsim run`` through the CLI; the per-request table, in request order."""
    assert main(["run", str(path), "--out", str(out), "--format", "csv", "--quiet", *args]) == 0
    return pd.read_csv(out / "requests.csv").sort_values("id").reset_index(drop=True)


# ---- the examples through the CLI ---------------------------------------------------------


def test_python_lru_plugin_gives_exactly_the_builtin_lru(tmp_path):
    """The same policy written as a plugin, on every tier and the remote servers: the same
    results, bit for bit (the delegating store evicts, counts and demotes as the built-in
    one, and the remote store without its mirrored index as with it)."""
    path = tmp_path / "s.yaml"
    path.write_text(
        f"name: s\nextends: {SCENARIOS / 'mooncake-sample.yaml'}\n"
        f"plugins: [{EXAMPLES / 'python_lru.py'}]\n"
    )
    out = {}
    for name in ("lru", "python_lru"):
        sets = [f"--set=tiers.{t}.eviction={name}" for t in ("gpu", "host", "nvme")]
        sets.append(f"--set=remote.eviction={name}")  # (a plugin's: no mirrored index)
        sets += ["--set=remote.servers=8", "--set=remote.sharding=per_rank"]
        sets += ["--set=remote.capacity=3 GB"]  # small enough to evict
        out[name] = run_cli(path, tmp_path / name, *sets)
    pd.testing.assert_frame_equal(out["lru"], out["python_lru"])
    assert (out["lru"]["tokens_gpu"] > 0).any()  # hits did happen, remote ones too
    assert (out["lru"]["tokens_remote"] > 0).any()


def test_lfu_keeps_the_block_used_most(tmp_path):
    """GPU HBM holds two blocks. Block 1 is used three times (stored, then a hit and its
    refresh), block 2 once; block 3 needs room. LRU evicts block 1 (used longest ago),
    LFU block 2: so the last request, block 1 again, hits under LFU only."""
    rows = [(0, [1]), (1, [1]), (2, [2]), (3, [3]), (4, [1])]
    path = scenario(tmp_path, rows, tiers={"gpu": {"capacity": f"{2.5 * BLOCK:.0f} B"}})
    lru = run_cli(path, tmp_path / "lru")
    lfu = run_cli(path, tmp_path / "lfu", "--set", "tiers.gpu.eviction=lfu")
    assert lru["tokens_gpu"].tolist() == [0, 99, 0, 0, 0]  # one token is always computed
    assert lfu["tokens_gpu"].tolist() == [0, 99, 0, 0, 99]


def test_cost_aware_evicts_the_cheap_leaf_not_the_start_of_a_long_chain(tmp_path):
    """HBM holds 6 blocks: a 5-block chain and a 1-block prompt. A new block needs room.
    LRU evicts the chain's first block (the oldest), which makes the whole chain
    unusable; cost-aware evicts among leaves (the chain's last block at depth 4, the
    short prompt's at depth 0) the one cheapest to recompute: with prefill time growing
    with cached context, the short one. The chain's next request then hits 500 tokens."""
    rows = [(0, [1, 2, 3, 4, 5]), (10, [1001]), (20, [2001]), (30, [1, 2, 3, 4, 5, 3001])]
    timing = {"seconds": [[0.1, 0.2], [1.1, 2.1]]}  # cached context costs time
    path = scenario(
        tmp_path, rows, timing=timing, tiers={"gpu": {"capacity": f"{6.5 * BLOCK:.0f} B"}}
    )
    lru = run_cli(path, tmp_path / "lru")
    cost = run_cli(path, tmp_path / "cost", "--set", "tiers.gpu.eviction=cost_aware")
    assert lru["tokens_gpu"].tolist()[-1] == 0
    assert cost["tokens_gpu"].tolist()[-1] == 500
    assert cost["ttft_s"].iloc[-1] < lru["ttft_s"].iloc[-1]


def test_load_aware_router_follows_the_cached_prefix(tmp_path):
    """Two idle engines. Round robin sends the fourth request (sharing the first one's
    4-block prefix) to engine 1, where nothing is cached; the load-aware router sends it
    where the prefix is (engine 0: no queue there to outweigh 400 cached tokens)."""
    rows = [(0, [1, 2, 3, 4]), (10, [9]), (20, [1, 2, 3, 4, 5]), (30, [1, 2, 3, 4, 6])]
    path = scenario(
        tmp_path,
        rows,
        cluster={"engines": 2, "router": "round_robin"},
        tiers={"gpu": {"capacity": "1 MB"}},
    )
    rr = run_cli(path, tmp_path / "rr")
    la = run_cli(path, tmp_path / "la", "--set", "cluster.router=load_aware")
    assert rr["engine"].tolist() == [0, 1, 0, 1]
    assert rr["tokens_gpu"].tolist() == [0, 0, 400, 0]
    assert la["engine"].tolist() == [0, 0, 0, 0]
    assert la["tokens_gpu"].tolist() == [0, 0, 400, 400]


def test_load_aware_router_weighs_queued_tokens(tmp_path):
    """Eight 10-block prompts arrive at once after a 2-block prefix was cached on engine
    0: the router sends the first of them to engine 0 (the cached tokens win over an
    empty queue elsewhere), then spreads them as the queued tokens grow."""
    burst = [(10, [1, 2, 100 + 20 * i, *range(200 + 20 * i, 207 + 20 * i)]) for i in range(8)]
    rows = [(0, [1, 2]), *burst]
    path = scenario(
        tmp_path,
        rows,
        cluster={"engines": 2, "router": "load_aware"},
        tiers={"gpu": {"capacity": "10 MB"}},
    )
    df = run_cli(path, tmp_path / "o")
    assert df["engine"].iloc[1] == 0
    counts = df["engine"].iloc[1:].value_counts()
    assert set(counts.index) == {0, 1} and abs(counts[0] - counts[1]) <= 2


def test_skip_short_recomputes_short_host_hits_and_restores_long_ones(tmp_path):
    """HBM holds 2 blocks, host everything demoted to it. The third request finds a
    2-block prefix in host: sync restores it, skip_short (at least 4 blocks) recomputes
    it. The fourth finds 4 blocks in host: both restore."""
    rows = [
        (0, [1, 2]),
        (10, [10, 11, 12, 13, 14, 15]),
        (20, [1, 2, 99]),
        (30, [10, 11, 12, 13, 98]),
    ]
    host = {"enabled": True, "capacity": "10 MB", "t0": "10 ms"}
    path = scenario(
        tmp_path, rows, tiers={"gpu": {"capacity": f"{2.5 * BLOCK:.0f} B"}, "host": host}
    )
    sync = run_cli(path, tmp_path / "sync")
    skip = run_cli(path, tmp_path / "skip", "--set", "cluster.load_policy=skip_short")
    assert sync["decision"].tolist()[2:] == ["restore", "restore"]
    assert skip["decision"].tolist()[2:] == ["skipped", "restore"]
    assert sync["tokens_host"].tolist()[2:] == [200, 400]
    assert skip["tokens_host"].tolist()[2:] == [0, 400]


def test_plugin_flag_adds_to_the_scenario_and_names_its_source(tmp_path, capsys):
    """--plugin MODULE on the command line works like plugins: in the file; the module
    name form is importable from the current folder."""
    path = tmp_path / "s.yaml"
    path.write_text(f"name: s\nextends: {SCENARIOS / 'mooncake-sample.yaml'}\n")
    assert main(["validate", str(path), "--set", "tiers.gpu.eviction=lfu"]) == 2
    err = capsys.readouterr().err  # (another test may have loaded examples/lfu.py here)
    assert "unknown eviction policy 'lfu'" in err or "which this scenario does not list" in err
    (tmp_path / "mypolicies.py").write_text((EXAMPLES / "lfu.py").read_text())
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        sys.modules.pop("mypolicies", None)
        rc = main(
            ["validate", str(path), "--plugin", "mypolicies", "--set", "tiers.gpu.eviction=lfu"]
        )
    finally:
        os.chdir(cwd)
        sys.modules.pop("mypolicies", None)
    assert rc == 0, capsys.readouterr().err


# ---- other kinds, through the Python API -------------------------------------------------


def toy_run(tmp_path: Path, rows: list[tuple[float, list[int]]], **sections: Any) -> pd.DataFrame:
    res = api.run(scenario(tmp_path, rows, **sections))
    return res.requests.sort_values("id").reset_index(drop=True)


class LongestFirst(SchedulingPolicy):
    def priority(self, request, engine):
        return -request.prompt_tokens


def test_a_plugin_scheduler_orders_the_queue(tmp_path):
    """Three prompts queue behind a first one; longest first serves 5, 3, then 1 blocks."""
    rows = [(0, [1]), (0.01, [10]), (0.01, [20, 21, 22, 23, 24]), (0.01, [30, 31, 32])]
    with registered("longest_first", LongestFirst):
        fcfs = toy_run(tmp_path, rows)
        mine = toy_run(tmp_path, rows, engine={"scheduler": "longest_first"})
    assert fcfs["finish_s"].rank().tolist() == [1, 2, 3, 4]
    assert mine["finish_s"].rank().tolist() == [1, 4, 2, 3]


def test_a_plugin_admission_policy_and_prefetch_policy(tmp_path):
    """An admission policy that refuses blocks deeper than 1 keeps the second block of
    every prompt out of HBM; a prefetch policy that fetches nothing moves no bytes."""
    from kvsim.plugins import AdmissionPolicy, PrefetchPolicy

    class Shallow(AdmissionPolicy):
        def admit(self, block, tier):
            assert tier.name == "gpu" and block.depth >= 0
            return block.depth < 1

    class Nothing(PrefetchPolicy):
        def fetch_blocks(self, request, sources):
            return 0

    rows = [(0, [1, 2]), (10, [1, 2, 3])]
    with registered("shallow", Shallow):
        df = toy_run(tmp_path, rows, tiers={"gpu": {"capacity": "1 MB", "admission": "shallow"}})
    assert df["tokens_gpu"].tolist() == [0, 100]
    host = {"enabled": True, "capacity": "10 MB", "t0": "10 ms"}
    nvme = {"enabled": True, "capacity": "10 MB", "t0": "10 ms", "write_policy": "write_through"}
    tiers = {"gpu": {"capacity": f"{1.5 * BLOCK:.0f} B"}, "host": host, "nvme": nvme}
    with registered("nothing", Nothing):
        sc = scenario(tmp_path, rows, tiers=tiers, prefetch={"policy": "nothing"})
        res = api.run(sc)
    assert res.summary["tiers"]["host"]["prefetched_bytes_in"] == 0


def test_views_show_the_engines_tiers_and_queues(tmp_path):
    """What a router sees: every enabled tier of every engine (empty ones too), live."""
    from kvsim.plugins import RoutingPolicy

    seen: list[tuple] = []

    class Spy(RoutingPolicy):
        def setup(self, sim):
            self.sim = sim

        def route(self, request, engines):
            e = engines[0]
            seen.append(
                (sorted(e.tiers), e.tiers["gpu"].used, e.queued_tokens, request.prompt_tokens)
            )
            assert self.sim.engines[0].index == 0 and self.sim.block_tokens == 100
            return e

    host = {"enabled": True, "capacity": "10 MB", "t0": "10 ms"}
    rows = [(0, [1, 2]), (10, [1, 2, 3])]
    with registered("spy", Spy):
        toy_run(
            tmp_path,
            rows,
            cluster={"router": "spy"},
            tiers={"gpu": {"capacity": "1 MB"}, "host": host},
        )
    assert seen == [(["gpu", "host"], 0.0, 0, 200), (["gpu", "host"], 2 * BLOCK, 0, 300)]


def test_a_saved_scenario_with_plugins_runs_again_from_anywhere(tmp_path, capsys):
    """kvsim run --out writes scenario.yaml with the plugins' files by absolute path."""
    (tmp_path / "mine.py").write_text((EXAMPLES / "lfu.py").read_text())
    (tmp_path / "s.yaml").write_text(
        f"name: s\nextends: {SCENARIOS / 'mooncake-sample.yaml'}\nplugins: [mine.py]\n"
        "tiers:\n  gpu: {eviction: lfu}\nworkload: {limit: 50}\n"
    )
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        assert main(["run", "s.yaml", "--out", "out", "--quiet"]) == 0
    finally:
        os.chdir(cwd)
    saved = yaml.safe_load((tmp_path / "out" / "scenario.yaml").read_text())
    assert saved["plugins"] == [str(tmp_path / "mine.py")]
    assert main(["validate", str(tmp_path / "out" / "scenario.yaml")]) == 0, capsys.readouterr().err


def test_capacity_over_a_sweep_takes_plugin(tmp_path):
    """capacity --sweep with a grid of plugin names given by --plugin."""
    (tmp_path / "sweep.yaml").write_text(
        yaml.safe_dump(
            {
                "base": str(SCENARIOS / "mooncake-sample.yaml"),
                "grid": {"tiers.gpu.eviction": ["lru", "python_lru"]},
                "set": {"workload.limit": 200},
            }
        )
    )
    args = ["capacity", "--sweep", str(tmp_path / "sweep.yaml"), "--slo", "ttft_p99<=2s"]
    args += ["--reps", "1", "--workers", "1", "--json", "--plugin", str(EXAMPLES / "python_lru.py")]
    assert main(args) == 0


def test_plugin_names_are_listed_with_the_builtin_ones():
    class Mine(EvictionPolicy):
        def victim(self, tier):
            return next(iter(tier))

    with registered("mine", Mine):
        assert names("eviction")[:2] == list(BUILTIN["eviction"])
        assert "mine" in names("eviction")
        with scope([]):  # a scenario with no plugins: only what the caller's code registered
            assert names("eviction") == [*BUILTIN["eviction"], "mine"]
        with scope([str(EXAMPLES / "lfu.py")]):
            assert "python_lru" not in names("eviction")
    assert "mine" not in names("eviction")
    assert set(INTERFACES) == set(BUILTIN)


# ---- sweeps with spawned workers, and Dask ------------------------------------------------


SWEPT = {  # every example, one run each (python_lru: the built-in lru, as a plugin)
    "tiers.gpu.eviction": ["lru", "python_lru", "lfu", "cost_aware", "lru", "lru"],
    "cluster.router": ["cache_affinity"] * 4 + ["load_aware", "cache_affinity"],
    "cluster.load_policy": ["sync"] * 5 + ["skip_short"],
}


def sweep_file(tmp_path: Path) -> Path:
    """A sweep running each example on 300 requests of the shipped sample; the base lists
    one plugin as a file beside it and the others by absolute path (python_lru comes
    from --plugin)."""
    base = tmp_path / "base.yaml"
    others = [str(EXAMPLES / f) for f in ("cost_aware.py", "load_aware_router.py", "skip_short.py")]
    base.write_text(
        f"name: base\nextends: {SCENARIOS / 'mooncake-sample.yaml'}\n"
        f"plugins: [lfu.py, {', '.join(others)}]\nworkload: {{limit: 300}}\n"
    )
    (tmp_path / "lfu.py").write_text((EXAMPLES / "lfu.py").read_text())
    p = tmp_path / "sweep.yaml"
    p.write_text(yaml.safe_dump({"base": "base.yaml", "zip": SWEPT}))
    return p


@pytest.fixture(scope="module")
def in_process(tmp_path_factory) -> pd.DataFrame:
    """The sweep run in this process, one run after another: what workers must match."""
    from kvsim.experiments.sweep import load_sweep, run_sweep

    tmp = tmp_path_factory.mktemp("sweep")
    sweep = load_sweep(sweep_file(tmp), plugins=[str(EXAMPLES / "python_lru.py")])
    table = run_sweep(sweep, tmp / "out", workers=1)
    assert (table["status"] == "ok").all(), table["error"].tolist()
    rows = table.set_index("tiers.gpu.eviction")
    # the plugin LRU is the built-in one; the others changed something
    assert rows.loc["python_lru", "ttft_p99_s"] == table.loc[0, "ttft_p99_s"]
    assert rows.loc["python_lru", "hit_ratio"] == table.loc[0, "hit_ratio"]
    return table


def same_runs(a: pd.DataFrame, b: pd.DataFrame) -> None:
    """The same results (run ids hash the files' paths, which differ per test folder)."""
    pd.testing.assert_frame_equal(a.drop(columns="run_id"), b.drop(columns="run_id"))


def test_sweep_workers_started_with_spawn_load_the_plugins(tmp_path, in_process):
    """Two local workers under the spawn start method (nothing inherited from a fork):
    the scenario's plugins (a .py file beside it, absolute paths) and a --plugin all
    reach them, and every run gives what it gives in the main process."""
    p = sweep_file(tmp_path)
    out = tmp_path / "out"
    code = textwrap.dedent(f"""
        import multiprocessing, sys
        multiprocessing.set_start_method("spawn", force=True)
        from kvsim.cli import main
        sys.exit(main(["sweep", {str(p)!r}, "--out", {str(out)!r}, "--workers", "2",
                       "--quiet", "--plugin", {str(EXAMPLES / "python_lru.py")!r}]))
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    same_runs(pd.read_parquet(out / "results.parquet"), in_process)


def test_dask_workers_load_the_plugins(tmp_path, in_process):
    distributed = pytest.importorskip("dask.distributed")
    p = sweep_file(tmp_path)
    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
    ) as cluster:
        rc = main(
            [
                "sweep",
                str(p),
                "--out",
                str(tmp_path / "dask"),
                "--quiet",
                "--scheduler",
                cluster.scheduler_address,
                "--plugin",
                str(EXAMPLES / "python_lru.py"),
            ]
        )
    assert rc == 0
    same_runs(pd.read_parquet(tmp_path / "dask" / "results.parquet"), in_process)


def test_policies_offered_by_an_installed_package(tmp_path, monkeypatch):
    """The entry-point group kvsim.policies: a package's policy, with no plugins: line."""

    pkg = tmp_path / "kvsim_fake_policies"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(
        (EXAMPLES / "python_lru.py").read_text().replace('@register("python_lru")', "")
    )
    info = tmp_path / "kvsim_fake_policies-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: kvsim-fake-policies\nVersion: 1.0\n"
    )
    (info / "entry_points.txt").write_text(
        "[kvsim.policies]\npackaged_lru = kvsim_fake_policies:PythonLRU\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(loading, "_entry_points_loaded", False)
    try:
        res = api.run(SCENARIOS / "mooncake-sample.yaml", {"tiers.gpu.eviction": "packaged_lru"})
        base = api.run(SCENARIOS / "mooncake-sample.yaml")
        assert res.summary["ttft_p99_s"] == base.summary["ttft_p99_s"]
    finally:
        registry._REGISTRY["eviction"].pop("packaged_lru", None)


# ---- guard rails ---------------------------------------------------------------------------

BAD = """
import math
from kvsim.plugins import (AdmissionPolicy, EvictionPolicy, LoadPolicy, PrefetchPolicy,
                           RoutingPolicy, SchedulingPolicy, register)

@register("ghost")
class Ghost(EvictionPolicy):
    def victim(self, tier):
        return 123456789

@register("crash")
class Crash(EvictionPolicy):
    def victim(self, tier):
        return 1 / 0

@register("nowhere")
class Nowhere(RoutingPolicy):
    def route(self, request, engines):
        return 99

@register("greedy")
class Greedy(LoadPolicy):
    def restore_blocks(self, request, sources, estimate):
        return len(sources) + 1

@register("negative")
class Negative(LoadPolicy):
    def restore_blocks(self, request, sources, estimate):
        return -1

@register("fractional")
class Fractional(LoadPolicy):
    def restore_blocks(self, request, sources, estimate):
        return 0.5

@register("nan_first")
class NanFirst(SchedulingPolicy):
    def priority(self, request, engine):
        return math.nan

@register("admit_one")
class AdmitOne(AdmissionPolicy):
    def admit(self, block, tier):
        return 1

@register("lazy_flag")
class LazyFlag(LoadPolicy):
    blocking = "yes"
    def restore_blocks(self, request, sources, estimate):
        return 0

@register("forgot_return")
class ForgotReturn(AdmissionPolicy):
    def admit(self, block, tier):
        pass

@register("overfetch")
class Overfetch(PrefetchPolicy):
    def fetch_blocks(self, request, sources):
        return len(sources) + 1
"""

RULE_ROWS = [(0, [1, 2]), (10, [10, 11, 12, 13, 14, 15]), (20, [1, 2, 99])]
RULE_TIERS = {
    "gpu": {"capacity": f"{2.5 * BLOCK:.0f} B"},
    "host": {"enabled": True, "capacity": "10 MB", "t0": "10 ms"},
    "nvme": {"enabled": True, "capacity": "10 MB", "t0": "10 ms"},
}

RULES = [
    (
        "tiers.gpu.eviction=ghost",
        "eviction 'ghost' on gpu",
        "victim() broke a rule",
        "not a block resident in gpu",
    ),
    (
        "tiers.gpu.eviction=crash",
        "eviction 'crash' on gpu",
        "victim() raised ZeroDivisionError",
        "",
    ),
    (
        "cluster.router=nowhere",
        "router 'nowhere'",
        "route() broke a rule",
        "engine 99, which is not an engine that is up",
    ),
    (
        "cluster.load_policy=greedy",
        "load_policy 'greedy'",
        "restore_blocks() broke a rule",
        "more blocks than the 2 hit",
    ),
    (
        "cluster.load_policy=negative",
        "load_policy 'negative'",
        "restore_blocks() broke a rule",
        "never negative",
    ),
    (
        "cluster.load_policy=fractional",
        "load_policy 'fractional'",
        "restore_blocks() broke a rule",
        "expected an int",
    ),
    (
        "engine.scheduler=nan_first",
        "scheduler 'nan_first'",
        "priority() broke a rule",
        "finite number",
    ),
    (
        "tiers.host.admission=forgot_return",
        "admission 'forgot_return' on host",
        "admit() broke a rule",
        "True or False",
    ),
    (
        "tiers.host.admission=admit_one",
        "admission 'admit_one' on host",
        "admit() broke a rule",
        "returned 1; expected True or False",
    ),
    (
        "cluster.load_policy=lazy_flag",
        "load_policy 'lazy_flag'",
        "its attribute blocking broke a rule",
        "must be True or False, got 'yes'",
    ),
    (
        "prefetch.policy=overfetch",
        "prefetch 'overfetch'",
        "fetch_blocks() broke a rule",
        "usable prefix",
    ),
]


@pytest.mark.parametrize("setting, who, what, rule", RULES, ids=[r[0] for r in RULES])
def test_a_policy_breaking_a_rule_stops_the_run_naming_it(
    tmp_path, capsys, setting, who, what, rule
):
    (tmp_path / "bad.py").write_text(BAD)
    path = scenario(tmp_path, RULE_ROWS, tiers=RULE_TIERS)
    text = yaml.safe_load(path.read_text())
    text["plugins"] = ["bad.py"]
    path.write_text(yaml.safe_dump(text))
    out = tmp_path / "out"
    assert main(["run", str(path), "--set", setting, "--out", str(out), "--quiet"]) == 2
    err = one_error(capsys.readouterr().err)
    assert f"plugin {tmp_path / 'bad.py'} ({who})" in err, err
    assert what in err and rule in err, err
    assert not out.exists() or not any(out.iterdir())  # nothing left as if complete


@pytest.mark.parametrize(
    "source, message",
    [
        ("import no_such_module_kvsim\n", "cannot import it (ModuleNotFoundError"),
        ("def broken(:\n", "cannot import it (SyntaxError"),
        ("raise RuntimeError('boom')\n", "failed while loading (RuntimeError: boom)"),
        (
            "from kvsim.plugins import EvictionPolicy, register\n"
            "@register('novictim')\nclass NoVictim(EvictionPolicy):\n    pass\n",
            "does not define victim()",
        ),
        (
            "from kvsim.plugins import EvictionPolicy, register\n"
            "@register('lru')\nclass Lru(EvictionPolicy):\n    def victim(self, t): pass\n",
            "eviction 'lru' is a built-in name",
        ),
    ],
    ids=["missing module", "syntax error", "raises on import", "missing method", "builtin name"],
)
def test_a_plugin_that_cannot_load_is_exit_2_naming_it(tmp_path, capsys, source, message):
    bad = tmp_path / "broken_plugin.py"
    bad.write_text(source)
    path = tmp_path / "s.yaml"
    path.write_text(
        f"name: s\nextends: {SCENARIOS / 'mooncake-sample.yaml'}\nplugins: [broken_plugin.py]\n"
    )
    assert main(["run", str(path), "--quiet", "--out", str(tmp_path / "out")]) == 2
    err = one_error(capsys.readouterr().err)
    assert f"plugin {bad}" in err and message in err, err
    assert not (tmp_path / "out").exists()


def test_a_missing_plugin_module_on_the_command_line(capsys):
    assert (
        main(["validate", str(SCENARIOS / "quickstart.yaml"), "--plugin", "no_such_kvsim_x"]) == 2
    )
    err = capsys.readouterr().err
    assert "--plugin no_such_kvsim_x: cannot import it" in err, err


# ---- issue 24: whatever plugin code does, one line; untrusted scenarios --------------------
# (tests/test_fuzz_plugins.py throws every exception and every number at the same guards)

from test_fuzz_plugins import control, kvsim, write_tiny  # noqa: E402


@pytest.fixture
def tiny(tmp_path) -> Path:
    """A scenario naming a plugin policy of every kind (tests/test_fuzz_plugins.py)."""
    return write_tiny(tmp_path / "tiny")


def raising(exc: BaseException):
    def act(*_: Any) -> Any:
        raise exc

    return act


class Custom(BaseException):
    pass


def check_failure(rc: int, err: str, plugin: Path, *fragments: str, log: bool = False) -> None:
    """Exit 2, one error line naming the plugin and the place in its code (``log``: after
    the command's progress lines)."""
    assert rc == 2, err
    line = err.splitlines()[-1] if log else one_error(err + "\n")
    assert "Traceback" not in err and line.startswith("kvsim: error: "), err
    assert f"plugin {plugin}" in line and f"(at {plugin}:" in line, line
    for f in fragments:
        assert f in line, line


@pytest.mark.parametrize(
    "exc",
    [
        SystemExit(0),
        SystemExit(None),
        KeyboardInterrupt(),
        GeneratorExit(),
        StopIteration(),
        Custom("mine"),
        KeyError("x"),
    ],
    ids=lambda e: type(e).__name__,
)
def test_any_exception_out_of_a_plugin_method_is_exit_2_naming_method_and_place(tiny, exc):
    """SystemExit(0) used to end `run` with exit 0 and nothing done; KeyboardInterrupt
    with "interrupted" (130); GeneratorExit and BaseExceptions with a traceback."""
    out = tiny.parent / "out"
    with control("priority", raising(exc)):
        rc, err = kvsim("run", str(tiny), "--quiet", "--out", str(out))
    check_failure(rc, err, tiny.parent / "fz.py", "(scheduler 'fz_sched')", "priority() raised")
    assert f"raised {type(exc).__name__}" in err
    assert not out.exists()


@pytest.mark.parametrize("exc", [SystemExit(0), KeyboardInterrupt()], ids=["exit", "kbd"])
def test_sweep_capacity_and_check_do_not_pass_when_a_plugin_exits(tiny, exc):
    """In worker processes too (a sweep's, started by fork), and the regression gate does
    not pass without comparing anything."""
    folder = tiny.parent
    (folder / "sweep.yaml").write_text("base: s.yaml\nreplications: 2\n")
    (folder / "suite.yaml").write_text(
        "seeds: [0]\nentries:\n  - {scenario: s.yaml, loads: [1.0]}\n"
    )
    with control():
        rc, err = kvsim("baseline", str(folder / "suite.yaml"), "--out", str(folder / "b"))
        assert rc == 0, err
    plugin = folder / "fz.py"
    with control("priority", raising(exc)):
        rc, err = kvsim(
            "sweep",
            str(folder / "sweep.yaml"),
            "--out",
            str(folder / "o"),
            "--workers",
            "2",
            "--quiet",
        )
        assert rc == 2 and f"plugin {plugin} (scheduler 'fz_sched'): priority() raised" in err
        rc, err = kvsim("capacity", str(tiny), "--slo", "ttft_p99<=5s", "--reps", "1")
        check_failure(rc, err, plugin, "priority() raised", log=True)
        rc, err = kvsim(
            "check", str(folder / "suite.yaml"), "--baseline", str(folder / "b"), "--workers", "1"
        )
        check_failure(rc, err, plugin, "priority() raised", log=True)


@pytest.mark.parametrize(
    "code, what",
    [
        ("import sys\nsys.exit(0)\n", "SystemExit: 0"),
        ("raise KeyboardInterrupt\n", "KeyboardInterrupt"),
        ("raise GeneratorExit\n", "GeneratorExit"),
        ("class Mine(BaseException): pass\nraise Mine('x')\n", "Mine: x"),
    ],
    ids=["exit", "kbd", "genexit", "custom"],
)
@pytest.mark.parametrize("command", ["validate", "run", "trace"])
def test_any_exception_while_a_plugin_is_imported(tmp_path, code, what, command):
    (tmp_path / "p.py").write_text("x = 1\n" + code)
    path = tmp_path / "s.yaml"
    path.write_text(f"extends: {SCENARIOS / 'quickstart.yaml'}\nplugins: [p.py]\n")
    argv = ["trace", "stats", str(path)] if command == "trace" else [command, str(path)]
    rc, err = kvsim(*argv)
    check_failure(rc, err, tmp_path / "p.py", "failed while loading", what)
    assert f"(at {tmp_path / 'p.py'}:{1 + code.count(chr(10))})" in err  # its last line


@pytest.mark.parametrize("exc", [SystemExit(0), KeyboardInterrupt(), Custom()], ids=str)
def test_any_exception_while_a_plugin_policy_is_made(tiny, exc):
    with control("__init__", raising(exc)):
        rc, err = kvsim("run", str(tiny), "--quiet")
    check_failure(rc, err, tiny.parent / "fz.py", "(eviction 'fz_evict')", "Evict() raised")


def test_debug_shows_the_plugins_traceback(tiny):
    with control("victim", raising(KeyError("x"))):
        rc, err = kvsim("run", str(tiny), "--quiet", "--debug")
    assert rc == 2
    assert err.startswith("Traceback") and f'File "{tiny.parent / "fz.py"}"' in err, err
    assert err.splitlines()[-1].startswith("kvsim: error: plugin "), err
    with control("victim", raising(KeyError("x"))):  # given before the command too
        rc, err = kvsim("--debug", "run", str(tiny), "--quiet")
    assert rc == 2 and "Traceback" in err


def test_a_real_ctrl_c_still_interrupts_inside_plugin_code(tmp_path):
    """SIGINT while a plugin method runs: exit 130, "interrupted" (the plugin's own
    KeyboardInterrupt is a plugin failure; a signal is not)."""
    import signal
    import time

    path = write_tiny(tmp_path)
    ready = tmp_path / "ready"
    code = textwrap.dedent(f"""
        import sys, time, types, pathlib
        def act(*a):
            pathlib.Path({str(ready)!r}).write_text("x")
            time.sleep(60)
        sys.modules["kvsim_fuzz_control"] = types.SimpleNamespace(
            method="priority", act=act, calls={{}})
        from kvsim.cli import main
        sys.exit(main(["run", {str(path)!r}, "--quiet"]))
    """)
    proc = subprocess.Popen([sys.executable, "-c", code], stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not ready.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert ready.exists(), proc.stderr.read() if proc.poll() is not None else "timeout"
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130 and err.splitlines()[-1] == "kvsim: interrupted", err


@pytest.mark.parametrize(
    "method, value, ok, rule",
    [
        ("priority", 10**400, False, "beyond a float's range"),
        ("priority", Fraction(10**400, 3), False, "beyond a float's range"),
        ("priority", Fraction(1, 3), True, ""),
        ("priority", np.float32(0.5), True, ""),
        ("priority", np.True_, False, "expected a finite number"),
        ("priority", Decimal("1.5"), False, "expected a finite number"),
        ("admit", np.True_, True, ""),
        ("admit", np.False_, True, ""),
        ("admit", 1, False, "expected True or False"),
        ("route", np.int64(0), True, ""),
        ("route", 10**5000, False, "an int of about 5,000 digits"),
        ("restore_blocks", np.int64(0), True, ""),
        ("restore_blocks", np.True_, False, "expected an int"),
        ("fetch_blocks", np.uint8(0), True, ""),
        ("fetch_blocks", -1, False, "never negative"),
        ("victim", "x", False, "a key must be an int"),
    ],
    ids=lambda v: type(v).__name__ if not isinstance(v, str | bool) else str(v),
)
def test_numbers_from_plugins(tiny, method, value, ok, rule):
    """Every numeric answer: ints, floats and NumPy scalars that are finite and in range;
    True/False (NumPy's too) where a boolean is asked; anything else is one line."""
    with control(method, lambda *_: value):
        rc, err = kvsim("run", str(tiny), "--quiet")
    if ok:
        assert rc == 0, err
    else:
        check_failure(rc, err, tiny.parent / "fz.py", f"{method}() broke a rule", rule)


@pytest.mark.parametrize("k", [-1, 99, 0.5, True, None, 10**400])
def test_estimate_refuses_a_block_count_outside_the_hit(tiny, k):
    """estimate(-1) used to answer (a time for restoring "-1 blocks")."""

    def act(estimate):
        with contextlib.suppress(Exception):  # refused even if the plugin catches it
            estimate(k)
        return 0

    with control("restore_blocks", act):
        rc, err = kvsim("run", str(tiny), "--quiet")
    check_failure(rc, err, tiny.parent / "fz.py", "restore_blocks() broke a rule", "estimate(")
    with control("restore_blocks", lambda estimate: int(estimate(np.int64(0)) < 0)):
        assert kvsim("run", str(tiny), "--quiet")[0] == 0


def _special(tmp_path: Path, kind: str) -> Path:
    p = tmp_path / f"{kind}.py"
    if kind == "loop":
        p.symlink_to(p)
    elif kind == "chain":  # a link to a link to a loop
        (tmp_path / "a.py").symlink_to(tmp_path / "b.py")
        (tmp_path / "b.py").symlink_to(tmp_path / "a.py")
        p.symlink_to(tmp_path / "a.py")
    elif kind == "folder":
        p.mkdir()
    elif kind == "fifo":
        os.mkfifo(p)
    elif kind == "unreadable":
        p.write_text("x = 1\n")
        p.chmod(0)
    elif kind == "dangling":
        p.symlink_to(tmp_path / "nowhere.py")
    return p


@pytest.mark.parametrize(
    "kind, reason",
    [
        ("loop", "symlink loop"),
        ("chain", "symlink loop"),
        ("folder", "is a folder"),
        ("fifo", "is a FIFO"),
        ("unreadable", "ermission denied"),
        ("missing", "no such file"),
        ("dangling", "no such file"),
    ],
)
def test_a_plugin_path_that_is_not_a_readable_file_is_one_line(tmp_path, kind, reason):
    if kind == "unreadable" and os.geteuid() == 0:
        pytest.skip("root reads any file")
    p = _special(tmp_path, kind)
    s = tmp_path / "s.yaml"
    s.write_text(f"extends: {SCENARIOS / 'quickstart.yaml'}\nplugins: [{p.name}]\n")
    for argv in (
        ["validate", str(s)],
        ["validate", str(s.with_name("q.yaml")), "--plugin", str(p)],
        ["run", str(s), "--quiet"],
        ["trace", "stats", str(s)],
    ):
        if "q.yaml" in argv[1]:
            Path(argv[1]).write_text(f"extends: {SCENARIOS / 'quickstart.yaml'}\n")
        rc, err = kvsim(*argv)
        assert rc == 2 and "\n" not in err and "Traceback" not in err, (argv, err)
        assert "cannot import it" in err and reason in err, (argv, err)


def test_one_plugin_registering_a_name_twice_is_refused_naming_both_places(tmp_path):
    """It used to keep the last class silently."""
    (tmp_path / "twice.py").write_text(
        "from kvsim.plugins import SchedulingPolicy, register\n"
        "@register('mine')\nclass A(SchedulingPolicy):\n    def priority(self, r, e): return 1\n"
        "@register('mine')\nclass B(SchedulingPolicy):\n    def priority(self, r, e): return 2\n"
    )
    rc, err = kvsim(
        "validate", str(SCENARIOS / "quickstart.yaml"), "--plugin", str(tmp_path / "twice.py")
    )
    assert rc == 2 and "\n" not in err, err
    assert "scheduler 'mine' is registered twice by this plugin" in err, err
    assert f"at {tmp_path / 'twice.py'}:2 and at {tmp_path / 'twice.py'}:5" in err, err


@pytest.fixture
def broken_entry_point(tmp_path, monkeypatch):
    """An installed package whose kvsim.policies entry points fail to load (one exits)."""

    pkg = tmp_path / "kvsim_broken_policies"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("import sys\nsys.exit(0)\n")
    info = tmp_path / "kvsim_broken_policies-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: kvsim-broken\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(
        "[kvsim.policies]\nbroken_lru = kvsim_broken_policies:LRU\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(loading, "_entry_points_loaded", False)
    monkeypatch.setattr(loading, "_entry_point_failures", [])
    return tmp_path


def test_a_broken_entry_point_is_not_blamed_for_a_typo(broken_entry_point):
    qs = str(SCENARIOS / "quickstart.yaml")
    rc, err = kvsim("validate", qs, "--set", "cluster.router=round_robbin")
    assert rc == 2 and "\n" not in err, err
    assert "unknown router 'round_robbin'; choose one of" in err, err
    # the name it offers: then it is the cause
    rc, err = kvsim("validate", qs, "--set", "tiers.gpu.eviction=broken_lru")
    assert rc == 2 and "\n" not in err, err
    assert "comes from entry point broken_lru = kvsim_broken_policies:LRU" in err, err
    assert "SystemExit" in err


EVIL = """
import pathlib
pathlib.Path(__file__).with_name("RAN").write_text("plugin code ran")
from kvsim.plugins import EvictionPolicy, register

@register("evil_lru")
class EvilLRU(EvictionPolicy):
    def victim(self, tier):
        return next(iter(tier))
"""


@pytest.fixture
def untrusted(tmp_path) -> Path:
    """A downloaded scenario whose plugin writes RAN beside itself when imported."""
    (tmp_path / "evil.py").write_text(EVIL)
    (tmp_path / "s.yaml").write_text(
        f"extends: {SCENARIOS / 'quickstart.yaml'}\nplugins: [evil.py]\n"
        "tiers:\n  gpu: {eviction: evil_lru}\nworkload: {requests: 40}\nrun: {warmup: 0 s}\n"
    )
    return tmp_path


def test_commands_say_which_plugin_code_they_import_before_importing_it(untrusted):
    rc, err = kvsim_raw("validate", str(untrusted / "s.yaml"))
    assert rc == 0 and (untrusted / "RAN").exists()
    assert err.splitlines() == [f"kvsim: importing plugin code: {untrusted / 'evil.py'}"], err


def kvsim_raw(*argv: str) -> tuple[int, str]:
    """(exit code, the whole stderr)."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        rc = main(list(argv))
    return rc, err.getvalue()


def test_no_plugins_inspects_an_untrusted_scenario_without_running_its_code(untrusted, capsys):
    s = str(untrusted / "s.yaml")
    assert main(["validate", s, "--no-plugins"]) == 0
    out, err = capsys.readouterr()
    assert f"not imported (--no-plugins): {untrusted / 'evil.py'}" in out, out
    assert "not checked (their plugin code was not run): eviction policy 'evil_lru'" in out
    assert err == ""
    assert main(["trace", "stats", s, "--no-plugins", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["requests"] == 40
    for argv in (
        ["run", s, "--quiet"],
        ["sensitivity", s, "--metric", "ttft_p99_s"],
        ["capacity", s, "--slo", "ttft_p99<=2s"],
    ):
        rc, err = kvsim_raw(*argv, "--no-plugins")
        assert rc == 2 and err.count("\n") == 1, err
        assert (
            "tiers.gpu.eviction: eviction policy 'evil_lru' is not a built-in one: it "
            "needs plugin code, which --no-plugins does not run" in err
        ), err
    # a scenario that lists plugins but names none runs without them, in workers too
    (untrusted / "sweep.yaml").write_text(
        "base: s.yaml\nset: {tiers.gpu.eviction: lru, workload.requests: 20}\nreplications: 2\n"
    )
    rc, err = kvsim_raw(
        "sweep",
        str(untrusted / "sweep.yaml"),
        "--out",
        str(untrusted / "o"),
        "--workers",
        "2",
        "--quiet",
        "--no-plugins",
    )
    assert rc == 0, err
    rc, err = kvsim_raw("run", s, "--set", "tiers.gpu.eviction=lru", "--quiet", "--no-plugins")
    assert rc == 0, err
    assert not (untrusted / "RAN").exists()
    rc, err = kvsim_raw("run", s, "--no-plugins", "--plugin", str(untrusted / "evil.py"))
    assert rc == 2 and "--plugin runs plugin code, --no-plugins runs none" in err, err
    assert not (untrusted / "RAN").exists()
    assert "KVSIM_NO_PLUGINS" not in os.environ  # (restored)


def test_plugin_failures_on_dask_workers_are_one_line(tmp_path):
    """A Dask worker runs plugin code in a thread: its KeyboardInterrupt or SystemExit is a
    failed run naming the plugin, not a dead worker or an interrupted sweep."""
    distributed = pytest.importorskip("dask.distributed")
    path = write_tiny(tmp_path)
    (tmp_path / "quits.py").write_text(
        "import sys\nfrom kvsim.plugins import SchedulingPolicy, register\n"
        "@register('kbd')\nclass K(SchedulingPolicy):\n"
        "    def priority(self, r, e): raise KeyboardInterrupt\n"
        "@register('quits')\nclass Q(SchedulingPolicy):\n"
        "    def priority(self, r, e): sys.exit(0)\n"
    )
    (tmp_path / "sweep.yaml").write_text(
        f"base: {path.name}\nset: {{plugins: [quits.py]}}\n"
        "grid: {engine.scheduler: [kbd, quits]}\n"
    )
    with distributed.LocalCluster(
        n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None
    ) as cluster:
        rc, err = kvsim_raw(
            "sweep",
            str(tmp_path / "sweep.yaml"),
            "--out",
            str(tmp_path / "o"),
            "--quiet",
            "--scheduler",
            cluster.scheduler_address,
        )
    assert rc == 2 and "Traceback" not in err, err
    for what in (
        "(scheduler 'kbd'): priority() raised KeyboardInterrupt (at ",
        "(scheduler 'quits'): priority() raised SystemExit: 0 (at ",
    ):
        assert f"plugin {tmp_path / 'quits.py'} {what}" in err, err
