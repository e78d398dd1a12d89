"""The tiered-offload experiment as a shipped sweep (scenarios/sweeps/offload-plan.yaml)."""

import pandas as pd
import yaml

from kvsim import api
from kvsim.cli import main
from kvsim.experiments.sweep import load_sweep

from conftest import ROOT

SWEEP = ROOT / "scenarios" / "sweeps" / "offload-plan.yaml"


def test_the_sweep_file_validates():
    s = load_sweep(SWEEP)
    assert not s.refused
    # 5 layouts x 2 host capacities x 2 drive speeds x 2 node counts, 2 seeds each
    assert len(s.runs) == 5 * 2 * 2 * 2 * 2
    configs = s.configurations()
    assert len(configs) == 40
    layouts = []
    for cfg in configs:
        sc = api.load(s.runs[0].base, {**s.set, **cfg})  # every configuration loads
        assert sc.tenancy.isolation == "tenant" and sc.workload.tenants.count == 4
        layout = ("host", *(t for t in ("nvme", "peer") if getattr(sc.tiers, t).enabled))
        if sc.remote.enabled:
            layout = (*layout, sc.remote.kind)
        layouts.append(layout)
    # host only first, then each farther tier added
    assert list(dict.fromkeys(layouts)) == [
        ("host",),
        ("host", "nvme"),
        ("host", "nvme", "peer"),
        ("host", "nvme", "peer", "object_store"),
        ("host", "nvme", "peer", "shared_nvme"),
    ]


def test_a_tiny_version_runs(tmp_path, capsys):
    """The same sweep on 200 requests, one seed, one pressure setting: five runs, each
    with the cold and warm TTFT and the p95 in its row."""
    spec = yaml.safe_load(SWEEP.read_text(encoding="utf-8"))
    spec["base"] = str((SWEEP.parent / spec["base"]).resolve())
    spec["grid"] = {"tiers.host.capacity": ["16 GB"]}  # host pressure only
    spec["set"].update({"workload.requests": 200, "run.warmup": "0 s"})
    spec["replications"] = 1
    tiny = tmp_path / "offload-plan.yaml"
    tiny.write_text(yaml.safe_dump(spec))
    out = tmp_path / "out"
    assert main(["sweep", str(tiny), "--out", str(out), "--workers", "1", "--quiet"]) == 0
    df = pd.read_csv(out / "results.csv")
    assert len(df) == 5 and (df["status"] == "ok").all()
    for col in ("ttft_cold_p50_s", "ttft_warm_p50_s", "ttft_p95_s", "hit_ratio"):
        assert df[col].notna().all(), col
    assert (df["requests_cold"] + df["requests_warm"] == df["requests"]).all()
    # the host-only layout reads nothing from farther tiers; the shared store is read
    assert df["remote.kind"].tolist()[-1] == "shared_nvme"
    first, last = df.iloc[0], df.iloc[-1]
    assert first["tier_read_bytes.nvme"] == first["tier_read_bytes.remote"] == 0
    assert last["tier_read_bytes.remote"] > 0
