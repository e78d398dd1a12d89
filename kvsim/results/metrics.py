"""Metric definitions in one place: pure functions from per-request columns to numbers.

Definitions (measured requests = finished and not in the warm-up):
- TTFT = prefill end - arrival; percentiles are linear-interpolated (numpy's default).
- hit_ratio = prompt tokens served from any cache tier / all prompt tokens.
- token_source_frac[t] = prompt tokens from tier t (or computed) / all prompt tokens.
- gpu_busy_frac = compute time inside the measurement window / (engines x window), where
  the window runs from max(warm-up, first arrival) to the last request's first token
  (background puts may go on after it). duration_s spans first arrival to that point.
- engine_blocked_frac: the same for time an engine sat in a synchronous restore.
- mean_queue_length = time-average number of requests waiting in engine queues (summed over
  engines, from time 0 to the last first token, warm-up included), integrated by the engines.
- remote_get_bw = remote bytes read / time spent in remote GETs (after T0), per request
  summed: the GET bandwidth requests achieved under the run's load.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

SOURCES = ("gpu", "host", "nvme", "remote", "compute")
QUANTILES = (50, 90, 99)


def percentile(values: Sequence[float] | np.ndarray, q: float) -> float:
    """The q-th percentile (0..100), linear interpolation; NaN for no values."""
    a = np.asarray(values, dtype=float)
    if a.size == 0:
        return float("nan")
    return float(np.percentile(a, q))


def window_overlap(starts: np.ndarray, ends: np.ndarray, lo: float, hi: float) -> float:
    """Total length of the intervals [starts, ends] inside [lo, hi]."""
    if starts.size == 0 or hi <= lo:
        return 0.0
    return float(np.clip(np.minimum(ends, hi) - np.maximum(starts, lo), 0.0, None).sum())


def ratio(num: float, den: float) -> float:
    """num / den, or 0.0 when den is 0."""
    return float(num) / float(den) if den else 0.0
