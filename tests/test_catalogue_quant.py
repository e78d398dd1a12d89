"""Quantised checkpoints' config.json (kvsim/catalogue/quantconfig.py): AWQ, GPTQ and
compressed-tensors weights, each read from a sample of a real file's keys, with the
weight bytes worked out by hand beside each assertion; refusals exit 2 with one line that
names the key.

Shapes (per layer; parameters): Llama-3.1-8B / Mistral-7B attention 4096 x 4096 (q, o) +
2 x 4096 x 1024 (k, v) = 41,943,040, MLP 3 x 4096 x 14,336 = 176,160,768 -> 218,103,808;
x 32 layers = 6,979,321,856 linear weights. Llama-3.1-70B: attention 2 x 8192^2 + 2 x 8192
x 1024 = 150,994,944, MLP 3 x 8192 x 28,672 = 704,643,072 -> 855,638,016; x 80 =
68,451,041,280.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kvsim.catalogue.gpus import read_gpu
from kvsim.catalogue.modelcard import DTYPE_BYTES, int_weight_bytes
from kvsim.catalogue.models import MODEL_DIR, read_model
from kvsim.cli import main
from kvsim.errors import InputError

LLAMA8_LINEAR = 32 * 218_103_808  # 6,979,321,856
LLAMA8_EMBED = 128_256 * 4096  # 525,336,576 each for the embedding and the LM head


def _arch(name: str) -> dict[str, Any]:
    doc = json.loads((MODEL_DIR / f"{name}.json").read_text())
    doc.pop("kvsim")
    doc.pop("quantization_config", None)
    return doc


def _read(tmp_path: Path, doc: dict[str, Any]):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(doc, indent=1))
    return read_model(str(path))


# ---- the per-weight arithmetic -----------------------------------------------------------


def test_int_weight_bytes_by_hand():
    # 4 bits + one FP16 scale per 128: 0.5 + 2 / 128 = 0.515625 B
    assert int_weight_bytes(4, 128, False) == 0.515625
    # AWQ's zero point (4 bits per group) too: 0.5 + (2 + 0.5) / 128 = 0.51953125 B
    assert int_weight_bytes(4, 128, True) == 0.51953125
    # Kimi-K2-Thinking's groups of 32: 0.5 + 2 / 32 = 0.5625 B (4.5 bits)
    assert int_weight_bytes(4, 32, False) == 0.5625
    # 8 bits, groups of 128 with zero points: 1 + (2 + 1) / 128 = 1.0234375 B
    assert int_weight_bytes(8, 128, True) == 1.0234375
    # one scale per output channel (group_size -1 -> 0): the values alone
    assert int_weight_bytes(4, 0, True) == 0.5
    # NVFP4: 4 bits + one FP8 scale per 16 = 4.5 bits
    assert DTYPE_BYTES["nvfp4"] == 0.5625 and DTYPE_BYTES["int4"] == 0.5


# ---- AWQ ---------------------------------------------------------------------------------


def test_awq_llama_70b_card_by_hand():
    # hugging-quants/Meta-Llama-3.1-70B-Instruct-AWQ-INT4: bits 4, group_size 128,
    # zero_point true, modules_to_not_convert null, torch_dtype float16
    card = read_model("llama-3.1-70b-awq")
    assert (card.quant_method, card.weight_dtype, card.activation_dtype) == ("awq", "int4", "fp16")
    p = card.param_breakdown()
    assert p["attention"] + p["dense_mlp"] == 68_451_041_280
    # every linear weight 0.51953125 B = 133/256: 68,451,041,280 x 133 / 256
    linear = 68_451_041_280 * 133 // 256
    # embedding and LM head FP16, untied: 2 x 128,256 x 8192 x 2 B = 4,202,692,608 B
    assert card.dense_weight_bytes() == linear + 4_202_692_608 == 39_765_147_648
    assert card.expert_weight_bytes() == 0
    # the parameters and FLOPs are the BF16 card's: quantisation changes bytes only
    bf16 = read_model("llama-3.1-70b")
    assert card.params() == bf16.params()
    assert card.linear_flops_per_token() == bf16.linear_flops_per_token()
    assert card.kv_bytes_per_token(4) == bf16.kv_bytes_per_token(4)  # FP16 KV, 2 B as BF16


def test_awq_modules_to_not_convert_keeps_parts_unquantised(tmp_path):
    doc = _arch("llama-3.1-8b")
    doc["quantization_config"] = {
        "quant_method": "awq",
        "bits": 4,
        "group_size": 128,
        "zero_point": True,
        "version": "gemm",
        "modules_to_not_convert": ["self_attn"],  # substring, as vLLM's is_layer_skipped_awq
    }
    card = _read(tmp_path, doc)
    assert dict(card.quant_exempt) == {"attention": 1.0}
    # attention 32 x 41,943,040 at BF16 (2 B), the MLP 32 x 176,160,768 at 0.51953125 B,
    # embedding + LM head 2 x 525,336,576 x 2 B
    attention = 32 * 41_943_040 * 2
    mlp = 32 * 176_160_768 * 133 // 256
    assert card.dense_weight_bytes() == attention + mlp + 2 * LLAMA8_EMBED * 2


def test_awq_substring_that_splits_a_part_is_refused(tmp_path, capsys):
    # DeepSeek-Coder-V2-Lite-Base-AWQ once shipped modules_to_not_convert ["mlp.gate"]: as
    # a substring it matches the dense layers' mlp.gate_proj but not up/down_proj
    doc = _arch("deepseek-v3")
    doc["quantization_config"] = {
        "quant_method": "awq",
        "bits": 4,
        "group_size": 64,
        "zero_point": True,
        "version": "gemm",
        "modules_to_not_convert": ["mlp.gate"],
    }
    path = tmp_path / "config.json"
    path.write_text(json.dumps(doc))
    assert main(["profiles", "show", str(path), "H100"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and str(path) in err
    assert "quantization_config.modules_to_not_convert: covers mlp.gate_proj but not" in err


# ---- GPTQ --------------------------------------------------------------------------------

# boadisamson/Mistral-7B-GPTQ-4bit-GPTQ-Instruct-v0.2-o config.json (AutoGPTQ), its keys
MISTRAL_GPTQ = {
    "architectures": ["MistralForCausalLM"],
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 8,
    "quantization_config": {
        "bits": 4,
        "damp_percent": 0.01,
        "desc_act": True,
        "group_size": 128,
        "is_marlin_format": False,
        "quant_method": "gptq",
        "static_groups": False,
        "sym": True,
        "true_sequential": True,
    },
    "sliding_window": None,
    "tie_word_embeddings": False,
    "torch_dtype": "float16",
    "vocab_size": 32000,
}


def test_gptq_dense_by_hand(tmp_path):
    card = _read(tmp_path, MISTRAL_GPTQ)
    assert (card.quant_method, card.weight_dtype) == ("gptq", "int4")
    # symmetric: no zero point on the GPU; 0.5 + 2 / 128 = 0.515625 B = 33/64 per weight;
    # desc_act is irrelevant to the bytes (g_idx, 4 B per input channel, left out)
    linear = LLAMA8_LINEAR * 33 // 64  # the same 32 x 218,103,808 shape as Llama-3.1-8B
    assert linear == 3_598_712_832
    # embedding + LM head at FP16: 2 x 32,000 x 4096 x 2 B = 524,288,000 B
    assert card.dense_weight_bytes() == linear + 524_288_000 == 4_123_000_832


def test_gptq_asymmetric_lm_head_and_8_bits(tmp_path):
    doc = json.loads(json.dumps(MISTRAL_GPTQ))
    doc["quantization_config"].update(bits=8, sym=False, lm_head=True, group_size=-1)
    card = _read(tmp_path, doc)
    # 8-bit, one scale per channel (-1): 1 B per weight, LM head quantised too; the
    # embedding stays FP16: 32,000 x 4096 x 2 B
    assert card.weight_dtype == "int8"
    assert card.dense_weight_bytes() == LLAMA8_LINEAR + 32_000 * 4096 * 1 + 32_000 * 4096 * 2


# TheBloke/dolphin-2.5-mixtral-8x7b-GPTQ config.json: bits 4, group 128, desc_act, and
# modules_in_block_to_quantize naming the attention and expert projections (w1, w3, w2)
def _mixtral_gptq(blocks: list[list[str]]) -> dict[str, Any]:
    return {
        "architectures": ["MixtralForCausalLM"],
        "hidden_size": 4096,
        "intermediate_size": 14336,
        "num_attention_heads": 32,
        "num_experts_per_tok": 2,
        "num_hidden_layers": 32,
        "num_key_value_heads": 8,
        "num_local_experts": 8,
        "quantization_config": {
            "bits": 4,
            "group_size": 128,
            "damp_percent": 0.1,
            "desc_act": True,
            "sym": True,
            "true_sequential": True,
            "modules_in_block_to_quantize": blocks,
            "quant_method": "gptq",
        },
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "vocab_size": 32002,
    }


def test_gptq_moe_modules_in_block_to_quantize(tmp_path):
    experts = [f"block_sparse_moe.experts.{e}.w{i}" for i in (1, 3) for e in range(8)]
    blocks = [
        ["self_attn.k_proj", "self_attn.v_proj", "self_attn.q_proj"],
        ["self_attn.o_proj"],
        experts,
        [f"block_sparse_moe.experts.{e}.w2" for e in range(8)],
    ]
    card = _read(tmp_path, _mixtral_gptq(blocks))
    assert (card.weight_dtype, card.expert_dtype) == ("int4", "int4")
    # experts: 32 layers x 8 x 3 x 4096 x 14,336 x 0.515625 B
    assert card.expert_weight_bytes() == 32 * 8 * 176_160_768 * 33 // 64
    # attention at 0.515625 B; embedding + LM head (2 x 32,002 x 4096) and the routers
    # (32 x 4096 x 8) at BF16
    dense = 32 * 41_943_040 * 33 // 64 + (2 * 32_002 * 4096 + 32 * 4096 * 8) * 2
    assert card.dense_weight_bytes() == dense
    # attention left out of the list: kept at BF16, the experts still int4
    card = _read(tmp_path, _mixtral_gptq(blocks[2:]))
    assert (card.weight_dtype, card.expert_dtype) == ("bf16", "int4")
    assert dict(card.quant_exempt) == {"attention": 1.0}


# ---- compressed-tensors -------------------------------------------------------------------


def _ct(weights: dict[str, Any] | None, **extra: Any) -> dict[str, Any]:
    """An llm-compressor quantization_config (RedHatAI/neuralmagic checkpoints' keys)."""
    group: dict[str, Any] = {"targets": ["Linear"], "weights": weights}
    group["input_activations"] = extra.pop("input_activations", None)
    q = {
        "config_groups": {"group_0": group},
        "format": extra.pop("format", "pack-quantized"),
        "ignore": extra.pop("ignore", ["lm_head"]),
        "kv_cache_scheme": None,
        "quant_method": "compressed-tensors",
        "quantization_status": "compressed",
    }
    q.update(extra)
    return q


W4A16 = {"num_bits": 4, "type": "int", "symmetric": True, "strategy": "group", "group_size": 128}


def test_compressed_tensors_w4a16_by_hand(tmp_path):
    doc = _arch("llama-3.1-8b")
    doc["quantization_config"] = _ct(W4A16)
    card = _read(tmp_path, doc)
    assert (card.quant_method, card.weight_dtype, card.quant_activations) == (
        "compressed-tensors",
        "int4",
        "",
    )
    # 6,979,321,856 x 0.515625 B + embedding and LM head (ignored) at BF16
    assert card.dense_weight_bytes() == 3_598_712_832 + 2 * LLAMA8_EMBED * 2
    # an asymmetric scheme keeps a 4-bit zero point per group: 0.51953125 B
    doc["quantization_config"] = _ct(dict(W4A16, symmetric=False))
    assert _read(tmp_path, doc).dense_weight_bytes() == (
        LLAMA8_LINEAR * 133 // 256 + 2 * LLAMA8_EMBED * 2
    )
    # without "lm_head" in ignore the LM head (a Linear) is quantised too
    doc["quantization_config"] = _ct(W4A16, ignore=[])
    card = _read(tmp_path, doc)
    assert card.dense_weight_bytes() == (LLAMA8_LINEAR + LLAMA8_EMBED) * 33 // 64 + (
        LLAMA8_EMBED * 2
    )


@pytest.mark.parametrize(
    ("weights", "acts", "dtype", "acts_name", "per_weight"),
    [
        # W8A8-int8: int8 per-channel weights, int8 per-token activations: 1 B a weight
        (
            {"num_bits": 8, "type": "int", "symmetric": True, "strategy": "channel"},
            {"num_bits": 8, "type": "int", "strategy": "token", "dynamic": True},
            "int8",
            "int8",
            1.0,
        ),
        # W8A8-FP8 (RedHatAI *-FP8-dynamic): FP8 weights per channel, FP8 activations
        (
            {"num_bits": 8, "type": "float", "symmetric": True, "strategy": "channel"},
            {"num_bits": 8, "type": "float", "strategy": "token", "dynamic": True},
            "fp8",
            "fp8",
            1.0,
        ),
    ],
)
def test_compressed_tensors_w8a8(tmp_path, weights, acts, dtype, acts_name, per_weight):
    doc = _arch("llama-3.1-8b")
    fmt = "int-quantized" if dtype == "int8" else "float-quantized"
    doc["quantization_config"] = _ct(weights, input_activations=acts, format=fmt)
    card = _read(tmp_path, doc)
    assert (card.weight_dtype, card.quant_activations) == (dtype, acts_name)
    assert card.dense_weight_bytes() == LLAMA8_LINEAR * per_weight + 2 * LLAMA8_EMBED * 2
    # compute dtype on an H100: FP8 tensor cores for FP8; INT8 has no peak on a card: bf16
    assert read_gpu("H100").compute_dtype(card.weight_dtype) == (
        "fp8" if dtype == "fp8" else "bf16"
    )


def test_kimi_k2_thinking_card_by_hand():
    card = read_model("kimi-k2-thinking")
    k2 = read_model("kimi-k2")
    assert (card.weight_dtype, card.expert_dtype, card.activation_dtype) == ("bf16", "int4", "bf16")
    assert dict(card.quant_exempt) == {
        "attention": 1.0,
        "dense_mlp": 1.0,
        "lm_head": 1.0,
        "shared_experts": 1.0,
    }
    # routed experts: 60 MoE layers x 384 x 3 x 7168 x 2048 at 0.5625 B (int4, groups of 32)
    experts = 60 * 384 * 3 * 7168 * 2048
    assert card.expert_weight_bytes() == experts * 9 // 16 == 570_760_888_320
    # the rest BF16: Kimi-K2's (FP8) dense parts at 2 B instead of 1 B, embedding, LM head
    # and routers at 2 B either way
    p = k2.param_breakdown()
    rest = p["attention"] + p["dense_mlp"] + p["shared_experts"]
    hi = p["embedding"] + p["lm_head"] + p["router"]
    assert card.dense_weight_bytes() == (rest + hi) * 2
    assert card.dense_weight_bytes() + card.expert_weight_bytes() == pytest.approx(594.2e9, 1e-3)
    assert card.params() == k2.params() and card.kv_bytes_per_token() == k2.kv_bytes_per_token()


def test_ct_ignore_listed_layer_by_layer(tmp_path):
    # llm-compressor writes some ignore lists module by module: layer 0's MLP kept in BF16
    doc = _arch("llama-3.1-8b")
    ignore = ["lm_head"] + [f"model.layers.0.mlp.{p}_proj" for p in ("gate", "up", "down")]
    doc["quantization_config"] = _ct(W4A16, ignore=ignore)
    card = _read(tmp_path, doc)
    assert dict(card.quant_exempt) == {"dense_mlp": 1 / 32, "lm_head": 1.0}
    # MLP: 31 layers at 0.515625 B, 1 at 2 B; attention all int4
    mlp = 31 * 176_160_768 * 33 // 64 + 176_160_768 * 2
    attention = 32 * 41_943_040 * 33 // 64
    assert card.dense_weight_bytes() == pytest.approx(
        mlp + attention + 2 * LLAMA8_EMBED * 2, rel=1e-12
    )


def test_ct_targets_name_the_experts_only(tmp_path):
    # a group that targets the routed experts by pattern: the rest stays BF16
    doc = _arch("qwen3-235b-a22b")
    q = _ct(dict(W4A16, group_size=32), ignore=[])
    q["config_groups"]["group_0"]["targets"] = ["re:.*mlp\\.experts.*"]
    doc["quantization_config"] = q
    card = _read(tmp_path, doc)
    assert (card.weight_dtype, card.expert_dtype) == ("bf16", "int4")
    # 94 layers x 128 experts x 3 x 4096 x 1536 at 0.5625 B
    assert card.expert_weight_bytes() == 94 * 128 * 3 * 4096 * 1536 * 9 // 16


def test_compute_dtype_of_integer_and_fp4_weights():
    h100, b200, a100 = read_gpu("H100"), read_gpu("B200"), read_gpu("A100")
    # weight-only int4/int8 (Marlin, Machete): bf16 tensor cores on Ampere and Hopper alike
    for gpu in (h100, b200, a100):
        assert gpu.compute_dtype("int4") == gpu.compute_dtype("int8") == "bf16"
    assert b200.compute_dtype("nvfp4") == "fp4" and h100.compute_dtype("nvfp4") == "bf16"


# ---- refusals: exit 2, one line naming the key ---------------------------------------------


@pytest.mark.parametrize(
    ("quant", "key", "words"),
    [
        (dict(MISTRAL_GPTQ["quantization_config"], bits=3), "quantization_config.bits", "3-bit"),
        ({"quant_method": "awq", "bits": 2}, "quantization_config.bits", "2-bit"),
        ({"quant_method": "hqq"}, "quantization_config.quant_method", "'hqq' is not supported"),
        ({"bits": 4}, "quantization_config.quant_method", "missing"),
        (
            {"quant_method": "bitsandbytes", "load_in_4bit": True},
            "quantization_config.quant_method",
            "'bitsandbytes' is not modelled",
        ),
        (
            dict(MISTRAL_GPTQ["quantization_config"], dynamic={"-:.*down_proj": {}}),
            "quantization_config.dynamic",
            "not modelled",
        ),
        (_ct(W4A16, format="marlin-24"), "quantization_config.format", "'marlin-24'"),
        (
            _ct(dict(W4A16, num_bits=2)),
            "quantization_config.config_groups.group_0.weights.num_bits",
            "2-bit",
        ),
        (
            _ct(W4A16, ignore=["re:.*q_proj"]),
            "quantization_config.ignore",
            "covers self_attn.q_proj but not self_attn.k_proj",
        ),
        (
            _ct(W4A16, sparsity_config={"format": "sparse-24-bitmask"}),
            "quantization_config.sparsity_config.format",
            "sparse weights",
        ),
        (_ct(W4A16, ignore=["re:("]), "quantization_config.ignore", "not a valid pattern"),
    ],
)
def test_refusals_exit_2_naming_the_key(tmp_path, capsys, quant, key, words):
    doc = _arch("llama-3.1-8b")
    doc["quantization_config"] = quant
    path = tmp_path / "config.json"
    path.write_text(json.dumps(doc, indent=1))
    with pytest.raises(InputError):
        read_model(str(path))
    assert main(["profiles", "show", str(path), "H100"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err, err
    assert err.startswith(f"kvsim: error: {path}: {key}: "), err
    assert words in err, err


def test_older_compression_config_is_read(tmp_path):
    # early llm-compressor checkpoints wrote compression_config: read, not silently BF16
    doc = _arch("llama-3.1-8b")
    q = _ct(W4A16)
    del q["quant_method"]
    doc["compression_config"] = q
    assert _read(tmp_path, doc).weight_dtype == "int4"


def test_unquantised_and_fp8_cards_unchanged():
    # the shipped FP8 / MXFP4 / BF16 cards carry no per-part bytes: their weights are
    # parameters x DTYPE_BYTES, as before quantised configs were read
    for name in ("deepseek-v3", "gpt-oss-120b", "llama-3.1-8b", "minimax-m2"):
        card = read_model(name)
        assert card.part_bytes == () and card.quant_exempt == ()
    assert read_model("gpt-oss-120b").quant_method == "mxfp4"
    assert read_model("llama-3.1-8b").quant_method == ""
