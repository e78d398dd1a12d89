"""What every command that runs a scenario several times shares: the load it is run at,
the seeds it is replicated over, and the worker processes that run it.

- :func:`load_overrides` scales a scenario's offered load (``kvsim capacity``, suites'
  load points, a swept rate), with the time windows that shrink with it
  (:func:`scaled_windows`, :func:`load_factor`);
- :func:`replication_overrides`: what running several seeds adds (a trace replay is
  resampled per seed). Every command that compares configurations runs them on the same
  seeds, so configuration A and B with seed s see the same workload draw (common random
  numbers) and their per-seed differences are paired;
- :func:`worker_pool` / :func:`stop_pool`: local worker processes that die with their
  parent.

Sweeps (:mod:`kvsim.experiments.sweep`), capacity searches
(:mod:`kvsim.experiments.capacity`), the planner, sensitivity and the CI gate import these
from here, so that none of them imports another for them.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from typing import Any

from kvsim.config.schema import (
    BurstyArrivals,
    ClosedArrivals,
    ConstantArrivals,
    PoissonArrivals,
    Scenario,
    SyntheticWorkload,
)
from kvsim.errors import InputError
from kvsim.interrupts import held_interrupts
from kvsim.units import parse_rate

#: how every command that compares configurations says that it pairs them
PAIRED = (
    "paired: every configuration ran on the same seeds and workload draws (common random "
    "numbers); differences are per seed, with 95% intervals over seeds"
)


def load_overrides(sc: Scenario, factor: float) -> dict[str, Any]:
    """Overrides that multiply the scenario's offered load by ``factor``. The run's time
    windows (``run.warmup``, ``run.max_time``) shrink with its arrivals, so that they
    cover the same share of the requests at any load.

    Multi-turn sessions above the scenario's load (``factor`` > 1) are the exception: a
    session lives as long at any load (its turns are think times apart), so the run keeps
    its time span and windows and gets ``factor`` times the requests instead (at most
    :data:`MAX_REQUESTS`). Shrinking the span would cut most sessions after their first
    turns, and measure a lighter, colder load than the one named.

    Closed-loop arrivals (``process: closed``) have no rate to scale: ``factor`` 1 leaves
    the scenario as it is, any other is an InputError (their load is
    ``workload.concurrency``)."""
    w = sc.workload
    out: dict[str, Any]
    if isinstance(w, SyntheticWorkload):
        arrivals = w.arrivals
        if isinstance(arrivals, ClosedArrivals):
            if factor == 1.0:
                return {}
            raise InputError(
                "process closed has no arrival rate to scale: its load is "
                "workload.concurrency (sweep that instead)",
                where="workload.arrivals",
            )
        out = {"workload.arrivals.rate": f"{arrivals.rate * factor!r}/s"}
        if w.sessions is not None and factor > 1:
            out["workload.requests"] = min(MAX_REQUESTS, round(w.requests * factor))
            return out
    else:
        out = {"workload.time_scale": w.time_scale / factor}
    return {**out, **scaled_windows(sc, factor)}


MAX_REQUESTS = 10_000_000  # workload.requests' bound (kvsim/config/schema/workload.py)


def scaled_windows(sc: Scenario, factor: float) -> dict[str, Any]:
    """``run.warmup`` and ``run.max_time`` for ``factor`` times the scenario's load: shrunk
    with its arrivals (an ``auto`` warm-up finds its own)."""
    out: dict[str, Any] = {}
    if sc.run.warmup != "auto" and sc.run.warmup:
        out["run.warmup"] = f"{sc.run.warmup / factor!r} s"
    if sc.run.max_time is not None:
        out["run.max_time"] = f"{sc.run.max_time / factor!r} s"
    return out


def load_factor(sc: Scenario, overrides: dict[str, Any]) -> float | None:
    """By how much ``overrides`` (field path -> raw value, as a sweep sets them) scale the
    scenario's load through its arrival rate or time scale; None when they do not (or
    the value is not one kvsim reads: that run fails with its own message)."""
    w = sc.workload
    try:
        if "workload.time_scale" in overrides:
            return w.time_scale / float(overrides["workload.time_scale"])
        arrivals = getattr(w, "arrivals", None)
        if "workload.arrivals.rate" in overrides and isinstance(
            arrivals, PoissonArrivals | ConstantArrivals | BurstyArrivals
        ):
            return parse_rate(overrides["workload.arrivals.rate"]) / arrivals.rate
    except (TypeError, ValueError, ZeroDivisionError):
        return None
    return None


def replication_overrides(sc: Scenario, replications: int) -> dict[str, Any]:
    """What running ``replications`` seeds of a scenario adds: a trace replayed with
    ``resample: auto`` is resampled (whole sessions or prefix chains drawn per seed, which
    keeps the trace's prefix reuse), so that replications differ and their spread means
    something."""
    if replications > 1 and getattr(sc.workload, "resample", None) == "auto":
        return {"workload.resample": "sessions"}
    return {}


def _watch_parent(parent: int) -> None:
    """In a worker process: exit as soon as the process that started it is gone, so that
    killing a sweep (even with SIGKILL) never leaves workers running on their own."""

    ppid = os.getppid()  # the sweep itself, or a fork server it started

    def watch() -> None:
        while os.getppid() == ppid and (parent == ppid or _alive(parent)):
            time.sleep(0.2)
        os._exit(1)

    # Ctrl-C reaches the whole process group: the parent handles it and ends the workers
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    for sig in ("SIGTERM", "SIGHUP"):  # not the parent's handlers (a fork copies them)
        if hasattr(signal, sig):
            signal.signal(getattr(signal, sig), signal.SIG_DFL)
    threading.Thread(target=watch, name="kvsim-parent-watch", daemon=True).start()


def worker_pool(workers: int) -> ProcessPoolExecutor:
    """Local worker processes that exit when the parent process does, started now with
    interrupts held (:func:`kvsim.interrupts.held_interrupts`): with the fork start method
    the first submit forks every worker, and a signal landing in the fork's at-fork hooks
    would be printed and lost rather than stop the command."""
    pool = ProcessPoolExecutor(
        max_workers=workers, initializer=_watch_parent, initargs=(os.getpid(),)
    )
    try:
        with held_interrupts():
            pool.submit(int)  # a no-op task: the workers start here, not mid-run
    except BaseException:
        stop_pool(pool)
        raise
    return pool


def stop_pool(pool: ProcessPoolExecutor) -> None:
    """Cancel what has not started and end the workers now (on an interrupt), rather than
    waiting for their runs to finish. SIGKILL, not SIGTERM: a worker forked a moment ago
    still has the parent's SIGTERM handler (until its initializer runs) and would print a
    KeyboardInterrupt traceback; a worker has nothing to clean up (finished rows are the
    parent's)."""
    procs = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for proc in procs:
        with contextlib.suppress(Exception):
            proc.kill()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError as e:
        return e.errno == errno.EPERM
    return True
