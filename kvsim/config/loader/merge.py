"""Merging a scenario's layers: profile, extends chain, scenario file, overrides.

Mappings merge key by key (later wins); a mapping whose tag (``kind``, ``dist``,
``process``) changes is replaced whole, as is a ``timing`` table given over a roofline (or
the other way round); a policy field's bare name under a mapping of its ``params`` becomes
``{name: NAME}``. Each layer's origins (field path -> file:line) merge alongside.
"""

from __future__ import annotations

from typing import Any

from kvsim.config.schema import POLICY_FIELDS
from kvsim.yamlfile import Origins, Path_

TAGS = ("kind", "dist", "process")


def promoted(path: Path_, value: Any, over: Any) -> Any:
    """A policy field's bare name as the mapping ``{name: NAME}``, when what goes over it
    is a mapping (``params`` given in an ``extends:`` layer or an override, for a name
    the layer below gave); anything else as it is."""
    if isinstance(value, str) and isinstance(over, dict) and tuple(path) in POLICY_FIELDS:
        return {"name": value}
    return value


def deep_merge(base: Any, over: Any, _path: Path_ = (), _replaced: list | None = None) -> Any:
    """Merge ``over`` onto ``base``: mappings recursively, anything else replaced.

    A mapping whose tag (``kind``, ``dist`` or ``process``) differs is replaced whole; its
    path is appended to ``_replaced`` when a list is given. A policy field's bare name
    under a mapping is taken as ``{name: NAME}`` (:func:`promoted`).
    """
    base = promoted(_path, base, over)
    if not isinstance(base, dict) or not isinstance(over, dict):
        return over
    changed = any(tag in over and tag in base and over[tag] != base[tag] for tag in TAGS)
    if _path == ("timing",):  # a table over a roofline (or back) replaces the time model
        a, b = _timing_kind(base), _timing_kind(over)
        changed = changed or (a is not None and b is not None and a != b)
    if changed:
        if _replaced is not None:
            _replaced.append(_path)
        return dict(over)
    merged = dict(base)
    for key, value in over.items():
        if key in base:
            merged[key] = deep_merge(base[key], value, (*_path, key), _replaced)
        else:
            merged[key] = value
    return merged


def _timing_kind(timing: dict[str, Any]) -> str | None:
    """ "roofline" or "table": which time model a timing mapping gives (None: neither)."""
    if "roofline" in timing:
        return "roofline"
    if any(k in timing for k in ("table", "new_tokens", "cached_tokens", "seconds")):
        return "table"
    return None


def merge_layers(
    base: dict[str, Any], base_origins: Origins, over: dict[str, Any], over_origins: Origins
) -> tuple[dict[str, Any], Origins]:
    """Deep-merge two layers and their origins (stale origins of replaced mappings dropped)."""
    replaced: list[Path_] = []
    data = deep_merge(base, over, (), replaced)
    origins = {p: w for p, w in base_origins.items() if not any(p[: len(r)] == r for r in replaced)}
    origins.update(over_origins)
    return data, origins
