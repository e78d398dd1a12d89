"""Paired comparisons (issue 28): a sweep's per-seed differences from its reference
configuration (``delta_<metric>``, its interval ``delta_<metric>_lo``/``_hi``), the sweep
file's ``reference:``, the run's ``hit_ratio_lo``/``_hi``, and the paired deltas of ``kvsim capacity
--sweep`` and ``--cheapest``.

The deltas are checked by hand against the rows they come from (exact: they are the
same subtractions), the intervals against :func:`paired_interval` of those rows."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from kvsim import api
from kvsim.cli import main
from kvsim.errors import InputError
from kvsim.experiments.capacity import Capacity, capacity_table
from kvsim.experiments.planner import Layout, paired_deltas
from kvsim.experiments.replicate import PAIRED
from kvsim.experiments.slo import SLO
from kvsim.experiments.sweep import load_sweep, run_sweep
from kvsim.experiments.sweep.tables import PAIRED_METRICS, add_paired, results_table
from kvsim.results.uncertainty import IDENTICAL, paired_interval, ratio_ci

ROOT = Path(__file__).resolve().parents[1]
QUICKSTART = ROOT / "scenarios" / "quickstart.yaml"
SAMPLE = ROOT / "scenarios" / "mooncake-sample.yaml"


def _sweep_file(tmp_path: Path, extra: str = "", *, base: Path = QUICKSTART) -> Path:
    """A tiny sweep: two load policies x 3 seeds, 400 requests each (a trace: its
    first 300)."""
    size = "workload.requests: 400" if base == QUICKSTART else "workload.limit: 300"
    p = tmp_path / "s.yaml"
    p.write_text(
        f"name: tiny\nbase: {base}\n"
        "grid:\n  cluster.load_policy: [sync, async]\n"
        f"set: {{{size}, run.warmup: 0 s}}\n"
        "seeds: [3, 4, 5]\n" + extra,
        encoding="utf-8",
    )
    return p


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> tuple[pd.DataFrame, Path]:
    """The tiny sweep, run once (6 runs, a few seconds)."""
    tmp = tmp_path_factory.mktemp("paired")
    sweep = load_sweep(_sweep_file(tmp))
    table = run_sweep(sweep, tmp / "out")
    return table, tmp / "out"


def test_deltas_are_the_per_seed_differences(tiny: tuple[pd.DataFrame, Path]) -> None:
    """delta_M of an async row is its M minus the sync row's with the same seed; the
    configuration's delta_M_lo/_hi is paired_interval of those rows, the same on each of
    its rows; the reference (sync, the first) has neither."""
    table, _ = tiny
    assert (table["status"] == "ok").all(), table["error"].tolist()
    ref = table[table["cluster.load_policy"] == "sync"].set_index("seed")
    new = table[table["cluster.load_policy"] == "async"].set_index("seed")
    assert list(ref.index) == list(new.index) == [3, 4, 5]
    for m in PAIRED_METRICS:
        want = new[m] - ref[m]
        assert np.array_equal(new[f"delta_{m}"].to_numpy(), want.to_numpy()), m
        iv = paired_interval(new[m].tolist(), ref[m].tolist())
        cis = set(zip(new[f"delta_{m}_lo"], new[f"delta_{m}_hi"], strict=True))
        assert len(cis) == 1, cis
        if iv.note == IDENTICAL:  # (a policy that changes nothing here: lo == hi == mean)
            assert list(cis.pop()) == [iv.mean, iv.mean]
        else:
            assert list(cis.pop()) == pytest.approx([iv.lo, iv.hi], rel=1e-12)
        assert ref[f"delta_{m}"].isna().all() and ref[f"delta_{m}_lo"].isna().all()


def test_tables_keep_the_runs_intervals(tiny: tuple[pd.DataFrame, Path]) -> None:
    """results.csv and results.parquet hold each run's intervals of ttft_p50_s,
    ttft_p99_s and hit_ratio as numbers <value>_lo and <value>_hi that hold the run's own
    value (as the summary holds them: ttft_p50_s_lo, ..., hit_ratio_hi)."""
    _, out = tiny
    for df in (pd.read_csv(out / "results.csv"), pd.read_parquet(out / "results.parquet")):
        assert not {"ttft_p50_ci_s", "ttft_p99_ci_s", "hit_ratio_ci"} & set(df.columns)
        for _, row in df.iterrows():
            for value in ("ttft_p50_s", "ttft_p99_s", "hit_ratio"):
                lo, hi = row[f"{value}_lo"], row[f"{value}_hi"]
                assert 0 <= lo <= row[value] <= hi, (value, lo, row[value], hi)
            assert row["hit_ratio_hi"] <= 1
        assert df["delta_ttft_p99_s_lo"].notna().sum() == 3  # the async rows


def test_same_seed_same_workload_draw_across_configurations(tmp_path: Path) -> None:
    """Seed s of every configuration replays the same workload draw (common random
    numbers): on a trace resampled per seed, the runs of two configurations with one seed
    have identical arrivals and prompts, and two seeds differ."""
    sweep = load_sweep(_sweep_file(tmp_path, base=SAMPLE))
    assert any("workload.resample" in dict(r.fixed) for r in sweep.runs)  # resampled
    by_seed: dict[int, list] = {}
    for r in sweep.runs:
        if r.seed in (3, 4):
            df = api.run(r.base, r.overrides(), r.seed).requests.sort_values("id")
            by_seed.setdefault(r.seed, []).append(df[["arrival_s", "input_tokens"]].to_numpy())
    for seed, (a, b) in by_seed.items():
        assert np.array_equal(a, b), seed
    assert not np.array_equal(by_seed[3][0], by_seed[4][0])


def _fake_rows(sweep, values: dict[str, dict[int, float]]) -> list[dict]:
    """Rows of every run of ``sweep`` with ttft_p99_s from ``values[policy][seed]``."""
    rows = []
    for r in sweep.runs:
        policy = dict(r.params)["cluster.load_policy"]
        v = values[policy].get(r.seed)
        status = "ok" if v is not None else "error"
        rows.append(
            {"run": r.index, "run_id": r.run_id, **dict(r.params), "seed": r.seed,
             "status": status, "error": "", "ttft_p99_s": v if v is not None else math.nan}
        )  # fmt: skip
    return rows


def test_reference_chooses_the_configuration(tmp_path: Path) -> None:
    """`reference: {cluster.load_policy: async}` makes async the reference: sync rows get
    the deltas (by hand: 1.0 - 1.5, 2.0 - 2.25, 4.0 - 3.0), async rows none."""
    sweep = load_sweep(_sweep_file(tmp_path, "reference: {cluster.load_policy: async}\n"))
    assert sweep.reference_index() == 1
    values = {"sync": {3: 1.0, 4: 2.0, 5: 4.0}, "async": {3: 1.5, 4: 2.25, 5: 3.0}}
    df = results_table(sweep, _fake_rows(sweep, values))
    sync = df[df["cluster.load_policy"] == "sync"]
    assert sync["delta_ttft_p99_s"].tolist() == [-0.5, -0.25, 1.0]
    iv = paired_interval([1.0, 2.0, 4.0], [1.5, 2.25, 3.0])
    got = [sync["delta_ttft_p99_s_lo"].iloc[0], sync["delta_ttft_p99_s_hi"].iloc[0]]
    assert got == pytest.approx([iv.lo, iv.hi])
    assert iv.lo < 0 < iv.hi  # (an interval, not clipped at 0)
    assert df[df["cluster.load_policy"] == "async"]["delta_ttft_p99_s"].isna().all()


def test_a_failed_run_and_one_seed_give_no_interval(tmp_path: Path) -> None:
    """A seed whose run failed pairs with nothing; one seed left: a delta, no interval."""
    sweep = load_sweep(_sweep_file(tmp_path))
    values = {"sync": {3: 1.0, 4: 2.0}, "async": {3: 1.5, 5: 3.0}}  # sync 5, async 4 fail
    df = results_table(sweep, _fake_rows(sweep, values))
    a = df[df["cluster.load_policy"] == "async"].set_index("seed")
    assert a.loc[3, "delta_ttft_p99_s"] == 0.5
    assert math.isnan(a.loc[4, "delta_ttft_p99_s"]) and math.isnan(a.loc[5, "delta_ttft_p99_s"])
    assert a["delta_ttft_p99_s_lo"].isna().all() and a["delta_ttft_p99_s_hi"].isna().all()


def test_one_configuration_has_no_deltas(tmp_path: Path) -> None:
    p = tmp_path / "one.yaml"
    p.write_text(f"base: {QUICKSTART}\nreplications: 2\n", encoding="utf-8")
    sweep = load_sweep(p)
    rows = [
        {"run_id": r.run_id, "seed": r.seed, "status": "ok", "ttft_p99_s": 1.0} for r in sweep.runs
    ]
    df = add_paired(pd.DataFrame(rows), sweep)
    assert not [c for c in df.columns if c.startswith("delta_")]


@pytest.mark.parametrize(
    "reference, said",
    [
        ("{cluster.load_policy: recompute}", "matches no configuration"),
        ("{cluster.engines: 2}", "reference.cluster.engines: not a swept field"),
        ("{}", "reference: name the configuration"),
        ("sync", "reference"),
    ],
)
def test_a_bad_reference_exits_2_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], reference: str, said: str
) -> None:
    p = _sweep_file(tmp_path, f"reference: {reference}\n")
    assert main(["sweep", str(p), "--out", str(tmp_path / "o"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert said in err and "Traceback" not in err
    assert not (tmp_path / "o").exists()


def test_a_reference_matching_two_configurations_is_refused(tmp_path: Path) -> None:
    p = tmp_path / "s.yaml"
    p.write_text(
        f"base: {QUICKSTART}\ngrid:\n  cluster.load_policy: [sync, async]\n"
        "  cluster.engines: [1, 2]\nreference: {cluster.load_policy: sync}\n",
        encoding="utf-8",
    )
    with pytest.raises(InputError, match="matches 2 configurations"):
        load_sweep(p)
    # numbers compare as numbers: 2.0 names engines 2
    p.write_text(p.read_text().replace("sync}", "sync, cluster.engines: 2.0}"))
    assert load_sweep(p).reference_index() == 1


def test_the_printed_table_shows_the_paired_difference(tmp_path: Path, capsys) -> None:
    """The sweep's printed table has the p99 interval, `delta p99 [lo, hi]` per
    configuration ("(reference)" for the first) and the line saying it is paired."""
    p = _sweep_file(tmp_path)
    p.write_text(p.read_text().replace("seeds: [3, 4, 5]", "seeds: [3, 4]"))
    assert main(["sweep", str(p), "--out", str(tmp_path / "o"), "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "p99 95% interval" in out and "delta p99 [lo, hi]" in out
    assert "(reference)" in out and PAIRED in out


# ---- hit_ratio_lo / hit_ratio_hi ---------------------------------------------------------


def test_hit_ratio_interval_holds_the_hit_ratio_within_0_and_1() -> None:
    s = api.run(QUICKSTART, {"workload.requests": 600, "run.warmup": "0 s"}).summary
    lo, hi = s["hit_ratio_lo"], s["hit_ratio_hi"]
    assert 0.0 <= lo <= s["hit_ratio"] <= hi <= 1.0 and lo < hi
    few = api.run(QUICKSTART, {"workload.requests": 15, "run.warmup": "0 s"}).summary
    assert few["hit_ratio_lo"] is None and few["hit_ratio_hi"] is None  # under 20 requests


def test_hit_ratio_ci_edges() -> None:
    rng = np.random.default_rng(0)
    prompt = rng.integers(100, 1000, size=50).astype(float)
    assert ratio_ci(prompt, prompt, rng) == (1.0, 1.0)  # every token a hit
    assert ratio_ci(0 * prompt, prompt, rng) == (0.0, 0.0)
    lo, hi = ratio_ci(prompt * (rng.random(50) < 0.5), prompt, rng)
    assert 0.0 <= lo < hi <= 1.0


@pytest.mark.parametrize("blocks", [1, 10])
def test_hit_ratio_ci_covers(blocks: int) -> None:
    """Statistical check: requests whose prompts (100..999 tokens) are all hits or all
    misses with probability 0.6 (true hit ratio 0.6), independently (blocks 1) or in runs
    of 10 requests sharing their outcome (a session's turns; 30 independent runs, which
    exercises the run-by-run sums): over 200 seeded replications of 300 requests, the 95%
    interval holds 0.6 in at least 88% (independent) or 78% (runs: a block bootstrap over
    30 independent units is known to run a little narrow; 0.835 measured) of them; the
    binomial s.d. of the count is about 1.5 points."""
    held = 0
    for i in range(200):
        rng = np.random.default_rng(1000 + i)
        prompt = rng.integers(100, 1000, size=300).astype(float)
        hit = np.repeat(rng.random(300 // blocks) < 0.6, blocks)
        lo, hi = ratio_ci(prompt * hit, prompt, np.random.default_rng(i))
        held += lo <= 0.6 <= hi
    assert held >= (176 if blocks == 1 else 156), held
    assert held <= 199, held  # not a trivially wide interval


# ---- capacity --sweep and --cheapest ---------------------------------------------------

SLO99 = SLO("ttft_p99_s", "<=", 1.0)


def _cap(rates: list[float], **config: object) -> Capacity:
    return Capacity(SLO99, rates, [1.0] * len(rates), 10, dict(config), base_rate=1.0)


def test_capacity_table_paired_deltas() -> None:
    """By hand: (13 - 10, 14 - 12, 15 - 11) = (3, 2, 4), mean 3; its interval is
    paired_interval's; the reference row has none; one configuration: no columns."""
    caps = [_cap([10.0, 12.0, 11.0], x=1), _cap([13.0, 14.0, 15.0], x=2)]
    df = capacity_table(caps)
    assert math.isnan(df.loc[0, "delta_capacity_rps"]) and pd.isna(
        df.loc[0, "delta_capacity_rps_lo"]
    )
    assert df.loc[1, "delta_capacity_rps"] == pytest.approx(3.0)
    iv = paired_interval([13.0, 14.0, 15.0], [10.0, 12.0, 11.0])
    got = [df.loc[1, "delta_capacity_rps_lo"], df.loc[1, "delta_capacity_rps_hi"]]
    assert got == pytest.approx([iv.lo, iv.hi])
    caps[1].reference = True  # a sweep's `reference:` marks another
    df = capacity_table(caps)
    assert df.loc[0, "delta_capacity_rps"] == pytest.approx(-3.0)
    assert "delta_capacity_rps" not in capacity_table([caps[0]]).columns
    one = capacity_table([_cap([10.0], x=1), _cap([12.0], x=2)])
    assert one.loc[1, "delta_capacity_rps"] == 2.0 and pd.isna(one.loc[1, "delta_capacity_rps_lo"])


def _layout(values: list[float], usd: float) -> Layout:
    sums = [
        {"ttft_p99_s": v, "usd_per_hour": usd, "usd_per_million_prompt_tokens": usd / (1 + v)}
        for v in values
    ]
    return Layout({}, sum(values) / len(values), 0.0, True, usd, 0.0, sums)


def test_cheapest_paired_deltas() -> None:
    """Layouts' paired differences from the first: the metric per seed (0.5 - 1.0,
    0.75 - 1.5), the price the same in every replication (IDENTICAL: [d, d])."""
    found = [_layout([1.0, 1.5], 10.0), _layout([0.5, 0.75], 14.0)]
    paired_deltas(found, "ttft_p99_s")
    assert found[0].reference and not found[0].deltas
    d = found[1].deltas
    assert d["ttft_p99_s"].mean == pytest.approx(-0.625)
    assert d["ttft_p99_s"].ok and d["ttft_p99_s"].lo < d["ttft_p99_s"].hi
    assert d["usd_per_hour"].note == IDENTICAL and d["usd_per_hour"].lo == 4.0


@pytest.mark.slow
def test_capacity_sweep_cli_prints_paired_deltas(tmp_path: Path, capsys) -> None:
    """`kvsim capacity --sweep` on two configurations, 2 replications: capacity.csv has
    delta_capacity_rps(_lo, _hi) and the output says the comparison is paired."""
    p = tmp_path / "c.yaml"
    p.write_text(
        f"base: {QUICKSTART}\ngrid:\n  cluster.load_policy: [sync, async]\n"
        "set: {workload.requests: 150, run.warmup: 0 s}\n",
        encoding="utf-8",
    )
    args = ["capacity", "--sweep", str(p), "--slo", "ttft_p99<=1s", "--reps", "2"]
    assert main([*args, "--tol", "0.3", "--out", str(tmp_path / "o")]) == 0
    out = capsys.readouterr().out
    assert "(reference)" in out and PAIRED in out and "vs the reference" in out
    df = pd.read_csv(tmp_path / "o" / "capacity.csv")
    assert pd.isna(df.loc[0, "delta_capacity_rps_lo"])
    lo, hi = df.loc[1, "delta_capacity_rps_lo"], df.loc[1, "delta_capacity_rps_hi"]
    assert lo <= df.loc[1, "delta_capacity_rps"] <= hi
