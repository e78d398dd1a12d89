"""Scenario files in, a validated :class:`Scenario` out; every mistake as one line.

Layers, each a plain dict, are deep-merged in this order (later wins):

    profile (by name)  <-  extends chain (root first)  <-  scenario file  <-  --set overrides

Every leaf remembers where it was written (file and line, or the ``--set`` expression),
so a validation error reads ``scenarios/x.yaml:12: remote.bandwidth: <reason>``. A
mapping whose ``kind``/``dist``/``process`` changes between layers is replaced, not merged,
so a child may swap a Mooncake workload for a synthetic one (likewise a ``timing`` table
given over a roofline, or the other way round). Relative paths (``extends``,
``workload.path``, ``timing.table``) resolve against the file that wrote them; timing CSVs
are read here, so config objects never touch the filesystem afterwards. Sweep and suite
files load through :func:`load_record` with the same one-line errors.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from kvsim.config.checks import cross_checks
from kvsim.config.loader.layers import (
    load_chain,
    load_profile,
    normalize_layer,
    remote_kind_layer,
    require_mapping,
)
from kvsim.config.loader.merge import merge_layers
from kvsim.config.loader.messages import origin_of, validation_error
from kvsim.config.loader.overrides import apply_overrides
from kvsim.config.schema import Scenario
from kvsim.errors import InputError, shown
from kvsim.files import check_regular
from kvsim.plugins.loading import load_plugins
from kvsim.plugins.loading import scope as plugin_scope
from kvsim.profiles import DEFAULT_PROFILE
from kvsim.yamlfile import Budget, Origins, dotted, load_yaml

RecordT = TypeVar("RecordT", bound=BaseModel)


_KIND_HINTS = {
    "sweep": "run it with `kvsim sweep FILE --out DIR` or `kvsim capacity --sweep FILE`",
    "suite": "use it with `kvsim baseline` or `kvsim check`",
    "scenario": "a sweep names it in `base:`, a suite under `entries:`",
}


def file_kind(data: Mapping[str, Any]) -> str | None:
    """Which kind of kvsim file a mapping looks like, by keys only that kind has."""
    if "entries" in data:
        return "suite"
    if "base" in data:
        return "sweep"
    if {"workload", "cluster", "tiers", "remote", "extends", "profile"} & set(data):
        return "scenario"
    return None


def check_file_kind(data: Mapping[str, Any], expected: str, where: str) -> None:
    """Refuse, with a pointer to the right command, a sweep, suite or scenario file given
    where another kind is expected (its own fields would fail with less helpful lines)."""
    kind = file_kind(data)
    if kind is not None and kind != expected:
        raise InputError(
            f"this is a {kind} file, not a {expected}; {_KIND_HINTS[kind]}", where=where
        )


def load_record(
    model: type[RecordT], path: str | os.PathLike[str], kind: str | None = None
) -> RecordT:
    """Load a YAML file into any config record (sweep and suite files), with the same
    one-line errors as scenarios: file, line, field path, reason. ``kind`` ("sweep",
    "suite") refuses another kind of kvsim file with a pointer to its command."""
    p = Path(path)
    data, origins = load_yaml(p)
    data = require_mapping(data, str(p))
    if kind is not None:
        check_file_kind(data, kind, str(p))
    try:
        return model.model_validate(data)
    except ValidationError as e:
        raise validation_error(e, data, origins, str(p), model) from None


def validate(data: dict[str, Any], origins: Origins, default_where: str) -> Scenario:
    """Build the Scenario or raise InputError naming file, line and field path. The
    scenario's plugins are imported first: their policy names are then valid."""
    plugins = data.get("plugins")
    if not isinstance(plugins, list):
        plugins = []  # (the schema refuses anything else)
    elif plugins:
        load_plugins(plugins, origin_of(origins, ("plugins",), default_where))
    try:
        with plugin_scope(plugins):  # its policy names: built-in ones and its plugins'
            scenario = Scenario.model_validate(data)
    except ValidationError as e:
        raise validation_error(e, data, origins, default_where) from None
    problems = cross_checks(scenario)
    w = scenario.workload
    if getattr(w, "path", None) is not None:
        try:
            check_regular(w.path, what="trace file")
        except InputError as e:  # missing, a folder, a FIFO, a device, a symlink loop...
            reason = " not found" if e.reason.endswith("not found") else f": {e.reason}"
            problems.append((("workload", "path"), f"trace file {shown(w.path)}{reason}"))
    if problems:
        path, msg = problems[0]
        raise InputError(f"{dotted(path)}: {msg}", where=origin_of(origins, path, default_where))
    return scenario


def load_scenario(
    path: str | os.PathLike[str],
    overrides: Sequence[str] | Mapping[str, Any] | None = None,
    seed: int | None = None,
) -> Scenario:
    """Load, merge (profile, extends, overrides) and validate a scenario file."""
    p = Path(path)
    if p.suffix.lower() in (".jsonl", ".csv"):
        raise InputError(
            "this is a trace file, not a scenario; a scenario names it in workload.path "
            "(see scenarios/mooncake-sample.yaml)",
            where=str(p),
        )
    budget = Budget()  # one for the whole chain and the profile
    data, origins = load_chain(p, (), budget)
    check_file_kind(data, "scenario", str(p))
    if overrides:
        apply_overrides(data, origins, overrides)
    if seed is not None:
        apply_overrides(data, origins, {"seed": seed}, label="--seed=")
    data.setdefault("profile", DEFAULT_PROFILE)
    profile_layer, profile_origins = load_profile(
        data["profile"], origin_of(origins, ("profile",), str(p)), p.parent, budget
    )
    profile_layer, profile_origins = remote_kind_layer(profile_layer, profile_origins, data)
    merged, merged_origins = merge_layers(profile_layer, profile_origins, data, origins)
    merged.setdefault("source", str(p))
    return validate(merged, merged_origins, str(p))


def scenario_from_dict(
    data: Mapping[str, Any],
    overrides: Sequence[str] | Mapping[str, Any] | None = None,
    base_dir: str | os.PathLike[str] = ".",
    label: str = "<dict>",
) -> Scenario:
    """Validate a scenario given as a dict (same rules as a file, paths relative to
    base_dir); errors name ``label`` as the place."""
    d = copy.deepcopy(dict(data))
    origins: Origins = {}
    normalize_layer(d, origins, Path(base_dir))
    if overrides:
        apply_overrides(d, origins, overrides)
    d.setdefault("profile", DEFAULT_PROFILE)
    layer, porigins = load_profile(d["profile"], label, Path(base_dir))
    layer, porigins = remote_kind_layer(layer, porigins, d)
    merged, merged_origins = merge_layers(layer, porigins, d, origins)
    return validate(merged, merged_origins, label)
