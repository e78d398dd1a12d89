"""A block bootstrap of a trace: another sample of the same traffic, drawn by a seed.

The trace's span is cut into ``windows`` windows of equal length; as many are drawn with
replacement and laid end to end, each keeping its requests' offsets inside it. A window
drawn again has its prompts' block ids salted (a different but equally shaped prefix
tree), so a repeat does not hit the cache its first copy filled; prefix reuse across the
windows of a first copy is kept. Request ids are renumbered in the new arrival order.

A draw of ``windows`` windows holds about as many requests as the trace, not exactly as
many; with ``keep_count`` (a trace cut at ``limit`` requests) windows are drawn until the
draw holds exactly as many requests as the trace, so that ``limit: 100`` replays 100.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import numpy as np

from kvsim.workload.request import MAX_HASH, Request

WINDOWS = 40
_SALT = 0x5851F42D4C957F2D  # an odd 63-bit constant: id XOR copy * salt is a bijection


def block_resample(
    requests: Iterable[Request],
    rng: np.random.Generator,
    windows: int = WINDOWS,
    *,
    keep_count: bool = False,
) -> Iterator[Request]:
    """The requests of one block-bootstrap draw (see the module docstring); with
    ``keep_count``, exactly as many as ``requests``."""
    reqs = list(requests)
    if len(reqs) < 2:
        yield from reqs
        return
    t0, t1 = reqs[0].arrival, reqs[-1].arrival
    k = max(1, min(windows, len(reqs)))
    length = (t1 - t0) / k if t1 > t0 else 0.0
    groups: list[list[Request]] = [[] for _ in range(k)]
    for i, r in enumerate(reqs):
        w = int((r.arrival - t0) / length) if length > 0 else i * k // len(reqs)
        groups[min(w, k - 1)].append(r)
    picks = rng.integers(0, k, size=k)
    copies = [0] * k
    rid = 0
    count = len(reqs) if keep_count else None

    def draws() -> Iterator[int]:
        yield from (int(w) for w in picks)
        while count is not None:  # more windows until the draw holds `count` requests
            yield from (int(w) for w in rng.integers(0, k, size=k))

    for j, w in enumerate(draws()):
        if count is not None and rid >= count:
            return
        copy = copies[w]
        copies[w] += 1
        for r in groups[w]:
            if count is not None and rid >= count:
                return
            offset = r.arrival - t0 - w * length if length > 0 else 0.0
            ids = r.hash_ids
            if copy:
                mask = (copy * _SALT) % MAX_HASH
                ids = tuple(h ^ mask for h in ids)
            yield r._replace(id=rid, arrival=t0 + j * length + offset, hash_ids=ids)
            rid += 1
