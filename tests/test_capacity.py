"""SLO capacity search: a scenario whose answer theory knows (M/D/1), and the plumbing."""

import json
import textwrap

import pytest

from kvsim.cli import main
from kvsim.errors import InputError
from kvsim.experiments.slo import SLO, parse_slo

from conftest import SCENARIOS

D = 0.31  # t(16384, 0) of the default profile

MD1 = """
name: md1
seed: 0
cluster: {engines: 1, load_policy: recompute}
tiers: {gpu: {capacity: 0 GB}, host: {enabled: false}, nvme: {enabled: false}}
remote: {enabled: false}
workload:
  kind: synthetic
  requests: 10000
  arrivals: {process: poisson, rate: 1/s}
  prompt_tokens: {dist: fixed, value: 16384}
  output_tokens: {dist: fixed, value: 1}
"""


@pytest.mark.slow
def test_capacity_matches_md1_theory_within_5_percent(tmp_path, capsys):
    """SLO: mean queue wait <= 0.62 s. Pollaczek-Khinchine, Wq = rho D / (2 (1 - rho)),
    gives rho = 0.8, i.e. 0.8 / 0.31 = 2.581 requests/s. Tolerance 5% on the mean of 3
    replications of 10,000 requests each (bisection to 2%)."""
    p = tmp_path / "md1.yaml"
    p.write_text(MD1)
    assert (
        main(["capacity", str(p), "--slo", "queue_wait_mean<=0.62s", "--reps", "3", "--json"]) == 0
    )
    row = json.loads(capsys.readouterr().out)[0]
    theory = 0.8 / D
    assert row["capacity_rps"] == pytest.approx(theory, rel=0.05)
    assert row["replications"] == 3
    assert row["capacity_rps_lo"] < row["capacity_rps"] < row["capacity_rps_hi"]


def test_slo_parsing():
    assert parse_slo("ttft_p99<=2s") == SLO("ttft_p99_s", "<=", 2.0)
    assert parse_slo("ttft_p99_s < 500 ms") == SLO("ttft_p99_s", "<", 0.5)
    assert parse_slo("gpu_busy_frac>=0.5") == SLO("gpu_busy_frac", ">=", 0.5)
    for bad, fragment in [
        ("p99<=2s", "unknown metric"),
        ("ttft_p99=2s", "METRIC<=VALUE"),
        ("ttft_p99<=2 parsecs", "duration"),
        ("scenario<=1", "unknown"),
    ]:
        with pytest.raises(InputError, match=fragment):
            parse_slo(bad)
    assert SLO("ttft_p99_s", "<=", 2.0).met({"ttft_p99_s": 1.5})
    assert not SLO("ttft_p99_s", "<=", 2.0).met({"ttft_p99_s": float("nan")})


def test_warm_up_and_time_limit_shrink_with_the_load():
    # at 8x the load the run is 8x shorter: a fixed 120 s warm-up would swallow it all
    from kvsim.api import load
    from kvsim.experiments.replicate import load_overrides

    # (single-turn requests: multi-turn sessions keep the span and scale the requests,
    # tests/test_central_nvme.py)
    sc = load(SCENARIOS / "quickstart.yaml", {"run.max_time": "800 s", "workload.sessions": None})
    o = load_overrides(sc, 8.0)
    assert o["workload.arrivals.rate"] == "16.0/s"
    assert load(sc, o).run.warmup == pytest.approx(15.0)
    assert load(sc, o).run.max_time == pytest.approx(100.0)


def test_readme_capacity_example_on_the_quickstart(capsys):
    # the README's first capacity command, with fewer requests and one replication
    args = ["capacity", str(SCENARIOS / "quickstart.yaml"), "--slo", "ttft_p99<=1s"]
    args += ["--reps", "1", "--set", "workload.requests=800", "--json"]
    assert main(args) == 0
    row = json.loads(capsys.readouterr().out)[0]
    assert row["capacity_rps"] > 0 and row["factor"] > 1


def test_capacity_over_a_sweep_writes_a_table_and_bars(tmp_path, capsys):
    base = tmp_path / "md1.yaml"
    base.write_text(MD1.replace("requests: 10000", "requests: 1500"))
    sweep = tmp_path / "s.yaml"
    sweep.write_text(
        textwrap.dedent(f"""
        base: {base}
        grid:
          timing.scale: [1.0, 0.5]
    """)
    )
    out = tmp_path / "cap"
    assert (
        main(
            [
                "capacity",
                "--sweep",
                str(sweep),
                "--slo",
                "ttft_p99<=3s",
                "--reps",
                "1",
                "--tol",
                "0.05",
                "--out",
                str(out),
                "--workers",
                "2",
            ]
        )
        == 0
    )
    text = capsys.readouterr().out
    assert "timing.scale=1.0" in text and "timing.scale=0.5" in text
    import pandas as pd

    df = pd.read_csv(out / "capacity.csv")
    # half the prefill time, about twice the capacity
    assert df["capacity_rps"].iloc[1] / df["capacity_rps"].iloc[0] == pytest.approx(2, rel=0.2)
    assert (out / "capacity.png").stat().st_size > 5000


def test_capacity_mistakes(tmp_path, capsys):
    q = str(SCENARIOS / "quickstart.yaml")
    assert main(["capacity", q, "--slo", "latency<=2s"]) == 2
    assert "unknown metric" in capsys.readouterr().err
    assert main(["capacity", "--slo", "ttft_p99<=2s"]) == 2
    assert "scenario or --sweep" in capsys.readouterr().err
    p = tmp_path / "md1.yaml"
    p.write_text(MD1.replace("requests: 10000", "requests: 200"))
    assert main(["capacity", str(p), "--slo", "ttft_p99<=1ms", "--reps", "1"]) == 2
    assert "fails even at" in capsys.readouterr().err
