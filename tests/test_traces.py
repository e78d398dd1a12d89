"""Trace readers on the real public traces (skipped when ../shared/traces is absent) and on
the shipped samples; figures checked against each trace's SOURCE.md."""

import pytest

from kvsim import api
from kvsim.workload.azure import read_azure
from kvsim.workload.mooncake import read_mooncake
from kvsim.workload.stats import trace_stats

from conftest import ROOT, SCENARIOS, shared_trace


def test_mooncake_conversation_trace_stats():
    st = trace_stats(read_mooncake(shared_trace("mooncake", "conversation_trace.jsonl")), 512)
    assert st["requests"] == 12031
    assert st["mean_input_tokens"] == pytest.approx(12035.06, abs=0.01)
    assert st["duration_s"] == pytest.approx(3536.999)
    assert 0.3 < st["prefix_reuse_ratio"] < 0.45


@pytest.mark.parametrize(
    ("name", "rows"), [("mooncake_trace_1000.jsonl", 1000), ("synthetic_trace.jsonl", 3993)]
)
def test_other_mooncake_traces_read(name, rows):
    assert sum(1 for _ in read_mooncake(shared_trace("mooncake", name))) == rows


@pytest.mark.parametrize(
    ("name", "rows", "duration", "mean_in"),
    [
        ("AzureLLMInferenceTrace_code.csv", 8819, 3436, 2048),
        ("AzureLLMInferenceTrace_conv.csv", 19366, 3502, 1155),
    ],
)
def test_azure_traces(name, rows, duration, mean_in):
    st = trace_stats(read_azure(shared_trace("azure_llm_2023", name)), 512)
    assert st["requests"] == rows
    assert st["duration_s"] == pytest.approx(duration, abs=1)
    assert st["mean_input_tokens"] == pytest.approx(mean_in, abs=1)
    assert st["prefix_reuse_ratio"] == 0.0


def test_conversation_replay_all_requests_eight_engines_four_tiers():
    trace = shared_trace("mooncake", "conversation_trace.jsonl")
    res = api.run(SCENARIOS / "mooncake-conversation.yaml", {"workload.path": str(trace)})
    s = res.summary
    assert s["requests"] + s["requests_warmup"] == 12031 and s["engines"] == 8
    assert 0 < s["requests_warmup"] < 1200  # warm-up auto: a short transient, cut
    assert set(s["tiers"]) == {"gpu", "host", "nvme", "remote"}
    assert res.requests["engine"].nunique() == 8


def test_bucket_spread_spreads_shared_timestamps():
    trace = shared_trace("mooncake", "conversation_trace.jsonl")
    plain = [r.arrival for r in read_mooncake(trace)][:200]
    spread = [r.arrival for r in read_mooncake(trace, bucket_spread=3.0)][:200]
    assert len(set(plain)) <= 30 and len(set(spread)) == 200
    assert spread == sorted(spread)
    assert all(0 <= s - p < 3.0 for s, p in zip(spread, plain, strict=True))


def test_shipped_samples_read_and_reuse():
    chat = trace_stats(read_mooncake(ROOT / "traces" / "sample_chat.jsonl"), 512)
    assert chat["requests"] == 800 and chat["prefix_reuse_ratio"] > 0.5
    az = trace_stats(read_azure(ROOT / "traces" / "sample_azure.csv"), 512)
    assert az["requests"] == 300 and az["prefix_reuse_ratio"] == 0.0


def test_window_time_scale_and_limit():
    path = ROOT / "traces" / "sample_chat.jsonl"
    res = api.run(
        SCENARIOS / "mooncake-sample.yaml",
        [
            "workload.window.start=100 s",
            "workload.window.end=400 s",
            "workload.time_scale=0.5",
            "workload.limit=50",
        ],
    )
    df = res.requests
    src = [r for r in read_mooncake(path) if 100 <= r.arrival < 400][:50]
    assert len(df) == 50
    assert df["id"].tolist() == [r.id for r in src]
    assert df["arrival_s"].tolist() == pytest.approx([(r.arrival - 100) * 0.5 for r in src])
