"""The one line a command logs about a workload's resampling and its prefix reuse.

This module owns :func:`resampling_note` (``kvsim sweep`` and ``kvsim capacity`` print
it): which resampling the runs over some seeds use (the replication rule of
:mod:`kvsim.experiments.replicate`) and the trace's prefix reuse as it is and over the
seeds' draws (:mod:`kvsim.workload.resample`), reading the trace without simulating.
"""

from __future__ import annotations

from kvsim.config.schema import Scenario
from kvsim.experiments.replicate import replication_overrides
from kvsim.workload.resample import WINDOWS, prefix_reuse, resampled
from kvsim.workload.sources import open_workload

_HOW = {
    "sessions": "whole sessions or prefix chains drawn with replacement near their start "
    "times, one draw per seed",
    "windows": f"{WINDOWS} windows drawn with replacement, repeats salted, one draw per seed",
}


def resampling_note(sc: Scenario, seeds: list[int]) -> str | None:
    """One line for a command's log: the resampling its runs of ``sc`` over ``seeds`` use
    and the workload's prefix reuse (:func:`~kvsim.workload.resample.prefix_reuse`) as it
    is and over the seeds' draws (reading the trace, no simulation); None when nothing is
    resampled (a synthetic workload, ``resample: none``, or ``auto`` with one seed)."""
    w = sc.workload
    mode = replication_overrides(sc, len(seeds)).get(
        "workload.resample", getattr(w, "resample", "none")
    )
    if mode not in _HOW or not seeds:
        return None
    trace = list(open_workload(w.model_copy(update={"resample": "none"}), sc.seed))
    as_is = prefix_reuse(trace)
    keep = w.limit is not None
    drawn = [prefix_reuse(resampled(trace, mode, s, keep)) for s in seeds]
    if len(drawn) == 1:
        spread = f"seed {seeds[0]}"
    else:
        spread = f"{min(drawn):.3f}-{max(drawn):.3f} over {len(drawn)} seeds"
    line = (
        f"workload.resample: {mode} ({_HOW[mode]}); prefix reuse (share of prompt blocks "
        f"seen earlier, an infinite cache's hit ratio): {as_is:.3f} as is, "
        f"{sum(drawn) / len(drawn):.3f} resampled ({spread})"
    )
    if mode == "windows":
        line += "; windows cut reuse across their edges, so hit ratios run low"
    return line
