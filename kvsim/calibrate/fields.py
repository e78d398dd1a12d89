"""Which constants ``kvsim calibrate`` may fit, and their documented ranges.

What this module owns: :class:`Field` (a fittable constant: the scenario's value, its
documented lo/hi, mark and source, and the map between its value and the fit's unit
coordinate) and :func:`resolve`, which turns ``--fit`` names (or the defaults) into
fields, refusing, with exit 2 naming the field, anything that cannot be fitted.

Fittable are the catalogue's assumptions of the scenario's composed profile
(kvsim/catalogue/assumptions.py: ``dense.e_max``, ``attention.half``, ``host_link_frac``,
``cpu.per_step``, ``frontend.per_request``...; ``profile.assume.NAME`` is the same name),
each within its documented range (efficiency.yaml, engine.yaml; widened to hold a value
the scenario gives). Not fittable: a plain scenario field (``node.h2d_per_gpu``,
``timing.roofline.*``: no documented range to fit within; fit the assumption it is
derived from), a whole count (``launch.kernels_per_layer``...), an assumption with no
range, and one that cannot change this scenario's runs (an expert curve for a dense
model, collectives on one GPU: :func:`kvsim.experiments.predict.applies`). A scenario on a
named profile has no assumptions: it is refused. The defaults (:data:`DEFAULTS`) are the
operation kinds' peak efficiencies (``dense.e_max``, ``experts.e_max`` for an MoE model,
``attention.e_max``), the engine's fixed time per step (``cpu.per_step``) and the host
link's fraction (``host_link_frac``); the fit leaves out a default no row depends on.

A field is fitted in the coordinate u = (ln v - ln lo) / (ln hi - ln lo), in [0, 1]: a
range spanning decades (a duration) is searched evenly in ratio, and every field's
finite-difference step is the same share of its range.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from kvsim.catalogue.assumptions import assumptions
from kvsim.catalogue.compose import Composition
from kvsim.config.schema import Scenario
from kvsim.errors import InputError
from kvsim.experiments.predict import applies, composition

#: what --fit means when not given (those that apply to the scenario)
DEFAULTS = ("dense.e_max", "experts.e_max", "attention.e_max", "cpu.per_step", "host_link_frac")
PREFIX = "profile.assume."


@dataclass(frozen=True)
class Field:
    """A fittable assumption (see the module docstring)."""

    name: str
    value: float  # the scenario's value: where the fit starts
    lo: float
    hi: float
    mark: str
    source: str
    unit: str  # "s" for a duration

    def to_u(self, v: float) -> float:
        """A value as the fit's coordinate in [0, 1]."""
        if self.lo > 0:
            return (math.log(v) - math.log(self.lo)) / (math.log(self.hi) - math.log(self.lo))
        return (v - self.lo) / (self.hi - self.lo)

    def from_u(self, u: float) -> float:
        """The value at coordinate ``u`` (clipped to [0, 1]: the documented range)."""
        if u <= 0:
            return self.lo
        if u >= 1:
            return self.hi
        if self.lo > 0:
            return math.exp(math.log(self.lo) + u * (math.log(self.hi) - math.log(self.lo)))
        return self.lo + u * (self.hi - self.lo)

    def override(self, v: float) -> str:
        """``--set``-style override giving the scenario this value."""
        text = f"{v!r} s" if self.unit == "s" else repr(v)
        return f"{PREFIX}{self.name}={text}"

    def text(self, v: float) -> str:
        """A value as tables show it, to 4 significant digits (durations in ms or us)."""
        if self.unit != "s":
            return f"{v:.4g}"
        return f"{v * 1e3:.4g} ms" if v >= 1e-3 else f"{v * 1e6:.4g} us"

    def yaml_value(self, v: float) -> str | float:
        """A value as a profile's ``assume:`` section writes it."""
        return f"{v!r} s" if self.unit == "s" else v


def scenario_composition(sc: Scenario, scenario: str | Path) -> Composition:
    """The scenario's composed profile; InputError naming the scenario for a named one."""
    comp = composition(sc, Path(scenario).resolve().parent)
    if comp is None:
        raise InputError(
            f"profile {sc.profile!r} is a named profile: calibrate fits the catalogue's "
            "assumptions of a composed one (profile: {model, gpu, gpus, ...}; base: NAME "
            "keeps a named profile's host, tiers and remote)",
            where=str(scenario),
        )
    return comp


def _count(name: str) -> bool:
    return name.endswith(("kernels_per_layer", "model_kernels"))


def resolve(
    names: Sequence[str] | None, sc: Scenario, comp: Composition
) -> tuple[list[Field], list[str]]:
    """The fields to fit and notes on defaults left out; ``names`` None: the defaults.
    InputError naming ``--fit NAME`` for a name that cannot be fitted."""
    known = dict(comp.assume)
    # the documented ranges: the catalogue's (a calibrated base's C values come with their
    # intervals as ranges, which a new fit must not be held to), widened to the value
    catalogue = assumptions(comp.gpu, comp.dtype, comp.expert_kernel)
    explicit = names is not None
    wanted = [n.strip() for n in names] if names is not None else list(DEFAULTS)
    fields: list[Field] = []
    notes: list[str] = []
    fittable = ", ".join(sorted(n for n in known if not _count(n)))
    for raw in wanted:
        name = raw.removeprefix(PREFIX)
        where = f"--fit {raw}"
        if not name:
            raise InputError("an empty field name", where="--fit")
        if name not in known:
            raise InputError(
                "not a fittable field: calibrate fits the catalogue's assumptions of the "
                "scenario's composed profile, within their documented ranges (a scenario "
                "field such as node.h2d_per_gpu or timing.roofline.* has none: fit the "
                f"assumption it comes from); fittable: {fittable}",
                where=where,
            )
        a = known[name]
        reason = None
        if _count(name):
            reason = "a whole count of kernels, not a constant a least-squares fit can move"
        elif not catalogue[name].lo < catalogue[name].hi:
            reason = f"no documented range (lo = hi = {a.text(catalogue[name].lo)})"
        elif not applies(name, sc, comp):
            reason = (
                "it cannot change this scenario's runs (kvsim run's prediction ranges "
                "leave it out too)"
            )
        if reason is not None:
            if explicit:
                raise InputError(f"cannot be fitted: {reason}", where=where)
            if comp.moe or not name.startswith("experts."):
                notes.append(f"{name} left out: {reason}")
            continue
        if any(f.name == name for f in fields):
            continue
        doc = catalogue[name]
        lo, hi = min(doc.lo, a.value), max(doc.hi, a.value)
        fields.append(Field(name, a.value, lo, hi, a.mark, a.source, a.unit))
    if not fields:
        raise InputError("no field to fit", where="--fit")
    return fields, notes
