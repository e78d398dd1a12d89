"""Hardware/model profiles shipped with kvsim, selectable by name.

A profile is a scenario fragment (``node``, ``model``, ``timing``, ``tiers``, ``remote``)
in a YAML file next to this module, with its sources written beside each number. The
``remote/`` folder holds one ``remote:`` section per remote store kind (``remote.kind``),
which a scenario asking for another kind than its profile's starts from. A
scenario names one with ``profile: NAME`` and may override any field. A scenario may
also name a profile file of its own (``profile: my-node.yaml``, relative to the scenario).
A profile file written by ``kvsim calibrate`` also holds an ``assume:`` section, the
catalogue assumptions it fitted (:func:`profile_assume`): named directly, the profile's
numbers already carry them; named as a composition's ``base``, the composition takes them
(marked C).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from kvsim.errors import InputError
from kvsim.files import check_regular, is_regular

PROFILE_DIR = Path(__file__).parent
DEFAULT_PROFILE = "b300-pcp8-glm5"
REMOTE_KIND_DIR = PROFILE_DIR / "remote"  # one remote: section per remote.kind


def remote_kind_path(kind: str) -> Path:
    """The shipped profile of a remote store kind (kvsim/profiles/remote/KIND.yaml)."""
    return REMOTE_KIND_DIR / f"{kind}.yaml"


def list_profiles() -> list[dict[str, str]]:
    """Name and one-line description of every shipped profile, sorted by name."""
    out = []
    for path in sorted(PROFILE_DIR.glob("*.yaml")):
        with path.open(encoding="utf-8") as fh:
            data = yaml.safe_load(fh) or {}
        out.append({"name": path.stem, "description": str(data.get("description", "")).strip()})
    return out


def profile_path(name: str, scenario_dir: Path | None = None) -> Path:
    """The YAML file of a shipped profile, or of a user profile file given as a path."""
    if name.endswith((".yaml", ".yml")):
        p = Path(name)
        if not p.is_absolute() and scenario_dir is not None:
            p = scenario_dir / p
        try:  # missing, a folder, a device, a FIFO, a symlink loop
            check_regular(p)
        except InputError as e:
            raise InputError(f"profile file {name!r}: {e.reason} (looked for {p})") from None
        return p
    p = PROFILE_DIR / f"{name}.yaml"
    if "/" in name or "\\" in name or not is_regular(p):
        names = ", ".join(x["name"] for x in list_profiles())
        raise InputError(f"unknown profile {name!r}; shipped profiles: {names}")
    return p


def profile_assume(name: str, scenario_dir: Path | None = None) -> tuple[dict[str, Any], str]:
    """A profile file's ``assume:`` section (the catalogue assumptions ``kvsim calibrate``
    fitted, by dotted name) and the file it came from; ``{}`` for a profile without one
    (every shipped profile)."""
    path = profile_path(name, scenario_dir)
    with path.open(encoding="utf-8") as fh:
        data = yaml.safe_load(fh) or {}
    section = data.get("assume") if isinstance(data, dict) else None
    if section is None:
        return {}, str(path)
    if not isinstance(section, dict):
        raise InputError(
            f"assume: expected a mapping of assumption names to values, got "
            f"{type(section).__name__}",
            where=str(path),
        )
    return section, str(path)
