"""A Scenario written back as a plain dict that loads again to the same Scenario.

Unit-carrying fields become unit strings in base units ("288000000000.0 B", "0.33 s"),
written with ``repr`` so every float round-trips exactly; the timing grid is written inline;
paths are absolute; a policy is its bare name when it has no params (as scenarios were
written before policies took any, so their hashes stay), ``{name, params}`` otherwise.
``yaml.safe_dump`` of the result is a complete, self-contained
scenario file (``kvsim run --out`` writes one next to the results).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from kvsim.config.schema import PolicyRef, Scenario, field_unit
from kvsim.plugins.loading import canonical
from kvsim.units import UNIT_WRITERS


def _value(value: Any, unit: str | None) -> Any:
    if isinstance(value, PolicyRef):
        if not value.params:
            return value.name
        return {"name": value.name, "params": copy.deepcopy(value.params)}
    if isinstance(value, BaseModel):
        return record_to_dict(value)
    if isinstance(value, list):
        return [_value(v, unit) for v in value]
    if unit is not None and isinstance(value, (int, float)) and not isinstance(value, bool):
        return UNIT_WRITERS[unit](float(value))
    return value


def record_to_dict(record: BaseModel) -> dict[str, Any]:
    """Any config record as a dict of YAML-ready values (units as strings)."""
    out: dict[str, Any] = {}
    for name, field in type(record).model_fields.items():
        out[name] = _value(getattr(record, name), field_unit(field.annotation, field.metadata))
    return out


def scenario_to_dict(sc: Scenario) -> dict[str, Any]:
    """The whole scenario, self-contained (inline timing, absolute trace path)."""
    out = record_to_dict(sc)
    out.pop("source", None)
    if not out["plugins"]:  # as a scenario without plugins was written before they existed
        del out["plugins"]
    else:  # .py files by absolute path: the written scenario loads from anywhere
        out["plugins"] = [canonical(p) for p in out["plugins"]]
    out["timing"]["table"] = None
    if out["workload"]["concurrency"] is None:  # (open loop: written as before it existed)
        del out["workload"]["concurrency"]
    path = out["workload"].get("path")
    if path is not None:
        out["workload"]["path"] = str(Path(path).resolve())
    return out


# Scenario fields that cannot change any result (words for humans): left out of the
# scenario's identity, so that `kvsim check --strict` does not call a scenario changed
# when only its description is. (``source``, the file it came from, is never written.)
NOT_RESULTS = ("description",)


def scenario_identity(sc: Scenario) -> dict[str, Any]:
    """:func:`scenario_to_dict` without :data:`NOT_RESULTS`: what a scenario's hash covers
    (kvsim.experiments.regression: a baseline's entries, ``kvsim check``)."""
    out = scenario_to_dict(sc)
    for key in NOT_RESULTS:
        out.pop(key, None)
    return out
