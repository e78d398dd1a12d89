"""Validation errors as one line: a pydantic ValidationError becomes an InputError naming
the field path as the user wrote it, the file and line that wrote it, what was given and
what is allowed (:func:`validation_error`, the one place this happens)."""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError

from kvsim.config.loader.merge import TAGS
from kvsim.config.schema import REMOVED_FIELDS, Scenario
from kvsim.errors import InputError, shown
from kvsim.yamlfile import Origins, Path_, dotted


def origin_of(origins: Origins, path: Path_, default: str) -> str:
    for n in range(len(path), -1, -1):
        if path[:n] in origins:
            return origins[path[:n]]
    return default


# pydantic's names for the schema it tried, which a loc may hold between the user's keys
# (a union member: "function-after[_one_line(), constrained-str]", "ProfileSpec", "str")
_PLAIN_TYPES = {"str", "int", "float", "bool", "list", "dict", "none"}
_FIELD_NAME = re.compile(r"[a-z_][a-z0-9_]*\Z")


def _data_path(
    data: Any, loc: Sequence[Any], kind: str = "", root: type[BaseModel] = Scenario
) -> Path_:
    """A pydantic loc as the user's field path: its keys that the data holds, a field of
    the record there that the data leaves out (a required one missing, a parameter), and a
    field below a value a validator rewrites (a policy's bare name); pydantic's own
    segments (union members, validators, tags) are dropped."""
    out: list[Any] = []
    node = data
    for i, key in enumerate(loc):
        last = i == len(loc) - 1
        if (isinstance(node, dict) and key in node) or (
            isinstance(node, list) and isinstance(key, int) and 0 <= key < len(node)
        ):
            out.append(key)
            node = node[key]
        elif isinstance(node, dict):
            there = _annotation_at(root, tuple(out), data)
            fields = (
                there.model_fields
                if isinstance(there, type) and issubclass(there, BaseModel)
                else {key: None}  # a free mapping (a policy's params): any key is the user's
                if there is dict or get_origin(there) is dict
                else {}
            )
            if (last and kind == "missing") or key in fields:
                out.append(key)  # a field of the mapping that the data leaves out
                node = None
            # else: a union member's or a tag's name
        elif (
            isinstance(key, str) and _FIELD_NAME.match(key) and key not in _PLAIN_TYPES
        ) or isinstance(key, int):
            out.append(key)  # below a value the schema rewrites ("lru" -> {name: lru})
            node = None
    return tuple(out)


def _annotation_at(model: Any, path: Path_, data: Any) -> Any:
    """The annotation of the field at ``path`` (the root model for the top level), the
    union members on the way picked by the data; None where the schema has no such field."""
    node = data
    for i, key in enumerate(path):
        if isinstance(key, int):  # an item of a list field
            args = get_args(model)
            if get_origin(model) not in (list, tuple) or not args:
                return None
            node = node[key] if isinstance(node, list) and key < len(node) else None
            given = args[0]
        else:
            if not (isinstance(model, type) and issubclass(model, BaseModel)):
                return None
            field = model.model_fields.get(key)
            if field is None:
                return None
            node = node.get(key) if isinstance(node, dict) else None
            given = field.annotation
        model = _pick(given, node)
        if model is None and i == len(path) - 1:
            return given  # a union the data picks no member of: all of it
    return model


def _model_at(model: Any, path: Path_, data: Any) -> type[BaseModel] | None:
    """The record class that validates the mapping at ``path`` (for 'did you mean')."""
    found = _annotation_at(model, path, data)
    return found if isinstance(found, type) and issubclass(found, BaseModel) else None


def _members(annotation: Any) -> list[Any]:
    """The alternatives of an (Optional, Annotated, discriminated) union annotation."""
    args = get_args(annotation)
    origin = get_origin(annotation)
    if origin is Annotated:
        return _members(args[0])
    if origin is Union or (origin is not None and "UnionType" in str(origin)):
        return [m for a in args if a is not type(None) for m in _members(a)]
    return [annotation]


def _pick(annotation: Any, node: Any) -> Any:
    """The member of an (Optional/discriminated) union annotation that fits ``node``."""
    args = get_args(annotation)
    origin = get_origin(annotation)
    if origin is Annotated:
        return _pick(args[0], node)
    if origin is Union or (origin is not None and "UnionType" in str(origin)):
        members = [_pick(a, node) for a in args if a is not type(None)]
        models = [m for m in members if isinstance(m, type) and issubclass(m, BaseModel)]
        for m in models:
            for tag in TAGS:
                field = m.model_fields.get(tag)
                if (
                    field is not None
                    and isinstance(node, dict)
                    and node.get(tag) in get_args(field.annotation)
                ):
                    return m
        return models[0] if len(models) == 1 else None
    return annotation


def _tagged(annotation: Any) -> tuple[str, list[str]] | None:
    """(tag field, its values) of a discriminated union of records, e.g. ("kind",
    ["mooncake", "azure", "synthetic"]); None for anything else."""
    models = [m for m in _members(annotation) if isinstance(m, type) and issubclass(m, BaseModel)]
    for tag in TAGS:
        values = [
            str(v)
            for m in models
            if tag in m.model_fields
            for v in get_args(m.model_fields[tag].annotation)
        ]
        if len(models) > 1 and values:
            return tag, values
    return None


def _either(words: Sequence[str]) -> str:
    """'a', 'a or b', 'a, b or c'."""
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} or {words[-1]}"


def _mapping_text(annotation: Any) -> str:
    """What a record field takes, in the user's words: its fields or its tag's values."""
    tagged = _tagged(annotation)
    if tagged is not None:
        tag, values = tagged
        return f"a mapping with {tag}: {_either([repr(v) for v in values])}"
    models = [m for m in _members(annotation) if isinstance(m, type) and issubclass(m, BaseModel)]
    if len(models) == 1:
        names = list(models[0].model_fields)
        more = ", ..." if len(names) > 8 else ""
        return f"a mapping {{{', '.join(names[:8])}{more}}}"
    return "a mapping"


# error types on a length: (which bound, what is counted)
_LENGTH_ERRORS = {
    "too_short": ("min", "item"),
    "too_long": ("max", "item"),
    "string_too_short": ("min", "character"),
    "string_too_long": ("max", "character"),
}
# error types whose message names a type or a record class: what the field takes instead
_MAPPING_ERRORS = {"model_type", "model_attributes_type", "dict_type", "mapping_type"}


def _allowed(err: Mapping[str, Any], annotation: Any) -> str:
    """What the field of a pydantic error takes, in the user's words (pydantic's message
    without "Input should be", a record class as its fields, a tagged union as its tags)."""
    kind = err["type"]
    if kind in _MAPPING_ERRORS:
        return _mapping_text(annotation) if annotation is not None else "a mapping"
    ctx = err.get("ctx") or {}
    if kind in _LENGTH_ERRORS:  # "List should have at least 1 item after validation, not 0"
        bound, unit = _LENGTH_ERRORS[kind]
        n = ctx.get(f"{bound}_length")
        if isinstance(n, int):
            return f"{'at least' if bound == 'min' else 'at most'} {n} {unit}{'s' * (n != 1)}"
    msg = str(err["msg"])
    msg = msg.removeprefix("Input should be ").removeprefix("Value error, ")
    # "a valid number, unable to parse string as a number": the allowed part only
    msg = re.split(r", (?:unable to|invalid|got|input )", msg, maxsplit=1)[0]
    return msg


def _describe(
    err: Mapping[str, Any],
    data: Any,
    path: Path_,
    root: type[BaseModel] = Scenario,
    others: Sequence[Mapping[str, Any]] = (),
) -> str:
    """One pydantic error (and ``others``: the other members of a union tried at the same
    field) as the user reads it: what was given and what is allowed, in the user's words
    (no validator, union-member or class names)."""
    kind = err["type"]
    msg = str(err["msg"]).removeprefix("Value error, ")
    got = err.get("input")
    if kind == "extra_forbidden":
        gone = REMOVED_FIELDS.get((str(path[-2]), str(path[-1]))) if len(path) > 1 else None
        if gone is not None:
            return gone
        model = _model_at(root, path[:-1], data)
        valid = sorted(model.model_fields) if model else []
        near = difflib.get_close_matches(str(path[-1]), valid, n=1)
        hint = f"; did you mean {near[0]!r}?" if near else ""
        return f"unknown field{hint}" + (
            f" (valid: {', '.join(valid)})" if valid and not near else ""
        )
    if kind == "union_tag_invalid":  # (the path ends with the tag field: kind, dist...)
        tagged = _tagged(_annotation_at(root, path[:-1], data))
        values = tagged[1] if tagged is not None else []
        node: Any = data
        for key in path:  # the tag as written (pydantic's ctx has it as text)
            node = node[key] if isinstance(node, (dict, list)) else None
        given = node if path and not isinstance(node, dict) else err.get("ctx", {}).get("tag")
        return f"given {_given(given)}; allowed {_either([repr(v) for v in values] or ['?'])}"
    annotation = _annotation_at(root, path, data)
    if kind == "missing":
        tagged = _tagged(annotation)
        if tagged is not None:
            return f"missing required field; allowed {_either([repr(v) for v in tagged[1]])}"
        if tuple(path[:3]) == ("timing", "roofline", "ops"):  # one field of ops set alone
            return (
                "missing required field: a per-operation roofline (timing.roofline.ops) "
                "needs every operation's curve; a composed profile (profile: {model, gpu}) "
                "writes them, a named profile's ops is null"
            )
        return "missing required field"
    if kind == "union_tag_not_found":
        tagged = _tagged(annotation)
        if tagged is None:  # pragma: no cover - every discriminated union has one
            return "given a mapping without its kind"
        tag, values = tagged
        return f"given a mapping without {tag}; allowed {tag}: {_either([repr(v) for v in values])}"
    if kind in ("value_error", "assertion_error"):  # kvsim's own words: they name the value
        return msg
    allowed = [_allowed(e, annotation) for e in (err, *others)]
    return f"given {_given(got)}; allowed {_either(list(dict.fromkeys(allowed)))}"


def _given(value: Any) -> str:
    """A value a message quotes as given: a mapping or list by its kind, anything else as
    written (repr, cut)."""
    if isinstance(value, dict):
        return "a mapping" if value else "an empty mapping"
    if isinstance(value, list):
        return shown(value)
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return shown(value)


def _path_of(data: Any, err: Mapping[str, Any], root: type[BaseModel] = Scenario) -> Path_:
    """The user's field path of a pydantic error; an unknown tag's, the tag field's own
    (``workload.kind``: its line is the one to fix)."""
    path = _data_path(data, err["loc"], err["type"], root)
    if err["type"] == "union_tag_invalid":
        tag = str(err.get("ctx", {}).get("discriminator", "")).strip("'")
        node: Any = data
        for key in path:
            node = node[key] if isinstance(node, (dict, list)) else None
        if isinstance(node, dict) and tag in node:
            path = (*path, tag)
    return path


def validation_error(
    e: ValidationError,
    data: Any,
    origins: Origins,
    default_where: str,
    root: type[BaseModel] = Scenario,
) -> InputError:
    """The one place a pydantic ValidationError becomes an InputError: the first error's
    field path (as the user wrote it), file and line, what was given and what is allowed,
    and how many other fields are wrong. The errors of a union's members at one field are
    one error (``profile`` given 5: neither a name nor a composition). An unknown key comes
    first: a misspelt key (``input_tokens``) is the cause of the missing field it meant."""
    errors = sorted(e.errors(), key=lambda x: x["type"] != "extra_forbidden")
    paths = [_path_of(data, x, root) for x in errors]
    path = paths[0]
    same = [x for x, p in zip(errors[1:], paths[1:], strict=True) if p == path]
    if errors[0]["type"] in ("missing", "extra_forbidden"):
        same = []
    others = len(dict.fromkeys(paths)) - 1
    more = f" (and {others} more)" if others else ""
    return InputError(
        f"{dotted(path)}: {_describe(errors[0], data, path, root, same)}{more}",
        where=origin_of(origins, path, default_where),
    )
