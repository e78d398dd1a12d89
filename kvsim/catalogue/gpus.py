"""GPU cards: one YAML file per GPU in ``kvsim/catalogue/gpus/``, each number with its source.

A card holds what the roofline step model and the data path take from a GPU's datasheet:
dense peak FLOP/s per dtype, HBM capacity and bandwidth, the host link (PCIe or
NVLink-C2C) per direction, NVLink per GPU per direction and the NIC per GPU. Its schema::

    name: H100-SXM                    # the card's name (lookup is case-insensitive)
    description: one line
    generation: hopper                # ampere | hopper | blackwell | blackwell-ultra
    aliases: [H100, H100-SXM5]        # optional: other names that find this card
    flops_sparse:                     # datasheet figures WITH 2:4 sparsity: halved here
      bf16: 1979 TFLOP/s
      fp8: 3958 TFLOP/s
    flops:                            # dense figures, where the datasheet gives them
      fp4: 13.125 PFLOP/s             # (a dtype in both: the dense figure wins)
    hbm: 80 GB
    hbm_bandwidth: 3.35 TB/s
    host_link: PCIe Gen5 x16
    host_link_per_direction: 64 GB/s  # one direction
    nvlink_per_gpu: 450 GB/s          # one direction: half the bidirectional figure
    nic_per_gpu: 400 Gb/s
    sources: {field: "H: where it comes from", ...}

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
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from kvsim.errors import InputError, shown
from kvsim.units import parse_bandwidth, parse_size

GPU_DIR = Path(__file__).parent / "gpus"
GENERATIONS = ("ampere", "hopper", "blackwell", "blackwell-ultra")
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
_OPTIONAL = ("description", "aliases", "flops", "flops_sparse", "sources")
_FIELDS = _REQUIRED + _OPTIONAL
# the fields a shipped card must source (tests/test_catalogue_gpus.py checks every card)
SOURCED = (
    "flops",
    "hbm",
    "hbm_bandwidth",
    "host_link_per_direction",
    "nvlink_per_gpu",
    "nic_per_gpu",
)

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
    nic_per_gpu: float  # bytes/s
    sources: dict[str, str] = field(default_factory=dict)  # field -> "H: source"
    aliases: tuple[str, ...] = ()
    path: str = ""  # the file the card was read from

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
        FP8; anything else, or a dtype the GPU lacks, in bf16 (weight-only kernels such as
        Marlin dequantize to bf16 on Ampere/Hopper). (M: vLLM's kernel choice per GPU.)"""
        w = weight_dtype.lower()
        if "fp4" in w:
            return "fp4" if "fp4" in self.flops else "bf16"
        if "fp8" in w:
            return "fp8" if "fp8" in self.flops else "bf16"
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
        return v.strip()

    def quantity(self, key: str, parse: Any, *, positive: bool = True) -> float:
        if self.data.get(key) is None:
            raise self.fail((key,), "missing (a GPU card needs it)")
        try:
            v = float(parse(self.data[key]))
        except ValueError as e:
            raise self.fail((key,), str(e)) from None
        if v < 0 or (positive and v == 0):
            raise self.fail((key,), f"must be {'positive' if positive else '>= 0'}, got {v:g}")
        return v

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
            out[dtype] = v
        return out


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
    halved = {k: v / SPARSITY_FACTOR for k, v in c.rates("flops_sparse").items()}
    flops = {d: dense.get(d, halved.get(d, 0.0)) for d in DTYPES if d in dense or d in halved}
    if "bf16" not in flops:
        raise c.fail(("flops",), "missing: give the bf16 rate in flops (dense) or flops_sparse")
    aliases = data.get("aliases") or []
    if not isinstance(aliases, list) or not all(isinstance(a, str) and a for a in aliases):
        raise c.fail(("aliases",), f"expected a list of names, got {shown(aliases)}")
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
        nvlink_per_gpu=c.quantity("nvlink_per_gpu", parse_bandwidth, positive=False),
        nic_per_gpu=c.quantity("nic_per_gpu", parse_bandwidth, positive=False),
        sources=dict(sources),
        aliases=tuple(aliases),
        path=where,
    )


def _read_file(path: Path) -> GpuCard:
    from kvsim.config.loader import load_yaml  # here: the loader will import the catalogue

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
    "DTYPES",
    "GENERATIONS",
    "GPU_DIR",
    "SPARSITY_FACTOR",
    "GpuCard",
    "list_gpus",
    "read_gpu",
]
