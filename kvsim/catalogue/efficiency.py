"""Per-operation efficiency curves per GPU generation, from kernel benchmarks.

A GPU card (:mod:`kvsim.catalogue.gpus`) gives datasheet peaks; each kind of kernel in a
prefill step reaches a fraction of them that depends on its size (docs/engine-model.md,
"The per-operation roofline"). ``efficiency.yaml`` next to this module has, per generation
("ampere", "ada", "hopper", "blackwell", "blackwell-ultra"; AMD's "cdna3", "cdna4"):

- per operation kind (:data:`OPS`: dense GEMMs, expert GEMMs, attention) and the dtype its
  kernels compute in, a :class:`Curve`: ``e_max`` (the best fraction of the dense FLOP
  peak), ``half`` (the size at which it reaches half of that) and ``e_mem`` (the fraction
  of HBM bandwidth its memory-bound form reaches);
- ``host_link_frac``: the fraction of the host link (one direction) pinned copies reach.

Every number carries its documented range ``[lo, hi]``, its mark (H: a kernel benchmark by
the kernel's authors or our fit to such measurements; M: a secondary measurement; L: our
assumption) and its source. None was chosen to land a validation figure: they come from
kernel microbenchmarks and per-operation profiles only. A GPU card may state its own
(:func:`curve`'s ``own``), which replace its generation's, marked ``card``.

What this module owns: reading and checking ``efficiency.yaml`` (:func:`curve`,
:func:`host_link_frac`, :func:`generations`, :func:`dtypes`) and :class:`Value`, one
number with its range, mark and source, which every catalogue assumption is
(:mod:`kvsim.catalogue.assumptions`).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

from kvsim.errors import InputError, shown
from kvsim.units import parse_duration

EFFICIENCY_FILE = Path(__file__).parent / "efficiency.yaml"
#: the operation kinds with a curve, and each curve's parameters
OPS = ("dense", "experts", "attention")
PARAMS = ("e_max", "half", "e_mem")
MARKS = ("H", "M", "L")  # a GPU card's own values are marked "card"


@dataclass(frozen=True)
class Value:
    """One assumed number: its value, documented range, mark and source."""

    value: float
    lo: float
    hi: float
    mark: str
    source: str


def parse_value(
    node: Any, where: str, source: str, *, duration: bool = False, fraction: bool = False
) -> Value:
    """``[value, lo, hi, mark]`` (durations with their unit), checked: lo <= value <= hi,
    positive (fractions in (0, 1]), a known mark."""
    if not isinstance(node, list) or len(node) != 4:
        raise InputError(f"expected [value, lo, hi, mark], got {shown(node)}", where=where)

    def num(raw: Any, what: str) -> float:
        try:
            v = parse_duration(raw) if duration else float(raw)
        except (TypeError, ValueError) as e:
            raise InputError(f"{what}: {e}", where=where) from None
        if not v >= 0 or (fraction and not 0 < v <= 1):
            raise InputError(
                f"{what}: must be {'in (0, 1]' if fraction else '>= 0'}, got {shown(raw)}",
                where=where,
            )
        return v

    value, lo, hi = (num(node[i], k) for i, k in enumerate(("value", "lo", "hi")))
    mark = str(node[3])
    if mark not in MARKS:
        raise InputError(f"mark: expected one of {', '.join(MARKS)}, got {mark!r}", where=where)
    if not lo <= value <= hi:
        raise InputError(f"value {value:g} outside [lo, hi] = [{lo:g}, {hi:g}]", where=where)
    return Value(value, lo, hi, mark, " ".join(str(source).split()))


def read_curve(node: Any, where: str) -> dict[str, Value]:
    """One ``{e_max, half, e_mem, source}`` entry."""
    if not isinstance(node, dict) or set(node) != {*PARAMS, "source"}:
        raise InputError(
            f"expected {{{', '.join(PARAMS)}, source}}, got {shown(node)}", where=where
        )
    return {
        p: parse_value(node[p], f"{where}.{p}", node["source"], fraction=p != "half")
        for p in PARAMS
    }


def _legacy_value(node: Any, where: str) -> Value:
    """host_link_frac's ``{value, lo, hi, mark, source}`` form."""
    if not isinstance(node, dict) or set(node) != {"value", "lo", "hi", "mark", "source"}:
        raise InputError(
            f"expected {{value, lo, hi, mark, source}}, got {shown(node)}", where=where
        )
    return parse_value(
        [node["value"], node["lo"], node["hi"], node["mark"]], where, node["source"], fraction=True
    )


@lru_cache(maxsize=1)
def narrow() -> tuple[Value, int]:
    """(the factor on e_max of a GEMM narrower than the width, the width): a narrow
    tensor-parallel shard or a small expert dimension."""
    where = str(EFFICIENCY_FILE)
    with EFFICIENCY_FILE.open(encoding="utf-8") as fh:
        data = yaml.safe_load(fh)
    v = parse_value(data["narrow"], f"{where}: narrow", data["narrow_source"], fraction=True)
    width = data["narrow_width"]
    if isinstance(width, bool) or not isinstance(width, int) or width < 1:
        raise InputError(
            f"expected a whole number, got {shown(width)}", where=f"{where}: narrow_width"
        )
    return v, width


@lru_cache(maxsize=1)
def _table() -> dict[str, dict[str, Any]]:
    """generation -> {"host_link_frac": Value, op: {dtype: {param: Value}}}, read once."""
    where = str(EFFICIENCY_FILE)
    with EFFICIENCY_FILE.open(encoding="utf-8") as fh:
        data = yaml.safe_load(fh)
    out: dict[str, dict[str, Any]] = {}
    for gen, entry in data["generations"].items():
        at = f"{where}: generations.{gen}"
        per: dict[str, Any] = {
            "host_link_frac": _legacy_value(entry["host_link_frac"], f"{at}.host_link_frac")
        }
        for op in OPS:
            per[op] = {
                dtype: read_curve(node, f"{at}.{op}.{dtype}") for dtype, node in entry[op].items()
            }
        out[gen] = per
    return out


def generations() -> list[str]:
    """The generations with an entry, in the file's order."""
    return list(_table())


def dtypes(generation: str, op: str = "dense") -> list[str]:
    """The dtypes ``generation`` has a curve for, for operation kind ``op``."""
    return list(_table()[generation][op])


def _generation(generation: str) -> dict[str, Any]:
    gen = str(generation).strip().lower()
    table = _table()
    if gen not in table:
        raise InputError(
            f"no efficiency entry for GPU generation {shown(generation)}; "
            f"known: {', '.join(generations())}"
        )
    return table[gen]


def curve(
    generation: str, op: str, dtype: str, own: dict[str, Any] | None = None
) -> dict[str, Value]:
    """The curve of operation kind ``op`` (:data:`OPS`) computing in ``dtype`` on
    ``generation``, with the GPU card's own values (``own``: op -> dtype -> param -> Value)
    replacing the generation's; InputError when neither has one."""
    entry = _generation(generation)
    dtype = str(dtype).strip().lower()
    mine = ((own or {}).get(op) or {}).get(dtype, {})
    base = entry[op].get(dtype)
    if base is None and len(mine) != len(PARAMS):
        have = ", ".join(entry[op])
        raise InputError(f"no {op} efficiency curve for {generation} in {dtype}; it has {have}")
    return {**(base or {}), **mine}


def host_link_frac(generation: str, own: dict[str, Any] | None = None) -> Value:
    """The fraction of the host link pinned copies reach (the card's own, if it says)."""
    mine = (own or {}).get("host_link_frac")
    return mine if mine is not None else _generation(generation)["host_link_frac"]


__all__ = [
    "EFFICIENCY_FILE",
    "OPS",
    "PARAMS",
    "Value",
    "curve",
    "dtypes",
    "generations",
    "host_link_frac",
    "narrow",
    "parse_value",
    "read_curve",
]
