"""Which keys a sweep file may set: a scenario field path (not ``seed``), never below a
field that holds one value nor naming a field its record lacks, so that a sweep every
run of which would fail is refused before any run."""

from __future__ import annotations

import json
import types
import typing
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel

from kvsim.config.schema import POLICY_FIELDS, REMOVED_FIELDS, Scenario
from kvsim.errors import InputError


def check_key(section: str, key: str, where: str) -> None:
    """A swept or set key must be a scenario field path (and not ``seed``: the seeds of a
    sweep are its ``seeds`` or ``replications``, which every run's row records)."""
    parts = key.split(".")
    shown = json.dumps(key)[1:-1][:80]  # control characters escaped, length bounded
    if key == "seed":
        raise InputError(
            f"{section}.seed: a sweep sets its seeds with `seeds: [...]` or "
            "`replications: N` (every configuration runs with each seed), not as a field",
            where=where,
        )
    if not all(part.strip() for part in parts):
        raise InputError(f"{section}.{shown}: empty field name in the path", where=where)
    if any(part != part.strip() for part in parts):
        raise InputError(f"{section}.{shown}: spaces around a field name", where=where)
    if parts[0] not in Scenario.model_fields or parts[0] == "source":
        raise InputError(
            f"{section}.{shown}: not a scenario field (top-level fields: "
            f"{', '.join(f for f in Scenario.model_fields if f not in ('seed', 'source'))})",
            where=where,
        )
    _check_below(section, parts, shown, where)


def _check_below(section: str, parts: list[str], shown: str, where: str) -> None:
    """A key must not go below a field that holds one value (``seed.x``, ``name.y``,
    ``cluster.engines.z``) nor name a field its record does not have: every run would
    fail, so the sweep is refused before any."""

    def models(annotation: Any) -> list[type[BaseModel]] | None:
        """The records a field may hold; None when kvsim cannot tell (a mapping, say);
        [] for a field holding one value."""
        origin = typing.get_origin(annotation)
        if origin is typing.Annotated:
            return models(typing.get_args(annotation)[0])
        if origin in (typing.Union, types.UnionType):
            found: list[type[BaseModel]] = []
            for arg in typing.get_args(annotation):
                if arg is type(None):
                    continue
                inner = models(arg)
                if inner is None:
                    return None
                found += inner
            return found
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            return [annotation]
        if origin in (dict, typing.Mapping) or annotation is Any or annotation is dict:
            return None
        return []  # a number, a text, a list: nothing below it

    current: list[type[BaseModel]] | None = [Scenario]
    for depth, part in enumerate(parts):
        if current is None:
            return
        if not current:
            above = ".".join(parts[:depth])
            raise InputError(
                f"{section}.{shown}: {above} holds a single value, with no fields below it",
                where=where,
            )
        fields = [m.model_fields[part] for m in current if part in m.model_fields]
        gone = REMOVED_FIELDS.get((parts[depth - 1], part)) if depth else None
        if not fields and gone is not None:  # a field kvsim used to have: say what replaces it
            raise InputError(f"{section}.{shown}: {gone}", where=where)
        if not fields:
            raise InputError(
                f"{section}.{shown}: {'.'.join(parts[:depth]) or 'the scenario'} has no "
                f"field {json.dumps(part)[1:-1][:40]!r}",
                where=where,
            )
        nxt: list[type[BaseModel]] = []
        for f in fields:
            inner = models(f.annotation)
            if inner is None:
                current = None
                break
            nxt += inner
        else:
            current = nxt


def policy_and_its_parts(field: str, inner: str, fixed: Mapping[str, Any]) -> bool:
    """Does `set:` give the policy field ``field`` as a bare name, and ``inner`` one of
    its parts (``field.params.x`` or ``field.name``)? The name then becomes ``{name:
    NAME}`` and the part goes in (kvsim.config.loader.apply_overrides), as with two
    ``--set``."""
    part = inner[len(field) + 1 :].split(".", 1)[0]
    return (
        tuple(field.split(".")) in POLICY_FIELDS
        and isinstance(fixed.get(field), str)
        and part in ("params", "name")
    )
