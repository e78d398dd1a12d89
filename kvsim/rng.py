"""Named, independent random streams spawned from one seed (no global randomness).

``stream(seed, "arrivals")`` always gives the same generator for the same seed and name,
and streams of different names are independent, so adding a consumer of one stream never
shifts the numbers another stream produces.
"""

from __future__ import annotations

import zlib

import numpy as np


def stream(seed: int, name: str) -> np.random.Generator:
    """The generator of stream ``name`` under ``seed``."""
    return np.random.default_rng(np.random.SeedSequence([int(seed), zlib.crc32(name.encode())]))
