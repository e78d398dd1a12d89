"""What a scenario's policy name means: looking it up, checking its params, making one.

This module owns the rules that turn a name into a policy class for a scenario (only
its own plugins', entry points' and the caller's own are visible: :func:`lookup`,
:func:`names`, :func:`visible`), the check of a scenario's name (:func:`check_name`)
and params (:func:`check_params`, coerced by pydantic), making an instance
(:func:`make`), and the one-line description of each built-in policy
(``BUILTIN_DOCS``).
"""

from __future__ import annotations

import difflib
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import ConfigDict, TypeAdapter, ValidationError
from pydantic.errors import PydanticUserError

from kvsim.interrupts import interrupted, signals
from kvsim.plugins import registry
from kvsim.plugins.failures import PluginError, at, describe, place_of, show
from kvsim.plugins.loading import (
    ENTRY_POINT_GROUP,
    canonical,
    entry_point_failures,
    load_entry_points,
)
from kvsim.plugins.params import Param, ParamError, parameters
from kvsim.plugins.registry import (
    _REGISTRY,
    BUILTIN,
    LABELS,
    Entry,
    _scope,
    _unchecked,
    disabled,
)


def _visible(entry: Entry, scope: frozenset[str] | None) -> bool:
    """May a scenario listing the plugins ``scope`` use this policy? Only if it lists
    the plugin that registered it (every worker imports just the scenario's plugins, so
    it knows the name too); entry points and policies registered by the caller's own
    code are visible to every scenario (None: no scenario in view, all are)."""
    return scope is None or entry.spec is None or entry.spec in scope


def lookup(kind: str, name: str, specs: Sequence[str] | None = None) -> Entry | None:
    """The plugin policy a scenario listing ``specs`` (default: the one being validated)
    means by ``name``; None: not a plugin name it can use. ValueError when two of its
    plugins register the name."""
    if name in BUILTIN[kind] or disabled():
        return None
    if name not in _REGISTRY[kind]:  # (once per process)
        load_entry_points()
    scope = frozenset(canonical(s) for s in specs) if specs is not None else _scope.get()
    seen = [e for e in _REGISTRY[kind].get(name, {}).values() if _visible(e, scope)]
    own = [e for e in seen if e.spec is not None]
    if len(own) > 1:
        raise ValueError(
            f"{LABELS[kind]} {name!r} is registered by two plugins of this scenario: "
            f"{own[0].plugin} (at {own[0].place}) and {own[1].plugin} (at {own[1].place})"
        )
    found = own or seen
    return found[-1] if found else None


def names(kind: str) -> list[str]:
    """Every name of a kind: built-in, then plugins' (entry points included; while a
    scenario is validated, those of its own plugins)."""
    if disabled():
        return list(BUILTIN[kind])
    load_entry_points()
    scope = _scope.get()
    mine = [n for n, by in _REGISTRY[kind].items() if any(_visible(e, scope) for e in by.values())]
    return [*BUILTIN[kind], *sorted(mine)]


def check_name(kind: str, name: str) -> str:
    """A scenario's policy name, if known (ValueError listing the choices otherwise)."""
    if name in BUILTIN[kind]:
        return name
    if disabled():
        label = f"{LABELS[kind]} {name!r}"
        if registry._inspect:
            if label not in _unchecked:
                _unchecked.append(label)
            return name
        raise ValueError(
            f"{label} is not a built-in one: it needs plugin code, which --no-plugins does not run"
        )
    if lookup(kind, name) is not None:
        return name
    others = _REGISTRY[kind].get(name)
    if others:
        plugin = next(iter(others.values())).plugin
        raise ValueError(
            f"{LABELS[kind]} {name!r} comes from plugin {plugin}, which this scenario "
            "does not list: add it to plugins: (or give --plugin)"
        )
    failures = entry_point_failures()
    for ep_name, where, why in failures:
        if ep_name == name:  # the installed package that offers it is broken
            raise ValueError(f"{LABELS[kind]} {name!r} comes from {where}, which {why}")
    known = names(kind)
    hint = (
        ""
        if len(known) > len(BUILTIN[kind])
        else "; a plugin's name needs its module in plugins: or --plugin"
    )
    broken = (
        f" (note: {len(failures)} installed {ENTRY_POINT_GROUP} entry point(s) "
        f"could not be loaded: {failures[0][1]}...)"
        if failures
        else ""
    )
    raise ValueError(f"unknown {LABELS[kind]} {name!r}; choose one of {known}{hint}{broken}")


# ---- loading -----------------------------------------------------------------------------


def make(
    kind: str, name: str, specs: Sequence[str], params: Mapping[str, Any] | None = None
) -> tuple[Any, str]:
    """A new instance of the plugin policy ``name`` of a scenario listing the plugins
    ``specs``, made with ``params`` as keyword arguments (checked and coerced by
    :func:`check_params`), and the plugin it came from (whatever its constructor raises
    is a :class:`PluginError` naming it)."""
    if disabled():
        raise PluginError(
            f"{LABELS[kind]} {name!r} needs plugin code, which --no-plugins does not run"
        )
    entry = lookup(kind, name, specs)
    if entry is None:  # validated names only reach here
        raise KeyError(name)
    where = f"plugin {entry.plugin} ({kind} {name!r})"
    try:
        kwargs = check_params(kind, name, params, specs) if params else {}
    except ParamError as e:  # (a scenario's params are checked when it is validated)
        raise PluginError(f"params.{e.param}: {e}" if e.param else str(e), where=where) from None
    before = signals()
    try:
        return entry.cls(**kwargs), entry.plugin
    except BaseException as e:  # SystemExit, KeyboardInterrupt too
        if interrupted(e, before):
            raise
        file = getattr(sys.modules.get(entry.cls.__module__), "__file__", None)
        raise PluginError(
            f"{entry.cls.__name__}() raised {describe(e)}{at(place_of(e, [file] if file else []))}",
            where=where,
        ) from e


def _coerce(kind: str, name: str, param: Param, value: Any) -> Any:
    """One parameter's value, validated and coerced to its annotation by pydantic."""

    if param.annotation is Any:
        return value
    try:
        try:
            adapter: Any = TypeAdapter(
                param.annotation,
                config=ConfigDict(arbitrary_types_allowed=True, allow_inf_nan=False),
            )
        except PydanticUserError:  # (a model with its own config)
            adapter = TypeAdapter(param.annotation)
    except Exception:  # an annotation pydantic cannot check: the value goes as given
        return value
    try:
        # True or False is taken only where the annotation takes a bool itself (pydantic's
        # lax mode would make it 1 or 1.0 for an int or a float)
        return adapter.validate_python(value, strict=True if type(value) is bool else None)
    except ValidationError as e:
        err = e.errors()[0]
        at_ = "".join(f"[{x}]" if isinstance(x, int) else f".{x}" for x in err["loc"])
        raise ParamError(
            f"{err['msg']}, got {show(err.get('input', value))}"
            + (f" at {at_.lstrip('.')}" if at_ else "")
            + f" ({LABELS[kind]} {name!r} takes {param.name}: {param.type_text()})",
            param.name,
        ) from None


def check_params(
    kind: str, name: str, params: Mapping[str, Any] | None, specs: Sequence[str] | None = None
) -> dict[str, Any]:
    """``params`` checked against the ``__init__`` of the policy ``name`` and coerced to
    its annotations (ParamError, a ValueError, naming the parameter at fault: an unknown
    one, a value of the wrong type, a required one missing; the built-in policies take
    none). Under ``no_plugins(inspect=True)`` a plugin's params are returned unchecked."""
    given = dict(params or {})
    if name in BUILTIN[kind]:
        if given:
            raise ParamError(
                f"the built-in {LABELS[kind]} {name!r} takes no parameters", next(iter(given))
            )
        return {}
    if disabled():
        return given
    entry = lookup(kind, name, specs)
    if entry is None:
        raise ParamError(f"unknown {LABELS[kind]} {name!r}")
    accepted, any_keyword = parameters(entry.cls)
    by_name = {p.name: p for p in accepted}
    out: dict[str, Any] = {}
    for key, value in given.items():
        param = by_name.get(key)
        if param is None:
            if any_keyword and isinstance(key, str) and key.isidentifier():
                out[key] = value
                continue
            choices = ", ".join(by_name) or "none"
            near = difflib.get_close_matches(str(key), list(by_name), n=1)
            hint = f"; did you mean {near[0]!r}?" if near else f" (it takes: {choices})"
            raise ParamError(f"unknown parameter of {LABELS[kind]} {name!r}{hint}", str(key))
        out[key] = _coerce(kind, name, param, value)
    for p in accepted:
        if p.required and p.name not in given:
            raise ParamError(
                f"missing required parameter of {LABELS[kind]} {name!r} ({p.type_text()})",
                p.name,
            )
    return out


# one line on each built-in policy (kvsim plugins lists them)
BUILTIN_DOCS: dict[tuple[str, str], str] = {
    ("eviction", "lru"): "evicts the least recently used block (hits and refreshes count)",
    ("eviction", "fifo"): "evicts the block stored first; hits do not reorder",
    ("admission", "all"): "stores every block offered",
    ("admission", "second_hit"): "stores a block offered once before (a ghost list remembers "
    "first sightings, as long as the tier holds blocks)",
    ("router", "round_robin"): "engines in turn",
    ("router", "least_loaded"): "the engine with the fewest outstanding requests",
    ("router", "cache_affinity"): "the engine holding the longest prefix, unless it has more "
    "than cluster.affinity_slack requests more than the least loaded one",
    ("scheduler", "fcfs"): "arrival order",
    ("scheduler", "lpm"): "longest cached prefix first",
    ("scheduler", "sjf"): "shortest remaining prompt first, with aging (engine.sjf_aging)",
    ("load_policy", "sync"): "restores the whole hit; the engine waits for it",
    ("load_policy", "async"): "restores the whole hit while the engine serves others",
    ("load_policy", "recompute"): "looks only at the GPU prefix cache; lower tiers are ignored",
    ("load_policy", "auto"): "as sync, but restores only the prefix whose live estimate "
    "beats the others (recompute included)",
    ("prefetch", "none"): "no prefetch: restores read NVMe and remote directly",
    ("prefetch", "best_effort"): "fetches NVMe and remote blocks into host; uses what arrived "
    "when the request is scheduled",
    ("prefetch", "wait_complete"): "fetches into host; the request waits for its prefetch",
    ("prefetch", "timeout"): "fetches into host; the request waits at most prefetch.timeout",
}


def visible(kind: str) -> list[tuple[str, Entry]]:
    """The plugin policies of a kind that the scenario in scope (else: every one) may
    name, with the entry each name means (a name two of its plugins register is left
    out: naming it is refused)."""
    out = []
    for n in names(kind)[len(BUILTIN[kind]) :]:
        try:
            entry = lookup(kind, n)
        except ValueError:
            continue
        if entry is not None:
            out.append((n, entry))
    return out
