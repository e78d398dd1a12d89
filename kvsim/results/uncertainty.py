"""How sure a run's numbers are: the warm-up transient (MSER-5), intervals on TTFT
percentiles (a stationary block bootstrap of the requests in arrival order), and the one
way every interval over replications is computed and shown (:func:`mean_interval`).

The per-run intervals work on one run's per-request results, so every run gets them, a
trace replay as much as a synthetic one: a trace has no random numbers to replicate over,
but its requests are still a sample of the traffic it stands for.

- :func:`mser5` (White 1997; Franklin and White 2008): batch the series into means of 5,
  and cut the prefix that minimises the squared standard error of what is left
  (at most half the batches, the rule's usual bound).
- :func:`percentile_cis`: resample the requests, in arrival order, as runs of
  consecutive requests drawn with replacement (circular: a run may wrap around the end)
  until there are as many as measured, and take each percentile; the 2.5th and 97.5th
  percentiles of 400 such resamples are the 95% interval. Runs, not single requests,
  because a queue's TTFTs are correlated (one burst delays many neighbours): a
  request-level bootstrap gives intervals that are far too narrow. The runs have random,
  geometric lengths (the stationary bootstrap of Politis and Romano 1994) whose mean
  comes from the data (:func:`block_length`): with runs of one fixed length, a length
  that is a multiple of a period of the traffic (short and long prompts alternating)
  gives every resample the same mix of requests, hence the same percentile, and a
  zero-width interval. Past 200,000 requests each resample is costly, so 40 are drawn
  and the interval is the estimate +- 1.96 times their standard deviation (the normal
  bootstrap interval). Either way the interval is widened to hold the distribution-free
  order-statistic interval (what independent requests would give: correlation between
  requests is assumed to widen an interval, never to narrow it below that), and kept
  within the values measured (a TTFT interval never goes below 0). It has zero width
  only when the measured values around that percentile are all equal.
- :func:`ratio_ci`: the same bootstrap for a ratio of sums (the hit ratio: hit tokens
  over prompt tokens), kept within the per-request ratios' range (a hit ratio's within
  [0, 1]).
- :func:`mean_interval`: a mean over replications (seeds) with its 95% Student-t
  interval, never below 0 for a quantity that cannot be negative, and no interval at all
  (with the reason, :attr:`Interval.note`) from one replication or identical ones.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any

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


def block_length(series: np.ndarray, *, stationary: bool = False) -> int:
    """Block length for a circular block bootstrap of ``series`` (the mean block length
    of a stationary bootstrap with ``stationary``), chosen from its own autocorrelation
    (Politis and White 2004, with the correction of Patton, Politis and White 2009): long
    where neighbouring values are alike (a queue in a burst), 1 for independent values.
    Clipped to [1, n / 4]."""
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
    d = 2.0 if stationary else 4.0 / 3.0  # D_SB = 2 g(0)^2, D_CB = 4/3 g(0)^2
    b = (2.0 * g * g / (d * spec * spec)) ** (1.0 / 3.0) * n ** (1.0 / 3.0)
    return int(min(max(round(b), 1), n // 4))


def stationary_indices(n: int, mean_block: float, rng: np.random.Generator) -> np.ndarray:
    """Indices of one stationary-bootstrap resample of ``n`` values (Politis and Romano
    1994): runs of consecutive indices (circular) from random starts, each run ending
    after any index with probability 1 / ``mean_block`` (geometric lengths)."""
    if mean_block <= 1:
        return rng.integers(0, n, size=n)
    new = rng.random(n) < 1.0 / mean_block
    new[0] = True
    firsts = np.flatnonzero(new)
    run = np.cumsum(new) - 1  # which run each position belongs to
    starts = rng.integers(0, n, size=len(firsts))
    return (starts[run] + (np.arange(n) - firsts[run])) % n


def order_statistic_ci(
    sorted_values: np.ndarray, q: float, level: float = 0.95
) -> tuple[float, float]:
    """The distribution-free interval of the ``q``-th percentile of independent values:
    the order statistics n p -+ z sqrt(n p (1 - p)) (normal approximation to the
    binomial), on values sorted ascending."""
    n = len(sorted_values)
    p = q / 100.0
    z = NormalDist().inv_cdf(0.5 + level / 2.0)
    half = z * math.sqrt(n * p * (1.0 - p))
    lo = min(max(math.floor(n * p - half), 0), n - 1)
    hi = min(max(math.ceil(n * p + half), 0), n - 1)
    return float(sorted_values[lo]), float(sorted_values[hi])


def percentile_cis(
    values: np.ndarray,
    qs: tuple[float, ...],
    rng: np.random.Generator,
    *,
    draws: int | None = None,
    level: float = 0.95,
) -> dict[float, tuple[float, float]]:
    """The ``level`` interval of each ``q``-th percentile of ``values`` (in arrival
    order) by a stationary block bootstrap (see the module docstring), every percentile
    from the same resamples, widened to the order-statistic interval and kept within the
    values' range. NaNs under 20 values."""
    v = np.asarray(values, dtype=float)
    n = len(v)
    if n < MIN_REQUESTS:
        return {q: (math.nan, math.nan) for q in qs}
    if v.min() == v.max():
        return {q: (float(v[0]), float(v[0])) for q in qs}
    if draws is None:
        draws = DRAWS if n <= LARGE else DRAWS_LARGE
    # the block length from the ranks: a few huge TTFTs do not dominate the correlation
    b = block_length(np.argsort(np.argsort(v)).astype(float), stationary=True)
    est = np.empty((draws, len(qs)))
    for i in range(draws):
        est[i] = np.percentile(v[stationary_indices(n, b, rng)], qs)
    alpha = (1.0 - level) / 2.0
    s = np.sort(v)
    out = {}
    for j, q in enumerate(qs):
        if draws >= DRAWS:  # percentile interval: the resamples' own quantiles
            lo, hi = np.quantile(est[:, j], [alpha, 1.0 - alpha])
        else:  # few resamples (a large run): normal interval from their spread
            z = NormalDist().inv_cdf(1.0 - alpha)
            point = float(np.percentile(v, q))
            half = z * float(np.std(est[:, j], ddof=1))
            lo, hi = point - half, point + half
        os_lo, os_hi = order_statistic_ci(s, q, level)
        # never narrower than independent requests' interval, never outside the values
        lo = min(max(float(lo), float(s[0])), os_lo)
        hi = max(min(float(hi), float(s[-1])), os_hi)
        out[q] = (lo, hi)
    return out


def percentile_ci(
    values: np.ndarray, q: float, rng: np.random.Generator, **kw: object
) -> tuple[float, float]:
    """The interval of one percentile (:func:`percentile_cis` with one ``q``)."""
    return percentile_cis(values, (q,), rng, **kw)[q]  # type: ignore[arg-type]


# ---- intervals over replications -------------------------------------------------------

# Student t, 97.5th percentile, 1..30 degrees of freedom (then 1.96)
_T95 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip

ONE_REPLICATION = "one replication: no interval"
IDENTICAL = "replications identical: no interval"
NO_VALUE = "no value"


@dataclass(frozen=True)
class Interval:
    """A mean over replications and its 95% interval ``[lo, hi]``, or why there is none
    (``note``; then ``lo`` and ``hi`` are NaN, or the mean itself when every replication
    gave the same value). Every interval over seeds that kvsim prints or stores is one
    of these (:func:`mean_interval`)."""

    mean: float
    lo: float
    hi: float
    n: int
    note: str = ""

    @property
    def ok(self) -> bool:
        """Whether there is an interval with spread (at least two distinct values)."""
        return not self.note

    @property
    def bounded(self) -> bool:
        """Whether ``lo`` and ``hi`` are bounds to store: an interval with spread, or
        identical replications (the value itself, exactly)."""
        return not self.note or self.note == IDENTICAL

    @property
    def half(self) -> float:
        """Half-width of the Student-t interval before any clipping at 0 (NaN without
        an interval; 0 when the replications are identical)."""
        if self.note == IDENTICAL:
            return 0.0
        if self.note:
            return math.nan
        return max(self.hi - self.mean, self.mean - self.lo)

    def text(self, show: Callable[[float], str] | None = None) -> str:
        """How it reads after the mean: "± h", "(95% interval lo .. hi)" when clipped at
        0, or "(one replication: no interval)" (never a "± 0")."""
        if self.note:
            return f"({self.note})"
        show = show or _plain
        if self.mean - self.lo < self.hi - self.mean:  # clipped at 0
            return f"(95% interval {show(self.lo)} .. {show(self.hi)})"
        return f"± {show(self.half)}"


def _plain(x: float) -> str:
    """A bound as people read it: three significant digits, no exponent (170, not 1.7e+02)."""
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.3g}"


def mean_interval(values: Sequence[float], *, nonnegative: bool = True) -> Interval:
    """Mean of independent replications and its 95% Student-t interval, the lower bound
    clipped at 0 for a quantity that cannot be negative (``nonnegative``: a TTFT, a
    rate, a ratio). One value, or none, gives no interval; identical values give the
    mean as both bounds and say so."""
    a = np.asarray([float(x) for x in values], dtype=float)
    if a.size == 0:
        return Interval(math.nan, math.nan, math.nan, 0, NO_VALUE)
    mean = float(a.mean())
    if a.size == 1:
        return Interval(mean, math.nan, math.nan, 1, ONE_REPLICATION)
    if not np.all(np.isfinite(a)):
        return Interval(mean, math.nan, math.nan, int(a.size), NO_VALUE)
    if float(a.min()) == float(a.max()):
        return Interval(float(a[0]), float(a[0]), float(a[0]), int(a.size), IDENTICAL)
    t = _T95[a.size - 2] if a.size - 1 <= len(_T95) else 1.96
    half = float(t * a.std(ddof=1) / math.sqrt(a.size))
    lo = mean - half
    if nonnegative:
        lo = max(lo, 0.0)
    return Interval(mean, lo, mean + half, int(a.size))


# one-sided 80% quantiles of Student's t by degrees of freedom 1..30 (the power term of a
# minimum detectable change); 0.842 (normal) past 30
_T80 = (
    1.376, 1.061, 0.978, 0.941, 0.920, 0.906, 0.896, 0.889, 0.883, 0.879,
    0.876, 0.873, 0.870, 0.868, 0.866, 0.865, 0.863, 0.862, 0.861, 0.860,
    0.859, 0.858, 0.858, 0.857, 0.856, 0.856, 0.855, 0.855, 0.854, 0.854,
)  # fmt: skip


def paired_interval(new: Sequence[float], base: Sequence[float]) -> Interval:
    """Mean of the per-seed differences ``new[i] - base[i]`` (two configurations run on the
    same seeds, hence the same workload draws: common random numbers) and its 95%
    Student-t interval over the seeds. Never clipped at 0: a difference may be negative.
    Identical differences (a deterministic change, e.g. a trace replayed as is) give the
    difference itself as both bounds."""
    if len(new) != len(base):
        raise ValueError(f"paired values need the same seeds: {len(new)} against {len(base)}")
    return mean_interval(
        [float(a) - float(b) for a, b in zip(new, base, strict=True)], nonnegative=False
    )


def detectable_change(sd: float, n: int, tolerance: float = 0.0) -> float:
    """Minimum detectable change of a paired comparison over ``n`` seeds whose per-seed
    differences have standard deviation ``sd``: the true mean change that a gate failing
    when the mean difference exceeds ``tolerance`` and its 95% interval excludes 0 flags
    with 80% power, max(tolerance, t95 x se) + t80 x se, se = sd / sqrt(n) (Student t
    with n - 1 degrees of freedom). Infinite with fewer than two seeds."""
    if n < 2 or not math.isfinite(sd):
        return math.inf
    se = sd / math.sqrt(n)
    df = n - 1
    t95 = _T95[df - 1] if df <= len(_T95) else 1.96
    t80 = _T80[df - 1] if df <= len(_T80) else 0.842
    return max(tolerance, t95 * se) + t80 * se


# ---- the interval of a ratio of sums (the hit ratio) ----------------------------------

CHUNK = 2_000_000  # resampled values handled at once (memory bound of :func:`_resample_sums`)
RUNS_FROM = 5  # mean run length from which a resample's sums are taken run by run


def _resample_sums(
    series: tuple[np.ndarray, ...], draws: int, mean_block: float, rng: np.random.Generator
) -> list[np.ndarray]:
    """Sums of each of ``series`` (same length n) over ``draws`` stationary-bootstrap
    resamples (the resamples of :func:`stationary_indices`), all draws at once: one long
    stream of runs (geometric lengths, uniform circular starts) cut every n values, each
    piece one resample (a run cut at a cut goes on in the next resample from a point as
    uniform as a fresh start, and geometric lengths are memoryless, so the pieces are
    independent resamples). A piece's sum comes from cumulative sums: the cost is the
    number of runs, not of values, in chunks of at most :data:`CHUNK` values."""
    n = len(series[0])
    prefixes = [np.concatenate(([0.0], np.cumsum(x))) for x in series]
    p = 1.0 / max(mean_block, 1.0)
    out = [np.empty(draws) for _ in series]
    per = max(1, CHUNK // n)
    for first in range(0, draws, per):
        k = min(per, draws - first)
        total = k * n
        lengths = rng.geometric(p, size=int(total * p * 1.1) + 16)
        while lengths.sum() < total:  # (rare: the runs drawn fell short)
            lengths = np.concatenate((lengths, rng.geometric(p, size=len(lengths) // 4 + 16)))
        ends = np.cumsum(lengths)
        used = int(np.searchsorted(ends, total)) + 1
        ends = ends[:used]
        ends[-1] = total
        run_first = ends - lengths[:used]
        run_first[-1] = ends[-2] if used > 1 else 0
        starts = rng.integers(0, n, size=used)
        # pieces: the runs cut at every multiple of n
        marks = np.arange(n, total, n)  # (every run end is already a cut)
        at = np.searchsorted(ends, marks)
        cuts = np.insert(ends, at, marks)
        cuts = cuts[np.concatenate((cuts[1:] != cuts[:-1], [True]))]  # a mark on a run end
        piece_first = np.concatenate(([0], cuts[:-1]))
        run = np.searchsorted(ends, piece_first, side="right")  # the run each piece is in
        begin = (starts[run] + (piece_first - run_first[run])) % n
        length = cuts - piece_first
        draw = piece_first // n
        for j, pre in enumerate(prefixes):
            sums = _run_sums(pre, begin, length)
            out[j][first : first + k] = np.bincount(draw, weights=sums, minlength=k)
    return out


def _stationary_matrix(n: int, mean_block: float, k: int, rng: np.random.Generator) -> np.ndarray:
    """``k`` resamples of :func:`stationary_indices` at once (a k x n array of indices)."""
    if mean_block <= 1:
        return rng.integers(0, n, size=(k, n))
    new = rng.random(k * n) < 1.0 / mean_block
    new[::n] = True  # each resample starts a run
    firsts = np.flatnonzero(new)
    run = np.cumsum(new) - 1
    starts = rng.integers(0, n, size=len(firsts))
    return ((starts[run] + (np.arange(k * n) - firsts[run])) % n).reshape(k, n)


def _run_sums(prefix: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Sums of circular runs of a series (``prefix``: its cumulative sums, 0 first): run
    ``i`` covers ``lengths[i]`` (at most n) values from ``starts[i]``, wrapping around the
    end."""
    n = len(prefix) - 1
    end = starts + lengths
    wrapped = np.where(end > n, prefix[np.clip(end - n, 0, n)], 0.0)
    return prefix[np.minimum(end, n)] - prefix[starts] + wrapped


def ratio_ci(
    num: np.ndarray,
    den: np.ndarray,
    rng: np.random.Generator,
    *,
    draws: int | None = None,
    level: float = 0.95,
) -> tuple[float, float]:
    """The ``level`` interval of the ratio of sums ``sum(num) / sum(den)`` of values in
    arrival order (the hit ratio: hit tokens over prompt tokens, per request), by the
    stationary block bootstrap of :func:`percentile_cis` (runs of consecutive requests of
    geometric lengths, their mean from the per-request ratios' own autocorrelation; each
    resample's sums from cumulative sums, :func:`_resample_sums`). Widened to hold the
    estimate and kept within the per-request ratios' range (a ratio of sums is a weighted
    mean of them: a hit ratio stays within [0, 1]). NaNs under 20 values or without a
    positive denominator."""
    a = np.asarray(num, dtype=float)
    d = np.asarray(den, dtype=float)
    n = len(a)
    if n < MIN_REQUESTS or not d.sum() > 0:
        return (math.nan, math.nan)
    point = float(a.sum() / d.sum())
    each = a[d > 0] / d[d > 0]  # (a request without a prompt adds nothing to either sum)
    low, high = float(each.min()), float(each.max())
    if low == high:
        return (point, point)
    if draws is None:
        draws = DRAWS if n <= LARGE else DRAWS_LARGE
    b = block_length(each, stationary=True)
    if b >= RUNS_FROM:
        sa, sd = _resample_sums((a, d), draws, b, rng)
        est = sa / sd
    else:  # short runs: gathering the values is cheaper than a sum per run
        est = np.empty(draws)
        per = max(1, CHUNK // n)
        for first in range(0, draws, per):
            idx = _stationary_matrix(n, b, min(per, draws - first), rng)
            est[first : first + len(idx)] = a[idx].sum(axis=1) / d[idx].sum(axis=1)
    alpha = (1.0 - level) / 2.0
    if draws >= DRAWS:
        lo, hi = (float(x) for x in np.quantile(est, [alpha, 1.0 - alpha]))
    else:  # few resamples (a large run): normal interval from their spread
        half = NormalDist().inv_cdf(1.0 - alpha) * float(np.std(est, ddof=1))
        lo, hi = point - half, point + half
    return (max(min(lo, point), low), min(max(hi, point), high))


# ---- the one form of an interval in a table or a JSON file ----------------------------


def bound_keys(name: str, bounds: Interval | tuple[float, float] | None) -> dict[str, float | None]:
    """An interval as a table or JSON file holds it: two numbers beside the value
    ``name``, ``{name}_lo`` and ``{name}_hi`` (None, or an empty cell, without an
    interval). Every interval kvsim writes for scripts takes this form; "± h" and
    "[lo, hi]" are only printed (:meth:`Interval.text`)."""
    if isinstance(bounds, Interval):
        bounds = (bounds.lo, bounds.hi) if bounds.bounded else None
    if bounds is None or not all(math.isfinite(float(x)) for x in bounds):
        return {f"{name}_lo": None, f"{name}_hi": None}
    return {f"{name}_lo": bounds[0], f"{name}_hi": bounds[1]}


def read_bounds(
    row: Mapping[str, Any], name: str, legacy: str | None = None
) -> tuple[float, float] | None:
    """The interval of the value ``name`` in a row kvsim wrote (:func:`bound_keys`), or in
    an older kvsim's text column ``legacy`` (JSON text "[lo, hi]"); None without one."""
    pair: Any = (row.get(f"{name}_lo"), row.get(f"{name}_hi"))
    if pair[0] is None and legacy is not None:
        raw: Any = row.get(legacy)
        try:
            pair = json.loads(raw) if isinstance(raw, str) else raw
        except ValueError:
            return None
    try:
        lo, hi = (float(x) for x in pair)
    except (TypeError, ValueError):
        return None
    return (lo, hi) if math.isfinite(lo) and math.isfinite(hi) else None
