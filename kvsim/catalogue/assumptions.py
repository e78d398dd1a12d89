"""The catalogue's assumptions for one composition: every number a composed profile rests
on beyond the cards' datasheet and config figures, each with its range, mark and source.

What this module owns: :class:`Assumption`, :class:`Assumptions` (the table, by dotted
name) and :func:`assumptions`, which gathers them for a GPU card and the dtypes its
kernels compute in: the operation kinds' efficiency curves (``dense.e_max``,
``experts.half``, ``attention.e_mem``, ...: kvsim/catalogue/efficiency.yaml, or the card's
own), the host link's fraction (``host_link_frac``), and the engine's costs outside the
kernels (``frontend.*``, ``cpu.*``, ``launch.*``, ``comm.*``, ``transfer.*``:
kvsim/catalogue/engine.yaml), and the factor on a narrow GEMM's e_max (``narrow``). A
scenario may give its own values
(``profile: {..., assume: {dense: {e_max: 0.6}}}``: :meth:`Assumptions.given`, marked
``given``; a ``base`` profile written by ``kvsim calibrate`` gives its fitted values in an
``assume:`` section, marked ``C``); prediction ranges move one at a time to an end of its range
(:meth:`Assumptions.at`; kvsim/catalogue/ranges.py).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any

from kvsim.catalogue.efficiency import OPS, curve, host_link_frac, narrow
from kvsim.catalogue.engine import DURATIONS, engine_values
from kvsim.catalogue.gpus import GpuCard
from kvsim.errors import InputError, shown
from kvsim.units import parse_duration

ENDS = ("lo", "hi")


@dataclass(frozen=True)
class Assumption:
    """One assumed number (see the module docstring); ``unit`` "s" for a duration."""

    name: str
    value: float
    lo: float
    hi: float
    mark: str
    source: str
    unit: str = ""

    def text(self, value: float | None = None) -> str:
        """A value as the table shows it (durations in us or ms)."""
        v = self.value if value is None else value
        if self.unit != "s":
            return f"{v:g}"
        return f"{v * 1e3:g} ms" if v >= 1e-3 else f"{v * 1e6:g} us"


class Assumptions(Mapping[str, Assumption]):
    """The assumptions of one composition, by dotted name."""

    def __init__(self, items: Mapping[str, Assumption]) -> None:
        self._items = dict(items)

    def __getitem__(self, name: str) -> Assumption:
        return self._items[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def v(self, name: str) -> float:
        """The value of ``name``."""
        return self._items[name].value

    def at(self, name: str, end: str) -> Assumptions:
        """The same with ``name`` at an end of its range (``lo`` or ``hi``)."""
        if end not in ENDS:
            raise ValueError(f"an end is 'lo' or 'hi', got {end!r}")
        a = self._items[name]
        return Assumptions({**self._items, name: replace(a, value=getattr(a, end))})

    def given(
        self,
        values: Mapping[str, Any],
        field: str = "profile.assume",
        mark: str = "given",
        source: str = "the scenario",
    ) -> Assumptions:
        """The same with a scenario's own values (``values``: nested or dotted names;
        durations as ``"2 us"``), marked ``given`` (a calibrated profile's values, its
        ``assume:`` section read through ``profile.base``: ``C``); a value may also come
        as the catalogue writes one, ``[value, lo, hi]`` or ``[value, lo, hi, mark]``: its
        own range (a calibrated value's interval) and mark. InputError naming the field
        (``profile.assume.NAME``) of an unknown name or a bad value."""
        items = dict(self._items)
        for name, raw in flatten(values).items():
            at = f"{field}.{name}"
            if name not in items:
                raise InputError(f"{at}: unknown assumption; known: {', '.join(sorted(items))}")
            a = items[name]
            own_mark = mark
            if isinstance(raw, list):
                if len(raw) not in (3, 4) or (len(raw) == 4 and not isinstance(raw[3], str)):
                    raise InputError(
                        f"{at}: expected a value or [value, lo, hi] (or [value, lo, hi, "
                        f"mark]), got {shown(raw)}"
                    )
                v, lo, hi = (_check(name, a, x, at) for x in raw[:3])
                if not lo <= v <= hi:
                    raise InputError(f"{at}: the value must lie in [lo, hi], got {shown(raw)}")
                own_mark = raw[3] if len(raw) == 4 else mark
            else:
                v = _check(name, a, raw, at)
                lo, hi = min(v, a.lo), max(v, a.hi)
            items[name] = replace(a, value=v, lo=lo, hi=hi, mark=own_mark, source=source)
        return Assumptions(items)


def _check(name: str, a: Assumption, raw: Any, at: str) -> float:
    """One given number of assumption ``a`` (a duration with its unit), checked."""
    try:
        v = parse_duration(raw) if a.unit == "s" else float(raw)
    except (TypeError, ValueError) as e:
        raise InputError(f"{at}: {e}") from None
    if isinstance(raw, bool) or not v >= 0 or v != v:
        raise InputError(f"{at}: expected a number >= 0, got {shown(raw)}")
    if (name.endswith(("e_max", "e_mem")) or name.endswith("_frac")) and not 0 < v <= 1:
        raise InputError(f"{at}: a fraction in (0, 1] is needed, got {shown(raw)}")
    return v


def flatten(values: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{dense: {e_max: 0.6}}`` (or ``{"dense.e_max": 0.6}``) as ``{"dense.e_max": 0.6}``."""
    out: dict[str, Any] = {}
    for k, v in values.items():
        name = f"{prefix}{k}"
        if isinstance(v, Mapping):
            out.update(flatten(v, f"{name}."))
        else:
            out[name] = v
    return out


def assumptions(gpu: GpuCard, dense_dtype: str, expert_dtype: str) -> Assumptions:
    """The assumptions of a composition on ``gpu``: its dense GEMMs computing in
    ``dense_dtype``, its routed experts' kernels in ``expert_dtype`` (bf16, fp8, fp4, or
    int4: a weight-only kernel timed against the BF16 peak), attention in bf16."""
    own = gpu.efficiency
    items: dict[str, Assumption] = {}
    for op, dtype in zip(OPS, (dense_dtype, expert_dtype, "bf16"), strict=True):
        try:
            c = curve(gpu.generation, op, dtype, own)
        except InputError as e:
            raise InputError(f"profile.gpu: {e.reason}", where=gpu.at("generation")) from None
        for p, v in c.items():
            items[f"{op}.{p}"] = Assumption(f"{op}.{p}", v.value, v.lo, v.hi, v.mark, v.source)
    h = host_link_frac(gpu.generation, own)
    items["host_link_frac"] = Assumption("host_link_frac", h.value, h.lo, h.hi, h.mark, h.source)
    n, _ = narrow()
    items["narrow"] = Assumption("narrow", n.value, n.lo, n.hi, n.mark, n.source)
    for name, v in engine_values().items():
        section, key = name.split(".", 1)
        unit = "s" if key in DURATIONS.get(section, ()) else ""
        items[name] = Assumption(name, v.value, v.lo, v.hi, v.mark, v.source, unit)
    return Assumptions(items)
