"""Validation against published measurements: the vLLM offloading blog's figure table,
``kvsim reproduce all``'s summary arithmetic and validation.csv (kvsim/reproduce/)."""

from __future__ import annotations

import math
import statistics
from pathlib import Path

import pandas as pd
import pytest

from kvsim import api
from kvsim.cli import main
from kvsim.physics.frontend import frontend_seconds
from kvsim.physics.step import make_step_model
from kvsim.reproduce import remote_kv_tiers, validation, vllm_offload
from kvsim.reproduce.studies import study

ROOT = Path(__file__).resolve().parent.parent
VO = ROOT / "scenarios" / "validation" / "vllm-offload"


# ---- the figure table ------------------------------------------------------------------


def test_every_figure_has_a_known_kind_and_the_published_ones_are_the_posts():
    kinds = {f.name: f.kind for f in vllm_offload.FIGURES}
    assert set(kinds.values()) <= set(vllm_offload.KINDS)
    # the setup's copy rates are inputs (matching them shows the input, not the model)
    assert kinds["h2d_one_way"] == kinds["copy_both_ways"] == "input"
    published = {f.name: f.paper for f in vllm_offload.FIGURES if f.paper is not None}
    assert published == {
        "h2d_one_way": 50.0,
        "copy_both_ways": 83.4,
        "ttft_speedup_512": 2.0,
        "ttft_speedup_90k": 22.0,
        "throughput_gain_100pct": 9.0,
        "dma_over_kernel_max_8b": 1.32,
        "dma_over_kernel_0pct_1b": 1.055,
        "dma_over_kernel_80pct_1b": 1.15,
        "kernel_over_no_offload_0pct_1b": 0.94,
    }
    # nothing in this study is fitted to it: every figure but the inputs is predicted
    assert {k for k, v in kinds.items() if v != "predicted"} == {"h2d_one_way", "copy_both_ways"}
    assert len(kinds) == len(vllm_offload.FIGURES)  # names are unique


def test_the_study_is_known_to_reproduce_and_its_scenarios_load():
    assert study("vllm-offload") is vllm_offload
    for name in vllm_offload.CONFIGS:
        sc = api.load(VO / f"{name}.yaml")
        assert sc.workload.block_tokens == 16  # the post's 16-token blocks
        assert sc.tiers.gpu.capacity == 0  # GPU prefix caching off
        assert sc.node.h2d_per_gpu == 50e9 and sc.node.d2h_per_gpu == 33.4e9
        assert not sc.remote.enabled and not sc.tiers.nvme.enabled
        assert sc.cluster.load_policy.name == "async"
    assert api.load(VO / "llama-3.2-1b-no-offload.yaml").tiers.host.enabled is False
    assert api.load(VO / "kernel.yaml").node.copy_engine == "kernel"


def test_the_catalogue_study_predicts_the_16k_recompute_and_keeps_the_store_calibrated(
    tmp_path,
):
    folder = validation.catalogue_folder(remote_kv_tiers.find_scenarios(), tmp_path)
    text = (folder / "base.yaml").read_text()
    line = "profile: {model: glm-5, gpu: B300, gpus: 8, pcp: 8, ep: 8, base: b300-pcp8-glm5}\n"
    assert line in text
    assert validation.DEFAULT_PROFILE_LINE not in text
    calibrated = {f.name for f in remote_kv_tiers.FIGURES if f.kind == "calibrated"}
    assert set(validation.UNCALIBRATED_IN_CATALOGUE) == {"recompute_16k_s"} < calibrated
    # the remote store's calibrated constants are the same in both profiles (C)
    a = api.load(remote_kv_tiers.find_scenarios() / "base.yaml").remote
    b = api.load(folder / "base.yaml").remote
    assert (a.bandwidth, a.op_overhead, a.t0) == (b.bandwidth, b.op_overhead, b.t0)
    # base keeps the calibrated profile's stack: only what the cards decide differs
    sa, sb = (
        api.load(remote_kv_tiers.find_scenarios() / "base.yaml"),
        api.load(folder / "base.yaml"),
    )
    assert sa.remote == sb.remote and sa.cluster == sb.cluster
    # the tiers too, but for the peer tier's transfer engine: the catalogue composes it from
    # the stack's sourced costs (issue 41, point 3), a named profile has none
    assert sb.tiers.peer.transfer is not None and sa.tiers.peer.transfer is None
    peer = sb.tiers.peer.model_copy(update={"transfer": None})
    assert sa.tiers == sb.tiers.model_copy(update={"peer": peer})
    assert sa.node.d2h_per_gpu == sb.node.d2h_per_gpu and sa.node.copy_engine == "kernel"
    assert sa.timing != sb.timing


# ---- the summary arithmetic ------------------------------------------------------------


def _rec(name, paper, kvsim, lo, hi, kind="predicted"):
    return {
        "figure": name,
        "paper": paper,
        "kvsim": kvsim,
        "kvsim_lo": lo,
        "kvsim_hi": hi,
        "unit": "x",
        "kind": kind,
    }


def test_summary_counts_inside_within_a_factor_and_the_median_error_by_hand():
    rows = [
        # published 2, kvsim 1.5 in [1.4, 1.6]: outside; r = 0.75, 1/r = 1.333: within
        # 1.5x, not 1.25x; |1.5/2 - 1| = 0.25
        validation.row("s", _rec("a", 2.0, 1.5, 1.4, 1.6)),
        # published 10, kvsim 11 in [9, 12]: inside; r = 1.1: within both; error 0.1
        validation.row("s", _rec("b", 10.0, 11.0, 9.0, 12.0)),
        # published 1, kvsim 3 (one value: the interval is the point): r = 3; error 2
        validation.row("s", _rec("c", 1.0, 3.0, None, None)),
        # no published value: not scored
        validation.row("s", _rec("d", None, 5.0, 4.0, 6.0)),
        # calibrated: an exact fit, left out of the summary
        validation.row("t", _rec("e", 0.31, 0.31, 0.31, 0.31, "calibrated")),
        # input: left out too
        validation.row("t", _rec("f", 50.0, 50.0, 50.0, 50.0, "input")),
        # predicted, published 4, kvsim 5 in [2, 5]: inside, r = 1.25 exactly: within
        # 1.25x (the bound is inclusive); error 0.25
        validation.row("t", _rec("g", 4.0, 5.0, 2.0, 5.0)),
    ]
    a, b, c, d, e, f, g = rows
    assert (a["inside"], a["within_1_25x"], a["within_1_5x"], a["abs_error"]) == (
        False,
        False,
        True,
        0.25,
    )
    assert (b["inside"], b["within_1_25x"], b["within_1_5x"]) == (True, True, True)
    assert b["abs_error"] == pytest.approx(0.1)
    assert (c["kvsim_lo"], c["kvsim_hi"], c["inside"], c["within_1_25x"], c["within_1_5x"]) == (
        3.0,
        3.0,
        False,
        False,
        False,
    )
    assert c["abs_error"] == pytest.approx(2.0)
    assert d["inside"] is d["within_1_25x"] is d["within_1_5x"] is d["abs_error"] is None
    assert (g["inside"], g["within_1_25x"], g["within_1_5x"]) == (True, True, True)
    assert e["inside"] is True and e["abs_error"] == 0.0  # shown, but not scored
    s = validation.summarize(rows[:4])  # study s: a, b, c scored
    assert s == {
        "figures": 4,
        "scored": 3,
        "inside": 1,
        "within_1_25x": 1,  # b
        "within_1_5x": 2,  # a, b
        "median_abs_error": pytest.approx(0.25),  # median of 0.25, 0.1, 2
    }
    overall = validation.summarize(rows)  # a, b, c, g: errors 0.25, 0.1, 2, 0.25
    assert overall["figures"] == 7 and overall["scored"] == 4
    assert overall["inside"] == 2
    assert (overall["within_1_25x"], overall["within_1_5x"]) == (2, 3)
    assert overall["median_abs_error"] == pytest.approx(statistics.median([0.25, 0.1, 2, 0.25]))
    assert math.isnan(validation.summarize([e, f])["median_abs_error"])  # nothing scored
    lines = validation.summary_lines(rows)
    assert "calibrated, derived and input figures leave the error summary" in lines[0]
    assert lines[1].split()[0] == "s" and lines[-1].split()[0] == "overall"
    assert "inside interval  1" in lines[1] and "within 1.25x  1" in lines[1]
    assert "within 1.5x  2" in lines[1]


@pytest.mark.parametrize(
    ("kvsim", "published", "factor"),
    [(1.0, 1.0, 1.0), (2.0, 1.0, 2.0), (1.0, 2.0, 2.0), (0.8, 1.0, 1.25), (-1.0, 1.0, math.inf)],
)
def test_the_factor_is_the_ratio_either_way(kvsim, published, factor):
    assert validation.factor(kvsim, published) == pytest.approx(factor)
    assert validation.within(kvsim, published, 1.25) is (factor <= 1.25 + 1e-12)


def test_validation_csv_has_the_issues_columns(tmp_path):
    rows = [
        validation.row("s", _rec("a", 2.0, 1.5, 1.4, 1.6)),
        validation.row("s", _rec("d", None, 5.0, 4.0, 6.0)),
    ]
    validation.write(rows, tmp_path / "v")
    df = pd.read_csv(tmp_path / "v" / "validation.csv")
    assert list(df.columns) == [
        "study",
        "figure",
        "published",
        "kvsim",
        "kvsim_lo",
        "kvsim_hi",
        "unit",
        "kind",
        "inside",
        "within_1_25x",
        "within_1_5x",
        "abs_error",
        "range_lo",
        "range_hi",
        "sensitive_to",
    ]
    assert df["abs_error"].iloc[0] == 0.25 and pd.isna(df["abs_error"].iloc[1])
    assert "| s | `a` | predicted | 2 | 1.5 |" in (tmp_path / "v" / "validation.md").read_text()


# ---- kvsim against a by-hand roofline --------------------------------------------------


def test_single_request_ttfts_equal_the_step_model_and_frontend_by_hand():
    """One 512-token prompt on the composed Llama-3.1-8B / H100 profile (one GPU, no
    parallelism), cold then from CPU, is the frontend's work plus the engine's steps and
    the restore, term by term:

        recompute = frontend(512) + output + step([(512 new, 0 context)])
        CPU hit   = frontend(512) + output + t0 + h2d_latency + 511 s / 50 GB/s
                    + step([(1 new, 511 context)])

    (s = 131,072 B/token; vLLM recomputes the last token of a fully cached prompt). The step
    times come from the profile's per-operation roofline (its terms are checked by hand in
    tests/test_ops.py) and the frontend's from its rates (tests/test_frontend.py): this
    test checks that a run adds exactly these parts and nothing else (rel 1e-9)."""
    sc = api.load(VO / "base.yaml")
    n, s, fe = sc.node, sc.model.kv_bytes, sc.engine.frontend
    assert s == 32 * 2 * 8 * 128 * 2  # Llama-3.1-8B: 32 layers x K,V x 8 heads x 128 x BF16
    model = make_step_model(sc)
    cold, hit = vllm_offload.ttft_pair(VO / "base.yaml", 512)
    front = frontend_seconds(fe, 512) + fe.output
    assert front > 0  # the catalogue's stack gives every request frontend work
    assert cold == pytest.approx(front + model.step([(512, 0)]), rel=1e-9)
    restore = sc.tiers.host.t0 + n.h2d_latency + 511 * s / n.h2d_per_gpu
    assert hit == pytest.approx(front + restore + model.step([(1, 511)]), rel=1e-9)


def test_the_throughput_batch_has_an_exact_cpu_hit_rate_and_leaves_out_the_warmup():
    """200 prompts of 512 tokens after a warm-up request holding a 26-block (416-token)
    prefix: every measured prompt restores 416 of its 512 tokens from CPU, exactly
    (81.25%), and the warm-up is not counted."""
    res = vllm_offload.throughput(VO / "llama-3.2-1b.yaml", 26, n=200)
    s = res.summary
    assert s["requests"] == 200 and s["requests_warmup"] == 1
    assert s["token_source_frac"]["host"] == pytest.approx(416 / 512)
    cold = vllm_offload.throughput(VO / "llama-3.2-1b.yaml", 0, n=200).summary
    assert cold["requests_warmup"] == 0 and cold["hit_ratio"] == 0.0
    # no random stream is drawn: another seed gives the same run
    again = api.run(
        api.load(VO / "llama-3.2-1b.yaml", seed=7),
        requests=vllm_offload.batch_requests(api.load(VO / "llama-3.2-1b.yaml"), 0, 200)[0],
    )
    assert again.summary["prompt_tokens_per_s"] == cold["prompt_tokens_per_s"]


# ---- the commands ----------------------------------------------------------------------


def test_reproduce_all_refuses_scenarios(capsys):
    assert main(["reproduce", "all", "--scenarios", "x"]) == 2
    assert "--scenarios" in capsys.readouterr().err


@pytest.mark.slow
def test_reproduce_vllm_offload_writes_its_table(tmp_path, capsys):
    assert main(["reproduce", "vllm-offload", "--out", str(tmp_path / "o")]) == 0
    df = pd.read_csv(tmp_path / "o" / "reproduction.csv")
    assert list(df.columns) == vllm_offload.COLUMNS
    assert set(df["figure"]) == {f.name for f in vllm_offload.FIGURES}
    assert "ttft_speedup_512" in capsys.readouterr().out
