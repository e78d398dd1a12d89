"""What identifies a sweep run beyond its overrides: the digests of the files it reads by
name (:func:`scenario_files`), file names in a sweep's values made absolute against the
file that wrote them (:func:`absolute_paths`), and the one digest (:func:`digest`) that
run ids, journal checksums and suite hashes share."""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path
from typing import Any

from kvsim.config.dump import scenario_identity
from kvsim.config.schema import Scenario
from kvsim.files import is_regular, sha256_file, text_values
from kvsim.plugins.loading import is_file_spec


def digest(obj: Any) -> str:
    """A short digest of a JSON-able value (keys sorted; what is not JSON as its text):
    run ids, journal row checksums, scenario hashes."""
    text = json.dumps(obj, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def config_files(
    config: Scenario | None,
    sc0: Scenario | None,
    params: tuple[tuple[str, Any], ...],
    folder: Path,
    *,
    whole: bool,
) -> dict[str, str]:
    """What identifies a configuration's runs beyond its overrides: the digests of the
    files it reads by name (:func:`scenario_files`), of any file a swept value names, and,
    when a swept value names one (whose content the loader takes in: a timing table, a
    profile) or the base is not valid alone (``whole``), of its resolved scenario."""
    files: dict[str, str] = {}
    scenario = config if config is not None else sc0
    if scenario is not None:
        files.update(scenario_files(scenario))
    named = {
        str(f): file_digest(f)
        for v in params
        for s in text_values(v[1])
        if (f := _file_named(s, folder)) is not None
    }
    files.update(named)
    if config is not None and (named or whole):
        files["(resolved scenario)"] = digest(scenario_identity(config))
    return files


def scenario_files(sc: Scenario) -> dict[str, str]:
    """``{path: digest of its content}`` of every file a resolved scenario still reads by
    name: found generically, as every text value of the scenario (any field) that names an
    existing file (a trace, a plugin file, a profile file...), and the file of each plugin
    given as a module. (What the loader reads whole: ``extends`` bases, profiles, timing
    tables, is in the resolved scenario itself.) An unchanged file keeps its digest."""
    d = scenario_identity(sc)  # (a description names no file the run reads)
    root = Path(sc.source).parent if sc.source else Path.cwd()
    out: dict[str, str] = {}
    for s in text_values(d):
        f = _file_named(s, root)
        if f is not None:
            out[str(f)] = file_digest(f)
    for spec in d.get("plugins", []):
        if isinstance(spec, str) and not is_file_spec(spec):
            module = sys.modules.get(spec)
            origin = getattr(module, "__file__", None) if module is not None else None
            if isinstance(origin, str) and is_regular(origin):
                out[f"plugin module {spec}"] = file_digest(Path(origin))
    return out


def _file_named(text: str, root: Path) -> Path | None:
    """The existing regular file a text value names (relative to ``root``), if it looks
    like a file name (a folder separator or a suffix) and is one."""
    if not text or len(text) > 4096 or not text.isprintable():
        return None
    if "/" not in text and os.sep not in text and not Path(text).suffix:
        return None
    try:
        q = Path(os.path.expanduser(text))
        q = q if q.is_absolute() else root / q
    except (ValueError, RuntimeError):
        return None
    return q.absolute() if is_regular(q) else None


def file_digest(path: Path) -> str:
    """A digest of a file's content (the same for an unchanged file, whatever its times;
    each file read once per process: :func:`kvsim.files.sha256_file`)."""
    digest = sha256_file(path)
    return digest[:16] if digest is not None else "unreadable"


# scenario fields that name files, and are resolved against the file that sets them
PATH_FIELDS = (("workload", "path"), ("timing", "table"))


def absolute_paths(overrides: dict[str, Any], folder: Path) -> dict[str, Any]:
    """``overrides`` (field path -> value) with the relative file names they set (a trace,
    a timing table, a profile file, plugin files) made absolute against ``folder``, the
    folder of the file that wrote them, whether given as ``workload.path: x`` or
    ``workload: {path: x}``."""

    def fix(parts: tuple[str, ...], value: Any) -> Any:
        if isinstance(value, dict):
            return {k: fix((*parts, str(k)), v) for k, v in value.items()}
        if parts == ("plugins",) and isinstance(value, list):  # modules stay as they are
            return [str(folder / p) if isinstance(p, str) and is_file_spec(p) else p for p in value]
        if not isinstance(value, str) or not value:
            return value
        is_profile_file = parts == ("profile",) and value.endswith((".yaml", ".yml"))
        if parts in PATH_FIELDS or is_profile_file:
            q = Path(os.path.expanduser(value))
            return value if q.is_absolute() else str(folder / q)
        return value

    return {k: fix(tuple(k.split(".")), v) for k, v in overrides.items()}
