"""Model cards: a model's architecture read from a Hugging Face-style ``config.json``.

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
- dtypes: the activation dtype from ``torch_dtype`` | ``dtype`` (absent: bf16, L);
  ``quantization_config.quant_method`` ``"fp8"``: every linear layer in FP8 (1 B), the
  embeddings, LM head and routers at the activation dtype (DeepSeek-V3, Kimi-K2 and
  MiniMax-M2 keep those unquantised); ``"mxfp4"``: routed experts in MXFP4, 4.25 bits a
  weight (4-bit E2M1 + one 8-bit E8M0 scale per 32 weights, OCP MX spec), the rest at the
  activation dtype (gpt-oss's ``modules_to_not_convert``). The KV cache is at the
  activation dtype unless ``kvsim.kv_cache_dtype`` names vLLM's ``--kv-cache-dtype``
  (``fp8``, ``fp8_e4m3``, ``fp8_e5m2``, ``fp8_ds_mla``, ``bfloat16``, ``auto``).

Multi-token-prediction layers (``num_nextn_predict_layers``) are not counted: they serve
speculative decoding, not prefill. Norm weights, biases and attention sinks (< 0.1% of any
shipped card) are left out of the parameter counts, and FP8 block scales (one FP32 per
128 x 128 block, 0.02%) out of the weight bytes.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvsim.errors import InputError, shown
from kvsim.files import read_text

MODEL_DIR = Path(__file__).parent / "models"

#: bytes per value of each dtype kvsim knows (H: IEEE/OCP formats; mxfp4: OCP MX v1.0,
#: 32 E2M1 values share one E8M0 scale -> 4 + 8/32 = 4.25 bits)
DTYPE_BYTES: dict[str, float] = {
    "fp32": 4.0,
    "bf16": 2.0,
    "fp16": 2.0,
    "fp8": 1.0,
    "mxfp4": 4.25 / 8,
}
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
#: vLLM's FP8 MLA cache format (fp8_ds_mla, used with its FlashMLA sparse kernels): per
#: token and layer the FP8 latent (kv_lora_rank B), one FP32 scale per 128 latent values
#: (16 B for 512) and the rope key kept in BF16 (qk_rope_head_dim x 2 B) -> 656 B for
#: DeepSeek-V3.2 / GLM-5 shapes (H, vLLM's FlashMLA sparse backend)
DS_MLA_TILE = 128
DS_MLA_SCALE_BYTES = 4.0
#: activation bytes of one hidden vector in the TP all-reduce / EP all-to-all (BF16, L:
#: vLLM communicates activations in the model dtype; FP8 dispatch exists but is optional)
COMM_BYTES = 2.0


@dataclass(frozen=True)
class ModelCard:
    """A model's architecture as kvsim needs it; the derived quantities are methods.

    ``attention`` is ``"gqa"`` (MHA is GQA with ``kv_heads == heads``) or ``"mla"``
    (``head_dim`` then = ``qk_nope_head_dim + qk_rope_head_dim``, ``kv_heads = heads``).
    """

    name: str
    description: str
    source: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    intermediate: int
    tie_embeddings: bool
    attention: str
    kv_lora_rank: int = 0
    q_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    qk_nope_head_dim: int = 0
    v_head_dim: int = 0
    experts: int = 0
    shared_experts: int = 0
    experts_per_token: int = 0
    expert_intermediate: int = 0
    dense_layers: int = 0
    sliding_window: int = 0
    sliding_layers: int = 0
    sparse_top_k: int = 0
    indexer_heads: int = 0
    indexer_head_dim: int = 0
    weight_dtype: str = "bf16"
    expert_dtype: str = "bf16"
    kv_dtype: str = "bf16"
    # additions to the interface
    activation_dtype: str = "bf16"  # embeddings, LM head, routers (and the KV by default)
    published_total: float = 0.0  # the model's published parameter counts (0: none)
    published_active: float = 0.0
    params_source: str = ""
    notes: str = ""

    # ---- structure --------------------------------------------------------------------

    @property
    def moe_layers(self) -> int:
        """Layers whose MLP is a routed MoE (0 for a dense model)."""
        return self.layers - self.dense_layers if self.experts else 0

    @property
    def full_layers(self) -> int:
        """Layers attending to every earlier key (the rest are sliding-window layers)."""
        return self.layers - self.sliding_layers

    @property
    def kv_layers(self) -> int:
        """Layers whose KV counts per token: the full-attention layers; when every layer
        slides (Mistral-7B v0.1), all of them (below)."""
        return self.full_layers or self.layers

    def param_breakdown(self) -> dict[str, float]:
        """Parameters by part (all layers), matrices only.

        - ``embedding`` = vocab x hidden; ``lm_head`` = vocab x hidden when untied, else 0
          (the tied table is counted once, as ``embedding``);
        - ``attention`` per layer, GQA: hidden x heads x head_dim (q) + 2 x hidden x
          kv_heads x head_dim (k, v) + heads x head_dim x hidden (o); MLA: q = hidden x
          q_lora + q_lora x heads x (nope + rope) (or hidden x heads x (nope + rope)
          without q_lora), kv_a = hidden x (kv_lora + rope), kv_b = kv_lora x heads x
          (nope + v), o = heads x v x hidden;
        - ``indexer`` per layer (DSA): q_lora x idx_heads x idx_dim (its query from the
          compressed query; hidden x ... without q_lora) + hidden x idx_dim (key) + hidden x
          idx_heads (head weights);
        - ``dense_mlp`` = dense_layers x 3 x hidden x intermediate (SwiGLU gate, up, down);
        - ``shared_experts`` = moe_layers x shared x 3 x hidden x expert_intermediate;
        - ``routed_experts`` = moe_layers x experts x 3 x hidden x expert_intermediate;
        - ``router`` = moe_layers x hidden x experts.
        """
        h, L = self.hidden, self.layers
        if self.attention == "mla":
            qk = self.qk_nope_head_dim + self.qk_rope_head_dim
            q = (
                h * self.q_lora_rank + self.q_lora_rank * self.heads * qk
                if self.q_lora_rank
                else h * self.heads * qk
            )
            kv_a = h * (self.kv_lora_rank + self.qk_rope_head_dim)
            kv_b = self.kv_lora_rank * self.heads * (self.qk_nope_head_dim + self.v_head_dim)
            o = self.heads * self.v_head_dim * h
            attn = q + kv_a + kv_b + o
        else:
            attn = (
                h * self.heads * self.head_dim
                + 2 * h * self.kv_heads * self.head_dim
                + self.heads * self.head_dim * h
            )
        indexer = 0
        if self.indexer_heads:
            q_in = self.q_lora_rank or h
            indexer = (
                q_in * self.indexer_heads * self.indexer_head_dim
                + h * self.indexer_head_dim
                + h * self.indexer_heads
            )
        expert = 3 * h * self.expert_intermediate
        moe = self.moe_layers
        return {
            "embedding": float(self.vocab * h),
            "lm_head": 0.0 if self.tie_embeddings else float(self.vocab * h),
            "attention": float(L * attn),
            "indexer": float(L * indexer),
            "dense_mlp": float(self.dense_layers * 3 * h * self.intermediate),
            "shared_experts": float(moe * self.shared_experts * expert),
            "routed_experts": float(moe * self.experts * expert),
            "router": float(moe * h * self.experts),
        }

    def _active_matmul_params(self) -> float:
        """Matrix parameters one token multiplies by: attention, indexer, dense MLP, shared
        experts, router, LM head, and experts_per_token / experts of the routed experts."""
        p = self.param_breakdown()
        routed = p["routed_experts"] * self.experts_per_token / self.experts if self.experts else 0
        lm_head = p["embedding"] if self.tie_embeddings else p["lm_head"]
        return (
            p["attention"]
            + p["indexer"]
            + p["dense_mlp"]
            + p["shared_experts"]
            + p["router"]
            + routed
            + lm_head
        )

    # ---- derived quantities ------------------------------------------------------------

    def params(self) -> tuple[float, float]:
        """(total, active) parameters.

        total = the sum of :meth:`param_breakdown` (a tied embedding counted once, an
        untied LM head counted as well). active = the parameters one token's forward pass
        multiplies by: everything but the routed experts it is not sent to and the input
        embedding table (a lookup). This is OpenAI's convention for gpt-oss (5.13B active:
        the unembedding counted, the embedding not); DeepSeek's and Moonshot's published
        active figures agree with it within 2%. For a dense model the published figure is
        the total.
        """
        total = sum(self.param_breakdown().values())
        return total, self._active_matmul_params()

    def linear_flops_per_token(self) -> float:
        """FLOPs of every matmul but attention's scores, per token (prefill).

        = 2 x (the matrix parameters a token passes: attention projections, MLA's down and
        up projections and the DSA indexer's, the dense MLP, shared experts,
        experts_per_token routed experts, the router, the LM head) = 2 x active parameters
        (:meth:`params`). The LM head is counted for every token (an upper bound for a
        prefill: vLLM computes logits only for each prompt's last token); subtract
        :meth:`lm_head_flops_per_token` for the prefill-only figure (2% of GLM-5's total,
        10% of Qwen3-4B's, 21% of Llama-3.2-1B's).
        """
        return 2.0 * self._active_matmul_params()

    def lm_head_flops_per_token(self) -> float:
        """The LM head's share of :meth:`linear_flops_per_token`: 2 x vocab x hidden."""
        return 2.0 * self.vocab * self.hidden

    def _pair_flops_per_layer(self) -> float:
        """2 x heads x (qk dim + v dim): QK^T and PV, one multiply-add each per dim."""
        if self.attention == "mla":
            qk = self.qk_nope_head_dim + self.qk_rope_head_dim
            return 2.0 * self.heads * (qk + self.v_head_dim)
        return 2.0 * self.heads * (2 * self.head_dim)

    def pair_flops(self) -> float:
        """Attention FLOPs per query-key pair, summed over the full-attention layers.

        Per layer 2 x heads x (qk dim + v dim): for GQA 4 x heads x head_dim; for MLA the
        naive (non-absorbed) prefill form vLLM uses for prefill, qk dim = qk_nope +
        qk_rope, v dim = v_head_dim (the absorbed decode form scores against the
        kv_lora + rope latent instead). The caller multiplies by the pairs (causal:
        ~n^2 / 2 for n new tokens with no cache).
        """
        return self.full_layers * self._pair_flops_per_layer()

    def window_pair_flops(self) -> float:
        """The same per pair for the sliding-window layers (0 if none); each query there
        sees at most ``sliding_window`` keys."""
        return self.sliding_layers * self._pair_flops_per_layer()

    def indexer_pair_flops(self) -> float:
        """Sparse attention's indexer per query-key pair: 2 x index heads x index head dim
        per layer (its FP8 scores; the ReLU and head weighting are negligible), all layers;
        0 without an indexer."""
        if not self.indexer_heads:
            return 0.0
        return self.layers * 2.0 * self.indexer_heads * self.indexer_head_dim

    def dense_weight_bytes(self) -> float:
        """Weights but the routed experts: embedding, LM head and router at the activation
        dtype; attention (+ indexer), dense MLP and shared experts at ``weight_dtype``."""
        p = self.param_breakdown()
        hi = (p["embedding"] + p["lm_head"] + p["router"]) * DTYPE_BYTES[self.activation_dtype]
        rest = p["attention"] + p["indexer"] + p["dense_mlp"] + p["shared_experts"]
        return hi + rest * DTYPE_BYTES[self.weight_dtype]

    def expert_weight_bytes(self) -> float:
        """Routed experts, all layers, at ``expert_dtype`` (MXFP4: 4.25 bits a weight)."""
        return self.param_breakdown()["routed_experts"] * DTYPE_BYTES[self.expert_dtype]

    def kv_heads_per_gpu(self, tp: int = 1) -> int:
        """KV heads one GPU holds: kv_heads / tp, replicated (1) when tp > kv_heads (H:
        vLLM's ``get_num_kv_heads``: max(1, kv_heads // tp))."""
        return max(self.kv_heads // tp, 1)

    def kv_bytes_per_token(self, tp: int = 1) -> float:
        """KV cache bytes per token on one GPU, in vLLM's layout.

        GQA: full_layers x 2 (K and V) x max(kv_heads // tp, 1) x head_dim x dtype bytes.
        MLA: layers x (kv_lora_rank + qk_rope_head_dim) x dtype bytes, not split by TP
        (every rank holds the whole latent); ``fp8_ds_mla``: layers x (kv_lora_rank x 1 +
        kv_lora_rank / 128 x 4 + qk_rope_head_dim x 2) = 656 B a layer for kv_lora 512,
        rope 64. Sliding-window layers are left out: vLLM's hybrid KV manager keeps only
        the last ``sliding_window`` tokens of them (a constant per request, not per token),
        so per token of a long prompt only the full-attention layers' KV remains. A model
        whose every layer slides has no such layer: there every layer's KV counts per token
        (:attr:`kv_layers`; exact for prompts within the window, an upper bound beyond it),
        never zero bytes a token. The DSA
        indexer's key cache (index_head_dim FP8 + a scale per token and layer) is not
        counted (a profile choice, shared/HARDWARE.md: +132 B/layer).
        """
        if not isinstance(tp, int) or isinstance(tp, bool) or tp < 1:
            raise InputError(f"tp: expected a positive integer, got {shown(tp)}")
        if self.attention == "mla":
            if self.kv_dtype == "fp8_ds_mla":
                per_layer = (
                    self.kv_lora_rank * 1.0
                    + self.kv_lora_rank / DS_MLA_TILE * DS_MLA_SCALE_BYTES
                    + self.qk_rope_head_dim * DTYPE_BYTES["bf16"]
                )
            else:
                b = DTYPE_BYTES[self.kv_dtype]
                per_layer = (self.kv_lora_rank + self.qk_rope_head_dim) * b
            return self.layers * per_layer
        b = DTYPE_BYTES[self.kv_dtype]
        return self.kv_layers * 2.0 * self.kv_heads_per_gpu(tp) * self.head_dim * b

    def kv_layout(self) -> dict[str, Any]:
        """The scenario's ``model.kv_layout`` (kvsim/config/schema.py MlaLayout or
        HeadsLayout) of one unsplit copy; its bytes_per_token == kv_bytes_per_token(1)."""
        if self.attention == "mla":
            if self.kv_dtype == "fp8_ds_mla":
                return {
                    "kind": "mla",
                    "layers": self.layers,
                    "latent_dim": self.kv_lora_rank,
                    "rope_dim": self.qk_rope_head_dim,
                    "latent_dtype_bytes": 1.0,
                    "rope_dtype_bytes": DTYPE_BYTES["bf16"],
                    "extra_bytes_per_layer": self.kv_lora_rank / DS_MLA_TILE * DS_MLA_SCALE_BYTES,
                }
            b = DTYPE_BYTES[self.kv_dtype]
            return {
                "kind": "mla",
                "layers": self.layers,
                "latent_dim": self.kv_lora_rank,
                "rope_dim": self.qk_rope_head_dim,
                "latent_dtype_bytes": b,
                "rope_dtype_bytes": b,
                "extra_bytes_per_layer": 0.0,
            }
        return {
            "kind": "mha" if self.kv_heads == self.heads else "gqa",
            "layers": self.kv_layers,
            "kv_heads": self.kv_heads,
            "head_dim": self.head_dim,
            "dtype_bytes": DTYPE_BYTES[self.kv_dtype],
            "extra_bytes_per_layer": 0.0,
        }

    def allreduce_bytes_per_token(self) -> float:
        """A token's activations through tensor-parallel all-reduces, all layers: two per
        layer (after attention and after the MLP), hidden x 2 B each = 2 x layers x hidden
        x 2 B (Megatron-style TP, H)."""
        return 2.0 * self.layers * self.hidden * COMM_BYTES

    def alltoall_bytes_per_token(self) -> float:
        """Dispatch + combine of a routed token, all MoE layers: 2 x moe_layers x
        experts_per_token x hidden x 2 B (0 for a dense model)."""
        return 2.0 * self.moe_layers * self.experts_per_token * self.hidden * COMM_BYTES


# ---- reading ------------------------------------------------------------------------------


class _Reader:
    """Typed access to one config.json's keys, every error naming the file and the key."""

    def __init__(self, doc: dict[str, Any], where: str) -> None:
        self.doc = doc
        self.where = where

    def fail(self, key: str, what: str) -> InputError:
        return InputError(f"{key}: {what}", where=self.where)

    def has(self, key: str) -> bool:
        return self.doc.get(key) is not None

    def first(self, *keys: str) -> str | None:
        """The first of ``keys`` present with a non-null value."""
        for k in keys:
            if self.has(k):
                return k
        return None

    def num(self, key: str, need: str, *, default: int | None = None, zero: bool = False) -> int:
        if not self.has(key):
            if default is not None:
                return default
            raise self.fail(key, f"missing (needed for {need})")
        v = self.doc[key]
        if isinstance(v, bool) or not isinstance(v, int):
            raise self.fail(key, f"expected an integer, got {shown(v)}")
        if v < 0 or (v == 0 and not zero):
            raise self.fail(key, f"must be {'>= 0' if zero else 'positive'}, got {v}")
        if v > 1 << 40:
            raise self.fail(key, f"implausibly large ({v:,})")
        return v

    def flag(self, key: str, default: bool) -> bool:
        if not self.has(key):
            return default
        v = self.doc[key]
        if not isinstance(v, bool):
            raise self.fail(key, f"expected true or false, got {shown(v)}")
        return v

    def text(self, key: str) -> str | None:
        if not self.has(key):
            return None
        v = self.doc[key]
        if not isinstance(v, str):
            raise self.fail(key, f"expected a string, got {shown(v)}")
        return v


def _reject_constant(name: str) -> float:
    raise ValueError(f"{name} is not a JSON number")


class _DuplicateKey(ValueError):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """json's object hook: an object with a key given twice is refused (json keeps the
    last silently), as YAML, CSV and GPU cards refuse theirs."""
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise _DuplicateKey(k)
        out[k] = v
    return out


_JSON_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|[{}\[\]:]')


def _duplicate_line(text: str, key: str) -> int | None:
    """The line of ``key``'s second occurrence in one JSON object (a token scan keeping one
    set of keys per open object), for the error message."""
    stack: list[set[str] | None] = []
    tokens = list(_JSON_TOKEN.finditer(text))
    for i, m in enumerate(tokens):
        tok = m.group()
        if tok == "{":
            stack.append(set())
        elif tok == "[":
            stack.append(None)
        elif tok in "}]":
            if stack:
                stack.pop()
        elif tok.startswith('"') and i + 1 < len(tokens) and tokens[i + 1].group() == ":":
            seen = stack[-1] if stack else None
            if seen is None:
                continue
            try:
                name = json.loads(tok)
            except ValueError:
                continue
            if name == key and name in seen:
                return text.count("\n", 0, m.start()) + 1
            seen.add(name)
    return None


def _load_json(path: Path, where: str) -> dict[str, Any]:
    text = read_text(path, what="model config")
    try:
        doc = json.loads(text, parse_constant=_reject_constant, object_pairs_hook=_no_duplicates)
    except json.JSONDecodeError as e:
        raise InputError(f"not valid JSON ({e.msg})", where=f"{where}:{e.lineno}") from None
    except _DuplicateKey as e:
        line = _duplicate_line(text, e.key)
        at = f"{where}:{line}" if line else where
        raise InputError(f"{e.key}: duplicate key", where=at) from None
    except (ValueError, RecursionError) as e:
        raise InputError(f"not valid JSON ({e})", where=where) from None
    if not isinstance(doc, dict):
        raise InputError(f"expected a JSON object, got {type(doc).__name__}", where=where)
    return doc


def _dtype(r: _Reader) -> str:
    key = r.first("torch_dtype", "dtype")
    if key is None:
        return "bf16"  # L: what vLLM serves an unmarked checkpoint in on current GPUs
    name = r.text(key)
    assert name is not None
    dt = _TORCH_DTYPES.get(name.lower().removeprefix("torch."))
    if dt is None:
        raise r.fail(key, f"unknown dtype {shown(name)} (known: {', '.join(_TORCH_DTYPES)})")
    return dt


def _quantization(r: _Reader, act: str) -> tuple[str, str]:
    """(weight_dtype, expert_dtype) from quantization_config."""
    if not r.has("quantization_config"):
        return act, act
    q = r.doc["quantization_config"]
    if not isinstance(q, dict):
        raise r.fail("quantization_config", f"expected an object, got {shown(q)}")
    method = q.get("quant_method")
    if method == "fp8":
        return "fp8", "fp8"
    if method == "mxfp4":
        return act, "mxfp4"
    raise r.fail(
        "quantization_config.quant_method",
        f"{shown(method)} is not supported (kvsim reads 'fp8' and 'mxfp4'; for another "
        "format give a copy with the quantization_config removed and the weights' bytes "
        "set in the scenario)",
    )


def _sliding(r: _Reader, layers: int) -> tuple[int, int]:
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


def _moe_keys(r: _Reader) -> None:
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


def _one_of(r: _Reader, keys: tuple[str, ...], need: str, *, zero: bool) -> tuple[str, int]:
    """(key, value) of the first of ``keys`` present; ("", 0) if none; every present one
    must agree."""
    got = [(k, r.num(k, need, zero=zero)) for k in keys if r.has(k)]
    if not got:
        return "", 0
    for k, v in got[1:]:
        if v != got[0][1]:
            raise r.fail(k, f"{v} disagrees with {got[0][0]} ({got[0][1]})")
    return got[0]


def _moe_layer_count(r: _Reader, layers: int) -> int:
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


def _moe(r: _Reader, layers: int) -> tuple[int, int, int, int, int]:
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
    r = _Reader(doc, where)
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
    weight_dtype, expert_dtype = _quantization(r, act)
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
        weight_dtype=weight_dtype,
        expert_dtype=expert_dtype,
        kv_dtype=kv_dtype,
        activation_dtype=act,
        published_total=published[0],
        published_active=published[1],
        params_source=text("params_source", str(params.get("source") or "")),
        notes=text("notes", ""),
    )


def _shipped() -> dict[str, Path]:
    return {p.stem.lower(): p for p in sorted(MODEL_DIR.glob("*.json"))}


def is_model_path(name_or_path: str) -> bool:
    """A card argument is a file when it ends in .json or contains a path separator."""
    return name_or_path.lower().endswith(".json") or "/" in name_or_path or "\\" in name_or_path


def read_model(name_or_path: str, base_dir: Path | None = None) -> ModelCard:
    """A shipped card by name (case-insensitive) or a config.json file (a path ending in
    .json or containing /, relative to ``base_dir``). InputError names the file and key."""
    if not isinstance(name_or_path, str) or not name_or_path.strip():
        raise InputError(
            f"model: expected a card name or a config.json path, got {shown(name_or_path)}"
        )
    if is_model_path(name_or_path):
        path = Path(name_or_path)
        if not path.is_absolute() and base_dir is not None:
            path = base_dir / path
        where = str(path)
        doc = _load_json(path, where)
        stem = path.parent.name if path.name.lower() == "config.json" else path.stem
        return card_from_config(doc, where=where, name=stem or "model")
    shipped = _shipped()
    card_path = shipped.get(name_or_path.strip().lower())
    if card_path is None:
        raise InputError(
            f"model: unknown card {shown(name_or_path)}; shipped: {', '.join(shipped)} "
            "(or give a config.json path)"
        )
    doc = _load_json(card_path, str(card_path))
    return card_from_config(doc, where=str(card_path), name=card_path.stem)


def list_models() -> list[dict[str, str]]:
    """Name, description and source of every shipped card, sorted by name."""
    out = []
    for name in sorted(_shipped()):
        card = read_model(name)
        out.append({"name": card.name, "description": card.description, "source": card.source})
    return out


__all__ = [
    "DTYPE_BYTES",
    "MAX_LAYERS",
    "MODEL_DIR",
    "ModelCard",
    "card_from_config",
    "is_model_path",
    "list_models",
    "read_model",
]
