"""Hardening of model cards (config.json) and GPU cards (issue 39, points 2, 3, 4, 10, 11,
12, 15 and 17's card names).

Every refusal goes through the CLI: exit 2, one line naming the card's file (and line
where the mistake has one), and no output folder left behind.
"""

from __future__ import annotations

import json
import math
import re
import textwrap
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvsim.catalogue.calibrated import calibrated_notes
from kvsim.catalogue.compose import compose
from kvsim.catalogue.efficiency import curve, host_link_frac
from kvsim.catalogue.gpus import GPU_DIR, RANGES, read_gpu
from kvsim.catalogue.hfconfig import card_from_config
from kvsim.catalogue.models import MODEL_DIR, read_model
from kvsim.cli import main
from kvsim.errors import InputError

from conftest import examples

ROOT = Path(__file__).resolve().parent.parent
GiB = 2**30

LLAMA = {
    k: v
    for k, v in json.loads((MODEL_DIR / "llama-3.1-8b.json").read_text()).items()
    if k != "kvsim"
}

GPU_CARD = """\
name: Test-GPU
generation: hopper
flops_sparse: {bf16: 1979 TFLOP/s}
hbm: 80 GiB
hbm_bandwidth: 3.35 TB/s
host_link: PCIe Gen5 x16
host_link_per_direction: 64 GB/s
nvlink_per_gpu: 450 GB/s
nic_per_gpu: 400 Gb/s
"""


def scenario(tmp: Path, model: str = "llama-3.1-8b", gpu: str = "H100-SXM", gpus: int = 1) -> Path:
    p = tmp / "s.yaml"
    p.write_text(
        textwrap.dedent(
            f"""\
            name: cards
            profile: {{model: {model}, gpu: {gpu}, gpus: {gpus}}}
            workload:
              kind: synthetic
              requests: 20
              arrivals: {{process: poisson, rate: 2/s}}
              prompt_tokens: {{dist: fixed, value: 2048}}
            """
        )
    )
    return p


def refused(tmp: Path, capsys, *, model: str = "llama-3.1-8b", gpu: str = "H100-SXM") -> str:
    """`kvsim run` on a scenario of the cards: exit 2, one line, nothing written."""
    out = tmp / "out"
    rc = main(["run", str(scenario(tmp, model, gpu)), "--out", str(out), "--quiet"])
    err = capsys.readouterr().err.strip()
    assert rc == 2, err
    assert err.startswith("kvsim: error: ") and "\n" not in err and "Traceback" not in err
    assert not out.exists()
    return err.removeprefix("kvsim: error: ")


def config(tmp: Path, text: str, name: str = "config.json") -> str:
    (tmp / name).write_text(text)
    return f"./{name}"


def gpu_card(tmp: Path, text: str, name: str = "g.yaml") -> str:
    (tmp / name).write_text(text)
    return f"./{name}"


def with_keys(**changes) -> str:
    doc = dict(LLAMA)
    for k, v in changes.items():
        if v is None:
            doc.pop(k, None)
        else:
            doc[k] = v
    return json.dumps(doc, indent=1)


# ---- point 2: config.json read strictly -----------------------------------------------


def test_a_key_given_twice_is_refused_at_its_line(tmp_path, capsys):
    text = with_keys(num_hidden_layers=32).replace(
        '"num_hidden_layers": 32,', '"num_hidden_layers": 32,\n "num_hidden_layers": 16,'
    )
    line = text.splitlines().index(' "num_hidden_layers": 16,') + 1
    msg = refused(tmp_path, capsys, model=config(tmp_path, text))
    assert f"config.json:{line}: " in msg and "num_hidden_layers: duplicate key" in msg


def test_a_duplicate_in_a_nested_object_names_its_line(tmp_path):
    text = with_keys().replace(
        '"architectures": [',
        '"quantization_config": {"quant_method": "fp8",\n'
        '"quant_method": "fp8"},\n "architectures": [',
    )
    p = tmp_path / "config.json"
    p.write_text(text)
    with pytest.raises(InputError) as e:
        read_model(str(p))
    assert e.value.where == f"{p}:3" and "quant_method: duplicate key" in e.value.reason


@pytest.mark.parametrize(
    "changes, fragment",
    [
        (
            {"num_local_experts": 0, "num_experts_per_tok": 2},
            "num_experts_per_tok: 2 experts per token but num_local_experts is 0",
        ),
        ({"num_experts_per_tok": 2}, "num_experts_per_tok: 2 experts per token but no expert"),
        ({"num_local_experts": 8}, "num_experts_per_tok: missing or 0"),
        (
            {"num_experts": 8, "moe_num_experts": 16, "num_experts_per_tok": 2},
            "moe_num_experts: 16 disagrees with num_experts (8)",
        ),
        # Llama 4's interleaving is not read: refused by name, never read as dense
        (
            {"num_local_experts": 16, "num_experts_per_tok": 1, "interleave_moe_layer_step": 2},
            "MoE key kvsim does not read: interleave_moe_layer_step",
        ),
        ({"moe_topk": 2}, "MoE key kvsim does not read: moe_topk"),
    ],
)
def test_half_or_unknown_moe_configs_are_refused(tmp_path, capsys, changes, fragment):
    msg = refused(tmp_path, capsys, model=config(tmp_path, with_keys(**changes)))
    assert msg.startswith(f"{tmp_path / 'config.json'}: ") and fragment in msg


# ERNIE-4.5-21B-A3B-PT's config.json (H: huggingface.co/baidu/ERNIE-4.5-21B-A3B-PT, the keys
# kvsim reads, verbatim) and its published size: 21B total, 3B active (the model card)
ERNIE = {
    "architectures": ["Ernie4_5_MoeForCausalLM"],
    "hidden_size": 2560,
    "intermediate_size": 12288,
    "head_dim": 128,
    "moe_intermediate_size": 1536,
    "moe_k": 6,
    "moe_layer_interval": 1,
    "moe_layer_start_index": 1,
    "moe_num_experts": 64,
    "moe_num_shared_experts": 2,
    "moe_capacity": [64, 64, 64],
    "moe_gate": "topk",
    "moe_use_aux_free": True,
    "num_attention_heads": 20,
    "num_hidden_layers": 28,
    "num_key_value_heads": 4,
    "tie_word_embeddings": True,
    "torch_dtype": "bfloat16",
    "vocab_size": 103424,
}


def test_ernie_moe_is_read_as_an_moe():
    card = card_from_config(dict(ERNIE), where="ernie.json", name="ernie")
    assert (card.experts, card.experts_per_token, card.shared_experts) == (64, 6, 2)
    assert card.dense_layers == 1 and card.moe_layers == 27  # layer 0 dense, 1..27 MoE
    total, active = card.params()
    # by hand: 28 x attention (2560 x 20 x 128 x 2 + 2 x 2560 x 4 x 128 = 15,728,640)
    # + 1 dense MLP (3 x 2560 x 12288) + 27 x (66 experts x 3 x 2560 x 1536 + 2560 x 64)
    # + the tied embedding 103,424 x 2560 -> 21.83 B (published "21B"; the 21.8 B)
    attn = 28 * (2560 * 20 * 128 * 2 + 2 * 2560 * 4 * 128)
    by_hand = attn + 3 * 2560 * 12288 + 27 * (66 * 3 * 2560 * 1536 + 2560 * 64) + 103424 * 2560
    assert total == by_hand and 21.7e9 < total < 21.9e9
    # active: attention, the dense MLP, 6 routed + 2 shared experts and the router of each
    # MoE layer, and the (tied) LM head, counted as for gpt-oss: 3.35 B (published "A3B",
    # 3.09 B without the LM head)
    routed = 27 * ((6 + 2) * 3 * 2560 * 1536 + 2560 * 64)
    assert active == attn + 3 * 2560 * 12288 + routed + 103424 * 2560


def moe_layers_by_loop(doc: dict, layers: int) -> int:
    """The per-layer rules as written in each family's modelling code, one layer at a time
    (the reference the arithmetic count must equal)."""
    if "first_k_dense_replace" in doc or "moe_layer_freq" in doc:
        first, freq = doc.get("first_k_dense_replace", 0), doc.get("moe_layer_freq", 1)
        return sum(1 for i in range(first, layers) if i % freq == 0)
    if "moe_layer_start_index" in doc:
        start, step = doc["moe_layer_start_index"], doc.get("moe_layer_interval", 1)
        end = doc.get("moe_layer_end_index", -1)
        end = layers - 1 if end == -1 else end
        return sum(1 for i in range(layers) if start <= i <= end and (i + 1) % step == 0)
    only, step = doc.get("mlp_only_layers", []), doc.get("decoder_sparse_step", 1)
    return sum(1 for i in range(layers) if i not in only and (i + 1) % step == 0)


@settings(max_examples=examples(200), deadline=None)
@given(
    layers=st.integers(1, 120),
    family=st.sampled_from(["deepseek", "ernie", "qwen"]),
    a=st.integers(0, 130),
    b=st.integers(1, 7),
    c=st.integers(-1, 130),
    only=st.lists(st.integers(-3, 130), max_size=6),
)
def test_moe_layers_counted_arithmetically_equal_the_loop(layers, family, a, b, c, only):
    doc = {**LLAMA, "num_hidden_layers": layers, "num_experts": 8, "num_experts_per_tok": 2}
    doc["moe_intermediate_size"] = 1024
    if family == "deepseek":
        doc.update(first_k_dense_replace=min(a, layers), moe_layer_freq=b)
    elif family == "ernie":
        doc.update(moe_layer_start_index=a, moe_layer_interval=b, moe_layer_end_index=c)
    else:
        doc.update(mlp_only_layers=[i for i in only if i >= 0], decoder_sparse_step=b)
    want = moe_layers_by_loop(doc, layers)
    card = card_from_config(doc, where="c.json", name="c")
    assert card.moe_layers == want


def test_a_huge_layer_count_is_refused_at_once(tmp_path, capsys):
    # 2^40 layers with MoE fields once hung `kvsim validate` (a loop over the layers)
    text = with_keys(
        num_hidden_layers=1099511627776,
        n_routed_experts=8,
        num_experts_per_tok=2,
        moe_intermediate_size=1024,
        first_k_dense_replace=1,
    )
    p = scenario(tmp_path, config(tmp_path, text))
    rc = main(["validate", str(p)])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "\n" not in err
    assert err.startswith(f"kvsim: error: {tmp_path / 'config.json'}: ")
    assert "num_hidden_layers: 1,099,511,627,776 layers: more than 10,000" in err


# ---- point 10: Mistral-7B v0.1 (every layer sliding) and a GPU without NVLink ----------

# Mistral-7B-v0.1's config.json (H: huggingface.co/mistralai/Mistral-7B-v0.1), verbatim
MISTRAL = {
    "architectures": ["MistralForCausalLM"],
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "max_position_embeddings": 32768,
    "model_type": "mistral",
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 8,
    "rope_theta": 10000.0,
    "sliding_window": 4096,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "vocab_size": 32000,
}


def test_mistral_7b_v01_every_layer_sliding_runs(tmp_path, capsys):
    model = config(tmp_path, json.dumps(MISTRAL))
    card = read_model(str(tmp_path / "config.json"))
    assert card.sliding_layers == 32 and card.full_layers == 0
    # every layer slides: each keeps its KV per token (32 x 2 x 8 x 128 x 2 B)
    assert card.kv_bytes_per_token() == 131_072
    assert card.pair_flops() == 0 and card.window_pair_flops() > 0
    out = tmp_path / "out"
    rc = main(["run", str(scenario(tmp_path, model)), "--out", str(out), "--quiet"])
    assert rc == 0, capsys.readouterr().err
    summary = json.loads((out / "summary.json").read_text())
    assert summary["requests"] > 0 and math.isfinite(summary["ttft_p99_s"])


def test_a_gpu_without_nvlink_runs_on_one_gpu_and_over_pcie_on_more(tmp_path, capsys):
    gpu = gpu_card(tmp_path, GPU_CARD.replace("nvlink_per_gpu: 450 GB/s", "nvlink_per_gpu: 0 GB/s"))
    out = tmp_path / "out"
    rc = main(["run", str(scenario(tmp_path, gpu=gpu)), "--out", str(out), "--quiet"])
    assert rc == 0, capsys.readouterr().err
    # on two GPUs the TP all-reduce goes over PCIe: the host link's achieved rate
    comp = compose({"model": "llama-3.1-8b", "gpu": str(tmp_path / "g.yaml"), "tp": 2})
    assert comp.gpu_link == pytest.approx(64e9 * host_link_frac("hopper").value)
    assert comp.comm_bandwidth == pytest.approx(comp.gpu_link * 0.95)  # comm.nvlink_frac
    assert comp.step_model().comm_bw == comp.comm_bandwidth
    rc = main(["validate", str(scenario(tmp_path, gpu=gpu, gpus=2))])
    assert rc == 0, capsys.readouterr().err


# ---- point 3: GPU card values bounded, one FLOP figure per dtype ---------------------


@pytest.mark.parametrize(
    "old, new, field",
    [
        ("hbm: 80 GiB", "hbm: 1e30 B", "hbm"),
        ("hbm_bandwidth: 3.35 TB/s", "hbm_bandwidth: 1e30 B/s", "hbm_bandwidth"),
        ("flops_sparse: {bf16: 1979 TFLOP/s}", "flops_sparse: {bf16: 1e40 PFLOP/s}", "bf16"),
        ("host_link_per_direction: 64 GB/s", "host_link_per_direction: 1 B/s", "host_link"),
        ("nvlink_per_gpu: 450 GB/s", "nvlink_per_gpu: 1e20 GB/s", "nvlink_per_gpu"),
        ("nic_per_gpu: 400 Gb/s", "nic_per_gpu: 1e6 Tb/s", "nic_per_gpu"),
    ],
)
def test_absurd_card_values_are_refused_at_their_line(tmp_path, capsys, old, new, field):
    text = GPU_CARD.replace(old, new)
    line = text.splitlines().index(new.replace("{bf16: ", "{bf16: ")) + 1
    msg = refused(tmp_path, capsys, gpu=gpu_card(tmp_path, text))
    assert msg.startswith(f"{tmp_path / 'g.yaml'}:{line}: ") and field in msg
    assert "outside the physical range" in msg


def test_flops_and_flops_sparse_for_one_dtype_is_refused(tmp_path, capsys):
    text = GPU_CARD + "flops: {bf16: 989.5 TFLOP/s}\n"
    msg = refused(tmp_path, capsys, gpu=gpu_card(tmp_path, text))
    assert msg.startswith(f"{tmp_path / 'g.yaml'}:3: ")
    assert "flops_sparse.bf16: bf16 is given in both flops (dense) and flops_sparse" in msg


def test_every_shipped_card_lies_in_the_ranges():
    for path in sorted(GPU_DIR.glob("*.yaml")):
        c = read_gpu(str(path))
        for key in ("hbm", "hbm_bandwidth", "host_link_per_direction", "nic_per_gpu"):
            lo, hi = RANGES[key]
            assert lo <= getattr(c, key) <= hi, (c.name, key)
        assert all(RANGES["flops"][0] <= v <= RANGES["flops"][1] for v in c.flops.values())


def test_validate_keeps_huge_numbers_in_their_columns(tmp_path, capsys):
    gpu = gpu_card(tmp_path, GPU_CARD.replace("hbm: 80 GiB", "hbm: 4 TiB"))
    p = tmp_path / "s.yaml"
    p.write_text(
        f"name: big\nprofile: {{model: llama-3.2-1b, gpu: {gpu}, gpus: 4096, tp: 32, pcp: 128}}\n"
        "workload: {kind: synthetic, requests: 5, arrivals: {process: poisson, rate: 1/s},"
        " prompt_tokens: {dist: fixed, value: 1024}}\n"
    )
    assert main(["validate", str(p)]) == 0
    rows = [ln for ln in capsys.readouterr().out.splitlines() if ln.endswith(" GB")]
    assert len(rows) >= 8
    for row in rows:  # two figures, each after a blank: never run together
        assert len(re.findall(r"(?<= )[\d,.]+ GB", row)) == 2, row


# ---- point 4: a card's mistake is named at the card's line ----------------------------


def test_a_zero_nic_is_named_at_the_card_s_line(tmp_path, capsys):
    text = GPU_CARD.replace("nic_per_gpu: 400 Gb/s", "nic_per_gpu: 0 Gb/s")
    msg = refused(tmp_path, capsys, gpu=gpu_card(tmp_path, text))
    assert msg.startswith(f"{tmp_path / 'g.yaml'}:9: profile.gpu: nic_per_gpu: ")


def test_profiles_show_names_the_card_s_line(tmp_path, capsys):
    gpu_card(tmp_path, GPU_CARD.replace("hbm: 80 GiB", "hbm: -1 GiB"))
    rc = main(["profiles", "show", "llama-3.1-8b", str(tmp_path / "g.yaml")])
    err = capsys.readouterr().err.strip()
    assert (
        rc == 2
        and err == f"kvsim: error: {tmp_path / 'g.yaml'}:4: hbm: must be positive, got '-1 GiB'"
    )


# ---- point 11: Ada and AMD generations, a card's own efficiency ------------------------


@pytest.mark.parametrize(
    "gen, dtypes",
    [("ada", {"bf16", "fp8"}), ("cdna3", {"bf16", "fp8"}), ("cdna4", {"bf16", "fp8", "fp4"})],
)
def test_new_generations_have_sourced_efficiency(gen, dtypes):
    for dtype in dtypes:
        for param, v in curve(gen, "dense", dtype).items():
            assert v.lo <= v.value <= v.hi and len(v.source) > 5, (gen, dtype, param)


def test_an_l40s_and_the_amd_cards_compose(tmp_path, capsys):
    l40s = gpu_card(
        tmp_path,
        GPU_CARD.replace("generation: hopper", "generation: ada")
        .replace("1979 TFLOP/s", "733 TFLOP/s")
        .replace("nvlink_per_gpu: 450 GB/s", "nvlink_per_gpu: 0 GB/s"),
    )
    for gpu in (str(tmp_path / l40s), "MI300X", "MI355X"):
        assert main(["profiles", "show", "llama-3.1-8b", gpu, "--json"]) == 0
        n = json.loads(capsys.readouterr().out)["numbers"]
        assert all(math.isfinite(v) and v >= 0 for v in n.values() if isinstance(v, float))
        assert all(math.isfinite(v) and v >= 0 for v in n["lone_16k_parts_s"].values())


def test_a_card_states_its_own_efficiency(tmp_path):
    text = GPU_CARD + (
        "efficiency:\n"
        "  dense:\n"
        "    bf16: {e_max: {value: 0.3, lo: 0.2, hi: 0.4}, half: 10, source: measured}\n"
        "  host_link_frac: 0.7\n"
    )
    gpu_card(tmp_path, text)
    comp = compose({"model": "llama-3.1-8b", "gpu": str(tmp_path / "g.yaml")})
    a = comp.assume
    assert a.v("dense.e_max") == 0.3 and a.v("dense.half") == 10 and a.v("host_link_frac") == 0.7
    assert a["dense.e_max"].mark == "card" and a["dense.e_max"].lo == 0.2
    assert a["dense.e_max"].source == "measured"
    assert comp.roofline_numbers()["ops"]["dense"]["e_max"] == pytest.approx(0.3)
    # the rest is the generation's
    assert a.v("dense.e_mem") == curve("hopper", "dense", "bf16")["e_mem"].value
    assert a.v("attention.e_max") == curve("hopper", "attention", "bf16")["e_max"].value


@pytest.mark.parametrize(
    "block, fragment",
    [
        (
            "  host_link_frac: 1.5\n",
            "efficiency.host_link_frac: expected a fraction in (0, 1], got 1.5",
        ),
        ("  dense: {bf16: {e_max: {value: 0.5, lo: 0.6, hi: 0.7}}}\n", "outside [lo, hi]"),
        ("  dense: {int8: {e_max: 0.5}}\n", "unknown dtype 'int8'"),
        ("  dense: {bf16: {speed: 0.5}}\n", "efficiency.dense.bf16.speed: unknown field"),
        ("  speed: 0.5\n", "efficiency.speed: unknown field"),
    ],
)
def test_bad_card_efficiency_is_refused_at_its_line(tmp_path, capsys, block, fragment):
    msg = refused(tmp_path, capsys, gpu=gpu_card(tmp_path, GPU_CARD + "efficiency:\n" + block))
    assert msg.startswith(f"{tmp_path / 'g.yaml'}:11: ") and fragment in msg


# ---- point 12: a calibrated profile of the same system is said ------------------------


def test_profiles_show_says_the_calibrated_profile_and_by_how_much(capsys):
    argv = ["profiles", "show", "glm-5", "B300", "--gpus", "8", "--pcp", "8", "--ep", "8"]
    assert main(argv) == 0
    notes = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("note: ")]
    assert len(notes) == 1
    # regression check (numbers of today's shipped cards and catalogue): 0.310 s vs 0.209 s
    assert "b300-pcp8-glm5" in notes[0] and "0.310 s" in notes[0] and "0.209 s" in notes[0]
    assert "1.49x faster" in notes[0]
    # no calibrated profile of Llama-3.1-8B on H100: no note
    assert calibrated_notes(compose({"model": "llama-3.1-8b", "gpu": "H100"})) == []


def test_a_run_on_the_composed_profile_says_it(tmp_path, capsys):
    p = scenario(tmp_path, "glm-5", "B300", 8)
    p.write_text(p.read_text().replace("gpus: 8}", "gpus: 8, pcp: 8, ep: 8}"))
    out = tmp_path / "out"
    assert main(["run", str(p), "--out", str(out), "--quiet"]) == 0
    table = capsys.readouterr().out
    assert "note" in table and "calibrated profile b300-pcp8-glm5" in table
    summary = json.loads((out / "summary.json").read_text())
    assert len(summary["profile_notes"]) == 1


# ---- point 15: HBM capacity in GiB, as the datasheets mean it -------------------------

# each shipped card's HBM in bytes: the datasheet's "N GB" of HBM is N GiB
HBM_BYTES = {
    "A100-80GB": 85_899_345_920,  # 80 GiB
    "H100-SXM": 85_899_345_920,  # 80 GiB (nvidia-smi: 81,559 MiB usable)
    "H200": 151_397_597_184,  # 141 GiB
    "B200": 193_273_528_320,  # 180 GiB
    "B300": 309_237_645_312,  # 288 GiB
    "GB200": 199_715_979_264,  # 186 GiB
    "MI300X": 206_158_430_208,  # 192 GiB
    "MI355X": 309_237_645_312,  # 288 GiB
}


@pytest.mark.parametrize("name", sorted(HBM_BYTES))
def test_each_card_s_hbm_in_bytes(name):
    assert read_gpu(name).hbm == HBM_BYTES[name]


def test_the_gib_convention_gives_the_published_pools():
    # gpt-oss-120b on one H100 (weights 65.2 GB): 80 GiB x 0.9 - weights - 5 GB reserve
    comp = compose({"model": "gpt-oss-120b", "gpu": "H100"})
    assert comp.kv_pool_per_gpu == pytest.approx(80 * GiB * 0.9 - comp.weights_per_gpu - 5e9)
    assert 6.5e9 < comp.kv_pool_per_gpu < 7.5e9  # about 6.8 GB (was 1.8 GB at 80e9)


# ---- point 17: card names are safe to print -------------------------------------------


@pytest.mark.parametrize(
    "old, new, field",
    [
        ("name: Test-GPU", 'name: "Test\\nGPU"', "name"),
        ("name: Test-GPU", 'name: "Test\\x1b[31mGPU"', "name"),
        ("name: Test-GPU", 'name: Test-GPU\naliases: ["a\\u202eb"]', "aliases.0"),
        ("host_link: PCIe Gen5 x16", 'host_link: "PCIe\\rGen5"', "host_link"),
    ],
)
def test_unsafe_characters_in_card_text_are_refused(tmp_path, capsys, old, new, field):
    msg = refused(tmp_path, capsys, gpu=gpu_card(tmp_path, GPU_CARD.replace(old, new)))
    assert msg.startswith(f"{tmp_path / 'g.yaml'}:") and f"{field}: unsafe character" in msg
    assert "\x1b" not in msg and "\r" not in msg


def test_each_printed_efficiency_carries_its_own_mark(tmp_path, capsys):
    # a card that states only its attention's e_max: the attention row says "card" beside
    # the generation's marks of its other parameters; the dense row keeps the generation's
    gpu_card(tmp_path, GPU_CARD + "efficiency:\n  attention: {bf16: {e_max: 0.7}}\n")
    assert main(["profiles", "show", "llama-3.1-8b", str(tmp_path / "g.yaml")]) == 0
    rows = {line[:32].strip(): line for line in capsys.readouterr().out.splitlines()}
    assert rows["attention"].endswith("(card/H/M)")
    assert rows["dense GEMMs"].endswith("(H)")
    assert rows["host link"].endswith(f"({host_link_frac('hopper').mark})")


def test_moe_keys_in_a_nested_mapping_are_refused_not_read_as_dense(tmp_path, capsys):
    # DBRX keeps its experts under ffn_config: read as dense it would be a quarter of its
    # size; kvsim reads MoE keys at the top level only, so it refuses, naming the paths
    cfg = {
        "architectures": ["DbrxForCausalLM"],
        "hidden_size": 6144,
        "num_attention_heads": 48,
        "num_hidden_layers": 40,
        "num_key_value_heads": 8,
        "intermediate_size": 10752,
        "vocab_size": 100352,
        "torch_dtype": "bfloat16",
        "ffn_config": {"ffn_hidden_size": 10752, "moe_num_experts": 16, "moe_top_k": 4},
    }
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    assert main(["profiles", "show", str(tmp_path / "config.json"), "H100-SXM"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "config.json" in err
    assert "ffn_config.moe_num_experts, ffn_config.moe_top_k" in err
    # a nested mapping without MoE keys (quantisation, RoPE scaling) is not in the way
    cfg.pop("ffn_config")
    cfg["rope_scaling"] = {"type": "linear", "factor": 2.0}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    assert main(["profiles", "show", str(tmp_path / "config.json"), "H100-SXM"]) == 0
