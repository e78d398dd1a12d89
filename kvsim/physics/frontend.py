"""What a request pays outside the GPU kernels: the frontend's time for one prompt.

What this module owns: :func:`frontend_seconds`, the work one API-server process does for
a prompt before the engine's scheduler sees it (engine.frontend; docs/engine-model.md, "The
frontend")::

    per_request + tokenize_per_request
      + prompt tokens x (per_token + tokenize_per_token)
      + full blocks x hash_per_block

The engine (:mod:`kvsim.sim.engine`) queues requests for its processes, first come first
served; the first token's way out (``output``) is added when the request finishes.
"""

from __future__ import annotations

from typing import Any


def frontend_seconds(fe: Any, prompt_tokens: int) -> float:
    """Seconds one API-server process works on a prompt of ``prompt_tokens`` tokens
    (``fe``: a scenario's ``engine.frontend``)."""
    n = prompt_tokens
    return (
        fe.per_request
        + fe.tokenize_per_request
        + n * (fe.per_token + fe.tokenize_per_token)
        + (n // fe.block_tokens) * fe.hash_per_block
    )
