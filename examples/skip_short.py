"""A load policy that skips short prefixes: restore a hit from host, NVMe or the remote
store only when it is at least ``min_blocks`` blocks long; a shorter one is recomputed
(a restore's fixed cost T0 would eat what it saves). The engine waits for the restores
it does make, as under ``sync``. Use it as ``cluster.load_policy: skip_short``.
"""

from __future__ import annotations

from collections.abc import Callable

from kvsim.plugins import LoadPolicy, RequestView, register


@register("skip_short")
class SkipShortPrefixes(LoadPolicy):
    blocking = True  # as sync: the engine waits for the restore
    min_blocks = 4  # 2,048 tokens at 512-token blocks

    def restore_blocks(
        self, request: RequestView, sources: list[str], estimate: Callable[[int], float]
    ) -> int:
        return len(sources) if len(sources) >= self.min_blocks else 0
