"""How a scenario field and its values read on a figure: a field's unit kind from the
schema (an axis in GB, a count on whole ticks), a swept value as people write it
("600 GB", "false", "lru(k=2)"), a configuration as its fields named in full."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, get_args

from pydantic import BaseModel

from kvsim.config.schema import Scenario, field_unit, policy_text
from kvsim.plots.style import display_unit, tick_text
from kvsim.results.readers import plain


def _models(annotation: Any) -> list[Any]:
    """The pydantic records an annotation holds (itself, or a union's or list's members)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for a in get_args(annotation) for m in _models(a)]


def _field_info(path: str) -> Any:
    """The schema's FieldInfo of the scenario field at a dotted path; None if it has none."""
    candidates: list[Any] = [Scenario]
    info = None
    for part in path.split("."):
        info = next((m.model_fields[part] for m in candidates if part in m.model_fields), None)
        if info is None:
            return None
        candidates = _models(info.annotation)
    return info


def field_unit_of(path: str) -> str | None:
    """The unit kind ("size", "bandwidth", "duration", "rate") of a scenario field named
    by its dotted path (``tiers.host.capacity`` -> "size"), from the schema; None for a
    plain number, a name or a path the schema does not have."""
    info = _field_info(path)
    return field_unit(info.annotation, info.metadata) if info is not None else None


def field_is_whole(path: str) -> bool:
    """Whether the scenario field at ``path`` holds a whole number (``cluster.engines``,
    ``remote.servers``): an axis of it ticks on whole numbers only."""
    info = _field_info(path)
    if info is None:
        return False
    if info.annotation is int:
        return True
    args = get_args(info.annotation)
    return bool(args) and args[0] is int and not _models(info.annotation)


def value_text(path: str, value: Any) -> str:
    """A swept value as a legend or label shows it: booleans as YAML writes them
    (false), a number in a unit field in its human unit (600 GB), a policy with params
    as ``name(k=v)``, else as written."""
    value = plain(value)
    policy = policy_text(value)
    if policy is not None:
        return policy
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        unit = field_unit_of(path)
        if unit in ("size", "bandwidth", "duration"):
            scale, name = display_unit(unit, [value])
            return f"{tick_text(value / scale)} {name}"
        return f"{value:g}" if isinstance(value, float) else str(value)
    return str(value)


def config_text(fields: Sequence[str], values: Sequence[Any], sep: str = ", ") -> str:
    """A configuration as people read it: "tiers.host.capacity = 600 GB, tiers.nvme.enabled
    = false" (every field named in full, so the tier is never lost)."""
    return sep.join(f"{c} = {value_text(c, v)}" for c, v in zip(fields, values, strict=True))
