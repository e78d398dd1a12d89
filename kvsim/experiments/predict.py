"""Prediction ranges of a run on a composed profile: its figures over the catalogue's
assumptions' documented ranges.

What this module owns: :func:`run_ranges`. A scenario whose profile is composed from the
catalogue (``profile: {model, gpu, ...}``) rests on assumptions with documented ranges
(kvsim/catalogue/assumptions.py: the per-operation efficiency curves, the frontend, the
host's work per step, launches, collectives, transfer engines). ``kvsim run`` screens the
run's figures (:data:`FIGURES`) against them as ``kvsim reproduce paper`` screens a
study's (kvsim/catalogue/ranges.py, :func:`~kvsim.catalogue.ranges.prediction_ranges`):
each assumption at each end of its range alone (``--set profile.assume.NAME=VALUE``, the
same seed: paired), then every corner of the two that move a figure most; a figure's
range spans them all, and ``sensitive_to`` names the assumptions whose end moves it by
more than 10%. An assumption that cannot change this run (an expert curve for a dense
model, collectives on one GPU, the peers' transfer engine with the peer tier off) is
left out.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from kvsim.api import load, run
from kvsim.catalogue.compose import Composition, compose
from kvsim.catalogue.ranges import inputs, prediction_ranges
from kvsim.config.schema import Scenario
from kvsim.reproduce.ranges import Input, Range, Setting

#: the run's figures given a range
FIGURES = ("ttft_p50_s", "ttft_p99_s", "ttft_mean_s", "hit_ratio")


def composition(sc: Scenario, scenario_dir: Path | None) -> Composition | None:
    """The scenario's composition, None for a named profile."""
    spec = sc.profile
    if isinstance(spec, str):
        return None
    data = spec.model_dump(exclude_none=True)
    return compose(data, scenario_dir)


def applies(name: str, sc: Scenario, comp: Composition) -> bool:
    """Whether an assumption can change this run."""
    section = name.split(".", 1)[0]
    if section == "experts":
        return comp.moe
    if section == "comm":
        return comp.collectives > 0
    if section == "transfer":
        return sc.tiers.peer.enabled
    if section == "frontend":
        return sc.engine.frontend is not None
    if name == "launch.graph_per_layer":
        return sc.engine.cuda_graphs
    if name == "launch.eager_kernel":  # eager mode only
        return not sc.engine.cuda_graphs
    if name == "launch.mla_kernels_per_layer":
        return comp.model.attention == "mla"
    if name == "launch.moe_kernels_per_layer":
        return comp.moe
    if name == "narrow":  # only where a GEMM is narrow
        base = comp.ops_numbers()
        wide = comp.with_assumptions(comp.assume.at("narrow", "hi")).ops_numbers()
        return any(base[op]["e_max"] != wide[op]["e_max"] for op in ("dense", "experts"))
    return True


def run_ranges(
    scenario: str | Path,
    overrides: Sequence[str],
    seed: int | None,
    base: Mapping[str, Any],
    progress: Callable[[int, int, str], None] | None = None,
) -> dict[str, Range]:
    """The run's figures (``base``: its summary) over the assumptions' ranges; {} for a
    scenario on a named profile. ``progress(done, total, what)`` as each run ends."""
    sc = load(scenario, list(overrides), seed)
    comp = composition(sc, Path(scenario).resolve().parent)
    if comp is None:
        return {}
    chosen = [i for i in inputs(comp) if applies(i.name, sc, comp)]
    figures = {f: float(base[f]) for f in FIGURES if f in base}
    # one-at-a-time ends, then the corners of the two that move a figure most (4 each)
    total = 2 * len(chosen) + 4
    done = 0

    def evaluate(setting: Setting, wanted: Sequence[str]) -> Mapping[str, float]:
        nonlocal done
        if not setting:
            return figures
        sets = [*overrides, *(_assume(i, end, chosen) for i, end in setting)]
        summary = run(scenario, sets, seed).summary
        done += 1
        if progress is not None:
            progress(done, total, ", ".join(f"{n}={e}" for n, e in setting))
        return {f: float(summary[f]) for f in wanted}

    return prediction_ranges(figures, chosen, lambda f, i: True, evaluate)


def _assume(name: str, end: str, chosen: Sequence[Input]) -> str:
    """``profile.assume.NAME=VALUE`` at an end of its range."""
    inp = next(i for i in chosen if i.name == name)
    return f"{inp.field}={inp.value(end)}"


def ranges_json(ranges: Mapping[str, Range]) -> dict[str, Any]:
    """The ranges as summary.json keeps them."""
    return {
        f: {"lo": r.lo, "hi": r.hi, "sensitive_to": list(r.sensitive_to)} for f, r in ranges.items()
    }
