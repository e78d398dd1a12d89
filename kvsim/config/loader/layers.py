"""One file = one layer: a scenario file with its ``extends`` chain, a named profile, a
composed profile (kvsim/catalogue/compose.py) and the remote kind's profile section, each
read into a plain dict with the origin (file:line) of every value. Relative paths
(``extends``, ``workload.path``, ``timing.table``, card files, plugin files) resolve against
the file that wrote them; timing CSVs are read here.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kvsim.catalogue.compose import profile_layer
from kvsim.config.loader.merge import merge_layers
from kvsim.config.loader.tables import read_timing_csv
from kvsim.config.schema import REMOTE_KINDS
from kvsim.errors import InputError, shown
from kvsim.files import check_regular
from kvsim.plugins.loading import canonical, is_file_spec
from kvsim.profiles import profile_path, remote_kind_path
from kvsim.yamlfile import Budget, Origins, load_yaml

MAX_EXTENDS = 32  # files in one extends chain
_PROFILE_KEYS = {
    "name",
    "description",
    "sources",
    "node",
    "model",
    "timing",
    "engine",
    "tiers",
    "remote",
    "assume",  # kvsim calibrate's fitted assumptions (read through profile.base)
}


def require_mapping(data: Any, where: str) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise InputError(
            f"expected a YAML mapping at the top level, got {type(data).__name__}", where=where
        )
    return data


def normalize_layer(data: dict[str, Any], origins: Origins, base_dir: Path) -> None:
    """Resolve the file references a layer makes, relative to its own folder."""
    plugins = data.get("plugins")
    if isinstance(plugins, list):  # .py files relative to the file; modules as they are
        data["plugins"] = [
            canonical(str(_resolve(base_dir, p))) if isinstance(p, str) and is_file_spec(p) else p
            for p in plugins
        ]
    wl = data.get("workload")
    if isinstance(wl, dict) and isinstance(wl.get("path"), str):
        wl["path"] = str(_resolve(base_dir, wl["path"]))
    prof = data.get("profile")
    if isinstance(prof, dict):  # card files relative to the file naming them
        for key in ("model", "gpu", "base"):
            v = prof.get(key)
            if isinstance(v, str) and ("/" in v or v.endswith((".json", ".yaml", ".yml"))):
                prof[key] = str(_resolve(base_dir, v))
    timing = data.get("timing")
    if isinstance(timing, dict):
        if isinstance(timing.get("table"), str):
            csv_path = _resolve(base_dir, timing["table"])
            where = origins.get(("timing", "table"), str(csv_path))
            timing.update(read_timing_csv(csv_path, where))
            timing["table"] = str(csv_path)  # (the file read, as workload.path: provenance)
        elif "seconds" in timing:
            timing["table"] = None


def _resolve(base_dir: Path, p: str) -> Path:
    q = Path(os.path.expanduser(p))
    return q if q.is_absolute() else (base_dir / q)


def load_chain(
    path: Path, stack: tuple[Path, ...] = (), budget: Budget | None = None
) -> tuple[dict[str, Any], Origins]:
    """A scenario file merged over its ``extends`` ancestors."""
    budget = budget if budget is not None else Budget()
    check_regular(path, what="scenario file")
    real = path.resolve()
    if real in stack:
        cycle = " -> ".join(str(p) for p in (*stack, real))
        raise InputError(f"extends cycle: {cycle}", where=str(path))
    if len(stack) >= MAX_EXTENDS:
        raise InputError(
            f"extends chain longer than {MAX_EXTENDS} files (from {stack[0]})", where=str(path)
        )
    data, origins = load_yaml(path, budget)
    data = require_mapping(data, str(path))
    normalize_layer(data, origins, path.parent)
    parent = data.pop("extends", None)
    where = origins.pop(("extends",), str(path))
    if parent is None:
        return data, origins
    if not isinstance(parent, str) or not parent:
        raise InputError("extends: expected a file path", where=where)
    parent_path = _resolve(path.parent, parent)
    try:
        check_regular(parent_path)
    except InputError as e:
        raise InputError(
            f"extends: {shown(parent)}: {e.reason} (looked for {parent_path})", where=where
        ) from None
    base, base_origins = load_chain(parent_path, (*stack, real), budget)
    return merge_layers(base, base_origins, data, origins)


def load_profile(
    name: Any, where: str, scenario_dir: Path | None, budget: Budget | None = None
) -> tuple[dict, Origins]:
    if isinstance(name, dict):  # composed from the catalogue (kvsim/catalogue/compose.py)
        return _compose_profile(name, where, scenario_dir, budget)
    if not isinstance(name, str) or not name:
        raise InputError(
            "profile: expected a profile name (see `kvsim profiles`) or a mapping "
            "{model, gpu, gpus, tp, pcp, ep}",
            where=where,
        )
    try:
        path = profile_path(name, scenario_dir)
    except InputError as e:
        raise InputError(f"profile: {e.reason}", where=where) from None
    data, origins = load_yaml(path, budget)
    data = require_mapping(data, str(path))
    unknown = set(data) - _PROFILE_KEYS
    if unknown:
        key = sorted(unknown, key=str)[0]
        raise InputError(
            f"{key}: unknown profile section (valid: {sorted(_PROFILE_KEYS)})",
            where=origins.get((str(key),), str(path)),
        )
    normalize_layer(data, origins, path.parent)
    # (assume: the numbers already carry a calibrated profile's fitted values; a
    # composition naming the file as its base reads them: kvsim.profiles.profile_assume)
    dropped = {"name", "description", "sources", "assume"}
    layer = {k: v for k, v in data.items() if k not in dropped}
    return layer, {k: v for k, v in origins.items() if k and k[0] in layer}


def remote_kind_layer(
    profile: dict[str, Any], origins: Origins, scenario: Mapping[str, Any]
) -> tuple[dict[str, Any], Origins]:
    """The profile layer, its remote section replaced by the shipped profile of the remote
    kind the scenario (its extends chain and ``--set``) asks for, when that differs from the
    profile's own (kvsim/profiles/remote/KIND.yaml); the scenario's remote fields then
    merge over it as over any profile. An unknown kind is left for validation to name."""
    remote = scenario.get("remote")
    kind = remote.get("kind") if isinstance(remote, dict) else None
    if not isinstance(kind, str) or kind not in REMOTE_KINDS:
        return profile, origins
    own = profile.get("remote")
    current = own.get("kind", "kv_server") if isinstance(own, dict) else "kv_server"
    if kind == current:
        return profile, origins
    path = remote_kind_path(kind)
    data, kind_origins = load_yaml(path)
    section = require_mapping(data, str(path)).get("remote")
    if not isinstance(section, dict):  # pragma: no cover - shipped files have one
        raise InputError("expected a remote: section", where=str(path))
    layer = {**profile, "remote": section}
    kept = {p: w for p, w in origins.items() if not p or p[0] != "remote"}
    # named as the package file (kvsim/profiles/remote/KIND.yaml:LINE), wherever installed
    shown = f"kvsim/profiles/remote/{kind}.yaml"
    kept.update(
        {
            p: w.replace(str(path), shown, 1)
            for p, w in kind_origins.items()
            if p and p[0] == "remote"
        }
    )
    return layer, kept


_COMPOSE_KEYS = {"model", "gpu", "gpus", "tp", "pcp", "pp", "ep", "dtype", "base", "assume"}


def _compose_profile(
    spec: dict, where: str, scenario_dir: Path | None, budget: Budget | None
) -> tuple[dict, Origins]:
    """A profile layer composed from a model card and a GPU card; its every value's origin
    is the scenario's ``profile`` mapping."""
    unknown = sorted(set(spec) - _COMPOSE_KEYS, key=str)
    if unknown:
        raise InputError(
            f"profile.{unknown[0]}: unknown field (valid: {', '.join(sorted(_COMPOSE_KEYS))})",
            where=where,
        )
    base = None
    if spec.get("base") is not None:
        try:
            base, _ = load_profile(spec["base"], where, scenario_dir, budget)
        except InputError as e:
            raise InputError(
                "profile.base: " + e.reason.removeprefix("profile: "), where=where
            ) from None
    try:
        layer = profile_layer(spec, base, scenario_dir)
    except InputError as e:  # a card's own mistake keeps the card's file and line
        raise InputError(e.reason, where=e.where or where) from None

    origins: Origins = {}

    def mark(d: dict, path: tuple) -> None:
        for k, v in d.items():
            origins[(*path, k)] = where
            if isinstance(v, dict):
                mark(v, (*path, k))

    mark(layer, ())
    return layer, origins
