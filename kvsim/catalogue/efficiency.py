"""Achievable efficiency per GPU generation and dtype, from public measurements.

A GPU card (:mod:`kvsim.catalogue.gpus`) gives datasheet peaks; a serving engine's prefill
step reaches a fraction of them. :func:`efficiency` returns, for a generation ("ampere",
"ada", "hopper", "blackwell", "blackwell-ultra"; AMD's "cdna3", "cdna4") and a compute
dtype ("bf16", "fp8", "fp4"):

- ``flops_frac``: the fraction of the dense peak FLOP/s a large prefill step reaches;
- ``hbm_frac``: the fraction of HBM bandwidth a streaming kernel reaches;
- ``host_link_frac``: the fraction of the host link (one direction) pinned copies reach;
- ``fixed_s`` + layers x ``fixed_per_layer_s``: the time of a step that is not GPU work
  (scheduler, input preparation, sampling; kernel launches per layer).

The numbers live in ``efficiency.yaml`` next to this module, each with its mark (M: a public
measurement or derived from one; L: our assumption or an extrapolation), its documented
range ``[lo, hi]`` and its source. None was chosen to land a validation figure (vLLM's
offloading blog, the seed study): they come from kernel benchmarks (FlashAttention-2/3/4,
DeepGEMM, cuBLAS), training MFU reports and copy benchmarks (nvbandwidth, STREAM).
A GPU card may state its own values (:func:`card_efficiency`), which replace its
generation's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

from kvsim.errors import InputError, shown
from kvsim.units import parse_duration

EFFICIENCY_FILE = Path(__file__).parent / "efficiency.yaml"
FRACTIONS = ("flops_frac", "hbm_frac", "host_link_frac")
TIMES = ("fixed_s", "fixed_per_layer_s")
FIELDS = FRACTIONS + TIMES
MARKS = ("M", "L")  # a GPU card's own values are marked "card" (card_efficiency)


@dataclass(frozen=True)
class Efficiency:
    """What a generation reaches in one dtype, with each value's range, mark and source."""

    generation: str
    dtype: str
    flops_frac: float  # achievable fraction of dense peak FLOP/s in prefill
    hbm_frac: float  # achievable fraction of HBM bandwidth
    host_link_frac: float  # achievable fraction of the host link (pinned copies)
    fixed_s: float  # fixed time per step (scheduler + launches), seconds
    fixed_per_layer_s: float  # kernel launches etc. per layer per step, seconds
    mark: str  # flops_frac's mark, the value that dominates a prefill (each in ``marks``;
    # "card": the GPU card's own value)
    source: str  # one line per value: "flops_frac (M): ..."
    lo: dict[str, float] = field(default_factory=dict)  # field -> low end of its range
    hi: dict[str, float] = field(default_factory=dict)  # field -> high end
    marks: dict[str, str] = field(default_factory=dict)  # field -> "M" | "L"
    sources: dict[str, str] = field(default_factory=dict)  # field -> source text

    def fixed_time(self, layers: int) -> float:
        """Seconds of a step that are not GPU work: ``fixed_s + layers x fixed_per_layer_s``."""
        return self.fixed_s + layers * self.fixed_per_layer_s


@dataclass(frozen=True)
class _Value:
    value: float
    lo: float
    hi: float
    mark: str
    source: str


def _value(node: Any, where: str, *, duration: bool) -> _Value:
    """One ``{value, lo, hi, mark, source}`` entry of efficiency.yaml, checked."""
    if not isinstance(node, dict) or set(node) != {"value", "lo", "hi", "mark", "source"}:
        raise InputError(
            f"expected {{value, lo, hi, mark, source}}, got {shown(node)}", where=where
        )

    def num(key: str) -> float:
        raw = node[key]
        try:
            v = parse_duration(raw) if duration else float(raw)
        except (TypeError, ValueError) as e:
            raise InputError(f"{key}: {e}", where=where) from None
        if not v > 0 or (not duration and v > 1):
            raise InputError(
                f"{key}: must be {'a positive duration' if duration else 'in (0, 1]'}, "
                f"got {shown(raw)}",
                where=where,
            )
        return v

    out = _Value(num("value"), num("lo"), num("hi"), str(node["mark"]), str(node["source"]))
    if out.mark not in MARKS:
        raise InputError(f"mark: expected one of {', '.join(MARKS)}, got {out.mark!r}", where=where)
    if not out.lo <= out.value <= out.hi:
        raise InputError(
            f"value {out.value:g} outside [lo, hi] = [{out.lo:g}, {out.hi:g}]", where=where
        )
    return out


@lru_cache(maxsize=1)
def _table() -> dict[tuple[str, str], dict[str, _Value]]:
    """(generation, dtype) -> field -> value, read once from efficiency.yaml."""
    where = str(EFFICIENCY_FILE)
    with EFFICIENCY_FILE.open(encoding="utf-8") as fh:
        data = yaml.safe_load(fh)
    common = {
        "fixed_s": _value(data["fixed"], f"{where}: fixed", duration=True),
        "fixed_per_layer_s": _value(
            data["fixed_per_layer"], f"{where}: fixed_per_layer", duration=True
        ),
    }
    out: dict[tuple[str, str], dict[str, _Value]] = {}
    for gen, entry in data["generations"].items():
        per_gen = {
            k: _value(entry[k], f"{where}: generations.{gen}.{k}", duration=False)
            for k in ("hbm_frac", "host_link_frac")
        }
        for dtype, node in entry["flops_frac"].items():
            flops = _value(node, f"{where}: generations.{gen}.flops_frac.{dtype}", duration=False)
            out[(gen, dtype)] = {"flops_frac": flops, **per_gen, **common}
    return out


def generations() -> list[str]:
    """The generations with an entry, in the file's order."""
    return list(dict.fromkeys(g for g, _ in _table()))


def dtypes(generation: str) -> list[str]:
    """The dtypes ``generation`` has an entry for."""
    return [d for g, d in _table() if g == generation]


def efficiency(generation: str, dtype: str) -> Efficiency:
    """The achievable efficiency of ``generation`` computing in ``dtype``; InputError for a
    generation or dtype with no entry (fp4 exists only from Blackwell on)."""
    table = _table()
    gen = str(generation).strip().lower()
    dt = str(dtype).strip().lower()
    if gen not in generations():
        raise InputError(
            f"no efficiency entry for GPU generation {shown(generation)}; "
            f"known: {', '.join(generations())}"
        )
    entry = table.get((gen, dt))
    if entry is None:
        raise InputError(
            f"no efficiency entry for {gen} in {shown(dtype)}; {gen} has {', '.join(dtypes(gen))}"
        )
    marks = {k: v.mark for k, v in entry.items()}
    return Efficiency(
        generation=gen,
        dtype=dt,
        flops_frac=entry["flops_frac"].value,
        hbm_frac=entry["hbm_frac"].value,
        host_link_frac=entry["host_link_frac"].value,
        fixed_s=entry["fixed_s"].value,
        fixed_per_layer_s=entry["fixed_per_layer_s"].value,
        mark=marks["flops_frac"],
        source="\n".join(f"{k} ({v.mark}): {v.source}" for k, v in entry.items()),
        lo={k: v.lo for k, v in entry.items()},
        hi={k: v.hi for k, v in entry.items()},
        marks=marks,
        sources={k: v.source for k, v in entry.items()},
    )


def card_efficiency(generation: str, dtype: str, own: dict[str, Any]) -> Efficiency:
    """:func:`efficiency`, with the values a GPU card states itself (``own``: field ->
    (value, lo, hi, source); ``flops_frac``: dtype -> the same, kvsim/catalogue/gpus.py)
    replacing its generation's, marked ``card``. A dtype the generation lacks is allowed
    when the card gives its flops_frac."""
    per_dtype = own.get("flops_frac", {})
    if (str(generation), str(dtype)) not in _table() and dtype in per_dtype:
        base = efficiency(generation, next(iter(dtypes(generation))))
    else:
        base = efficiency(generation, dtype)
    mine = {k: v for k, v in own.items() if k != "flops_frac"}
    if dtype in per_dtype:
        mine["flops_frac"] = per_dtype[dtype]
    if not mine:
        return base
    values = {k: getattr(base, k) for k in FIELDS}
    lo, hi, marks, sources = dict(base.lo), dict(base.hi), dict(base.marks), dict(base.sources)
    for k, (v, low, high, src) in mine.items():
        values[k], lo[k], hi[k], marks[k], sources[k] = v, low, high, "card", src
    return Efficiency(
        generation=base.generation,
        dtype=str(dtype),
        **values,
        mark=marks["flops_frac"],
        source="\n".join(f"{k} ({marks[k]}): {sources[k]}" for k in FIELDS),
        lo=lo,
        hi=hi,
        marks=marks,
        sources=sources,
    )


__all__ = [
    "EFFICIENCY_FILE",
    "FIELDS",
    "Efficiency",
    "card_efficiency",
    "dtypes",
    "efficiency",
    "generations",
]
