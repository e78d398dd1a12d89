"""``kvsim reproduce paper-catalogue``: the remote-KV-tier study's scenarios on the profile
composed from the catalogue, each predicted figure with its range over the catalogue's
assumptions.

What this module owns: :data:`CATALOGUE_PROFILE` (the GLM-5-class card on 8 B300 cards,
PCP8, EP8, with the calibrated profile's host, links, storage and KV stack as ``base``),
:func:`catalogue_folder` (a copy of ``scenarios/paper/`` whose base names it) and
:func:`reproduce`: :func:`kvsim.reproduce.remote_kv_tiers.reproduce` on that copy, with
the 16k recompute time predicted instead of calibrated, then every predicted figure over
the catalogue's assumptions (:func:`kvsim.reproduce.catalogue_ranges.study_ranges`, the
mechanism ``kvsim run`` and ``kvsim profiles show`` use on a composed profile), each
setting run with :data:`RANGE_SEEDS` seed(s). The study's own assumed inputs (stalls,
arrival rates: ``kvsim reproduce paper``'s ranges) are not screened here.
"""

from __future__ import annotations

import dataclasses
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from kvsim.errors import InputError
from kvsim.reproduce import remote_kv_tiers
from kvsim.reproduce.catalogue_ranges import ranges_markdown, study_ranges
from kvsim.reproduce.remote_kv_tiers import (
    STREAM_FIGURES,
    UNSCREENED,
    Reproduction,
    _run_config,
    _single_requests,
    find_scenarios,
    scenario_files,
    text_table,
)

__all__ = ["find_scenarios", "markdown", "scenario_files", "text_table", "write"]

# the GLM-5-class model on an 8xB300 node with the study's PCP8 (and EP8 for its experts);
# the calibrated profile's host, links, storage and KV stack kept (base), so that only what
# the cards determine differs between the two runs
CATALOGUE_PROFILE: dict[str, Any] = {
    "model": "glm-5",
    "gpu": "B300",
    "gpus": 8,
    "pcp": 8,
    "ep": 8,
    "base": "b300-pcp8-glm5",
}
DEFAULT_PROFILE_LINE = "profile: b300-pcp8-glm5"

# figures of the paper study fitted to it in the calibrated profile that the composed
# profile predicts instead
UNCALIBRATED_IN_CATALOGUE = ("recompute_16k_s",)

SEEDS = remote_kv_tiers.SEEDS
RANGE_SEEDS = 1  # seeds per range setting (each setting reruns every stream configuration)
COLD = ["remote.enabled=false", "workload.prestored=false"]  # the lone 16k recompute


def markdown(rep: Reproduction, plots: list[str] | None = None) -> str:
    """The paper study's table (kvsim.reproduce.remote_kv_tiers.markdown) with the catalogue
    ranges' section instead of the study's own inputs'."""
    return remote_kv_tiers.markdown(rep, plots, ranges_markdown)


def write(rep: Reproduction, out: str | Path) -> list[Path]:
    """reproduction.csv, reproduction.md (:func:`markdown`) and the TTFT CDF plots."""
    return remote_kv_tiers.write(rep, out, ranges_markdown)


def catalogue_folder(paper: Path, into: Path) -> Path:
    """A copy of the paper scenarios whose base names the composed catalogue profile
    instead of the calibrated one (every other file extends base.yaml)."""
    dst = into / "paper-catalogue"
    shutil.copytree(paper, dst)
    base = dst / "base.yaml"
    text = base.read_text(encoding="utf-8")
    if text.count(DEFAULT_PROFILE_LINE + "\n") != 1:
        raise InputError(
            f"expected one line {DEFAULT_PROFILE_LINE!r}", where=str(paper / "base.yaml")
        )
    flow = ", ".join(f"{k}: {v}" for k, v in CATALOGUE_PROFILE.items())
    base.write_text(
        text.replace(DEFAULT_PROFILE_LINE + "\n", f"profile: {{{flow}}}\n"), encoding="utf-8"
    )
    return dst


def figure_values(d: Path, overrides: list[str], seeds: list[int]) -> dict[str, float]:
    """The screened figures' means over ``seeds`` with ``--set``-style overrides on every
    configuration: the stream figures (:data:`STREAM_FIGURES` but :data:`UNSCREENED`) and
    the lone 16k recompute."""
    names = [n for n in STREAM_FIGURES if n not in UNSCREENED]
    configs = sorted({c for n in names for c in STREAM_FIGURES[n][0]})
    runs = {c: [_run_config(d, c, overrides, s) for s in seeds] for c in configs}
    out = {
        n: float(
            np.mean(
                [STREAM_FIGURES[n][1]({c: runs[c][i] for c in configs}) for i in range(len(seeds))]
            )
        )
        for n in names
    }
    cold = _single_requests(d / "micro.yaml", [*overrides, *COLD], 16384)
    out["recompute_16k_s"] = float(cold[0].requests["ttft_s"].iloc[0])
    return out


def reproduce(
    folder: str | Path | None = None,
    log: Callable[[str], None] = lambda _msg: None,
    seeds: int = SEEDS,
    range_seeds: int = RANGE_SEEDS,
) -> Reproduction:
    """The paper study on the composed profile (``folder``: the paper scenarios, copied
    with their base on :data:`CATALOGUE_PROFILE`); ``range_seeds`` > 0: each predicted
    figure's range over the catalogue's assumptions with that many seeds per setting."""
    paper = find_scenarios(folder)
    with tempfile.TemporaryDirectory(prefix="kvsim-paper-catalogue-") as tmp:
        d = catalogue_folder(paper, Path(tmp))
        rep = remote_kv_tiers.reproduce(d, log=log, seeds=seeds, range_seeds=0)
        for r in rep.rows:
            if r.figure.name in UNCALIBRATED_IN_CATALOGUE:
                r.figure = dataclasses.replace(r.figure, kind="predicted")
        if range_seeds:
            rep.range_seeds = rep.seeds[: min(range_seeds, seeds)]
            predicted = {
                r.figure.name: r.kvsim
                for r in rep.rows
                if r.figure.kind == "predicted" and r.figure.name not in UNSCREENED
            }
            rep.ranges = study_ranges(
                [d / "base.yaml"],
                predicted,
                lambda sets: figure_values(d, sets, rep.range_seeds),
                log,
            )
    return rep
