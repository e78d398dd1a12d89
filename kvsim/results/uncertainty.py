"""How sure a run's numbers are: the warm-up transient (MSER-5) and intervals on TTFT
percentiles (a circular block bootstrap of the requests in arrival order).

Both work on one run's per-request results, so every run gets them, a trace replay as
much as a synthetic one: a trace has no random numbers to replicate over, but its
requests are still a sample of the traffic it stands for.

- :func:`mser5` (White 1997; Franklin and White 2008): batch the series into means of 5,
  and cut the prefix that minimises the squared standard error of what is left
  (at most half the batches, the rule's usual bound).
- :func:`percentile_cis`: resample the requests, in arrival order, as runs of
  consecutive requests drawn with replacement (circular: a run may wrap around the end)
  until there are as many as measured, and take each percentile; the 2.5th and 97.5th
  percentiles of 400 such resamples are the 95% interval. Runs, not single requests,
  because a queue's TTFTs are correlated (one burst delays many neighbours): a
  request-level bootstrap gives intervals that are far too narrow. The run length comes
  from the data (:func:`block_length`). Past 200,000 requests each resample is costly,
  so 40 are drawn and the interval is the estimate +- 1.96 times their standard
  deviation (the normal bootstrap interval).
"""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np

BATCH = 5  # MSER-5
DRAWS = 400  # bootstrap resamples
# past LARGE requests, fewer resamples (each costs n) and a normal interval from their
# spread, which needs far fewer than the percentile interval's tails do
LARGE, DRAWS_LARGE = 200_000, 40
MIN_REQUESTS = 20  # fewer measured requests: no interval (NaN)


def mser5(series: np.ndarray) -> int:
    """How many leading observations of ``series`` are warm-up (a multiple of 5; 0 when
    the series is too short to tell, under 20 observations)."""
    n = len(series) // BATCH
    if n < 4:
        return 0
    z = np.asarray(series[: n * BATCH], dtype=float).reshape(n, BATCH).mean(axis=1)
    s1 = np.cumsum(z[::-1])[::-1]  # sums of the batches from d on
    s2 = np.cumsum((z * z)[::-1])[::-1]
    left = np.arange(n, 0, -1, dtype=float)  # batches kept when cutting d
    sq = np.maximum(s2 - s1 * s1 / left, 0.0)  # squared deviations of what is left
    stat = (sq / (left * left))[: n // 2 + 1]  # cut at most half of the batches
    # the first cut within rounding of the best (a flat stretch computes as noise)
    tol = 1e-9 * float(np.var(z)) / n
    return int(np.argmax(stat <= stat.min() + tol)) * BATCH


def block_length(series: np.ndarray) -> int:
    """Block length for a circular block bootstrap of ``series``, chosen from its own
    autocorrelation (Politis and White 2004, with the correction of Patton, Politis and
    White 2009): long where neighbouring values are alike (a queue in a burst), 1 for
    independent values. Clipped to [1, n / 4]."""
    x = np.asarray(series, dtype=float)
    n = len(x)
    x = x - x.mean()
    size = 1 << (2 * n - 1).bit_length()
    f = np.fft.rfft(x, size)
    acov = np.fft.irfft(f * np.conj(f), size)[:n] / n  # autocovariances, lags 0..n-1
    if not acov[0] > 0:
        return 1
    rho = acov / acov[0]
    kn = max(5, math.ceil(math.log10(n)))
    m_max = min(math.ceil(math.sqrt(n)) + kn, n - kn - 1)
    c = 2.0 * math.sqrt(math.log10(n) / n)
    m_hat = m_max
    for m in range(m_max):  # first lag after which kn autocorrelations are all small
        if np.all(np.abs(rho[m + 1 : m + 1 + kn]) < c):
            m_hat = m
            break
    big_m = min(2 * max(m_hat, 1), m_max)
    if big_m < 1:
        return 1
    k = np.arange(1, big_m + 1)
    t = k / big_m
    lam = np.where(t <= 0.5, 1.0, 2.0 * (1.0 - t))  # the flat-top lag window
    g = 2.0 * float(np.sum(lam * k * acov[k]))
    spec = acov[0] + 2.0 * float(np.sum(lam * acov[k]))
    if spec <= 0:
        return 1
    b = (2.0 * g * g / ((4.0 / 3.0) * spec * spec)) ** (1.0 / 3.0) * n ** (1.0 / 3.0)
    return int(min(max(round(b), 1), n // 4))


def percentile_cis(
    values: np.ndarray,
    qs: tuple[float, ...],
    rng: np.random.Generator,
    *,
    draws: int | None = None,
    level: float = 0.95,
) -> dict[float, tuple[float, float]]:
    """The ``level`` interval of each ``q``-th percentile of ``values`` (in arrival
    order) by a circular block bootstrap (see the module docstring), every percentile
    from the same resamples. NaNs under 20 values."""
    v = np.asarray(values, dtype=float)
    n = len(v)
    if n < MIN_REQUESTS:
        return {q: (math.nan, math.nan) for q in qs}
    if v.min() == v.max():
        return {q: (float(v[0]), float(v[0])) for q in qs}
    if draws is None:
        draws = DRAWS if n <= LARGE else DRAWS_LARGE
    # the block length from the ranks: a few huge TTFTs do not dominate the correlation
    b = block_length(np.argsort(np.argsort(v)).astype(float))
    blocks = -(-n // b)
    offsets = np.arange(b)
    est = np.empty((draws, len(qs)))
    for i in range(draws):
        starts = rng.integers(0, n, size=blocks)
        idx = ((starts[:, None] + offsets) % n).ravel()[:n]
        est[i] = np.percentile(v[idx], qs)
    alpha = (1.0 - level) / 2.0
    out = {}
    for j, q in enumerate(qs):
        if draws >= DRAWS:  # percentile interval: the resamples' own quantiles
            lo, hi = np.quantile(est[:, j], [alpha, 1.0 - alpha])
        else:  # few resamples (a large run): normal interval from their spread
            z = NormalDist().inv_cdf(1.0 - alpha)
            point = float(np.percentile(v, q))
            half = z * float(np.std(est[:, j], ddof=1))
            lo, hi = point - half, point + half
        out[q] = (float(lo), float(hi))
    return out


def percentile_ci(
    values: np.ndarray, q: float, rng: np.random.Generator, **kw: object
) -> tuple[float, float]:
    """The interval of one percentile (:func:`percentile_cis` with one ``q``)."""
    return percentile_cis(values, (q,), rng, **kw)[q]  # type: ignore[arg-type]
