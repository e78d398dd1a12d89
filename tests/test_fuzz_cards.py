"""Fuzzing the catalogue's inputs: mutated config.json model cards and GPU cards, thrown at
the CLI (issue 39).

Contract for every generated case: ``kvsim profiles show MODEL GPU --json`` and ``kvsim
validate`` of a scenario composing them either succeed with a finite, sane composed profile
(every number finite and >= 0, a positive KV size, pool and 16k prefill time) or refuse
with exit 2 and one line ``kvsim: error: ...`` naming the card's file (or the command's
own argument); never a traceback, exit 1 or a hang.

Mutations of a few real configs (dense GQA, Qwen-MoE, DeepSeek MLA-MoE, gpt-oss with
sliding layers and MXFP4, ERNIE-MoE, Mistral-7B v0.1 with every layer sliding) and of the
shipped GPU cards: every numeric field set to 0, negative, NaN, inf, 1e30, a huge integer
or a wrong type; a key deleted or given twice; half an MoE config (an expert count without
experts per token, or the other way round, or zero experts); unknown MoE keys; GPU values
with absurd units, both dense and sparse FLOP figures, no NVLink, unsafe characters in
names, a card's own efficiency. The example counts are bounded so both tests together
run in well under a minute.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import re
import signal
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from test_hardening_cards import ERNIE

from kvsim.catalogue.gpus import GPU_DIR
from kvsim.catalogue.models import MODEL_DIR
from kvsim.cli import main

from conftest import examples


def shipped_config(name: str) -> dict[str, Any]:
    doc = json.loads((MODEL_DIR / f"{name}.json").read_text())
    doc.pop("kvsim", None)
    return doc


MODELS: list[dict[str, Any]] = [
    shipped_config("llama-3.2-1b"),
    shipped_config("qwen3-235b-a22b"),
    shipped_config("deepseek-v3"),
    shipped_config("gpt-oss-120b"),
    ERNIE,  # ERNIE-4.5-21B-A3B (the MoE keys of its family)
    {  # Mistral-7B v0.1: every layer sliding
        "hidden_size": 4096,
        "intermediate_size": 14336,
        "num_attention_heads": 32,
        "num_hidden_layers": 32,
        "num_key_value_heads": 8,
        "sliding_window": 4096,
        "torch_dtype": "bfloat16",
        "vocab_size": 32000,
    },
]
GPUS: list[dict[str, Any]] = [
    yaml.safe_load((GPU_DIR / f"{n}.yaml").read_text()) for n in ("h100-sxm", "b300", "mi300x")
]

# values that end up in a JSON config: every one either reads or is refused
JSON_JUNK = [0, -1, -4096, 1.5, 1e30, 2**40 + 1, 1099511627776, 10**30, "32", None, True, []]
JSON_CONSTANTS = ["NaN", "Infinity", "-Infinity", "1e999"]  # written into the text
MOE_HALVES = [
    {"num_experts_per_tok": 2},
    {"num_local_experts": 0, "num_experts_per_tok": 2},
    {"num_local_experts": 8},
    {"moe_num_experts": 64},
    {"moe_k": 6},
    {"n_routed_experts": 16, "num_experts_per_tok": 4, "moe_intermediate_size": 512},
    {"num_experts": 8, "moe_num_experts": 4, "num_experts_per_tok": 2},
    {"interleave_moe_layer_step": 2},
    {"moe_every_k_layers": 1},
    {"first_k_dense_replace": 10**6, "moe_layer_freq": 0},
    {"mlp_only_layers": [0, -5, 10**9], "decoder_sparse_step": 3},
    {"moe_layer_start_index": 5, "moe_layer_end_index": 2},
    {"shared_expert_intermediate_size": 1000},
    {"layer_types": ["sliding_attention"] * 3},
    {"sliding_window": 0},
    {"use_sliding_window": True, "max_window_layers": 10**9},
]
GPU_JUNK = [
    "0 GB",
    "-1 GB",
    "nan GB",
    "inf GB",
    "1e30 B",
    "1e30 B/s",
    "1e40 PFLOP/s",
    "0 TFLOP/s",
    "1 B",
    "80 GiB",
    "0 GB/s",
    "3 TB/s",
    "400 Gb/s",
    "12 furlongs",
    5,
    None,
    [],
]
UNSAFE_NAMES = ["GPU\nX", "GPU\x1b[2J", "GPU\u202e", "GPU\r", "ok-name"]


@st.composite
def model_text(draw) -> str:
    doc = dict(draw(st.sampled_from(MODELS)))
    constant = None
    for _ in range(draw(st.integers(0, 2))):
        op = draw(st.sampled_from(["value", "delete", "moe", "constant"]))
        numeric = sorted(k for k, v in doc.items() if isinstance(v, int | float))
        if op == "value" and numeric:
            doc[draw(st.sampled_from(numeric))] = draw(st.sampled_from(JSON_JUNK))
        elif op == "delete" and doc:
            doc.pop(draw(st.sampled_from(sorted(doc))))
        elif op == "moe":
            doc.update(draw(st.sampled_from(MOE_HALVES)))
        elif op == "constant" and numeric:
            constant = (draw(st.sampled_from(numeric)), draw(st.sampled_from(JSON_CONSTANTS)))
    text = json.dumps(doc, indent=1)
    if constant is not None:
        key, word = constant
        text = re.sub(rf'("{key}": )[^,\n]+', lambda m: m.group(1) + word, text, count=1)
    if draw(st.integers(0, 5)) == 0 and doc:  # a key given twice
        key = draw(st.sampled_from(sorted(doc)))
        text = text.replace("{\n", f'{{\n "{key}": 1,\n', 1)
    return text


@st.composite
def gpu_text(draw) -> str:
    card = dict(draw(st.sampled_from(GPUS)))
    card.pop("sources", None)
    for _ in range(draw(st.integers(0, 2))):
        op = draw(st.sampled_from(["value", "flops", "delete", "both", "name", "nvlink", "eff"]))
        if op == "value":
            key = draw(
                st.sampled_from(
                    [
                        "hbm",
                        "hbm_bandwidth",
                        "host_link_per_direction",
                        "nvlink_per_gpu",
                        "nic_per_gpu",
                    ]
                )
            )
            card[key] = draw(st.sampled_from(GPU_JUNK))
        elif op == "flops":
            table = "flops" if "flops" in card else "flops_sparse"
            card[table] = {**(card.get(table) or {}), "bf16": draw(st.sampled_from(GPU_JUNK))}
        elif op == "delete":
            card.pop(draw(st.sampled_from(sorted(card))))
        elif op == "both":
            card["flops"] = {**card.get("flops", {}), "bf16": "900 TFLOP/s"}
            card["flops_sparse"] = {**card.get("flops_sparse", {}), "bf16": "1800 TFLOP/s"}
        elif op == "name":
            card["name"] = draw(st.sampled_from(UNSAFE_NAMES))
        elif op == "nvlink":
            card["nvlink_per_gpu"] = "0 GB/s"
        else:
            frac = draw(st.sampled_from([0.5, 0, -1, 1.5, float("nan"), "x", {"value": 0.4}]))
            key = draw(st.sampled_from(["host_link_frac", "dense", "attention"]))
            card["efficiency"] = (
                {key: frac} if key == "host_link_frac" else {key: {"bf16": {"e_max": frac}}}
            )
    text = yaml.safe_dump(card, sort_keys=False, allow_unicode=True)
    if draw(st.integers(0, 5)) == 0:  # a key given twice
        text += "hbm: 80 GiB\n"
    return text


class Hang(Exception):
    pass


def cli(argv: list[str]) -> tuple[int, str, str]:
    def alarm(*_):
        raise Hang(f"kvsim did not finish within 60 s: {argv}")

    old = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(60)  # a liveness guard against hangs, not a speed check
    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
            rc = main(argv)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    return rc, out.getvalue(), err.getvalue().strip()


def check(tmp: Path, model: str, gpu: str, gpus: int) -> None:
    m, g = tmp / "m.json", tmp / "g.yaml"
    m.write_text(model)
    g.write_text(gpu)
    names = (str(m), str(g))
    argv = ["profiles", "show", str(m), str(g), "--gpus", str(gpus), "--json"]
    rc, out, err = cli(argv)
    event(f"profiles show exit {rc}")
    assert rc in (0, 2), (rc, err)
    if rc == 2:
        assert err.startswith("kvsim: error: ") and "\n" not in err, err
        assert "Traceback" not in err and "\x1b" not in err
        body = err.removeprefix("kvsim: error: ")
        assert body.startswith(names) or body.startswith(("--", "profiles show: ")), err
    else:
        n = json.loads(out)["numbers"]
        flat = [v for v in n.values() if not isinstance(v, dict)]
        flat += list(n["lone_16k_parts_s"].values())
        assert all(math.isfinite(v) and v >= 0 for v in flat), n
        assert n["kv_bytes_per_token"] > 0 and n["kv_pool_per_gpu_bytes"] > 0
        assert 0 < n["lone_16k_s"] < 1e6 and n["params_total"] > 0
    sc = tmp / "s.yaml"
    sc.write_text(
        f"name: fuzz\nprofile: {{model: m.json, gpu: g.yaml, gpus: {gpus}}}\n"
        "workload: {kind: synthetic, requests: 5, arrivals: {process: poisson, rate: 1/s},"
        " prompt_tokens: {dist: fixed, value: 1024}}\n"
    )
    rc2, _, err2 = cli(["validate", str(sc)])
    assert rc2 in (0, 2), (rc2, err2)
    if rc2 == 2:
        assert err2.startswith("kvsim: error: ") and "\n" not in err2, err2
        body = err2.removeprefix("kvsim: error: ")
        # the card's file (and line), or the scenario's profile line
        assert body.startswith(names) or body.startswith(str(sc)), err2
    if rc == 2 and err.removeprefix("kvsim: error: ").startswith(names):
        assert rc2 == 2  # a bad card is bad wherever it is read


FUZZ = settings(
    max_examples=examples(40),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
BASE_GPU = (GPU_DIR / "h100-sxm.yaml").read_text()


@FUZZ
@given(model=model_text(), gpus=st.sampled_from([1, 2, 8]))
def test_fuzzed_model_configs_compose_or_are_refused_cleanly(tmp_path_factory, model, gpus):
    check(tmp_path_factory.mktemp("fuzz"), model, BASE_GPU, gpus)


@FUZZ
@given(gpu=gpu_text(), gpus=st.sampled_from([1, 2, 8]))
def test_fuzzed_gpu_cards_compose_or_are_refused_cleanly(tmp_path_factory, gpu, gpus):
    model = json.dumps(shipped_config("llama-3.1-8b"))
    check(tmp_path_factory.mktemp("fuzz"), model, gpu, gpus)


def test_the_unmutated_bases_compose(tmp_path):
    # the fuzz starts from cards that work, so refusals come from the mutations
    for doc in MODELS:
        t = tmp_path / f"m{MODELS.index(doc)}"
        t.mkdir()
        (t / "m.json").write_text(json.dumps(doc))
        (t / "g.yaml").write_text((GPU_DIR / "b300.yaml").read_text())
        rc, _, err = cli(["profiles", "show", str(t / "m.json"), str(t / "g.yaml"), "--gpus", "4"])
        assert rc == 0, err
    for card in GPUS:
        (tmp_path / "g.yaml").write_text(yaml.safe_dump(card, sort_keys=False))
        (tmp_path / "m.json").write_text(json.dumps(shipped_config("llama-3.1-8b")))
        rc, _, err = cli(["profiles", "show", str(tmp_path / "m.json"), str(tmp_path / "g.yaml")])
        assert rc == 0, err
