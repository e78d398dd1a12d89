"""Prefill time t(new_tokens, cached_tokens) by bilinear interpolation on a grid.

Rule off the grid, per axis: below the first grid point the first value holds (a prefill
never gets cheaper than the smallest one measured); above the last grid point the last
segment's slope extends the table (linear, so it under-estimates quadratic attention
growth; :attr:`TimingTable.extrapolations` counts such calls). A one-point axis is
constant. The grid must be strictly increasing and the times must not decrease along
either axis; anything else is refused where it is made.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from itertools import pairwise


def _segment(grid: Sequence[float], x: float) -> tuple[int, float, bool]:
    """(lower index, weight of the upper point, extrapolated?) for x on a grid."""
    n = len(grid)
    if n == 1 or x <= grid[0]:
        return 0, 0.0, False
    if x >= grid[-1]:
        lo = n - 2
        w = (x - grid[lo]) / (grid[-1] - grid[lo])
        return lo, w, x > grid[-1]
    lo = bisect_right(grid, x) - 1
    return lo, (x - grid[lo]) / (grid[lo + 1] - grid[lo]), False


class TimingTable:
    """Interpolated node prefill time; call it as ``table(new_tokens, cached_tokens)``."""

    def __init__(
        self,
        new_tokens: Sequence[float],
        cached_tokens: Sequence[float],
        seconds: Sequence[Sequence[float]],
        scale: float = 1.0,
    ) -> None:
        # messages are "field: reason", so a scenario error can name the field
        for name, grid in (("new_tokens", new_tokens), ("cached_tokens", cached_tokens)):
            seen: set[float] = set()
            for x in grid:  # a point given twice: which row (column) of seconds is meant?
                if x in seen:
                    raise ValueError(f"{name}: {x:g} is listed twice (give each point once)")
                seen.add(x)
            if not grid or any(b <= a for a, b in pairwise(grid)):
                raise ValueError(f"{name}: must be a non-empty, strictly increasing list")
        if len(seconds) != len(new_tokens) or any(len(r) != len(cached_tokens) for r in seconds):
            raise ValueError("seconds: grid shape does not match new_tokens x cached_tokens")
        if scale <= 0:
            raise ValueError("scale: must be > 0")
        for i, row in enumerate(seconds):
            for j, t in enumerate(row):
                if not t > 0:
                    raise ValueError("seconds: every time must be > 0")
                if (i and t < seconds[i - 1][j]) or (j and t < row[j - 1]):
                    raise ValueError("seconds: must not decrease as new or cached tokens grow")
        self.new_grid = [float(x) for x in new_tokens]
        self.cached_grid = [float(x) for x in cached_tokens]
        self.seconds = [[float(t) * scale for t in row] for row in seconds]
        self.extrapolations = 0
        self._memo: dict[tuple[int, int], tuple[float, bool]] = {}

    def __call__(self, new: int, cached: int = 0) -> float:
        key = (new, cached)
        hit = self._memo.get(key)
        if hit is None:
            hit = self._interpolate(new, cached)
            if len(self._memo) < 1_000_000:
                self._memo[key] = hit
        if hit[1]:
            self.extrapolations += 1
        return hit[0]

    def _interpolate(self, new: float, cached: float) -> tuple[float, bool]:
        i, wi, ei = _segment(self.new_grid, new)
        j, wj, ej = _segment(self.cached_grid, cached)
        s = self.seconds
        i2 = min(i + 1, len(s) - 1)
        j2 = min(j + 1, len(s[0]) - 1)
        lo = s[i][j] + (s[i][j2] - s[i][j]) * wj
        hi = s[i2][j] + (s[i2][j2] - s[i2][j]) * wj
        return max(lo + (hi - lo) * wi, 0.0), ei or ej

    def throughput(self, tokens: int) -> float:
        """Cold prefill rate R(tokens) = tokens / t(tokens, 0), in tokens/s."""
        return tokens / self(tokens, 0)
