"""Overrides: ``--set path=value`` expressions (and a sweep's or suite's ``set``) parsed
as YAML scalars and set into a scenario's data, each value's origin the expression."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from kvsim.config.loader.merge import TAGS, deep_merge, promoted
from kvsim.config.schema import POLICY_FIELDS
from kvsim.errors import InputError
from kvsim.yamlfile import MAX_YAML_DEPTH, Origins, dotted, parse_text, unshared


def parse_override(expr: str) -> tuple[list[str], Any]:
    """``remote.sharding=per_rank`` -> (["remote", "sharding"], "per_rank"); YAML scalars."""
    if "=" not in expr:
        raise InputError(
            "expected path=value, e.g. remote.sharding=per_rank", where=f"--set {expr}"
        )
    key, _, raw = expr.partition("=")
    parts = [k.strip() for k in key.split(".")]
    if not all(parts):
        raise InputError("empty field name in path", where=f"--set {expr}")
    value: Any = ""
    if raw.strip():
        try:  # the same bounds as a file: nesting, size, aliases, integer length
            _, value, _ = parse_text(raw, f"--set {expr}", lines=False)
        except InputError as e:
            if not e.reason.startswith(("YAML syntax error", "YAML error", "YAML cannot")):
                raise
            value = raw  # not YAML: the text itself
    return parts, value


def _parsed_sets(sets: Iterable[str], label: str = "--set ") -> list[tuple[list[str], Any, str]]:
    """Each ``path=value`` expression parsed: (path, value, where), a field given twice
    refused (which value would be meant?); ``plugins`` may be given again: they add up."""
    items: list[tuple[list[str], Any, str]] = []
    given: dict[tuple[str, ...], str] = {}
    for expr in sets:
        parts, value = parse_override(expr)
        earlier = given.get(tuple(parts))
        given[tuple(parts)] = expr
        if earlier is not None and parts != ["plugins"]:
            raise InputError(
                f"{dotted(parts)} is set twice (also by {label}{earlier}); give it once",
                where=f"{label}{expr}",
            )
        items.append((parts, value, f"{label}{expr}"))
    return items


def with_sets(
    overrides: Mapping[str, Any] | None, sets: Sequence[str] | Mapping[str, Any] | None
) -> dict[str, Any]:
    """A configuration's overrides (a sweep's ``set`` and swept values, a suite entry's
    ``set``) with the command line's ``--set`` on top, as one mapping (field path -> value)
    for :func:`load_scenario`. Every command that runs such configurations takes ``--set``
    this way, so that it reaches the same layer as ``kvsim run --set``: below the profile
    merge, where ``--set profile=...`` chooses the profile (set over an already loaded
    Scenario, it would change nothing but the name). Plugins add up."""
    out = dict(overrides or {})
    if isinstance(sets, Mapping):
        pairs = [(str(k), v) for k, v in sets.items()]
    else:
        pairs = [(".".join(p), v) for p, v, _ in _parsed_sets(sets or [])]
    for key, value in pairs:
        if key == "plugins" and isinstance(value, list) and isinstance(out.get(key), list):
            value = [*out[key], *(v for v in value if v not in out[key])]
        out.pop(key, None)  # (applied after the configuration's own overrides)
        out[key] = value
    return out


def apply_overrides(
    data: dict[str, Any],
    origins: Origins,
    overrides: Sequence[str] | Mapping[str, Any],
    label: str = "--set ",
) -> None:
    """Set each override into ``data`` in place (creating mappings on the way). Errors name
    the override as ``label`` + ``path=value`` (``label`` alone when it ends with "=")."""
    items: list[tuple[list[str], Any, str]] = []
    if isinstance(overrides, Mapping):
        for k, v in overrides.items():
            where = f"{label}{v}" if label.endswith("=") else f"{label}{k}={v}"
            items.append((k.split("."), v, where))
    else:
        items = _parsed_sets(overrides, label)
    for parts, value, where in items:
        if len(parts) > MAX_YAML_DEPTH:  # also keeps the bookkeeping below linear
            raise InputError(f"field path deeper than {MAX_YAML_DEPTH} levels", where=where)
        node = data
        for i, key in enumerate(parts[:-1]):
            child = node.get(key)
            if child is None:
                child = node[key] = {}
            elif isinstance(child, str) and tuple(parts[: i + 1]) in POLICY_FIELDS:
                child = node[key] = {"name": child}  # (its params, or its name, set below)
            if not isinstance(child, dict):
                raise InputError(f"{dotted(parts[: i + 1])} is not a mapping", where=where)
            node = child
        key = parts[-1]
        path = tuple(parts)
        if key in TAGS and key in node and node[key] != value:
            # a new kind of record: the old one's fields do not carry over
            node.clear()
            path = path[:-1]
        old = promoted(path, node.get(key), value)
        if isinstance(old, dict) and isinstance(value, dict):
            value = deep_merge(old, value, path)
        elif path == ("plugins",) and isinstance(old, list) and isinstance(value, list):
            value = [*old, *(v for v in value if v not in old)]  # plugins add up
        node[key] = unshared(value)  # never the caller's object, which later overrides edit
        for p in [p for p in origins if p[: len(path)] == path]:
            del origins[p]
        for n in range(1, len(parts) + 1):  # levels this override created are its own
            prefix = tuple(parts[:n])
            if prefix not in origins:
                origins[prefix] = where
