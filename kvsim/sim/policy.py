"""Load policies: whether lower tiers are looked at, whether the engine waits for a
restore, and how much of an available hit to restore. ``LOAD_POLICIES`` maps names.

- ``sync``: restore every available block; the engine waits (nothing else runs on it).
- ``async``: restore every available block while the engine serves other requests; the
  request re-joins the queue (in arrival order) for its suffix prefill once its KV is in.
- ``recompute``: look only at the GPU prefix cache; lower tiers are ignored.
- ``auto``: like ``sync``, but restore only the prefix whose live estimate (T0 + bytes at
  the bandwidth share a new transfer would get now + suffix compute) beats the others,
  recompute included.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence


class LoadPolicy:
    name = ""
    lower_tiers = True  # look up host, NVMe and remote
    blocking = True  # the engine waits for the restore

    def restore_blocks(
        self, src: Sequence[int], estimate: Callable[[int], float], job: object = None
    ) -> int:
        """How many of the available hit blocks (tier codes ``src``) to restore
        (``job``: the request, for policies that look beyond its sources)."""
        return len(src)


class Sync(LoadPolicy):
    name = "sync"


class Async(LoadPolicy):
    name = "async"
    blocking = False


class Recompute(LoadPolicy):
    name = "recompute"
    lower_tiers = False


class Auto(LoadPolicy):
    name = "auto"

    def restore_blocks(
        self, src: Sequence[int], estimate: Callable[[int], float], job: object = None
    ) -> int:
        # candidate cut points: the end of each run of blocks from one tier
        cuts = [i for i in range(1, len(src)) if src[i] != src[i - 1]] + [len(src)]
        best, best_t = 0, estimate(0)
        for k in cuts:
            t = estimate(k)
            if t < best_t:
                best, best_t = k, t
        return best


LOAD_POLICIES: dict[str, LoadPolicy] = {p.name: p for p in (Sync(), Async(), Recompute(), Auto())}
