"""The model card: :class:`ModelCard`, a model's architecture as numbers (layers, heads,
MLA, MoE, sliding window, sparse attention, dtypes), and what follows from it: parameter
counts, FLOPs per token and per attention pair, weight bytes, KV bytes per token and the
scenario's KV layout. Reading a card from a config.json is :mod:`kvsim.catalogue.hfconfig`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kvsim.errors import InputError, shown

#: bytes per value of each dtype kvsim knows (H: IEEE/OCP formats; mxfp4: OCP MX v1.0,
#: 32 E2M1 values share one E8M0 scale -> 4 + 8/32 = 4.25 bits; nvfp4: 16 E2M1 values
#: share one E4M3 scale -> 4 + 8/16 = 4.5 bits, NVIDIA's per-tensor FP32 scale left out).
#: ``int4``/``int8`` are the packed integer values alone: their group scales and zero
#: points depend on the checkpoint (:func:`int_weight_bytes`; a card's ``part_bytes``)
DTYPE_BYTES: dict[str, float] = {
    "fp32": 4.0,
    "bf16": 2.0,
    "fp16": 2.0,
    "fp8": 1.0,
    "int8": 1.0,
    "mxfp4": 4.25 / 8,
    "nvfp4": 4.5 / 8,
    "int4": 0.5,
}
#: bits of the integer weight dtypes (AWQ, GPTQ, compressed-tensors int)
INT_BITS: dict[str, int] = {"int4": 4, "int8": 8}
#: bytes of one group scale of integer weights: FP16 in AWQ and GPTQ, the model's dtype
#: (BF16/FP16) in compressed-tensors (H: the formats' scale tensors)
SCALE_BYTES = 2.0


def int_weight_bytes(bits: int, group_size: int, zero_point: bool) -> float:
    """Bytes per weight of ``bits``-bit integer weights with one 2-byte scale per
    ``group_size`` weights (0: one per output channel, left out: < 0.1% of a row of 2,048
    or more) and, with ``zero_point``, a ``bits``-bit zero point per group (packed, as AWQ's
    ``qzeros``): bits / 8 + (2 + bits / 8) / group_size. 4-bit, groups of 128 with zero
    points: 0.5 + 2.5 / 128 = 0.51953125 B."""
    value = bits / 8
    if group_size <= 0:
        return value
    return value + (SCALE_BYTES + (value if zero_point else 0.0)) / group_size


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
    # weight quantisation (kvsim/catalogue/quantconfig.py): the config's quant_method ("":
    # none); bytes per weight of each part whose bytes are not its dtype's DTYPE_BYTES
    # (group scales, zero points and unquantised layers folded in); the fraction of each
    # part kept at the activation dtype; "int8"/"fp8" where activations are quantised too
    quant_method: str = ""
    part_bytes: tuple[tuple[str, float], ...] = ()
    quant_exempt: tuple[tuple[str, float], ...] = ()
    quant_activations: str = ""
    quant_detail: str = ""

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

    def bytes_per_weight(self) -> dict[str, float]:
        """Bytes per weight of each part of :meth:`param_breakdown`: embedding, LM head and
        router at the activation dtype; attention (+ indexer), dense MLP and shared experts
        at ``weight_dtype``; routed experts at ``expert_dtype``; a quantised checkpoint's
        ``part_bytes`` (group scales, zero points, layers kept unquantised) replace these."""
        act = DTYPE_BYTES[self.activation_dtype]
        w = DTYPE_BYTES[self.weight_dtype]
        out = {
            "embedding": act,
            "lm_head": act,
            "router": act,
            "attention": w,
            "indexer": w,
            "dense_mlp": w,
            "shared_experts": w,
            "routed_experts": DTYPE_BYTES[self.expert_dtype],
        }
        out.update(self.part_bytes)
        return out

    def weight_bytes_by_part(self) -> dict[str, float]:
        """Bytes of each part, all layers: parameters x :meth:`bytes_per_weight`."""
        b = self.bytes_per_weight()
        return {part: n * b[part] for part, n in self.param_breakdown().items()}

    def dense_weight_bytes(self) -> float:
        """Weights but the routed experts (:meth:`weight_bytes_by_part`): embedding, LM head
        and router at the activation dtype; attention (+ indexer), dense MLP and shared
        experts at ``weight_dtype`` (int4: with its group scales)."""
        b = self.weight_bytes_by_part()
        hi = b["embedding"] + b["lm_head"] + b["router"]
        return hi + b["attention"] + b["indexer"] + b["dense_mlp"] + b["shared_experts"]

    def expert_weight_bytes(self) -> float:
        """Routed experts, all layers, at ``expert_dtype`` (MXFP4: 4.25 bits a weight; int4
        in groups of 32 with a BF16 scale: 4.5 bits)."""
        return self.weight_bytes_by_part()["routed_experts"]

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
        """The scenario's ``model.kv_layout`` (kvsim/config/schema/hardware.py MlaLayout or
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
