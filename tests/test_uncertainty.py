"""How sure a run's numbers are: intervals on TTFT percentiles, trace resampling, the
automatic warm-up, and what sweeps and capacity searches do with them."""

from __future__ import annotations

import itertools
import math
import subprocess
import sys

import numpy as np
import pytest

from kvsim import api
from kvsim.experiments.replicate import replication_overrides
from kvsim.experiments.sweep import load_sweep
from kvsim.results.uncertainty import (
    block_length,
    mean_interval,
    mser5,
    percentile_ci,
    percentile_cis,
)
from kvsim.workload import open_workload
from kvsim.workload.request import Request
from kvsim.workload.resample import block_resample

from conftest import MD1_SERVICE, ROOT, SCENARIOS, md1, req, toy

# ---- the pure functions ---------------------------------------------------------------


def test_mser5_cuts_a_decaying_start():
    """A series that starts at 10 and decays linearly to 1 over 100 observations, then
    stays at 1 (noise 0.1): MSER-5 cuts the ramp, to within two batches."""
    rng = np.random.default_rng(0)
    x = np.r_[np.linspace(10, 1, 100), np.ones(900)] + rng.normal(0, 0.1, 1000)
    assert 90 <= mser5(x) <= 110
    assert mser5(np.ones(1000) + rng.normal(0, 0.1, 1000)) <= 50  # nothing to cut
    assert mser5(np.ones(10)) == 0  # too short to tell


def test_block_length_follows_the_correlation():
    """Independent values need no blocks; an AR(1) series with coefficient 0.9
    (correlation time ~10) gets blocks of tens."""
    rng = np.random.default_rng(1)
    assert block_length(rng.normal(size=5000)) <= 3
    e = rng.normal(size=5000)
    ar = np.empty(5000)
    ar[0] = e[0]
    for i in range(1, 5000):
        ar[i] = 0.9 * ar[i - 1] + e[i]
    assert 10 <= block_length(ar) <= 200


def test_percentile_ci_covers_the_true_median_of_independent_values():
    """Exponential(1) samples of 2,000: the 95% interval holds ln 2 in 180 to 200 of 200
    seeded samples (binomial: 95% gives 190 +- 3 s.d. of 3.1)."""
    rng = np.random.default_rng(2)
    hits = 0
    for i in range(200):
        lo, hi = percentile_ci(rng.exponential(1.0, 2000), 50, np.random.default_rng(i))
        hits += lo <= math.log(2) <= hi
    assert 180 <= hits <= 200


def test_percentile_ci_edge_cases():
    assert all(math.isnan(x) for x in percentile_ci(np.ones(5), 50, np.random.default_rng()))
    assert percentile_ci(np.full(100, 0.3), 99, np.random.default_rng()) == (0.3, 0.3)


# ---- M/D/1: a known median -----------------------------------------------------------

D = MD1_SERVICE


def md1_wait_cdf(t: float, lam: float) -> float:
    """P(wait <= t) in M/D/1 with service D (Erlang's formula)."""
    s = 0.0
    for k in range(int(t // D) + 1):
        x = lam * (k * D - t)
        s += x**k / math.factorial(k) * math.exp(-x)
    return (1 - lam * D) * s


def md1_median_ttft(lam: float) -> float:
    lo, hi = 0.0, 100 * D
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if md1_wait_cdf(mid, lam) < 0.5 else (lo, mid)
    return hi + D


@pytest.mark.slow
def test_md1_median_falls_inside_its_interval_about_95_percent_of_the_time():
    """One serial engine, Poisson arrivals at rho = 0.6, every prompt served in exactly
    D = 0.31 s (conftest.md1, as tests/test_theory.py): the true median TTFT is D plus
    the median M/D/1 wait (0.4253 s). 100 seeded runs of 2,000 requests, warm-up auto:
    the reported ttft_p50_s_lo .. ttft_p50_s_hi holds it in 88 to 100 of them (about 95%;
    binomial s.d. 2.2, so 88 is 3 s.d. below). The development machine measured 95 of 100."""
    lam = 0.6 / D
    true = md1_median_ttft(lam)
    assert true == pytest.approx(0.42529, abs=1e-4)
    hits = 0
    for seed in range(100):
        sc = md1(seed, lam, 2000, "auto")
        s = api.run(sc).summary
        lo, hi = s["ttft_p50_s_lo"], s["ttft_p50_s_hi"]
        hits += lo <= true <= hi
    assert 88 <= hits <= 100, f"{hits} of 100 intervals hold the true median"


# ---- the automatic warm-up ---------------------------------------------------------


def test_auto_warmup_cuts_the_cache_filling_transient():
    """600 requests every 2 s, each one of 100 prompts (1,000 tokens) in turn, on an empty
    GPU tier that holds them all: the first 100 compute everything (1.099 s), the rest
    hit (0.1 s). MSER-5 on the hit fraction cuts exactly the first 100."""
    sc = toy(tiers={"gpu": {"capacity": "1 GB"}}, run={"warmup": "auto"})
    reqs = [req(i, 2.0 * i, 1000, range(10 * (i % 100), 10 * (i % 100) + 10)) for i in range(600)]
    s = api.run(sc, requests=reqs).summary
    assert s["warmup_s"] == 200.0
    assert s["requests_warmup"] == 100
    assert s["requests"] == 500
    assert s["hit_ratio"] == pytest.approx(0.999)


def test_a_fixed_warmup_is_reported_as_it_is():
    """Arrivals every second from 1 s: two of them before 3 s."""
    sc = toy(run={"warmup": "3 s"}, workload={"requests": 10})
    s = api.run(sc).summary
    assert s["warmup_s"] == 3.0
    assert s["requests_warmup"] == 2


# ---- traces: resampled replications ------------------------------------------------


def sample_trace(**overrides):
    return api.load(SCENARIOS / "mooncake-sample.yaml", {"workload.limit": 300, **overrides})


def test_block_resample_keeps_the_count_order_and_salts_repeats():
    reqs = [Request(i, float(i), 100, 1, (i % 7, 100 + i)) for i in range(400)]
    out = list(block_resample(reqs, np.random.default_rng(0), windows=40))
    assert len(out) == 400
    assert [r.id for r in out] == list(range(400))
    assert all(a.arrival <= b.arrival for a, b in itertools.pairwise(out))
    seen = {r.hash_ids for r in reqs}
    # 40 windows drawn with replacement: some are repeats, whose prompts get new ids
    assert 0 < sum(r.hash_ids not in seen for r in out) < 400


def test_a_trace_replay_with_three_replications_has_a_non_zero_interval():
    """Trace replications used to be identical (no random numbers: '+- 0'). With
    replications, resample: auto becomes sessions, one bootstrap draw per seed."""
    sc = sample_trace()
    extra = replication_overrides(sc, 3)
    assert extra == {"workload.resample": "sessions"}
    assert replication_overrides(sc, 1) == {}
    p99 = [api.run(sc, extra, seed).summary["ttft_p99_s"] for seed in (0, 1, 2)]
    assert len(set(p99)) == 3
    assert mean_interval(p99).half > 0
    # the same seed draws the same resample (determinism)
    a = [r.arrival for r in open_workload(api.load(sc, extra).workload, 5)]
    b = [r.arrival for r in open_workload(api.load(sc, extra).workload, 5)]
    assert a == b
    # a single run replays the trace as it is, and still reports intervals
    s = api.run(sc).summary
    lo, hi = s["ttft_p99_s_lo"], s["ttft_p99_s_hi"]
    assert lo < hi
    assert lo <= s["ttft_p99_s"] <= hi


def test_resample_none_keeps_replications_identical_and_capacity_says_so():
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "kvsim",
            "capacity",
            str(SCENARIOS / "mooncake-sample.yaml"),
            "--slo",
            "ttft_p99<=2s",
            "--reps",
            "2",
            "--tol",
            "0.2",
            "--set",
            "workload.limit=200",
            "--set",
            "workload.resample=none",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr
    assert "replications identical: no interval" in out.stdout
    assert "±" not in out.stdout


# ---- sweeps and capacity scale the time windows with the load ------------------------


def test_a_swept_load_shrinks_an_explicit_warmup_as_capacity_does(tmp_path):
    (tmp_path / "s.yaml").write_text(
        f"base: {SCENARIOS / 'mooncake-sample.yaml'}\n"
        "grid:\n  workload.time_scale: [1.0, 0.5]\n"
        "set:\n  run.warmup: 20 s\n  run.max_time: 400 s\n"
    )
    runs = load_sweep(tmp_path / "s.yaml").runs
    fixed = [dict(r.fixed) for r in runs]
    assert fixed[0]["run.warmup"] == "20 s"  # the sweep's own set wins
    # without the set, the base's windows scale with the load
    (tmp_path / "t.yaml").write_text(
        f"base: {SCENARIOS / 'quickstart.yaml'}\n"
        "grid:\n  workload.arrivals.rate: [1/s, 4/s]\n"
        "replications: 2\n"
    )
    base = api.load(SCENARIOS / "quickstart.yaml")
    runs = load_sweep(tmp_path / "t.yaml").runs
    warm = {dict(r.params)["workload.arrivals.rate"]: dict(r.fixed)["run.warmup"] for r in runs}
    rate = base.workload.arrivals.rate
    assert float(warm["4/s"].split()[0]) == pytest.approx(base.run.warmup * rate / 4)
    assert float(warm["1/s"].split()[0]) == pytest.approx(base.run.warmup * rate / 1)


def test_capacity_refuses_an_slo_that_fails_at_vanishing_load_at_once():
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "kvsim",
            "capacity",
            str(SCENARIOS / "quickstart.yaml"),
            "--slo",
            "ttft_p99<=10ms",
            "--reps",
            "1",
            "--set",
            "workload.requests=300",
            "--set",
            "run.warmup=auto",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert out.returncode == 2
    err = out.stderr.strip().splitlines()[-1]
    assert "fails even at vanishing load" in err
    assert "compute dominates" in err


def test_a_large_run_gets_a_normal_interval_from_fewer_resamples():
    """Past 200,000 values: 40 resamples, estimate +- 1.96 s.d. On n = 300,000
    exponential(1) values the half-width matches the sample quantile's asymptotic
    standard error, sqrt(p (1 - p) / n) / f(x_p), times 1.96: 0.0036 for the median and
    0.0356 for p99. Tolerance 35% (40 resamples estimate a s.d. to about 11%). The
    interval is widened to hold the order-statistic interval, so its middle may move off
    the estimate by a little (at most a third of a standard error here)."""
    n = 300_000
    v = np.random.default_rng(3).exponential(1.0, n)
    cis = percentile_cis(v, (50, 99), np.random.default_rng(4))
    for q in (50, 99):
        p = q / 100
        se = math.sqrt(p * (1 - p) / n) / (1 - p)  # density of exp(1) at x_p is 1 - p
        lo, hi = cis[q]
        # about symmetric: widened at most to the order-statistic interval, of the same size
        assert lo < np.percentile(v, q) < hi
        assert (lo + hi) / 2 == pytest.approx(np.percentile(v, q), abs=0.3 * se)
        assert (hi - lo) / 2 == pytest.approx(1.96 * se, rel=0.35)
