"""kvsim's prediction of every measurement row at given values of the fitted constants.

What this module owns: :class:`Predictor`, a function from the fields' values to each
row's simulated TTFT statistic (kvsim/calibrate/runs.py), remembered per point (the fit's
Jacobian and its steps revisit points), spread over local worker processes by rows
(a shared pool of local worker processes, :func:`pool`; the rows' outcomes do not
depend on which process ran them), and counting its evaluations for the progress line.
The fit runs one predictor on its fit rows and another on the held-out rows, so that a
step of the fit simulates only the rows it fits.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor

import numpy as np

from kvsim.calibrate.fields import Field
from kvsim.calibrate.rows import Row
from kvsim.calibrate.runs import Outcome, cost, simulate_rows
from kvsim.experiments.replicate import stop_pool, worker_pool


class Predictor:
    """Predictions of ``rows`` on the scenario file with ``overrides``, the ``fields`` set
        to the values asked for (see the module docstring); ``pool``: worker processes to spread
    the rows over (``workers`` of them)."""

    def __init__(
        self,
        scenario: str,
        overrides: Sequence[str],
        seed: int | None,
        fields: Sequence[Field],
        rows: Sequence[Row],
        *,
        max_requests: int = 100,
        pool: ProcessPoolExecutor | None = None,
        workers: int = 1,
        log: Callable[[str], None] | None = None,
    ) -> None:
        self.scenario = scenario
        self.overrides = list(overrides)
        self.seed = seed
        self.fields = list(fields)
        self.rows = list(rows)
        self.max_requests = max_requests
        self.log = log
        self.evaluations = 0
        self.seconds = 0.0
        self._memo: dict[tuple[float, ...], list[Outcome]] = {}
        self._workers = max(1, min(workers, len(self.rows))) if pool is not None else 1
        self._pool = pool
        self._chunks = self._share()

    def _share(self) -> list[list[int]]:
        """Row indexes per worker: the costliest rows first, each to the least loaded."""
        load = [0.0] * self._workers
        chunks: list[list[int]] = [[] for _ in range(self._workers)]
        order = sorted(range(len(self.rows)), key=lambda i: -cost(self.rows[i], self.max_requests))
        for i in order:
            w = min(range(self._workers), key=lambda k: load[k])
            chunks[w].append(i)
            load[w] += cost(self.rows[i], self.max_requests)
        return [sorted(c) for c in chunks if c]

    def outcomes(self, values: Sequence[float]) -> list[Outcome]:
        """Every row's outcome with the fields at ``values``."""
        key = tuple(round(float(v), 12) for v in values)
        hit = self._memo.get(key)
        if hit is not None:
            return hit
        over = [*self.overrides, *(f.override(v) for f, v in zip(self.fields, key, strict=True))]
        start = time.perf_counter()
        if self._workers == 1:
            out = simulate_rows(self.scenario, over, self.seed, self.rows, self.max_requests)
        else:
            out = self._parallel(over)
        self.seconds += time.perf_counter() - start
        self.evaluations += 1
        self._memo[key] = out
        if self.log is not None:
            shown = ", ".join(
                f"{f.name} {f.text(v)}" for f, v in zip(self.fields, key, strict=True)
            )
            self.log(
                f"evaluation {self.evaluations}: {len(self.rows)} rows in "
                f"{time.perf_counter() - start:.1f} s ({shown})"
            )
        return out

    def __call__(self, values: Sequence[float]) -> np.ndarray:
        """Every row's simulated statistic (s) with the fields at ``values``."""
        return np.array([o.seconds for o in self.outcomes(values)])

    def _parallel(self, over: list[str]) -> list[Outcome]:
        assert self._pool is not None
        futures = [
            self._pool.submit(
                simulate_rows,
                self.scenario,
                over,
                self.seed,
                [self.rows[i] for i in chunk],
                self.max_requests,
            )
            for chunk in self._chunks
        ]
        out: list[Outcome | None] = [None] * len(self.rows)
        for chunk, fut in zip(self._chunks, futures, strict=True):
            for i, o in zip(chunk, fut.result(), strict=True):
                out[i] = o
        return [o for o in out if o is not None]


@contextlib.contextmanager
def pool(workers: int) -> Iterator[ProcessPoolExecutor | None]:
    """Local worker processes for predictors (None for one worker: rows run in this
    process), ended on leaving, an error or an interrupt included."""
    if workers <= 1:
        yield None
        return
    p = worker_pool(workers)
    try:
        yield p
    finally:
        stop_pool(p)
