"""Calibrated profiles beside a composition: where a shipped named profile (kvsim/profiles)
models the same model on the same GPU as a composed profile, the two lone 16k prefills are
compared in one line, so that two answers for one system are said, never silent. It loads
the named profiles as scenarios, so it sits above the loader (which composes profiles with
:mod:`kvsim.catalogue.compose`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from kvsim.catalogue.compose import Composition, compose
from kvsim.catalogue.gpus import read_gpu
from kvsim.config.loader import scenario_from_dict
from kvsim.errors import InputError
from kvsim.physics.step import lone_seconds, make_step_model
from kvsim.profiles import PROFILE_DIR


def _norm(name: str) -> str:
    return "".join(c for c in name.lower() if c.isalnum())


def calibrated_profiles(comp: Composition) -> list[tuple[str, int]]:
    """The shipped named profiles calibrated to the same model on the same GPU as ``comp``,
    as (name, GPUs): the profile's ``node.gpu`` finds the same GPU card, and its
    ``model.name`` begins with the model card's name (letters and digits only, case
    ignored: ``GLM-5-class (GLM-5.3)`` is ``glm-5``)."""
    out = []
    for path in sorted(PROFILE_DIR.glob("*.yaml")):
        with path.open(encoding="utf-8") as fh:
            data = yaml.safe_load(fh) or {}
        node, model = data.get("node") or {}, data.get("model") or {}
        gpu, name = node.get("gpu"), model.get("name")
        if not isinstance(gpu, str) or not isinstance(name, str):
            continue
        try:
            card = read_gpu(gpu)
        except InputError:
            continue
        if card.name == comp.gpu.name and _norm(name).startswith(_norm(comp.model.name)):
            out.append((path.stem, int(node.get("gpus", 8))))
    return out


def calibrated_notes(comp: Composition, per_step: int = 8192) -> list[str]:
    """One line per calibrated profile of the same model and GPU (:func:`calibrated_profiles`)
    comparing their lone 16k prefills: two answers for one system are said, never silent."""
    mine = lone_seconds(comp.step_model(), 16384, 0, per_step)
    out = []
    for name, gpus in calibrated_profiles(comp):
        sc = scenario_from_dict(
            {
                "name": "calibrated",
                "profile": name,
                "workload": {
                    "kind": "synthetic",
                    "requests": 1,
                    "arrivals": {"process": "poisson", "rate": "1/s"},
                    "prompt_tokens": {"dist": "fixed", "value": 16384},
                },
            },
            label=f"profile {name}",
        )
        theirs = lone_seconds(make_step_model(sc), 16384, 0, per_step)
        ratio = theirs / mine
        how = f"{ratio:.2f}x faster" if ratio >= 1 else f"{1 / ratio:.2f}x slower"
        out.append(
            f"calibrated profile {name} ({gpus} x {comp.gpu.name}) models {comp.model.name} "
            f"on this GPU: its lone 16k prefill takes {theirs:.3f} s; this composition's "
            f"({comp.gpus} x {comp.gpu.name}) {mine:.3f} s is {how} (an uncalibrated "
            "prediction, docs/catalogue.md)"
        )
    return out


def scenario_notes(sc: Any) -> list[str]:
    """:func:`calibrated_notes` of a scenario whose profile is composed (``[]`` for a named
    profile): what ``kvsim run`` prints under its summary."""
    spec = getattr(sc, "profile", None)
    if spec is None or isinstance(spec, str):
        return []
    base_dir = Path(sc.source).parent if getattr(sc, "source", None) else None
    data = {
        k: v
        for k, v in spec.model_dump(exclude_unset=True).items()
        if v is not None and k != "base"
    }
    try:
        return calibrated_notes(compose(data, base_dir))
    except InputError:  # the run already composed it; a card changed since: say nothing
        return []
