"""A model card read from a Hugging Face-style ``config.json``: :func:`card_from_config`.

A card is a ``config.json`` (nothing is downloaded): the shipped ones, in
``kvsim/catalogue/models/NAME.json``, hold a subset of each model's real Hugging Face
config with the values verbatim (mark H) plus one extra top-level key ``"kvsim"`` with the
card's sources (``description``, ``source``, optional ``kv_cache_dtype``, the published
``params`` and ``notes``). A user's own ``config.json`` (no ``"kvsim"`` key) reads from the
standard keys alone; keys kvsim does not use are ignored (real configs carry many), but a
key given twice is refused at its line and ``num_hidden_layers`` is at most
:data:`MAX_LAYERS`.

Keys read (the first present of each group):

- size: ``num_hidden_layers``, ``hidden_size``, ``num_attention_heads``, ``vocab_size``,
  ``num_key_value_heads`` (GQA), ``head_dim`` (default ``hidden_size / heads``, as HF),
  ``intermediate_size``, ``tie_word_embeddings`` (default false, the Llama/Qwen/DeepSeek
  config classes' default);
- MLA (when ``kv_lora_rank`` is set): ``kv_lora_rank``, ``q_lora_rank`` (null: a full
  query projection), ``qk_rope_head_dim``, ``qk_nope_head_dim``, ``v_head_dim``;
- MoE: routed experts ``n_routed_experts`` | ``num_experts`` | ``num_local_experts`` |
  ``moe_num_experts`` (ERNIE); ``num_experts_per_tok`` | ``experts_per_token`` |
  ``moe_k``; the expert width ``moe_intermediate_size`` (Mixtral-style configs with
  ``num_local_experts`` and no ``moe_intermediate_size`` use ``intermediate_size``:
  gpt-oss, MiniMax-M2); ``n_shared_experts`` | ``moe_num_shared_experts`` (each as wide
  as a routed expert, DeepSeek's layout) or ``shared_expert_intermediate_size`` (Qwen2-MoE,
  a whole number of experts); dense layers from ``first_k_dense_replace`` (+
  ``moe_layer_freq``), ``mlp_only_layers`` + ``decoder_sparse_step`` (Qwen-MoE) or
  ``moe_layer_start_index`` / ``moe_layer_end_index`` / ``moe_layer_interval`` (ERNIE),
  counted arithmetically. Keys of one group that disagree, half an MoE config (experts
  per token without experts, or the reverse) and any other MoE-looking key (``*expert*``,
  ``*moe*``) that changes sizes are refused, naming the key: never read as dense;
- sliding window: ``layer_types`` (``"sliding_attention"`` entries) with
  ``sliding_window``; without ``layer_types``, ``sliding_window`` applies to every layer
  unless ``use_sliding_window`` is false (Qwen: then layers from ``max_window_layers`` on);
  a model with every layer sliding keeps every layer's KV per token (:attr:`ModelCard.kv_layers`);
- sparse attention (DSA indexer): ``index_topk``, ``index_n_heads``, ``index_head_dim``;
- dtypes: the activation dtype from ``torch_dtype`` | ``dtype`` (absent: bf16, L); the
  weights' from ``quantization_config`` (or the older ``compression_config``):
  :mod:`kvsim.catalogue.quantconfig` reads ``quant_method`` ``"fp8"`` (every linear layer
  in FP8, 1 B; the embeddings, LM head and routers at the activation dtype, as DeepSeek-V3,
  Kimi-K2 and MiniMax-M2 keep them), ``"mxfp4"`` (routed experts in MXFP4, 4.25 bits a
  weight: 4-bit E2M1 + one 8-bit E8M0 scale per 32 weights, OCP MX spec; the rest at the
  activation dtype, gpt-oss's ``modules_to_not_convert``), ``"awq"``, ``"gptq"`` and
  ``"compressed-tensors"`` (``int4``/``int8`` weights with group scales, ``fp8``,
  ``nvfp4``, ``mxfp4``; the layers their ignore lists keep unquantised) and refuses the
  rest (``bitsandbytes`` included), naming the key. The KV cache is at the activation
  dtype unless ``kvsim.kv_cache_dtype`` names vLLM's ``--kv-cache-dtype`` (``fp8``,
  ``fp8_e4m3``, ``fp8_e5m2``, ``fp8_ds_mla``, ``bfloat16``, ``auto``).

Multi-token-prediction layers (``num_nextn_predict_layers``) are not counted: they serve
speculative decoding, not prefill. Norm weights, biases and attention sinks (< 0.1% of any
shipped card) are left out of the parameter counts, and FP8 block scales (one FP32 per
128 x 128 block, 0.02%) out of the weight bytes.
"""

from __future__ import annotations

from typing import Any

from kvsim.catalogue.configjson import ConfigReader
from kvsim.catalogue.modelcard import DS_MLA_TILE, ModelCard
from kvsim.catalogue.quantconfig import Shape, read_quantization
from kvsim.errors import shown

_TORCH_DTYPES = {
    "bfloat16": "bf16",
    "float16": "fp16",
    "half": "fp16",
    "float32": "fp32",
    "float": "fp32",
}
#: vLLM's --kv-cache-dtype choices -> kvsim's dtype names (None: the activation dtype)
_KV_CACHE_DTYPES: dict[str, str | None] = {
    "auto": None,
    "bfloat16": "bf16",
    "bf16": "bf16",
    "float16": "fp16",
    "fp16": "fp16",
    "half": "fp16",
    "fp8": "fp8",
    "fp8_e4m3": "fp8",
    "fp8_e5m2": "fp8",
    "fp8_ds_mla": "fp8_ds_mla",
}


def _dtype(r: ConfigReader) -> str:
    key = r.first("torch_dtype", "dtype")
    if key is None:
        return "bf16"  # L: what vLLM serves an unmarked checkpoint in on current GPUs
    name = r.text(key)
    assert name is not None
    dt = _TORCH_DTYPES.get(name.lower().removeprefix("torch."))
    if dt is None:
        raise r.fail(key, f"unknown dtype {shown(name)} (known: {', '.join(_TORCH_DTYPES)})")
    return dt


def _sliding(r: ConfigReader, layers: int) -> tuple[int, int]:
    """(sliding_window, sliding_layers)."""
    if r.has("layer_types"):
        types = r.doc["layer_types"]
        if not isinstance(types, list) or not all(isinstance(t, str) for t in types):
            raise r.fail("layer_types", "expected a list of strings")
        if len(types) != layers:
            raise r.fail(
                "layer_types", f"{len(types)} entries for {layers} layers (num_hidden_layers)"
            )
        n = sum(1 for t in types if t == "sliding_attention")
        if n == 0:
            return 0, 0
        return r.num("sliding_window", "the sliding_attention layers"), n
    if not r.has("sliding_window"):
        return 0, 0
    if r.has("use_sliding_window") and not r.flag("use_sliding_window", False):
        return 0, 0
    window = r.num("sliding_window", "the sliding-window layers")
    if r.has("use_sliding_window"):  # Qwen: layers from max_window_layers on slide
        first = r.num("max_window_layers", "the sliding-window layers", zero=True)
        return window, max(0, layers - first)
    return window, layers  # Mistral-style: every layer slides


#: the MoE key families kvsim reads (the first present of each group wins; two that
#: disagree are refused): routed experts, experts per token, shared experts
_EXPERT_KEYS = ("n_routed_experts", "num_experts", "num_local_experts", "moe_num_experts")
_PER_TOKEN_KEYS = ("num_experts_per_tok", "experts_per_token", "moe_k")
_SHARED_KEYS = ("n_shared_experts", "moe_num_shared_experts")
_LAYOUT_KEYS = (
    "moe_intermediate_size",
    "shared_expert_intermediate_size",
    "first_k_dense_replace",
    "moe_layer_freq",
    "mlp_only_layers",
    "decoder_sparse_step",
    "moe_layer_start_index",
    "moe_layer_end_index",
    "moe_layer_interval",
)
#: MoE-looking keys that change no size or FLOP count (routing scores, losses, groups)
_MOE_IGNORED = frozenset(
    {
        "norm_topk_prob",
        "moe_norm_min",
        "moe_use_aux_free",
        "moe_capacity",
        "moe_gate",
        "moe_router_dtype",
        "router_aux_loss_coef",
        "output_router_logits",
        "ep_size",
    }
)
_MOE_READ = frozenset(_EXPERT_KEYS + _PER_TOKEN_KEYS + _SHARED_KEYS + _LAYOUT_KEYS)
#: a config's layer count is bounded (the largest published model has under 200 layers)
MAX_LAYERS = 10_000


#: nested mappings whose keys are not model sizes (quantisation, RoPE scaling): not scanned
_NESTED_READ = frozenset({"quantization_config", "rope_scaling", "compression_config"})


def _moe_looking(doc: dict[str, Any], prefix: str) -> list[str]:
    """Dotted paths of the MoE-looking keys (``*expert*``, ``*moe*``, not null) anywhere
    inside a nested mapping."""
    out = []
    for k, v in doc.items():
        path = f"{prefix}.{k}"
        if isinstance(v, dict):
            out += _moe_looking(v, path)
        elif ("expert" in k.lower() or "moe" in k.lower()) and v is not None:
            out.append(path)
    return out


def _moe_keys(r: ConfigReader) -> None:
    """Refuse MoE-looking keys (``*expert*``, ``moe_*``) kvsim does not read, naming them:
    read as a dense model, such a config would be silently wrong."""
    odd = sorted(
        k
        for k in r.doc
        if ("expert" in k.lower() or "moe" in k.lower())
        and k not in _MOE_READ
        and k not in _MOE_IGNORED
        and r.doc[k] is not None
    )
    nested = [
        (k, path)
        for k, v in r.doc.items()
        if isinstance(v, dict) and k not in _NESTED_READ
        for path in _moe_looking(v, k)
    ]
    if nested:  # DBRX's ffn_config: {moe_num_experts, moe_top_k}: not read, so refused
        key = nested[0][0]
        raise r.fail(
            key,
            f"MoE key{'s' if len(nested) > 1 else ''} inside a nested mapping kvsim does "
            f"not read: {', '.join(p for _, p in nested[:5])} (it reads MoE keys at the "
            "top level only: docs/catalogue.md); remove them if the model is dense",
        )
    if odd:
        raise r.fail(
            odd[0],
            f"MoE key{'s' if len(odd) > 1 else ''} kvsim does not read: {', '.join(odd)} "
            f"(it reads {', '.join(_EXPERT_KEYS)}; {', '.join(_PER_TOKEN_KEYS)}; "
            "docs/catalogue.md lists the rest); remove them if the model is dense",
        )


def _one_of(r: ConfigReader, keys: tuple[str, ...], need: str, *, zero: bool) -> tuple[str, int]:
    """(key, value) of the first of ``keys`` present; ("", 0) if none; every present one
    must agree."""
    got = [(k, r.num(k, need, zero=zero)) for k in keys if r.has(k)]
    if not got:
        return "", 0
    for k, v in got[1:]:
        if v != got[0][1]:
            raise r.fail(k, f"{v} disagrees with {got[0][0]} ({got[0][1]})")
    return got[0]


def _moe_layer_count(r: ConfigReader, layers: int) -> int:
    """Layers with a routed MoE MLP, counted arithmetically (never layer by layer)."""
    if r.has("first_k_dense_replace") or r.has("moe_layer_freq"):  # DeepSeek, GLM
        first = r.num("first_k_dense_replace", "", default=0, zero=True)
        freq = r.num("moe_layer_freq", "", default=1)
        if first > layers:
            raise r.fail("first_k_dense_replace", f"{first} > {layers} layers")
        # i in [first, layers) with i % freq == 0
        return (layers - 1) // freq - (first - 1) // freq if first > 0 else (layers - 1) // freq + 1
    if (
        r.has("moe_layer_start_index")
        or r.has("moe_layer_interval")
        or (r.has("moe_layer_end_index"))
    ):  # ERNIE: start <= i <= end and (i + 1) % interval == 0
        start = r.num("moe_layer_start_index", "", default=0, zero=True)
        end = layers - 1
        if r.has("moe_layer_end_index") and r.doc["moe_layer_end_index"] != -1:
            end = min(r.num("moe_layer_end_index", "", zero=True), layers - 1)
        step = r.num("moe_layer_interval", "", default=1)
        if start > end:
            return 0
        return (end + 1) // step - start // step
    if r.has("mlp_only_layers") or r.has("decoder_sparse_step"):  # Qwen-MoE
        only = r.doc.get("mlp_only_layers") or []
        if not isinstance(only, list) or not all(
            isinstance(i, int) and not isinstance(i, bool) for i in only
        ):
            raise r.fail("mlp_only_layers", "expected a list of layer indices")
        step = r.num("decoder_sparse_step", "", default=1)
        dense = {i for i in only if 0 <= i < layers and (i + 1) % step == 0}
        return layers // step - len(dense)
    return layers


def _moe(r: ConfigReader, layers: int) -> tuple[int, int, int, int, int]:
    """(experts, experts_per_token, expert_intermediate, shared_experts, dense_layers)."""
    _moe_keys(r)
    key, experts = _one_of(r, _EXPERT_KEYS, "MoE", zero=True)
    k_key, k = _one_of(r, _PER_TOKEN_KEYS, "the routed FLOPs (MoE)", zero=True)
    if not experts:
        if k:  # half an MoE config: refused, not read as a dense model
            raise r.fail(
                k_key,
                f"{k} experts per token but "
                + (f"{key} is 0" if key else f"no expert count ({', '.join(_EXPERT_KEYS)})"),
            )
        return 0, 0, 0, 0, layers
    if not k:
        raise r.fail(
            k_key or _PER_TOKEN_KEYS[0],
            f"missing or 0 (needed for the routed FLOPs of {key}: {experts} experts)",
        )
    if k > experts:
        raise r.fail(k_key, f"{k} experts per token but only {experts} experts ({key})")
    if r.has("moe_intermediate_size") or key != "num_local_experts":
        width = r.num("moe_intermediate_size", "the expert weights (MoE)")
    else:  # Mixtral-style: intermediate_size is the expert width
        width = r.num("intermediate_size", "the expert weights (MoE)")
    _, shared = _one_of(r, _SHARED_KEYS, "", zero=True)
    if r.has("shared_expert_intermediate_size"):  # Qwen2-MoE: one wide shared expert
        size = r.num("shared_expert_intermediate_size", "", zero=True)
        if size % width:
            raise r.fail(
                "shared_expert_intermediate_size",
                f"{size} is not a whole number of experts of moe_intermediate_size {width}",
            )
        if shared and shared != size // width:
            raise r.fail("shared_expert_intermediate_size", f"disagrees with {shared} shared")
        shared = size // width
    return experts, k, width, shared, layers - _moe_layer_count(r, layers)


def card_from_config(
    doc: dict[str, Any], *, where: str, name: str, source: str | None = None
) -> ModelCard:
    """A :class:`ModelCard` from a parsed config.json (``where``: the file, for errors)."""
    r = ConfigReader(doc, where)
    meta = doc.get("kvsim") or {}
    if not isinstance(meta, dict):
        raise r.fail("kvsim", f"expected an object, got {shown(meta)}")

    layers = r.num("num_hidden_layers", "every per-layer quantity")
    if layers > MAX_LAYERS:
        raise r.fail("num_hidden_layers", f"{layers:,} layers: more than {MAX_LAYERS:,}")
    hidden = r.num("hidden_size", "the weights and FLOPs")
    heads = r.num("num_attention_heads", "the attention FLOPs")
    vocab = r.num("vocab_size", "the embedding and LM head")
    tie = r.flag("tie_word_embeddings", False)

    if r.has("kv_lora_rank"):  # MLA
        attention = "mla"
        kv_lora = r.num("kv_lora_rank", "the KV size (MLA)")
        q_lora = r.num("q_lora_rank", "", default=0, zero=True)
        rope = r.num("qk_rope_head_dim", "the KV size (MLA)", zero=True)
        nope = r.num("qk_nope_head_dim", "the attention FLOPs (MLA)", zero=True)
        v_dim = r.num("v_head_dim", "the attention FLOPs (MLA)")
        if rope + nope == 0:
            raise r.fail("qk_nope_head_dim", "qk_nope_head_dim + qk_rope_head_dim must be > 0")
        kv_heads, head_dim = heads, nope + rope
    else:
        attention = "gqa"
        kv_lora = q_lora = rope = nope = v_dim = 0
        kv_heads = r.num("num_key_value_heads", "the KV size")
        if r.has("head_dim"):
            head_dim = r.num("head_dim", "the KV size")
        elif hidden % heads:
            raise r.fail(
                "head_dim",
                f"missing, and hidden_size {hidden} / {heads} heads is "
                "not whole (needed for the KV size)",
            )
        else:
            head_dim = hidden // heads
        if heads % kv_heads:
            raise r.fail(
                "num_key_value_heads", f"{kv_heads} does not divide {heads} attention heads"
            )

    experts, k, width, shared, dense_layers = _moe(r, layers)
    intermediate = r.num("intermediate_size", "the dense MLP") if dense_layers else 0
    window, sliding_layers = _sliding(r, layers)
    if attention == "mla" and sliding_layers:
        raise r.fail("sliding_window", "sliding-window MLA layers are not modelled")

    top_k = idx_heads = idx_dim = 0
    if r.has("index_topk"):
        top_k = r.num("index_topk", "sparse attention")
        idx_heads = r.num("index_n_heads", "the sparse-attention indexer")
        idx_dim = r.num("index_head_dim", "the sparse-attention indexer")

    act = _dtype(r)
    model_type = str(doc.get("model_type") or "")
    quant = read_quantization(
        r,
        act,
        Shape(
            layers=layers,
            dense_layers=dense_layers if experts else layers,
            moe_layers=layers - dense_layers if experts else 0,
            shared=bool(shared),
            mla=attention == "mla",
            q_lora=bool(q_lora),
            indexer=bool(idx_heads),
            experts_naming=(
                "gpt_oss"
                if model_type == "gpt_oss"
                else "block_sparse_moe"
                if r.has("num_local_experts")
                else "mlp"
            ),
            shared_naming=(
                "shared_expert" if r.has("shared_expert_intermediate_size") else "shared_experts"
            ),
        ),
    )
    kv_dtype = act
    kv_choice = meta.get("kv_cache_dtype")
    if kv_choice is not None:
        if not isinstance(kv_choice, str) or kv_choice.lower() not in _KV_CACHE_DTYPES:
            raise r.fail(
                "kvsim.kv_cache_dtype",
                f"unknown {shown(kv_choice)} (known: {', '.join(_KV_CACHE_DTYPES)})",
            )
        kv_dtype = _KV_CACHE_DTYPES[kv_choice.lower()] or act
        if kv_dtype == "fp8_ds_mla" and (attention != "mla" or kv_lora % DS_MLA_TILE):
            raise r.fail(
                "kvsim.kv_cache_dtype",
                "fp8_ds_mla needs MLA with kv_lora_rank a multiple of 128",
            )

    params = meta.get("params") or {}
    if not isinstance(params, dict):
        raise r.fail("kvsim.params", f"expected an object, got {shown(params)}")
    published: list[float] = []
    for key in ("total", "active"):
        v = params.get(key)
        if v is None:
            published.append(0.0)
        elif isinstance(v, bool) or not isinstance(v, int | float) or not v > 0:
            raise r.fail(f"kvsim.params.{key}", f"expected a positive number, got {shown(v)}")
        else:
            published.append(float(v))

    def text(key: str, default: str) -> str:
        v = meta.get(key)
        if v is None:
            return default
        if isinstance(v, list) and all(isinstance(s, str) for s in v):
            return "; ".join(v)
        if not isinstance(v, str):
            raise r.fail(f"kvsim.{key}", f"expected a string, got {shown(v)}")
        return v

    arch = doc.get("architectures")
    kind = arch[0] if isinstance(arch, list) and arch and isinstance(arch[0], str) else ""
    default_desc = kind or str(doc.get("model_type") or "model") + " (from config.json)"
    return ModelCard(
        name=name,
        description=text("description", default_desc),
        source=text("source", source or where),
        layers=layers,
        hidden=hidden,
        heads=heads,
        kv_heads=kv_heads,
        head_dim=head_dim,
        vocab=vocab,
        intermediate=intermediate,
        tie_embeddings=tie,
        attention=attention,
        kv_lora_rank=kv_lora,
        q_lora_rank=q_lora,
        qk_rope_head_dim=rope,
        qk_nope_head_dim=nope,
        v_head_dim=v_dim,
        experts=experts,
        shared_experts=shared,
        experts_per_token=k,
        expert_intermediate=width,
        dense_layers=dense_layers,
        sliding_window=window,
        sliding_layers=sliding_layers,
        sparse_top_k=top_k,
        indexer_heads=idx_heads,
        indexer_head_dim=idx_dim,
        weight_dtype=quant.weight_dtype,
        expert_dtype=quant.expert_dtype,
        kv_dtype=kv_dtype,
        activation_dtype=act,
        published_total=published[0],
        published_active=published[1],
        params_source=text("params_source", str(params.get("source") or "")),
        notes=text("notes", ""),
        quant_method=quant.method,
        part_bytes=quant.part_bytes,
        quant_exempt=quant.exempt,
        quant_activations=quant.activations,
        quant_detail=quant.detail,
    )
