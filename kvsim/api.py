"""The Python entry points: load a scenario, run it, get Results back (no files written)."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from kvsim.config.loader import apply_overrides, load_scenario, validate
from kvsim.config.schema import NUMBERS_OK, MooncakeWorkload, Scenario, SyntheticWorkload
from kvsim.results import Results, collect
from kvsim.sim.simulation import Progress, Simulation
from kvsim.workload.request import Request

Overrides = Sequence[str] | Mapping[str, Any] | None


def load(
    scenario: Scenario | str | os.PathLike[str],
    overrides: Overrides = None,
    seed: int | None = None,
) -> Scenario:
    """A validated Scenario from a path (or a Scenario, with overrides applied)."""
    if isinstance(scenario, Scenario):
        if not overrides and seed is None:
            return scenario
        data = scenario.model_dump()
        if overrides:
            apply_overrides(data, {}, overrides)
        if seed is not None:
            data["seed"] = seed
        return validate(data, {}, "overrides", context=NUMBERS_OK)
    return load_scenario(scenario, overrides, seed)


def run(
    scenario: Scenario | str | os.PathLike[str],
    overrides: Overrides = None,
    seed: int | None = None,
    *,
    progress: Progress | None = None,
    requests: Iterable[Request] | None = None,
) -> Results:
    """Run one scenario and return its Results.

    ``requests`` replaces the scenario's workload (any iterable of Request in time order);
    ``progress`` is called with the number of requests finished since its last call.
    """
    sc = load(scenario, overrides, seed)
    sim = Simulation(sc, requests=requests, progress=progress)
    return collect(sim.run(), sc)


def expected_requests(sc: Scenario) -> int | None:
    """How many requests a run will see, when that is cheap to know (for progress bars)."""
    w = sc.workload
    if w.window.start > 0 or w.window.end is not None:
        return None
    n: int | None = None
    if isinstance(w, SyntheticWorkload):
        n = w.requests
    else:
        try:
            with Path(w.path).open("rb") as fh:
                n = sum(1 for line in fh if line.strip())
        except OSError:
            return None
        if not isinstance(w, MooncakeWorkload):
            n -= 1  # CSV header
    return min(n, w.limit) if w.limit else n
