"""GPU cards: one YAML file per GPU in ``kvsim/catalogue/gpus/``, each number with its source.

A card holds what the roofline step model and the data path take from a GPU's datasheet:
dense peak FLOP/s per dtype, HBM capacity and bandwidth, the host link (PCIe or
NVLink-C2C) per direction, NVLink per GPU per direction, the GPUs one NVLink domain joins
(``nvlink_domain``: 8 on an HGX/DGX board, 72 in a GB200/GB300 NVL72 rack, 1 for a PCIe
card without NVLink) and the NIC per GPU: the scale-out link (InfiniBand or RoCE) that a
tensor-, context- or pipeline-parallel group's collectives cross when the group spans
NVLink domains, and that remote KV stores are reached over. Its schema::

    name: H100-SXM                    # the card's name (lookup is case-insensitive)
    description: one line
    generation: hopper                # ampere | ada | hopper | blackwell | blackwell-ultra
                                      # | cdna3 | cdna4 (AMD)
    aliases: [H100, H100-SXM5]        # optional: other names that find this card
    flops_sparse:                     # datasheet figures WITH 2:4 sparsity: halved here
      bf16: 1979 TFLOP/s
      fp8: 3958 TFLOP/s
    flops:                            # dense figures, where the datasheet gives them
      fp4: 13.125 PFLOP/s             # (a dtype in both is refused: give one)
    hbm: 80 GB
    hbm_bandwidth: 3.35 TB/s
    host_link: PCIe Gen5 x16
    host_link_per_direction: 64 GB/s  # one direction
    nvlink_per_gpu: 450 GB/s          # one direction: half the bidirectional figure
    nvlink_domain: 8                  # optional: GPUs one NVLink (or Infinity Fabric)
                                      # domain joins; default 8 (1 without NVLink)
    nic_per_gpu: 400 Gb/s             # the scale-out network per GPU (bits/s)
    efficiency:                       # optional: the card's own, replacing its generation's
      host_link_frac: 0.8             # a fraction in (0, 1], or {value, lo, hi, source}
      dense:                          # an operation kind's curve (efficiency.yaml), by dtype
        bf16: {e_max: 0.85, half: 6, e_mem: 0.8, source: "..."}
    sources: {field: "H: where it comes from", ...}

Every value must lie in its physical range (:data:`RANGES`; ``nvlink_per_gpu`` may be 0:
no NVLink, then GPUs exchange over the host link, and ``nvlink_domain`` must be 1; a
domain of 1 with NVLink is refused too). A card without ``nvlink_domain`` gets
:data:`DEFAULT_NVLINK_DOMAIN` (8, L: the HGX/DGX 8-GPU board every SXM/OAM system shipped
since 2020 is built from), or 1 when ``nvlink_per_gpu`` is 0; :attr:`GpuCard.defaulted`
names it and :meth:`GpuCard.source_of` gives the default's source. HBM capacity is in
GiB as datasheets mean it (``80 GiB``); rates are decimal (``3.35 TB/s``, ``400 Gb/s``).
Text fields refuse control, format and separator characters
(:data:`kvsim.errors.UNSAFE_CATEGORIES`).

NVIDIA's datasheets quote Tensor Core FLOP/s "with sparsity"; a dense prefill does half of
that, so ``flops_sparse`` figures are halved (:data:`SPARSITY_FACTOR`). FLOP/s are written
with a unit (``989.4 TFLOP/s``, ``2.25 PFLOP/s``); sizes and bandwidths as everywhere in
kvsim (:mod:`kvsim.units`). :func:`read_gpu` takes a shipped card's name or alias, or the
path of a user's card with the same schema; every mistake is an :class:`InputError` naming
the file, line and field.
"""

from __future__ import annotations

import difflib
import math
import os
import re
import unicodedata
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from kvsim.catalogue.efficiency import OPS, PARAMS, Value, generations
from kvsim.errors import UNSAFE_CATEGORIES, InputError, shown
from kvsim.units import parse_bandwidth, parse_size
from kvsim.yamlfile import load_yaml

GPU_DIR = Path(__file__).parent / "gpus"
#: the generations with an efficiency entry (kvsim/catalogue/efficiency.yaml)
GENERATIONS = tuple(generations())
DTYPES = ("bf16", "fp8", "fp4")
# 2:4 structured sparsity doubles the datasheet's Tensor Core rate; dense work gets half (H:
# every NVIDIA datasheet footnote, "specifications 1/2 lower without sparsity")
SPARSITY_FACTOR = 2.0

_REQUIRED = (
    "name",
    "generation",
    "hbm",
    "hbm_bandwidth",
    "host_link",
    "host_link_per_direction",
    "nvlink_per_gpu",
    "nic_per_gpu",
)
_OPTIONAL = (
    "description",
    "aliases",
    "flops",
    "flops_sparse",
    "nvlink_domain",
    "efficiency",
    "sources",
)
_FIELDS = _REQUIRED + _OPTIONAL
# the fields a shipped card must source (tests/test_catalogue_gpus.py checks every card)
SOURCED = (
    "flops",
    "hbm",
    "hbm_bandwidth",
    "host_link_per_direction",
    "nvlink_per_gpu",
    "nvlink_domain",
    "nic_per_gpu",
)

#: the physical range of every card value, in base units (bytes, bytes/s, FLOP/s): a
#: value outside is a typo or a unit slip, refused at its line (docs/catalogue.md). The
#: bounds sit well outside every GPU shipped or announced (2026: 8 TB/s HBM, 288 GiB,
#: 20 PFLOP/s sparse FP4, 1.8 TB/s NVLink, 800 Gb/s NICs) and inside absurdity.
RANGES: dict[str, tuple[float, float]] = {
    "hbm": (1 * 2**30, 4 * 2**40),  # 1 GiB .. 4 TiB
    "hbm_bandwidth": (50e9, 100e12),  # 50 GB/s .. 100 TB/s
    "host_link_per_direction": (1e9, 2e12),  # 1 GB/s .. 2 TB/s
    "nvlink_per_gpu": (1e9, 10e12),  # 1 GB/s .. 10 TB/s, or 0: no NVLink
    "nic_per_gpu": (1e9 / 8, 10e12 / 8),  # 1 Gb/s .. 10 Tb/s
    "flops": (1e12, 100e15),  # 1 TFLOP/s .. 100 PFLOP/s, per dtype, dense
}
_UNITS = {
    "hbm": (2**30, "GiB"),
    "hbm_bandwidth": (1e9, "GB/s"),
    "host_link_per_direction": (1e9, "GB/s"),
    "nvlink_per_gpu": (1e9, "GB/s"),
    "nic_per_gpu": (1e9 / 8, "Gb/s"),
    "flops": (1e12, "TFLOP/s"),
}
#: GPUs one NVLink domain joins on a card that does not say (L: the 8-GPU HGX/DGX board of
#: A100, H100, H200, B200 and B300 and AMD's 8-OAM MI300X/MI355X platforms)
DEFAULT_NVLINK_DOMAIN = 8
DEFAULT_NVLINK_DOMAIN_SOURCE = (
    "L: kvsim's default: the 8-GPU HGX/DGX board (A100, H100, H200, B200, B300; AMD's "
    "8-OAM platforms); 1 for a card without NVLink"
)
#: the largest NVLink domain a card may give (NVIDIA's NVL576 is the largest announced)
MAX_NVLINK_DOMAIN = 4096
#: what a card's own ``efficiency:`` may set: the host link's fraction, and per operation
#: kind a curve per dtype (kvsim/catalogue/efficiency.py has the generation's values these
#: replace)
CARD_EFFICIENCY = ("host_link_frac", *OPS)


def _range_text(key: str) -> str:
    lo, hi = RANGES[key]
    unit, name = _UNITS[key]
    return f"{lo / unit:g} .. {hi / unit:g} {name}"


def _in_range(key: str, v: float) -> str | None:
    """Why ``v`` is outside ``key``'s physical range, or None."""
    lo, hi = RANGES[key]
    if key == "nvlink_per_gpu" and v == 0:
        return None
    if not lo <= v <= hi:
        unit, name = _UNITS[key]
        return f"{v / unit:.4g} {name} is outside the physical range {_range_text(key)}"
    return None


_FLOP_PREFIX = {"": 1.0, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18}
_FLOP_RATE = re.compile(r"([-+]?(?:\d[\d_]*\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*([GTPE]?)FLOP(?:/s|S)")
FLOPS_EXAMPLE = '"989.4 TFLOP/s" or "2.25 PFLOP/s"'


@dataclass(frozen=True)
class GpuCard:
    """One GPU's datasheet numbers in base units (FLOP/s, bytes, bytes/s)."""

    name: str
    description: str
    generation: str
    flops: dict[str, float]  # dense peak FLOP/s per dtype ("bf16", "fp8", "fp4")
    hbm: float  # bytes
    hbm_bandwidth: float  # bytes/s
    host_link: str  # "PCIe Gen5 x16", "NVLink-C2C"
    host_link_per_direction: float  # bytes/s, one direction
    nvlink_per_gpu: float  # bytes/s, one direction
    nic_per_gpu: float  # bytes/s: the scale-out network (InfiniBand/RoCE) per GPU
    sources: dict[str, str] = field(default_factory=dict)  # field -> "H: source"
    aliases: tuple[str, ...] = ()
    path: str = ""  # the file the card was read from
    # the card's own efficiency values, replacing its generation's: host_link_frac ->
    # Value; op -> dtype -> param -> Value (kvsim/catalogue/efficiency.py)
    efficiency: dict[str, Any] = field(default_factory=dict)
    lines: dict[str, str] = field(default_factory=dict)  # field -> "FILE:LINE"
    # GPUs one NVLink domain joins (1: no NVLink); collectives of a parallel group larger
    # than this cross the NIC (nic_per_gpu)
    nvlink_domain: int = DEFAULT_NVLINK_DOMAIN
    defaulted: tuple[str, ...] = ()  # optional fields the card left out (kvsim's default)

    def source_of(self, key: str) -> str:
        """The source of ``key``'s value: the card's ``sources`` entry, or the default's
        source (mark L) for a field the card left out; "" when neither."""
        if key == "nvlink_domain" and key in self.defaulted:
            return DEFAULT_NVLINK_DOMAIN_SOURCE
        return self.sources.get(key, "")

    def at(self, key: str) -> str:
        """Where the card gives ``key`` ("FILE:LINE"; the file when unknown)."""
        return self.lines.get(key, self.path)

    def dense_flops(self, dtype: str) -> float:
        """Dense peak FLOP/s of one GPU in ``dtype``; InputError if it has no such units."""
        if dtype not in self.flops:
            raise InputError(
                f"GPU {self.name} has no {dtype} tensor cores (it has {', '.join(self.flops)})"
            )
        return self.flops[dtype]

    def compute_dtype(self, weight_dtype: str) -> str:
        """The dtype a model's matmuls run in on this GPU: FP4 weights ("fp4", "mxfp4",
        "nvfp4") in fp4 where the GPU has FP4 tensor cores, FP8 weights in fp8 where it has
        FP8; integer weights ("int4", "int8": AWQ, GPTQ, compressed-tensors W4A16/W8A16) in
        bf16: weight-only kernels (Marlin, Machete, AWQ/GPTQ GEMM) unpack each tile to
        BF16/FP16 in registers and run BF16/FP16 tensor-core MMAs on Ampere and Hopper
        (M: the Marlin and Machete kernel descriptions; vLLM's kernel choice per GPU); a
        W8A8-int8 checkpoint's INT8 tensor cores have no peak on a card, so it is counted
        in bf16 too (slow by up to 2x: INT8 runs at the FP8 rate on Hopper, twice BF16 on
        Ampere). Anything else, or a dtype the GPU lacks, in bf16."""
        w = weight_dtype.lower()
        if "fp4" in w:
            return "fp4" if "fp4" in self.flops else "bf16"
        if "fp8" in w:
            return "fp8" if "fp8" in self.flops else "bf16"
        if w in ("int4", "int8"):
            return "bf16"
        return "bf16"


def _parse_flops(value: object) -> float:
    """FLOP/s from "989.4 TFLOP/s" (or "TFLOPS"); a bare number is refused."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise ValueError(f"expected a FLOP rate such as {FLOPS_EXAMPLE}, got {shown(value)}")
    if not isinstance(value, str):
        raise ValueError(f"missing unit: expected a FLOP rate such as {FLOPS_EXAMPLE}")
    m = _FLOP_RATE.fullmatch(value.strip())
    if not m:
        raise ValueError(f"expected a FLOP rate such as {FLOPS_EXAMPLE}, got {shown(value)}")
    out = float(m.group(1)) * _FLOP_PREFIX[m.group(2)]
    if not math.isfinite(out):
        raise ValueError(f"FLOP rate {shown(value)} is not finite")
    return out


def _is_path(name: str) -> bool:
    return name.endswith((".yaml", ".yml")) or "/" in name or "\\" in name


class _Card:
    """Reads one card's mapping, raising InputError at the line of the bad field."""

    def __init__(self, data: dict[str, Any], origins: dict[Any, str], where: str) -> None:
        self.data = data
        self.origins = origins
        self.where = where

    def fail(self, path: tuple[Any, ...], reason: str) -> InputError:
        dotted = ".".join(str(p) for p in path) or "(top level)"
        at = self.where
        for n in range(len(path), -1, -1):
            if path[:n] in self.origins:
                at = self.origins[path[:n]]
                break
        return InputError(f"{dotted}: {reason}", where=at)

    def text(self, key: str, *, required: bool = True) -> str:
        v = self.data.get(key)
        if v is None:
            if required:
                raise self.fail((key,), "missing (a GPU card needs it)")
            return ""
        if not isinstance(v, str) or not v.strip():
            raise self.fail((key,), f"expected a non-empty string, got {shown(v)}")
        self.safe((key,), v)
        return v.strip()

    def safe(self, path: tuple[Any, ...], v: str) -> None:
        """Card text reaches the terminal: control, format and separator characters
        (newlines, escape sequences) are refused, as in config labels."""
        bad = next((c for c in v if unicodedata.category(c) in UNSAFE_CATEGORIES), None)
        if bad is not None:
            raise self.fail(path, f"unsafe character U+{ord(bad):04X} in {shown(v)}")

    def quantity(self, key: str, parse: Any, *, positive: bool = True) -> float:
        if self.data.get(key) is None:
            raise self.fail((key,), "missing (a GPU card needs it)")
        try:
            v = float(parse(self.data[key]))
        except ValueError as e:
            raise self.fail((key,), str(e)) from None
        if not math.isfinite(v) or v < 0 or (positive and v == 0):
            given = shown(self.data[key])
            raise self.fail((key,), f"must be {'positive' if positive else '>= 0'}, got {given}")
        why = _in_range(key, v)
        if why is not None:
            raise self.fail((key,), why)
        return v

    def domain(self, nvlink: float) -> tuple[int, tuple[str, ...]]:
        """(nvlink_domain, the fields defaulted): a whole number of GPUs in 1 ..
        :data:`MAX_NVLINK_DOMAIN`, 1 exactly when the card has no NVLink."""
        raw = self.data.get("nvlink_domain")
        if raw is None:
            return (DEFAULT_NVLINK_DOMAIN if nvlink else 1), ("nvlink_domain",)
        if isinstance(raw, bool) or not isinstance(raw, int):
            raise self.fail(
                ("nvlink_domain",), f"expected a whole number of GPUs, got {shown(raw)}"
            )
        if not 1 <= raw <= MAX_NVLINK_DOMAIN:
            raise self.fail(
                ("nvlink_domain",),
                f"{raw} GPUs is outside the physical range 1 .. {MAX_NVLINK_DOMAIN}",
            )
        if nvlink == 0 and raw > 1:
            raise self.fail(
                ("nvlink_domain",),
                f"{raw} GPUs with nvlink_per_gpu 0 (no NVLink): a GPU without NVLink is a "
                "domain of 1",
            )
        if nvlink > 0 and raw == 1:
            raise self.fail(
                ("nvlink_domain",),
                f"1 GPU with nvlink_per_gpu {nvlink / 1e9:g} GB/s: a GPU alone in its domain "
                "has no NVLink peers (give nvlink_per_gpu: 0 GB/s, or 2 or more GPUs)",
            )
        return raw, ()

    def rates(self, key: str) -> dict[str, float]:
        raw = self.data.get(key)
        if raw is None:
            return {}
        if not isinstance(raw, dict):
            raise self.fail((key,), f"expected a mapping of dtype to FLOP/s, got {shown(raw)}")
        out: dict[str, float] = {}
        for dtype, value in raw.items():
            if dtype not in DTYPES:
                raise self.fail(
                    (key, dtype),
                    f"unknown dtype {shown(dtype)}; expected one of {', '.join(DTYPES)}",
                )
            try:
                v = _parse_flops(value)
            except ValueError as e:
                raise self.fail((key, dtype), str(e)) from None
            if v <= 0:
                raise self.fail((key, dtype), f"must be positive, got {v:g}")
            dense = v / SPARSITY_FACTOR if key == "flops_sparse" else v
            why = _in_range("flops", dense)
            if why is not None:
                raise self.fail((key, dtype), ("dense " if key == "flops_sparse" else "") + why)
            out[dtype] = v
        return out

    def efficiency(self) -> dict[str, Any]:
        """The card's own ``efficiency:`` (replacing its generation's values, marked
        ``card``): ``host_link_frac`` a fraction, and per operation kind and dtype a curve's
        parameters (``dense: {bf16: {e_max: 0.85, half: 6, e_mem: 0.8, source: ...}}``;
        kvsim/catalogue/efficiency.yaml has the generation's). Each number alone, or
        ``{value, lo, hi}`` with lo <= value <= hi; e_max, e_mem and host_link_frac in
        (0, 1], half >= 0. Returns host_link_frac -> Value, op -> dtype -> param -> Value."""
        raw = self.data.get("efficiency")
        if raw is None:
            return {}
        if not isinstance(raw, dict):
            raise self.fail(("efficiency",), f"expected a mapping, got {shown(raw)}")
        out: dict[str, Any] = {}
        for key, node in raw.items():
            if key not in CARD_EFFICIENCY:
                raise self.fail(
                    ("efficiency", key),
                    f"unknown field; a card's efficiency has {', '.join(CARD_EFFICIENCY)}",
                )
            if key == "host_link_frac":
                out[key] = self.number(("efficiency", key), node, "", fraction=True)
                continue
            if not isinstance(node, dict) or not node:
                raise self.fail(("efficiency", key), "expected a mapping of dtype to a curve")
            per: dict[str, dict[str, Value]] = {}
            for dtype, entry in node.items():
                at = ("efficiency", key, dtype)
                if dtype not in (*DTYPES, "int4"):
                    raise self.fail(
                        at,
                        f"unknown dtype {shown(dtype)}; expected one of {', '.join(DTYPES)}, int4",
                    )
                if not isinstance(entry, dict):
                    raise self.fail(at, "expected a mapping of e_max, half, e_mem, source")
                src = entry.get("source", "")
                if not isinstance(src, str):
                    raise self.fail((*at, "source"), f"expected text, got {shown(src)}")
                extra = set(entry) - {*PARAMS, "source"}
                if extra:
                    raise self.fail(
                        (*at, sorted(extra)[0]),
                        f"unknown field; a curve has {', '.join(PARAMS)}, source",
                    )
                per[dtype] = {
                    p: self.number((*at, p), entry[p], src, fraction=p != "half")
                    for p in PARAMS
                    if p in entry
                }
            out[key] = per
        return out

    def number(self, path: tuple[Any, ...], node: Any, source: str, *, fraction: bool) -> Value:
        """One card efficiency number: alone, or ``{value, lo, hi, source}``."""
        if isinstance(node, dict):
            extra = set(node) - {"value", "lo", "hi", "source"}
            if extra or "value" not in node:
                raise self.fail(path, "expected a number or {value, lo, hi, source}")
            v, lo, hi = node["value"], node.get("lo", node["value"]), node.get("hi", node["value"])
            src = node.get("source", source)
            if not isinstance(src, str):
                raise self.fail(path, f"source: expected text, got {shown(src)}")
        else:
            v = lo = hi = node
            src = source
        nums = []
        for x in (v, lo, hi):
            bad = isinstance(x, bool) or not isinstance(x, int | float)
            if bad or not (0 < x <= 1 if fraction else 0 <= x < 1e9):
                want = "a fraction in (0, 1]" if fraction else "a number >= 0"
                raise self.fail(path, f"expected {want}, got {shown(x)}")
            nums.append(float(x))
        if not nums[1] <= nums[0] <= nums[2]:
            raise self.fail(
                path, f"value {nums[0]:g} outside [lo, hi] = [{nums[1]:g}, {nums[2]:g}]"
            )
        return Value(
            nums[0], nums[1], nums[2], "card", src or f"the card's own value ({self.where})"
        )


def _card_from(data: Any, origins: dict[Any, str], where: str) -> GpuCard:
    if not isinstance(data, dict):
        raise InputError(f"expected a GPU card (a YAML mapping), got {shown(data)}", where=where)
    c = _Card(data, origins, where)
    for key in data:
        if key not in _FIELDS:
            near = difflib.get_close_matches(str(key), _FIELDS, n=1)
            hint = f" (did you mean {near[0]!r}?)" if near else ""
            raise c.fail((key,), f"unknown field{hint}; a GPU card has {', '.join(_FIELDS)}")
    name = c.text("name")
    generation = c.text("generation")
    if generation not in GENERATIONS:
        raise c.fail(
            ("generation",),
            f"unknown generation {shown(generation)}; expected one of {', '.join(GENERATIONS)}",
        )
    dense = c.rates("flops")
    sparse = c.rates("flops_sparse")
    both = [d for d in DTYPES if d in dense and d in sparse]
    if both:
        raise c.fail(
            ("flops_sparse", both[0]),
            f"{both[0]} is given in both flops (dense) and flops_sparse: give one, the "
            "datasheet's dense figure where it has one",
        )
    halved = {k: v / SPARSITY_FACTOR for k, v in sparse.items()}
    flops = {d: dense.get(d, halved.get(d, 0.0)) for d in DTYPES if d in dense or d in halved}
    if "bf16" not in flops:
        raise c.fail(("flops",), "missing: give the bf16 rate in flops (dense) or flops_sparse")
    aliases = data.get("aliases") or []
    if not isinstance(aliases, list) or not all(isinstance(a, str) and a for a in aliases):
        raise c.fail(("aliases",), f"expected a list of names, got {shown(aliases)}")
    for i, a in enumerate(aliases):
        c.safe(("aliases", i), a)
    nvlink = c.quantity("nvlink_per_gpu", parse_bandwidth, positive=False)
    domain, defaulted = c.domain(nvlink)
    sources = data.get("sources") or {}
    if not isinstance(sources, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in sources.items()
    ):
        raise c.fail(("sources",), "expected a mapping of field name to source text")
    return GpuCard(
        name=name,
        description=c.text("description", required=False),
        generation=generation,
        flops=flops,
        hbm=c.quantity("hbm", parse_size),
        hbm_bandwidth=c.quantity("hbm_bandwidth", parse_bandwidth),
        host_link=c.text("host_link"),
        host_link_per_direction=c.quantity("host_link_per_direction", parse_bandwidth),
        nvlink_per_gpu=nvlink,
        nic_per_gpu=c.quantity("nic_per_gpu", parse_bandwidth, positive=False),
        sources=dict(sources),
        aliases=tuple(aliases),
        path=where,
        efficiency=c.efficiency(),
        lines={k: c.origins[(k,)] for k in data if (k,) in c.origins},
        nvlink_domain=domain,
        defaulted=defaulted,
    )


def _read_file(path: Path) -> GpuCard:
    data, origins = load_yaml(path)
    return _card_from(data, origins, str(path))


@lru_cache(maxsize=1)
def _shipped() -> dict[str, GpuCard]:
    """Every shipped card by its lower-cased name and aliases."""
    out: dict[str, GpuCard] = {}
    for p in sorted(GPU_DIR.glob("*.yaml")):
        card = _read_file(p)
        for key in (card.name, *card.aliases):
            out[key.lower()] = card
    return out


def list_gpus() -> list[dict[str, str]]:
    """Name, generation, aliases and description of every shipped card, sorted by name."""
    cards = {c.name: c for c in _shipped().values()}
    return [
        {
            "name": c.name,
            "generation": c.generation,
            "aliases": ", ".join(c.aliases),
            "description": c.description,
        }
        for c in sorted(cards.values(), key=lambda c: c.name.lower())
    ]


def read_gpu(name_or_path: str | os.PathLike[str], base_dir: Path | None = None) -> GpuCard:
    """A shipped card by name or alias (case-insensitive), or a user's card file: a name
    ending in .yaml/.yml or containing a slash, relative to ``base_dir`` if given."""
    name = os.fspath(name_or_path) if isinstance(name_or_path, os.PathLike) else name_or_path
    if not isinstance(name, str) or not name.strip():
        raise InputError(f"expected a GPU name or card file, got {shown(name)}")
    if _is_path(name):
        p = Path(name)
        if not p.is_absolute() and base_dir is not None:
            p = base_dir / p
        return _read_file(p)
    card = _shipped().get(name.strip().lower())
    if card is None:
        names = ", ".join(c["name"] for c in list_gpus())
        raise InputError(
            f"unknown GPU {shown(name)}; shipped GPUs: {names} "
            "(or the path of a card file, NAME.yaml)"
        )
    return card


__all__ = [
    "DEFAULT_NVLINK_DOMAIN",
    "DTYPES",
    "GENERATIONS",
    "GPU_DIR",
    "SPARSITY_FACTOR",
    "GpuCard",
    "list_gpus",
    "read_gpu",
]
