"""The command line as a user types it: outputs, formats, listings, trace tools."""

import json

import pandas as pd

from kvsim.cli import main
from kvsim.results.records import COLUMN_NAMES

from conftest import SCENARIOS

KEYS = {
    "requests",
    "duration_s",
    "ttft_mean_s",
    "ttft_p50_s",
    "ttft_p90_s",
    "ttft_p99_s",
    "queue_wait_p99_s",
    "gpu_busy_frac",
    "prompt_tokens_per_s",
    "hit_ratio",
    "token_source_frac",
    "tier_read_bytes",
    "scenario",
    "seed",
    "kvsim_version",
}


def test_run_prints_a_table_and_writes_outputs(tmp_path, capsys):
    out = tmp_path / "o"
    assert (
        main(
            [
                "run",
                str(SCENARIOS / "quickstart.yaml"),
                "--quiet",
                "--out",
                str(out),
                "--set",
                "workload.requests=300",
                "--set",
                "run.warmup=0s",
            ]
        )
        == 0
    )
    text = capsys.readouterr().out
    for label in ("TTFT", "p99", "GPU busy", "hit ratio", "tokens by source"):
        assert label in text
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary) >= KEYS
    assert set(summary["token_source_frac"]) == {"gpu", "host", "nvme", "remote", "peer", "compute"}
    df = pd.read_parquet(out / "requests.parquet")
    assert list(df.columns) == list(COLUMN_NAMES) and len(df) == 300
    assert (out / "scenario.yaml").exists()
    assert not list(out.glob(".*tmp*"))


def test_csv_format_and_json_summary(tmp_path, capsys):
    out = tmp_path / "o"
    assert (
        main(
            [
                "run",
                str(SCENARIOS / "azure-sample.yaml"),
                "--quiet",
                "--json",
                "--format",
                "csv",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    s = json.loads(capsys.readouterr().out)
    assert s["hit_ratio"] == 0.0
    assert len(pd.read_csv(out / "requests.csv")) == s["requests"] == 300


def test_seed_flag_overrides_the_scenario(tmp_path, capsys):
    assert (
        main(
            [
                "run",
                str(SCENARIOS / "quickstart.yaml"),
                "--quiet",
                "--json",
                "--seed",
                "7",
                "--set",
                "workload.requests=100",
                "--set",
                "run.warmup=0s",
            ]
        )
        == 0
    )
    assert json.loads(capsys.readouterr().out)["seed"] == 7


def test_profiles_listing(capsys):
    assert main(["profiles"]) == 0
    text = capsys.readouterr().out
    assert "b300-pcp8-glm5" in text and "(default)" in text
    assert main(["profiles", "--json"]) == 0
    names = {p["name"] for p in json.loads(capsys.readouterr().out)}
    assert {"b300-pcp8-glm5", "h200-tp8-glm5", "h100-tp8-llama2-70b"} <= names


def test_validate(capsys):
    assert main(["validate", str(SCENARIOS / "quickstart.yaml")]) == 0
    assert "ok:" in capsys.readouterr().out


def test_trace_generate_then_stats_round_trip(tmp_path, capsys):
    out = tmp_path / "gen.jsonl"
    assert (
        main(
            [
                "trace",
                "generate",
                str(SCENARIOS / "quickstart.yaml"),
                str(out),
                "--set",
                "workload.requests=120",
            ]
        )
        == 0
    )
    assert main(["trace", "stats", str(out), "--json"]) == 0
    from_file = json.loads(capsys.readouterr().out)
    assert main(["trace", "stats", str(SCENARIOS / "quickstart.yaml"), "--json"]) == 0
    assert from_file["requests"] == 120
    assert main(["trace", "stats", str(out)]) == 0
    assert "prefix reuse" in capsys.readouterr().out


def test_trace_stats_on_unknown_format(tmp_path, capsys):
    p = tmp_path / "x.txt"
    p.write_text("hello")
    assert main(["trace", "stats", str(p)]) == 2
    assert "unknown trace format" in capsys.readouterr().err
