"""``kvsim plugins``: the policies a scenario (or this environment) may name, by kind:
built-in ones, those of plugin files and modules, and installed entry points, each with
its source, its parameters (annotation and default, from the class's ``__init__``) and
the first line of its docstring."""

from __future__ import annotations

import argparse
import inspect
import json
from typing import Any

from kvsim.api import load
from kvsim.config.schema import POLICY_FIELDS
from kvsim.errors import clean
from kvsim.plugins.failures import show
from kvsim.plugins.loading import scope
from kvsim.plugins.params import ParamError, is_plain, parameters
from kvsim.plugins.registry import BUILTIN, disabled, skipped
from kvsim.plugins.resolve import BUILTIN_DOCS, visible


def _doc_line(cls: type) -> str:
    """The first line of a class's own docstring ("" if it has none)."""
    doc = cls.__dict__.get("__doc__")
    if not isinstance(doc, str):
        return ""
    lines = inspect.cleandoc(doc).splitlines()
    return lines[0].strip() if lines else ""


def _params(cls: type) -> tuple[list[dict[str, Any]], bool, str | None]:
    """A class's parameters as rows, whether it takes any keyword, and why they cannot be
    read (None: they can)."""
    try:
        accepted, any_keyword = parameters(cls)
    except ParamError as e:
        return [], False, str(e)
    rows = []
    for p in accepted:
        row: dict[str, Any] = {"name": p.name, "type": p.type_text(), "required": p.required}
        if not p.required:
            row["default"] = p.default if is_plain(p.default) else show(p.default)
        rows.append(row)
    return rows, any_keyword, None


def _used_by(sc: Any, kind: str, name: str) -> list[str]:
    """The fields of the scenario that name this policy (in sections that are enabled)."""
    out = []
    for path, k in POLICY_FIELDS.items():
        if k != kind:
            continue
        node = sc
        for part in path:
            if getattr(node, "enabled", True) is False:
                node = None
                break
            node = getattr(node, part)
        if node is not None and node.name == name:
            out.append(".".join(path) + (f" ({node})" if node.params else ""))
    return out


def policy_rows(sc: Any = None) -> list[dict[str, Any]]:
    """Every policy the scenario ``sc`` (None: any scenario) may name, as rows: kind,
    name, source, params, doc, used_by."""
    rows: list[dict[str, Any]] = []
    for kind in BUILTIN:
        for name in BUILTIN[kind]:
            rows.append(
                {
                    "kind": kind,
                    "name": name,
                    "source": "built-in",
                    "params": [],
                    "doc": BUILTIN_DOCS.get((kind, name), ""),
                }
            )
        for name, entry in visible(kind):
            params, any_keyword, unreadable = _params(entry.cls)
            row: dict[str, Any] = {
                "kind": kind,
                "name": name,
                "source": entry.plugin,
                "params": params,
                "doc": _doc_line(entry.cls),
            }
            if any_keyword:
                row["any_keyword"] = True
            if unreadable is not None:
                row["params_error"] = unreadable
            rows.append(row)
    if sc is not None:
        for row in rows:
            row["used_by"] = _used_by(sc, row["kind"], row["name"])
    return rows


def _param_text(param: dict[str, Any]) -> str:
    text = f"{param['name']}: {param['type']}"
    if not param["required"]:
        text += f" = {param['default']!r}" if "default" in param else ""
    return clean(text, 200)


def _cmd_plugins(args: argparse.Namespace) -> int:
    sc = None
    if args.scenario is not None:
        extra = ["plugins=" + json.dumps(args.plugins)] if args.plugins else None
        sc = load(args.scenario, extra)
        with scope(sc.plugins):
            rows = policy_rows(sc)
    else:
        rows = policy_rows()
    not_imported = skipped() if disabled() else []
    if args.json:
        print(json.dumps({"policies": rows, "not_imported": not_imported}, indent=2, default=str))
        return 0
    for kind in BUILTIN:
        print(f"{kind}:")
        mine = [r for r in rows if r["kind"] == kind]
        width = max(len(clean(r["name"], 40)) for r in mine)
        for r in mine:
            source = "built-in" if r["source"] == "built-in" else clean(r["source"], 200)
            doc = clean(r["doc"], 200)
            print(f"  {clean(r['name'], 40):<{width}}  [{source}]{'  ' + doc if doc else ''}")
            if r["params"] or r.get("any_keyword"):
                shown = [_param_text(x) for x in r["params"]]
                shown += ["**kwargs"] if r.get("any_keyword") else []
                print(f"  {'':<{width}}  params: {', '.join(shown)}")
            elif r.get("params_error"):
                print(f"  {'':<{width}}  params: {clean(r['params_error'], 300)}")
            if r.get("used_by"):
                print(f"  {'':<{width}}  used by: {', '.join(r['used_by'])}")
    if not_imported:
        print(f"not imported (--no-plugins): {', '.join(map(clean, not_imported))}")
    return 0
