"""Model cards (kvsim/catalogue/modelcard.py): derived quantities computed by hand.

Every expected number is worked out in the comment beside it from the card's config.json
values (kvsim/catalogue/models/*.json, copied from the models' Hugging Face configs).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import yaml
from pydantic import TypeAdapter

from kvsim.catalogue.modelcard import ModelCard
from kvsim.catalogue.models import MODEL_DIR, list_models, read_model
from kvsim.config.schema import KvLayout
from kvsim.errors import InputError

MiB = 2**20
SHIPPED = sorted(p.stem for p in MODEL_DIR.glob("*.json"))
REQUIRED = {
    "llama-3.1-8b",
    "llama-3.2-1b",
    "llama-3.1-70b",
    "qwen3-4b",
    "qwen3-32b",
    "qwen3-235b-a22b",
    "deepseek-v3",
    "gpt-oss-120b",
    "kimi-k2",
    "glm-5",
    "minimax-m2",
}


def constants(card: ModelCard) -> dict[str, object]:
    """Every field and derived quantity but the card's name, description and source."""
    out: dict[str, object] = {
        k: v
        for k, v in dataclasses.asdict(card).items()
        if k not in ("name", "description", "source")
    }
    out.update(
        params=card.params(),
        linear=card.linear_flops_per_token(),
        pair=card.pair_flops(),
        window=card.window_pair_flops(),
        indexer=card.indexer_pair_flops(),
        dense_bytes=card.dense_weight_bytes(),
        expert_bytes=card.expert_weight_bytes(),
        kv1=card.kv_bytes_per_token(1),
        kv8=card.kv_bytes_per_token(8),
        layout=card.kv_layout(),
        allreduce=card.allreduce_bytes_per_token(),
        alltoall=card.alltoall_bytes_per_token(),
    )
    return out


def test_shipped_cards_listed_sorted():
    names = [m["name"] for m in list_models()]
    assert names == sorted(names) == SHIPPED
    assert set(names) >= REQUIRED
    for m in list_models():
        assert m["description"] and m["source"].startswith("http")


# ---- KV bytes against vLLM's offloading blog (16-token blocks, contiguous layout) ----------


@pytest.mark.parametrize(
    ("name", "tp", "mib"),
    [
        # 16 tok x 32 layers x 2 (K,V) x 8 KV heads x 128 dims x 2 B = 2,097,152 B = 2 MiB
        ("llama-3.1-8b", 1, 2.0),
        # 16 x 16 layers x 2 x 8 heads x 64 dims x 2 B = 524,288 B = 0.5 MiB
        ("llama-3.2-1b", 1, 0.5),
        # 16 x 36 layers x 2 x 8 heads x 128 dims x 2 B = 2,359,296 B = 2.25 MiB
        ("qwen3-4b", 1, 2.25),
        # TP4: 8 KV heads / 4 = 2 per GPU; 16 x 80 x 2 x 2 x 128 x 2 B = 1,310,720 B = 1.25 MiB
        ("llama-3.1-70b", 4, 1.25),
    ],
)
def test_block_bytes_match_vllm_blog(name, tp, mib):
    card = read_model(name)
    block = 16 * card.kv_bytes_per_token(tp) / MiB
    assert block == pytest.approx(mib, rel=0.03)


def test_kv_heads_replicated_beyond_kv_heads_and_mla_not_split():
    llama = read_model("llama-3.1-8b")
    # tp 16 > 8 KV heads: one head per GPU (vLLM replicates): 32 x 2 x 1 x 128 x 2 = 16,384 B
    assert llama.kv_bytes_per_token(16) == 16_384
    # tp 2: 4 heads: 32 x 2 x 4 x 128 x 2 = 65,536 B
    assert llama.kv_bytes_per_token(2) == 65_536
    ds = read_model("deepseek-v3")
    # MLA, BF16: 61 layers x (512 + 64) x 2 B = 70,272 B on every rank, any tp
    assert ds.kv_bytes_per_token(1) == ds.kv_bytes_per_token(8) == 70_272
    with pytest.raises(InputError, match="tp"):
        llama.kv_bytes_per_token(0)


@pytest.mark.parametrize("name", SHIPPED)
def test_kv_layout_is_a_valid_scenario_layout(name):
    card = read_model(name)
    layout = TypeAdapter(KvLayout).validate_python(card.kv_layout())
    assert layout.bytes_per_token() == card.kv_bytes_per_token(1)


# ---- FLOPs and parameters --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "published"),
    [
        # dense cards whose published figure is the total: Llama-3.1-70B 70.6B, Qwen3-32B
        # 32.8B, Qwen3-4B 4.0B (tied: the LM head is the embedding, a matmul)
        ("llama-3.1-70b", 70.6e9),
        ("qwen3-32b", 32.8e9),
        ("qwen3-4b", 4.0e9),
        # MoE: DeepSeek-V3 37B activated, Qwen3-235B-A22B 22B activated
        ("deepseek-v3", 37e9),
        ("qwen3-235b-a22b", 22e9),
    ],
)
def test_linear_flops_twice_the_active_params(name, published):
    assert read_model(name).linear_flops_per_token() == pytest.approx(2 * published, rel=0.05)


def test_qwen3_4b_linear_flops_by_hand():
    card = read_model("qwen3-4b")
    # per layer: q 2560 x 32x128 = 10,485,760; k, v 2560 x 8x128 = 2,621,440 each;
    # o 4096 x 2560 = 10,485,760; MLP 3 x 2560 x 9728 = 74,711,040 -> 100,925,440
    # x 36 layers = 3,633,315,840; tied LM head 151,936 x 2560 = 388,956,160
    # -> 4,022,272,000 matmul params a token passes; x 2 FLOPs
    assert card.linear_flops_per_token() == 2 * 4_022_272_000
    # total = the same (the tied table counted once): 4,022,272,000
    assert card.params() == (4_022_272_000, 4_022_272_000)
    # pair: 36 layers x 2 x 32 heads x (128 + 128) = 589,824 FLOPs per query-key pair
    assert card.pair_flops() == 589_824
    # BF16 weights: 4,022,272,000 x 2 B
    assert card.dense_weight_bytes() == 8_044_544_000
    assert card.expert_weight_bytes() == 0


def test_deepseek_v3_by_hand():
    card = read_model("deepseek-v3")
    p = card.param_breakdown()
    # MLA per layer: q_a 7168 x 1536 = 11,010,048; q_b 1536 x 128 x (128 + 64) = 37,748,736;
    # kv_a 7168 x (512 + 64) = 4,128,768; kv_b 512 x 128 x (128 + 128) = 16,777,216;
    # o 128 x 128 x 7168 = 117,440,512 -> 187,105,280; x 61 layers
    assert p["attention"] == 61 * 187_105_280
    # 3 dense layers (first_k_dense_replace) x 3 x 7168 x 18432
    assert p["dense_mlp"] == 3 * 3 * 7168 * 18432
    # 58 MoE layers x 256 experts x 3 x 7168 x 2048 (one expert: 44,040,192)
    assert p["routed_experts"] == 58 * 256 * 44_040_192
    assert p["shared_experts"] == 58 * 1 * 44_040_192
    assert p["router"] == 58 * 7168 * 256
    # naive prefill MLA: 61 x 2 x 128 heads x ((128 + 64) + 128) = 4,997,120 per pair
    assert card.pair_flops() == 4_997_120
    # experts at FP8 (1 B): 58 x 256 x 44,040,192 = 653,908,770,816 B
    assert card.expert_weight_bytes() == 653_908_770_816
    # dense: embedding + LM head + router at BF16: (2 x 129,280 x 7168 + 58 x 7168 x 256)
    # x 2 B; attention + dense MLP + shared expert at FP8 (1 B)
    hi = (2 * 129_280 * 7168 + 58 * 7168 * 256) * 2
    lo = 61 * 187_105_280 + 3 * 3 * 7168 * 18432 + 58 * 44_040_192
    assert card.dense_weight_bytes() == hi + lo
    # dispatch + combine: 2 x 58 MoE layers x 8 experts x 7168 x 2 B = 13,303,808 B
    assert card.alltoall_bytes_per_token() == 13_303_808
    # TP all-reduce: 2 x 61 layers x 7168 x 2 B = 1,748,992 B
    assert card.allreduce_bytes_per_token() == 1_748_992


def test_gpt_oss_sliding_window_and_mxfp4():
    card = read_model("gpt-oss-120b")
    # layer_types: 18 sliding_attention + 18 full_attention
    assert (card.sliding_layers, card.full_layers, card.sliding_window) == (18, 18, 128)
    # KV of the full layers only: 18 x 2 x 8 heads x 64 dims x 2 B = 36,864 B/token
    assert card.kv_bytes_per_token() == 36_864
    # per pair and layer 2 x 64 heads x (64 + 64) = 16,384; x 18 layers each kind
    assert card.pair_flops() == card.window_pair_flops() == 18 * 16_384 == 294_912
    # one expert: gate_up 2880 x 5760 + down 2880 x 2880 = 3 x 2880^2 = 24,883,200;
    # 36 x 128 of them at 4.25 bits = 0.53125 B
    assert card.expert_weight_bytes() == 36 * 128 * 24_883_200 * 0.53125
    # everything else at BF16 (quant_method mxfp4 converts only the experts)
    assert (card.weight_dtype, card.expert_dtype, card.kv_dtype) == ("bf16", "mxfp4", "bf16")


def test_glm5_card_matches_the_default_profile():
    card = read_model("glm-5")
    # fp8_ds_mla: 78 layers x (512 B FP8 latent + 512/128 x 4 B scales + 64 x 2 B rope)
    # = 78 x 656 = 51,168 B/token
    assert card.kv_bytes_per_token() == 51_168
    assert card.kv_bytes_per_token(8) == 51_168
    profile = yaml.safe_load((MODEL_DIR.parent.parent / "profiles/b300-pcp8-glm5.yaml").read_text())
    want = profile["model"]["kv_layout"]
    got = card.kv_layout()
    assert {k: got[k] for k in want} == want
    # ~744 GB of FP8 weights (shared/HARDWARE.md)
    weights = card.dense_weight_bytes() + card.expert_weight_bytes()
    assert weights == pytest.approx(744e9, rel=0.05)
    # routed experts: 75 MoE layers x 256 x 3 x 6144 x 2048 B = 724,775,731,200 B
    assert card.expert_weight_bytes() == 724_775_731_200
    # dense MLA, naive prefill: 78 x 2 x 64 heads x ((192 + 64) + 256) = 5,111,808 per pair
    assert card.pair_flops() == 5_111_808
    # DSA indexer: 78 x 2 x 32 heads x 128 dims = 638,976 per pair; top-2048 keys
    assert card.indexer_pair_flops() == 638_976
    assert card.sparse_top_k == 2048
    # config head_dim (192) is not MLA's qk dim: 192 + 64 = 256
    assert card.head_dim == 256


@pytest.mark.parametrize("name", SHIPPED)
def test_params_within_5_percent_of_published(name):
    card = read_model(name)
    total, active = card.params()
    assert card.published_total > 0, "every shipped card states its published total"
    assert total == pytest.approx(card.published_total, rel=0.05)
    if card.experts:  # dense models publish one figure, the total
        assert card.published_active > 0
        assert active == pytest.approx(card.published_active, rel=0.05)
    assert 0 < active <= total


# ---- a user's config.json ----------------------------------------------------------------------


@pytest.mark.parametrize("name", SHIPPED)
def test_user_config_json_gives_the_same_constants(name, tmp_path):
    shipped = read_model(name)
    doc = json.loads((MODEL_DIR / f"{name}.json").read_text())
    folder = tmp_path / name
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(doc))
    copy = read_model(f"{name}/config.json", base_dir=tmp_path)
    assert copy.name == name  # the folder's name
    assert constants(copy) == constants(shipped)

    # without the "kvsim" key (a plain Hugging Face config.json) it still reads; only the
    # serving choice kv_cache_dtype and the published figures live there
    del doc["kvsim"]
    (folder / "config.json").write_text(json.dumps(doc, indent=1))
    plain = read_model(str(folder / "config.json"))
    assert plain.source == str(folder / "config.json")
    assert plain.params() == shipped.params()
    assert plain.linear_flops_per_token() == shipped.linear_flops_per_token()
    assert plain.expert_weight_bytes() == shipped.expert_weight_bytes()
    if name == "glm-5":  # KV at the activation dtype: 78 x (512 + 64) x 2 B = 89,856 B
        assert plain.kv_dtype == "bf16"
        assert plain.kv_bytes_per_token() == 89_856
    else:
        assert plain.kv_bytes_per_token() == shipped.kv_bytes_per_token()


def test_unknown_keys_ignored_and_name_case_insensitive(tmp_path):
    doc = json.loads((MODEL_DIR / "llama-3.1-8b.json").read_text())
    doc.update({"rope_scaling": {"rope_type": "llama3", "factor": 8.0}, "bos_token_id": 128000})
    path = tmp_path / "my-llama.json"
    path.write_text(json.dumps(doc))
    assert read_model("my-llama.json", base_dir=tmp_path).name == "my-llama"
    assert constants(read_model(str(path))) == constants(read_model("Llama-3.1-8B"))


# ---- bad input: one InputError naming the file and the field -----------------------------------


def _write(tmp_path: Path, doc: object) -> str:
    path = tmp_path / "config.json"
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return str(path)


def _llama() -> dict:
    doc = json.loads((MODEL_DIR / "llama-3.1-8b.json").read_text())
    del doc["kvsim"]
    return doc


@pytest.mark.parametrize(
    ("change", "field", "words"),
    [
        ({"num_key_value_heads": None}, "num_key_value_heads", "missing (needed for the KV size)"),
        ({"num_hidden_layers": -32}, "num_hidden_layers", "must be positive"),
        ({"hidden_size": "4096"}, "hidden_size", "expected an integer"),
        ({"hidden_size": 4096.5}, "hidden_size", "expected an integer"),
        ({"num_attention_heads": 0}, "num_attention_heads", "must be positive"),
        ({"tie_word_embeddings": "no"}, "tie_word_embeddings", "expected true or false"),
        ({"torch_dtype": "int3"}, "torch_dtype", "unknown dtype"),
        ({"num_key_value_heads": 7}, "num_key_value_heads", "does not divide"),
        ({"quantization_config": {"quant_method": "hqq"}}, "quant_method", "not supported"),
        ({"num_local_experts": 8}, "num_experts_per_tok", "missing"),
        ({"kvsim": {"kv_cache_dtype": "fp4"}}, "kvsim.kv_cache_dtype", "unknown"),
        ({"kvsim": {"kv_cache_dtype": "fp8_ds_mla"}}, "kvsim.kv_cache_dtype", "needs MLA"),
        ({"layer_types": ["full_attention"]}, "layer_types", "1 entries for 32 layers"),
    ],
)
def test_bad_config_names_file_and_field(tmp_path, change, field, words):
    doc = _llama()
    for k, v in change.items():
        if v is None:
            del doc[k]
        else:
            doc[k] = v
    path = _write(tmp_path, doc)
    with pytest.raises(InputError) as err:
        read_model(path)
    msg = str(err.value)
    assert msg.startswith(path + ": ")
    assert field in msg and words in msg
    assert "\n" not in msg


def test_mla_missing_rope_dim(tmp_path):
    doc = json.loads((MODEL_DIR / "deepseek-v3.json").read_text())
    del doc["qk_rope_head_dim"]
    path = _write(tmp_path, doc)
    with pytest.raises(InputError, match=r"config\.json: qk_rope_head_dim: missing"):
        read_model(path)


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ('{"num_hidden_layers": 32,', "not valid JSON"),
        ("[1, 2]", "expected a JSON object"),
        ('{"num_hidden_layers": NaN}', "not valid JSON"),
        ("", "not valid JSON"),
    ],
)
def test_bad_json(tmp_path, text, words):
    path = _write(tmp_path, text)
    with pytest.raises(InputError, match=words) as err:
        read_model(path)
    assert "config.json" in str(err.value)


def test_unknown_name_lists_shipped_and_missing_file(tmp_path):
    with pytest.raises(InputError) as err:
        read_model("llama-9")
    assert "llama-3.1-8b" in str(err.value) and "glm-5" in str(err.value)
    with pytest.raises(InputError, match="not found"):
        read_model("nothere/config.json", base_dir=tmp_path)
    with pytest.raises(InputError, match="is a folder"):
        (tmp_path / "d.json").mkdir()
        read_model("d.json", base_dir=tmp_path)


def test_lm_head_share():
    card = read_model("llama-3.2-1b")
    # 2 x 128,256 x 2048 = 525,336,576 FLOPs per token, tied or not
    assert card.lm_head_flops_per_token() == 525_336_576
    assert card.lm_head_flops_per_token() / card.linear_flops_per_token() == pytest.approx(
        0.21, abs=0.01
    )
