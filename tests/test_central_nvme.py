"""Sessions per GPU (``kvsim capacity`` on session workloads) and the central-NVMe study
(``kvsim reproduce central-nvme``)."""

import json
import math

import pytest

from kvsim import api
from kvsim.cli import main
from kvsim.experiments.capacity import (
    mean_turns,
    parse_slo,
    search,
    session_lifetime,
)
from kvsim.experiments.replicate import load_overrides

from conftest import ROOT

CN = ROOT / "scenarios" / "validation" / "central-nvme"

# constant session arrivals, three turns each, 10 s mean think time, short fixed prompts,
# two engines of the default profile's 8 GPUs: 16 GPUs
TINY = """
name: tiny-sessions
seed: 3
cluster: {engines: 2, router: round_robin, load_policy: recompute}
tiers: {host: {enabled: false}, nvme: {enabled: false}}
remote: {enabled: false}
run: {warmup: 40 s}
workload:
  kind: synthetic
  requests: 1500
  arrivals: {process: constant, rate: 0.5/s}
  sessions: {turns: {dist: fixed, value: 3}, think_time: 10 s}
  prompt_tokens: {dist: fixed, value: 1000}
  output_tokens: {dist: fixed, value: 10}
"""


def _tiny(tmp_path, text=TINY):
    p = tmp_path / "tiny.yaml"
    p.write_text(text)
    return p


def test_mean_turns_by_hand(tmp_path):
    def turns(dist):
        return mean_turns(api.load(_tiny(tmp_path), {"workload.sessions.turns": dist}))

    assert turns({"dist": "fixed", "value": 3}) == 3.0
    assert turns({"dist": "uniform", "low": 2, "high": 5}) == 3.5  # (2+3+4+5)/4
    # choice 2 (w 1) or 6 (w 3): (2 + 18) / 4 = 5
    assert turns({"dist": "choice", "values": [2, 6], "weights": [1, 3]}) == 5.0
    # geometric mean 4, clipped at requests = 1500: (1 - 0.75^1500) / 0.25 = 4 (to 1e-12)
    assert turns({"dist": "geometric", "mean": 4}) == pytest.approx(4.0, rel=1e-12)
    # lognormal: a fixed-seed sample; median 3, sigma 0 draws 3 every time
    assert turns({"dist": "lognormal", "median": 3, "sigma": 0}) == 3.0
    # a draw is clipped at requests (here 2): fixed 3 -> 2
    sc = api.load(_tiny(tmp_path), {"workload.requests": 2})
    assert mean_turns(sc) == 2.0
    assert mean_turns(api.load(_tiny(tmp_path), {"workload.sessions": None})) is None


def test_sessions_per_gpu_by_hand_and_by_littles_law(tmp_path):
    """lambda = 0.5 sessions/s (constant arrivals); W = (3 - 1) turns' gaps x 10 s + the
    mean TTFT of a session's last turn; L = lambda W; per GPU: L / (2 engines x 8 GPUs).
    Then the same L measured directly: the time-average of sessions alive (first arrival
    to last first token) over the measured window, within 10% (exponential think times:
    the mean of ~1,000 gaps of 10 s is within ~6% at 95%)."""
    sc = api.load(_tiny(tmp_path))
    res = api.run(sc)
    st = session_lifetime(sc, res.requests)
    df = res.requests
    m = df[~df["warmup"]]
    last = m.loc[m.groupby("session")["arrival_s"].idxmax()]
    ttft = float(last["ttft_s"].mean())
    assert 0 < ttft < 1  # a 1000-3000-token prompt alone on an idle engine
    assert st.rate == 0.5
    assert st.lifetime == pytest.approx(2 * 10.0 + ttft, rel=1e-12)
    assert st.per_gpu == pytest.approx(0.5 * (20.0 + ttft) / 16, rel=1e-12)
    # Little's law, measured: sessions whose three turns all arrived, alive in [a, b]
    g = df.groupby("session")
    full = g.size() == 3
    start = g["arrival_s"].min()[full]
    end = g["finish_s"].max()[full]
    a, b = 60.0, float(start.max()) - 60.0  # away from the ramp-up and the cut at the end
    alive = (end.clip(upper=b) - start.clip(lower=a)).clip(lower=0).sum() / (b - a)
    assert alive / 16 == pytest.approx(st.per_gpu, rel=0.10)


def test_capacity_reports_sessions_per_gpu(tmp_path, capsys):
    # 16k-token turns (~0.3 s each alone): the capacity is a few times the given load
    text = TINY.replace("requests: 1500", "requests: 400").replace("value: 1000", "value: 16000")
    p = _tiny(tmp_path, text)
    args = ["capacity", str(p), "--slo", "ttft_p95<=3s", "--reps", "2", "--tol", "0.2"]
    assert main([*args, "--json", "--out", str(tmp_path / "cap")]) == 0
    row = json.loads(capsys.readouterr().out)[0]
    per = [float(x) for x in row["sessions_per_gpu_reps"].split()]
    assert len(per) == 2 and row["sessions_per_gpu"] == pytest.approx(sum(per) / 2, rel=1e-5)
    lo, hi = row["sessions_per_gpu_lo"], row["sessions_per_gpu_hi"]
    assert lo is not None and 0 <= lo <= row["sessions_per_gpu"] <= hi
    # L / GPUs = session rate x lifetime / 16, from the table's own means (one seed each)
    assert row["session_rate_per_s"] * row["session_lifetime_s"] / 16 == pytest.approx(
        row["sessions_per_gpu"], rel=0.05
    )
    import pandas as pd

    csv = pd.read_csv(tmp_path / "cap" / "capacity.csv")
    assert "sessions_per_gpu" in csv.columns
    assert main(args) == 0
    assert "concurrent sessions per GPU" in capsys.readouterr().out


def test_single_turn_workloads_have_no_sessions_columns(tmp_path, capsys):
    p = _tiny(tmp_path, TINY.replace("requests: 1500", "requests: 300"))
    sc = api.load(p, {"workload.sessions": None})
    cap = search(sc, parse_slo("ttft_p95<=1s"), reps=1, tol=0.3)
    assert cap.sessions == [] and len(cap.summaries) == 1
    assert math.isnan(cap.sessions_per_gpu.mean)
    from kvsim.experiments.capacity import capacity_table

    assert "sessions_per_gpu" not in capacity_table([cap]).columns


def test_session_load_keeps_the_span_and_scales_the_requests(tmp_path):
    # above the scenario's load, sessions live as long: 4x the sessions = 4x the requests
    # over the same span (warm-up unchanged); below it, the span stretches as before
    sc = api.load(_tiny(tmp_path))
    up = load_overrides(sc, 4.0)
    assert up == {"workload.arrivals.rate": "2.0/s", "workload.requests": 6000}
    down = load_overrides(sc, 0.5)
    assert down["workload.arrivals.rate"] == "0.25/s" and "workload.requests" not in down
    assert api.load(sc, down).run.warmup == pytest.approx(80.0)


def test_study_scenarios_validate():
    for name in ("host-only", "host-nvme", "shared-nvme"):
        sc = api.load(CN / f"{name}.yaml")
        assert sc.cluster.router.name == "round_robin" and sc.workload.sessions is not None
    shared = api.load(CN / "shared-nvme.yaml")
    assert shared.remote.enabled and shared.remote.kind == "shared_nvme"
    assert not api.load(CN / "host-nvme.yaml").remote.enabled
    assert api.load(CN / "host-nvme.yaml").tiers.nvme.enabled


def test_quick_is_central_nvme_only(capsys):
    assert main(["reproduce", "vllm-offload", "--quick"]) == 2
    assert "--quick" in capsys.readouterr().err
    assert main(["reproduce", "nope"]) == 2
    assert "central-nvme" in capsys.readouterr().err


def test_the_study_on_a_tiny_configuration(tmp_path):
    # (~10 s: three layouts x two seeds of capacity searches on 800-request runs)
    from kvsim.reproduce import central_nvme
    from kvsim.reproduce.studies import study

    assert study("central-nvme") is central_nvme
    rep = central_nvme.reproduce(
        seeds=2,
        range_seeds=0,
        quick=True,
        overrides={"workload.requests": 800, "cluster.engines": 2},
    )
    names = {r.figure.name for r in rep.rows}
    for layout in central_nvme.LAYOUTS:
        for fig in ("sessions_per_gpu", "gpu_recompute_frac_at_slo", "gpu_busy_frac_at_slo"):
            assert f"{fig}.{layout}" in names
    kinds = {r.figure.kind for r in rep.rows}
    assert {"predicted", "derived", "vendor claim"} <= kinds
    for r in rep.rows:
        assert len(r.values) == 2 and r.lo <= r.kvsim <= r.hi
    claims = [r for r in rep.rows if r.figure.kind == "vendor claim"]
    assert len(claims) == len(central_nvme.CLAIMS) and all(r.figure.paper for r in claims)
    # the shared store: nothing the cluster computed before is computed again
    assert rep.value("gpu_recompute_frac_at_slo.shared-nvme") < 0.05
    assert rep.value("gpu_recompute_frac_at_slo.host-only") > 0.2
    text = central_nvme.text_table(rep)
    assert all(name in text for name in central_nvme.LAYOUTS) and "vendor claim" in text
    files = central_nvme.write(rep, tmp_path / "o")
    assert {p.name for p in files} == {"reproduction.csv", "reproduction.md"}
