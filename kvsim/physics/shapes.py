"""The work in a step, as numbers: query-key pairs of attention and the experts a step's
tokens touch.

What this module owns: :data:`Chunk` (new tokens computed after context tokens in HBM),
:func:`dense_pairs`, :func:`sparse_pairs` (causal query-key pairs, dense or capped at a
top-k), :func:`expert_coverage` (the share of experts T tokens routed top-k touch) and
:func:`step_tokens`. The step models (:mod:`kvsim.physics.step`, :mod:`kvsim.physics.ops`)
turn them into time.
"""

from __future__ import annotations

from collections.abc import Sequence

Chunk = tuple[int, int]  # (new tokens, context tokens before them)


def dense_pairs(new: float, context: float) -> float:
    """Causal query-key pairs of ``new`` queries after ``context`` keys (continuous form:
    the integral of (context + x) over x in [0, new])."""
    return new * context + new * new / 2.0


def sparse_pairs(new: float, context: float, top_k: float) -> float:
    """Pairs when each query sees at most ``top_k`` keys: the integral of
    min(context + x, top_k) over x in [0, new]."""
    if context >= top_k:
        return new * top_k
    if context + new <= top_k:
        return dense_pairs(new, context)
    m = top_k - context  # queries before the cap binds
    return dense_pairs(m, context) + (new - m) * top_k


def expert_coverage(tokens: float, experts: int, per_token: int) -> float:
    """Expected share of ``experts`` touched when ``tokens`` tokens each pick ``per_token``
    of them (uniform routing): 1 - (1 - k/E)^T."""
    if tokens <= 0:
        return 0.0
    if per_token >= experts:
        return 1.0
    return 1.0 - (1.0 - per_token / experts) ** tokens


def step_tokens(chunks: Sequence[Chunk]) -> tuple[int, int]:
    """A step's new tokens and the tokens its attention reads (new + context, summed)."""
    tokens = 0
    context = 0
    for new, ctx in chunks:
        tokens += new
        context += new + ctx
    return tokens, context
