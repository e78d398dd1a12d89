"""A config.json's ``quantization_config`` read into weight dtypes and bytes per weight:
:func:`read_quantization`.

Formats read (``quant_method``; anything else is refused naming the key):

- ``fp8`` (DeepSeek/Qwen FP8 block-scaled): every linear layer in FP8, 1 B a weight;
- ``mxfp4`` (gpt-oss): routed experts in MXFP4, 4.25 bits a weight, the rest unquantised;
- ``awq`` and ``gptq`` (AutoAWQ / AutoGPTQ / GPTQModel checkpoints): ``bits`` 4 or 8 integer
  weights with one FP16 scale per ``group_size`` weights (``-1``: one per output channel)
  and, where the format keeps one (AWQ ``zero_point``, GPTQ ``sym: false``), a ``bits``-bit
  zero point per group: bytes a weight = bits / 8 + (2 + bits / 8) / group_size. Every
  linear layer of the decoder is quantised, routed experts included; the embedding, the LM
  head (unless ``lm_head: true``) and the MoE routers are not. AWQ's
  ``modules_to_not_convert`` (substring match, as vLLM's ``is_layer_skipped_awq``) and
  GPTQ's ``modules_in_block_to_quantize`` say which layers stay unquantised;
- ``compressed-tensors`` (llm-compressor, RedHatAI/neuralmagic, Kimi-K2-Thinking):
  ``config_groups`` each with ``targets`` (the class ``Linear``, module names or ``re:``
  patterns) and a ``weights`` scheme: ``type: int`` with ``num_bits`` 4 or 8 (``int4``,
  ``int8``; ``strategy: group`` with ``group_size``, else one scale per channel),
  ``type: float`` 8 bits (``fp8``), 4 bits in groups of 16 (``nvfp4``: FP8 scale per 16)
  or 32 (``mxfp4``); ``input_activations`` (W8A8 int8 or FP8) are recorded; ``ignore``
  (names or ``re:`` patterns, matched as vLLM does) keeps layers unquantised. The 2:4
  sparse formats (``marlin-24``, ``sparse-24-bitmask``) are refused;
- ``bitsandbytes`` is refused: a load-time quantisation whose NF4/LLM.int8() kernels
  (a dequantise per matmul, outlier columns in 16 bits) kvsim has no efficiency for.

Layers are judged by part (:meth:`kvsim.catalogue.modelcard.ModelCard.param_breakdown`):
attention (and the DSA indexer), dense MLP, shared experts, routed experts, LM head. A
pattern is tested against each part's Hugging Face module names (``model.layers.N.
self_attn.q_proj``, ``model.layers.N.mlp.experts.E.down_proj``, Mixtral's
``block_sparse_moe``, Qwen2-MoE's ``shared_expert``); a part whose every projection is
matched stays unquantised; one listed layer by layer (``model.layers.3.mlp.down_proj``)
stays unquantised in that fraction of its layers; a part only some of whose projections
are matched is refused (kvsim counts whole parts). The embedding and the routers are at
the activation dtype whatever the config says (routers are a few MB; vLLM builds them
unquantised). GPTQ's ``g_idx`` (4 B per input channel) and per-channel scales (2 B per
row) are left out of the bytes (< 0.1%).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from kvsim.catalogue.configjson import ConfigReader
from kvsim.catalogue.modelcard import DTYPE_BYTES, INT_BITS, int_weight_bytes
from kvsim.errors import shown

#: the quant_methods kvsim reads (docs/catalogue.md)
METHODS = ("fp8", "mxfp4", "awq", "gptq", "compressed-tensors")
#: compressed-tensors formats whose weights kvsim can size (the 2:4 sparse ones it cannot)
CT_FORMATS = (
    "pack-quantized",
    "int-quantized",
    "float-quantized",
    "naive-quantized",
    "nvfp4-pack-quantized",
    "mxfp4-pack-quantized",
)
#: parts a quantisation config can keep unquantised (router and embedding never count)
PARTS = ("attention", "indexer", "dense_mlp", "shared_experts", "routed_experts", "lm_head")
_NON_EXPERT = ("attention", "indexer", "dense_mlp", "shared_experts")
_IDX = "99999"  # a layer / expert index no config names, for the patterns that name any
_LAYER = re.compile(r"^(?:.*\.)?layers\.(\d+)\.(.+)$")
#: bound on pattern tests (patterns x module names): configs list at most a few thousand
_MAX_TESTS = 5_000_000


@dataclass(frozen=True)
class Shape:
    """What the reader needs of the model: which parts exist, in how many layers, and the
    attention's projection names."""

    layers: int
    dense_layers: int
    moe_layers: int
    shared: bool
    mla: bool
    q_lora: bool
    indexer: bool
    experts_naming: str = "mlp"  # "mlp" (DeepSeek, Qwen) | "block_sparse_moe" (Mixtral,
    # MiniMax) | "gpt_oss": how the routed experts' modules are named
    shared_naming: str = "shared_experts"  # DeepSeek's; "shared_expert" for Qwen2-MoE


@dataclass(frozen=True)
class Quantization:
    """The weights' dtypes and bytes.

    ``weight_dtype``: the non-expert linear layers' (attention, dense MLP, shared experts);
    ``expert_dtype``: the routed experts'; ``part_bytes``: bytes per weight of each part
    whose bytes are not its dtype's :data:`DTYPE_BYTES` (group scales and zero points
    included, unquantised fractions folded in); ``exempt``: the fraction of each part kept
    at the activation dtype; ``activations``: ``"int8"``/``"fp8"`` where activations are
    quantised too (W8A8), else ``""``; ``detail``: one line for people.
    """

    method: str
    weight_dtype: str
    expert_dtype: str
    part_bytes: tuple[tuple[str, float], ...] = ()
    exempt: tuple[tuple[str, float], ...] = ()
    activations: str = ""
    detail: str = ""


@dataclass(frozen=True)
class _Scheme:
    dtype: str
    group_size: int  # 0: one scale per channel / tensor / block, or a float format
    zero_point: bool

    def bytes(self) -> float:
        if self.dtype in INT_BITS:
            return int_weight_bytes(INT_BITS[self.dtype], self.group_size, self.zero_point)
        return DTYPE_BYTES[self.dtype]

    def text(self) -> str:
        g = f" g{self.group_size}" if self.group_size else ""
        return f"{self.dtype}{g}{' zero-point' if self.zero_point else ''}"


#: the routed experts' module names per naming family (``{e}``: an expert index)
_EXPERT_NAMES = {
    "mlp": tuple(f"mlp.experts.{{e}}.{p}_proj" for p in ("gate", "up", "down")),
    "block_sparse_moe": tuple(f"block_sparse_moe.experts.{{e}}.w{i}" for i in (1, 2, 3)),
    "gpt_oss": ("mlp.experts.gate_up_proj", "mlp.experts.down_proj"),
}


def _projections(part: str, s: Shape) -> tuple[str, ...]:
    """Block-relative module names of ``part`` in the model's naming."""
    if part == "attention":
        if not s.mla:
            return ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj")
        q = ("self_attn.q_a_proj", "self_attn.q_b_proj") if s.q_lora else ("self_attn.q_proj",)
        return (*q, "self_attn.kv_a_proj_with_mqa", "self_attn.kv_b_proj", "self_attn.o_proj")
    if part == "indexer":
        return ("self_attn.indexer.wq_b", "self_attn.indexer.wk")
    if part == "dense_mlp":
        return ("mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")
    if part == "shared_experts":
        return tuple(f"mlp.{s.shared_naming}.{p}_proj" for p in ("gate", "up", "down"))
    if part == "routed_experts":
        return _EXPERT_NAMES[s.experts_naming]
    return ("lm_head",)


def _part_layers(part: str, s: Shape) -> int:
    return {
        "attention": s.layers,
        "indexer": s.layers if s.indexer else 0,
        "dense_mlp": s.dense_layers,
        "shared_experts": s.moe_layers if s.shared else 0,
        "routed_experts": s.moe_layers,
        "lm_head": 1,
    }[part]


def _name(part: str, layer: str, block: str) -> str:
    if part == "lm_head":
        return "lm_head"
    return f"model.layers.{layer}.{block.replace('{e}', _IDX)}"


class _Patterns:
    """One list of module patterns (an ignore list, targets, modules_to_not_convert) with
    its format's matching rule, tested against the parts' module names."""

    def __init__(
        self, r: ConfigReader, key: str, raw: Any, rule: str, shape: Shape, *, listed: bool = False
    ) -> None:
        self.r, self.key, self.rule, self.shape = r, key, rule, shape
        if raw is None:
            raw = []
        if isinstance(raw, list) and listed:  # GPTQ: [[names], [names]] or [names]
            raw = [x for item in raw for x in (item if isinstance(item, list) else [item])]
        if not isinstance(raw, list) or not all(isinstance(x, str) for x in raw):
            raise r.fail(key, f"expected a list of module names, got {shown(raw)}")
        self.generic: list[tuple[str, Any]] = []
        self.by_layer: dict[int, list[tuple[str, Any]]] = {}
        for entry in raw:
            m = _LAYER.match(entry) if not entry.startswith("re:") else None
            if m and rule != "block":
                layer = int(m.group(1))
                self.by_layer.setdefault(layer, []).append(
                    (entry, f"model.layers.{layer}.{m.group(2)}")
                )
                continue
            if entry.startswith("re:"):
                try:
                    self.generic.append((entry, re.compile(entry[3:])))
                except re.error as e:
                    raise r.fail(key, f"{shown(entry)} is not a valid pattern ({e})") from None
            elif rule == "block":  # GPTQ names are block-relative; expert indices any
                self.generic.append((entry, re.sub(r"experts\.\d+\.", f"experts.{_IDX}.", entry)))
            else:
                self.generic.append((entry, entry))
        tests = (len(self.generic) + 1) * (len(self.by_layer) + 1) * 16
        if tests > _MAX_TESTS:
            raise r.fail(key, f"{len(raw):,} entries over {len(self.by_layer):,} layers: too many")

    def _hit(self, entry: tuple[str, Any], name: str, block: str) -> bool:
        _, pat = entry
        if isinstance(pat, re.Pattern):
            return pat.match(name) is not None
        if self.rule == "substring":  # vLLM's is_layer_skipped_awq
            return pat in name
        if self.rule == "block":
            return pat == block.replace("{e}", _IDX)
        return pat == name or (name == "lm_head" and pat.endswith(".lm_head"))

    def classify(self, part: str, layer: str, extra: list[tuple[str, Any]]) -> tuple[bool, str]:
        """(every projection matched, a partial match's description or "")."""
        fam = _projections(part, self.shape)
        got = [
            b
            for b in fam
            if any(self._hit(e, _name(part, layer, b), b) for e in (*self.generic, *extra))
        ]
        if len(got) == len(fam):
            return True, ""
        if not got:
            return False, ""
        missing = ", ".join(b.replace("{e}", "E") for b in fam if b not in got)
        return False, f"{', '.join(g.replace('{e}', 'E') for g in got)} but not {missing}"

    def fraction(self, part: str) -> float:
        """The fraction of ``part``'s layers these patterns match (1.0: all)."""
        n = _part_layers(part, self.shape)
        if not n:
            return 0.0
        whole, partial = self.classify(part, _IDX, [])
        if whole:
            return 1.0
        self._partial(part, partial, "")
        if part == "lm_head":
            return 0.0
        hit = 0
        for layer, extra in self.by_layer.items():
            if layer >= self.shape.layers:
                continue
            whole, partial = self.classify(part, str(layer), extra)
            self._partial(part, partial, f" in layer {layer}")
            hit += whole
        return min(1.0, hit / n)

    def _partial(self, part: str, partial: str, where: str) -> None:
        if partial:
            how = " (matched as substrings, as vLLM does)" if self.rule == "substring" else ""
            raise self.r.fail(
                self.key,
                f"covers {partial}{where}{how}: kvsim counts whole parts ({part}); list "
                "every projection of the part or none",
            )


def _q(q: dict[str, Any], key: str, default: Any) -> Any:
    v = q.get(key)
    return default if v is None else v


def _int(r: ConfigReader, v: Any, path: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise r.fail(path, f"expected an integer, got {shown(v)}")
    return v


def _flag(r: ConfigReader, v: Any, path: str) -> bool:
    if not isinstance(v, bool):
        raise r.fail(path, f"expected true or false, got {shown(v)}")
    return v


def _int_scheme(r: ConfigReader, q: dict[str, Any], prefix: str, *, zero: bool) -> _Scheme:
    bits = _int(r, q.get("bits"), f"{prefix}.bits") if q.get("bits") is not None else None
    if bits is None:
        raise r.fail(f"{prefix}.bits", "missing (needed for the weight bytes)")
    if bits not in (4, 8):
        raise r.fail(
            f"{prefix}.bits",
            f"{bits}-bit weights are not modelled (kvsim reads 4- and 8-bit integer weights)",
        )
    group = _int(r, _q(q, "group_size", 128), f"{prefix}.group_size")
    if group == 0 or group < -1:
        raise r.fail(f"{prefix}.group_size", f"expected a positive size or -1, got {group}")
    return _Scheme(f"int{bits}", max(group, 0), zero)


def _build(
    method: str,
    schemes: dict[str, _Scheme],
    exempt: dict[str, float],
    act: str,
    r: ConfigReader,
    key: str,
    shape: Shape,
    activations: str = "",
) -> Quantization:
    """A :class:`Quantization` from each part's scheme (absent: unquantised) and the
    fraction of it kept unquantised (``exempt``)."""
    live = {p: sc for p, sc in schemes.items() if exempt.get(p, 0.0) < 1.0}
    non_expert = {live[p].dtype for p in _NON_EXPERT if p in live}
    if len(non_expert) > 1:
        raise r.fail(
            key,
            f"the non-expert layers are quantised to {', '.join(sorted(non_expert))}: kvsim "
            "keeps one dtype for attention, dense MLP and shared experts",
        )
    weight = non_expert.pop() if non_expert else act
    expert = live["routed_experts"].dtype if "routed_experts" in live else act
    act_b = DTYPE_BYTES[act]
    part_bytes = []
    for part in PARTS:
        if not _part_layers(part, shape):
            continue
        default = act if part == "lm_head" else expert if part == "routed_experts" else weight
        sc = live.get(part)
        f = exempt.get(part, 0.0)
        b = act_b if sc is None else (1.0 - f) * sc.bytes() + f * act_b
        if b != DTYPE_BYTES[default]:
            part_bytes.append((part, b))
    kept = tuple(sorted((p, f) for p, f in exempt.items() if f > 0 and p in schemes))
    quantised = sorted({sc.text() for sc in live.values()})
    at_act = ["embedding", "routers"] + [
        p if f >= 1.0 else f"{p} ({f:.0%} of layers)" for p, f in kept
    ]
    if "lm_head" not in live and ("lm_head", 1.0) not in kept:
        at_act.insert(1, "lm_head")
    what = ", ".join(quantised) or "nothing quantised"
    detail = f"{method}: {what}; at {act}: {', '.join(at_act)}"
    return Quantization(method, weight, expert, tuple(part_bytes), kept, activations, detail)


def _awq_gptq(r: ConfigReader, q: dict[str, Any], method: str, act: str, s: Shape) -> Quantization:
    p = "quantization_config"
    if method == "awq":
        zero = _flag(r, _q(q, "zero_point", True), f"{p}.zero_point")
    else:
        zero = not _flag(r, _q(q, "sym", True), f"{p}.sym")
        if q.get("dynamic"):
            raise r.fail(
                f"{p}.dynamic",
                "per-module bit widths (GPTQModel's dynamic) are not modelled; give a "
                "config without them and the weights' bytes in the scenario",
            )
    scheme = _int_scheme(r, q, p, zero=zero)
    lm_head = _flag(r, _q(q, "lm_head", False), f"{p}.lm_head")
    parts = [x for x in PARTS if _part_layers(x, s) and (x != "lm_head" or lm_head)]
    schemes = {x: scheme for x in parts}
    exempt: dict[str, float] = {}
    if method == "awq":
        pats = _Patterns(
            r, f"{p}.modules_to_not_convert", q.get("modules_to_not_convert"), "substring", s
        )
        exempt = {x: f for x in parts if (f := pats.fraction(x))}
    elif q.get("modules_in_block_to_quantize") is not None:
        pats = _Patterns(
            r,
            f"{p}.modules_in_block_to_quantize",
            q.get("modules_in_block_to_quantize"),
            "block",
            s,
            listed=True,
        )
        for x in parts:
            if x != "lm_head" and pats.fraction(x) < 1.0:
                exempt[x] = 1.0
    return _build(method, schemes, exempt, act, r, p, s)


def _ct_scheme(r: ConfigReader, w: Any, path: str) -> _Scheme | None:
    if w is None:
        return None
    if not isinstance(w, dict):
        raise r.fail(path, f"expected an object, got {shown(w)}")
    kind = w.get("type", "int")
    bits = _int(r, w.get("num_bits"), f"{path}.num_bits") if "num_bits" in w else None
    if bits is None:
        raise r.fail(f"{path}.num_bits", "missing (needed for the weight bytes)")
    group = w.get("group_size")
    group = _int(r, group, f"{path}.group_size") if group is not None else 0
    strategy = w.get("strategy")
    if kind == "int":
        if bits not in (4, 8):
            raise r.fail(
                f"{path}.num_bits",
                f"{bits}-bit weights are not modelled (kvsim reads 4- and 8-bit integer weights)",
            )
        if strategy == "group" and group <= 0:
            raise r.fail(f"{path}.group_size", f"expected a positive size, got {shown(group)}")
        sym = _flag(r, w.get("symmetric", True), f"{path}.symmetric")
        return _Scheme(f"int{bits}", group if strategy == "group" else 0, not sym)
    if kind == "float":
        if bits == 8:
            return _Scheme("fp8", 0, False)
        if bits == 4 and group in (16, 32):
            return _Scheme("nvfp4" if group == 16 else "mxfp4", 0, False)
        raise r.fail(
            f"{path}.num_bits",
            f"{bits}-bit float weights in groups of {group} are not modelled (kvsim reads "
            "FP8, NVFP4 in groups of 16 and MXFP4 in groups of 32)",
        )
    raise r.fail(f"{path}.type", f"unknown {shown(kind)} (expected 'int' or 'float')")


def _ct_activations(r: ConfigReader, a: Any, path: str) -> str:
    if a is None:
        return ""
    if not isinstance(a, dict):
        raise r.fail(path, f"expected an object, got {shown(a)}")
    kind = a.get("type", "int")
    bits = a.get("num_bits")
    name = {("int", 8): "int8", ("float", 8): "fp8", ("float", 4): "fp4"}.get((kind, bits))
    if name is None:
        raise r.fail(path, f"{shown(kind)} {shown(bits)}-bit activations are not modelled")
    return name


def _compressed_tensors(
    r: ConfigReader, q: dict[str, Any], key: str, act: str, s: Shape
) -> Quantization:
    sparsity = q.get("sparsity_config")
    if isinstance(sparsity, dict) and sparsity.get("format") not in (None, "dense"):
        raise r.fail(
            f"{key}.sparsity_config.format",
            f"{shown(sparsity.get('format'))}: sparse weights are not modelled",
        )
    groups = q.get("config_groups")
    if not isinstance(groups, dict) or not groups:
        raise r.fail(f"{key}.config_groups", f"expected a non-empty object, got {shown(groups)}")
    top = q.get("format")
    schemes: dict[str, _Scheme] = {}
    acts: set[str] = set()
    for gname, g in groups.items():
        path = f"{key}.config_groups.{gname}"
        if not isinstance(g, dict):
            raise r.fail(path, f"expected an object, got {shown(g)}")
        fmt = g.get("format") or top
        if fmt not in CT_FORMATS:
            fpath = f"{path}.format" if g.get("format") else f"{key}.format"
            raise r.fail(
                fpath,
                f"{shown(fmt)} is not modelled (kvsim reads {', '.join(CT_FORMATS)}; the 2:4 "
                "sparse formats store half the weights and run on sparse tensor cores)",
            )
        scheme = _ct_scheme(r, g.get("weights"), f"{path}.weights")
        a = _ct_activations(r, g.get("input_activations"), f"{path}.input_activations")
        targets = g.get("targets", ["Linear"])
        linear = isinstance(targets, list) and "Linear" in targets
        pats = _Patterns(
            r,
            f"{path}.targets",
            [t for t in targets if t != "Linear"] if isinstance(targets, list) else targets,
            "ct",
            s,
        )
        matched = [p for p in PARTS if _part_layers(p, s) and (linear or pats.fraction(p) >= 1.0)]
        if not matched:
            raise r.fail(
                f"{path}.targets",
                f"{shown(targets)} matches none of the model's linear layers (kvsim reads "
                "'Linear', module names and 're:' patterns)",
            )
        if scheme is None:
            continue
        if a:
            acts.add(a)
        for p in matched:
            schemes.setdefault(p, scheme)  # the first group that targets a layer applies
    ignore = _Patterns(r, f"{key}.ignore", q.get("ignore"), "ct", s)
    exempt = {p: f for p in schemes if (f := ignore.fraction(p))}
    return _build(
        "compressed-tensors",
        schemes,
        exempt,
        act,
        r,
        f"{key}.config_groups",
        s,
        activations="+".join(sorted(acts)),
    )


def read_quantization(r: ConfigReader, act: str, shape: Shape) -> Quantization:
    """The weights' quantisation from ``quantization_config`` (or the older
    ``compression_config``); unquantised at ``act`` without one."""
    key = "quantization_config" if r.has("quantization_config") else "compression_config"
    if not r.has(key):
        return Quantization("", act, act)
    q = r.doc[key]
    if not isinstance(q, dict):
        raise r.fail(key, f"expected an object, got {shown(q)}")
    raw = q.get("quant_method")
    method = raw.lower() if isinstance(raw, str) else raw
    if key == "compression_config" and method is None:
        method = "compressed-tensors"
    if method == "fp8":
        return Quantization("fp8", "fp8", "fp8", detail="fp8: every linear layer in FP8")
    if method == "mxfp4":
        return Quantization("mxfp4", act, "mxfp4", detail="mxfp4: routed experts in MXFP4")
    if method in ("awq", "gptq"):
        return _awq_gptq(r, q, method, act, shape)
    if method == "compressed-tensors":
        return _compressed_tensors(r, q, key, act, shape)
    if method == "bitsandbytes":
        raise r.fail(
            f"{key}.quant_method",
            "'bitsandbytes' is not modelled: a load-time quantisation whose NF4 / LLM.int8() "
            "kernels (a dequantise per matmul, outliers in 16 bits) kvsim has no efficiency "
            "for; serve an AWQ, GPTQ or compressed-tensors checkpoint, or remove "
            "quantization_config and set model.weight_bytes in the scenario",
        )
    what = "missing" if raw is None else f"{shown(raw)} is not supported"
    raise r.fail(
        f"{key}.quant_method",
        f"{what} (kvsim reads {', '.join(repr(m) for m in METHODS)}; "
        "for another format give a copy with the quantization_config removed and the "
        "weights' bytes set in the scenario)",
    )


__all__ = ["CT_FORMATS", "METHODS", "PARTS", "Quantization", "Shape", "read_quantization"]
