"""Render the scenario field reference (docs/scenario-reference.md) from the schema itself,
so the documentation cannot drift from the code: ``python -m kvsim.config.reference``."""

from __future__ import annotations

import types
import typing
from typing import Any, get_args, get_origin

import annotated_types
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic.functional_validators import BeforeValidator

from kvsim.config import schema
from kvsim.config.dump import NOT_RESULTS
from kvsim.config.loader.layers import MAX_EXTENDS
from kvsim.config.loader.merge import TAGS
from kvsim.config.loader.tables import MAX_TIMING_ROWS
from kvsim.files import MAX_CONFIG_BYTES, MAX_TABLE_BYTES
from kvsim.yamlfile import MAX_INT_CHARS, MAX_YAML_DEPTH, MAX_YAML_VALUES

_BOUNDS = (
    (annotated_types.Gt, "gt", "> {}"),
    (annotated_types.Ge, "ge", ">= {}"),
    (annotated_types.Le, "le", "<= {}"),
    (annotated_types.Lt, "lt", "< {}"),
)


def _describe_metadata(base: str, metadata: list[Any]) -> str:
    flat: list[Any] = []
    for m in metadata:
        flat += list(m.metadata) if isinstance(m, FieldInfo) else [m]
    metadata = flat
    unit = next(
        (getattr(m.func, "unit", None) for m in metadata if isinstance(m, BeforeValidator)), None
    )
    name = unit or base
    for m in metadata:
        for kind, attr, fmt in _BOUNDS:
            if isinstance(m, kind):
                name += " " + fmt.format(getattr(m, attr))
    return name


def _type_name(ann: Any, metadata: list[Any] | None = None) -> str:
    origin = get_origin(ann)
    args = get_args(ann)
    if origin is typing.Annotated:
        return _type_name(args[0], list(ann.__metadata__))
    if ann is schema.PolicyRef:  # (a policy field: its name, or the name with params)
        return "policy name, or mapping {name, params}"
    if origin is typing.Literal:
        return " \\| ".join(f"`{a}`" for a in args)
    if origin in (typing.Union, types.UnionType):
        parts = [_type_name(a) for a in args if a is not type(None)]
        opt = " or null" if type(None) in args else ""
        return " \\| ".join(parts) + opt
    if origin is list:
        return f"list of {_type_name(args[0])}"
    if origin is dict:
        return f"mapping of {_type_name(args[0])} to {_type_name(args[1])}"
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        return f"mapping ({ann.__name__})"
    names = {int: "integer", float: "number", str: "text", bool: "true/false", Any: "value"}
    base = names.get(ann, str(ann))
    return _describe_metadata(base, metadata or [])


def _models(ann: Any) -> list[type[BaseModel]]:
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        return [ann]
    out: list[type[BaseModel]] = []
    for a in get_args(ann):
        out += _models(a)
    return out


def _default(field: FieldInfo) -> str:
    if field.is_required():
        return "required"
    d = field.default
    if isinstance(d, schema.PolicyRef):
        return f"`{d}`"
    if isinstance(d, BaseModel):
        return "(defaults)"
    return f"`{d}`" if d not in (None, "") else ("null" if d is None else '`""`')


def rows(model: type[BaseModel], prefix: str = "") -> list[tuple[str, str, str, str]]:
    """(path, type, default, meaning) of every field under ``model``."""
    out = []
    for name, field in model.model_fields.items():
        path = f"{prefix}{name}"
        ann = field.annotation
        desc = field.description or ("selects this variant" if name in TAGS else "")
        out.append((path, _type_name(ann, list(field.metadata)), _default(field), desc))
        subs = [m for m in _models(ann) if m is not schema.PolicyRef]
        for sub in subs:
            tag = next((t for t in TAGS if t in sub.model_fields), None)
            label = ""
            if tag and len(subs) > 1:
                value = get_args(sub.model_fields[tag].annotation)[0]
                label = f"[{tag}={value}]"
            out += rows(sub, f"{path}{label}.")
    return out


def _limits() -> list[str]:
    """The bounds every YAML file kvsim reads is held to (from the loader's constants)."""
    return [
        "Limits, for scenarios, `extends` parents, profiles, sweep and suite files and `--set`",
        f"values: a YAML file is a regular file of at most {MAX_CONFIG_BYTES >> 20} MiB, nested",
        f"at most {MAX_YAML_DEPTH} levels deep, with at most "
        f"{MAX_YAML_VALUES:,} values in a scenario's",
        "files together once aliases are expanded (anchors, aliases and `<<` merge keys work;",
        f"a recursive alias is refused); an integer has at most {MAX_INT_CHARS} characters;",
        f"every number is finite; an `extends` chain has at most {MAX_EXTENDS} files; a",
        f"timing table is a regular file of at most {MAX_TABLE_BYTES >> 20} MiB and "
        f"{MAX_TIMING_ROWS:,} rows.",
    ]


def render() -> str:
    """The whole reference page as Markdown."""
    lines = [
        "# Scenario field reference",
        "",
        "Generated from `kvsim/config/schema/` by `python -m kvsim.config.reference`; a test",
        'fails when this file and the schema disagree. Units: sizes such as `"2 TiB"`,',
        '`"51168 B"`; bandwidths `"12 GB/s"`, `"1.71 GiB/s"`, `"800 Gb/s"` (bits);',
        'durations `"330 ms"`; rates `"5/s"`. Bare numbers are refused where a unit is',
        "expected. Fields of `node`, `model`, `timing`, `tiers` and `remote` default to the",
        "chosen profile's values (see `kvsim profiles` and `kvsim/profiles/*.yaml`). A path",
        "such as `workload[kind=synthetic].requests` applies when `workload.kind` is",
        "`synthetic`; write it as `workload.requests`. A policy field takes a name or",
        "`{name: NAME, params: {...}}`: a plugin class's keyword arguments, checked against its",
        "`__init__` and set or swept as e.g. `tiers.host.eviction.params.small_frac`",
        '(docs/extending.md, "Parameters"; `kvsim plugins` lists each policy\'s). A mapping',
        "names its policy: params without a `name` (`{params: {...}}`, or a `--set` of one",
        "parameter where no file names the policy) are refused, not given to the default.",
        "",
        "`--set PATH=VALUE` sets a field the same way in every command that takes it (run,",
        "validate, trace generate, costmodel, capacity in all its modes, sensitivity,",
        "baseline, check): on top of the scenario file (and of a sweep's or a suite's own",
        "`set`), before the profile is merged, so `--set profile=NAME` (or a composition",
        "`--set 'profile={model: ..., gpu: ...}'`) chooses the profile. A wrong",
        "value is named by its field path as written here, what was given and what is",
        "allowed (`cluster.engines: given 'four'; allowed a valid integer`). A scenario's",
        f"hash (`kvsim check --strict`) leaves out {', '.join(f'`{k}`' for k in NOT_RESULTS)},",
        "which cannot change a result.",
        "",
        *_limits(),
        "",
        "| field | type | default | meaning |",
        "|---|---|---|---|",
    ]
    for path, typ, default, desc in rows(schema.Scenario):
        lines.append(f"| `{path}` | {typ} | {default} | {desc} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":  # pragma: no cover
    print(render(), end="")
