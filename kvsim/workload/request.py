"""The request record every workload source emits (trace readers and the generator alike).

What this module owns: :class:`Request`, the limits on a request's shape, and the check
every request passes before it is simulated (:func:`check_request`). Compiled with the core
(``[tool.kvsim] compiled``): the simulation checks each arriving request, block by block.
"""

from __future__ import annotations

from typing import NamedTuple

from kvsim.errors import InputError


class Request(NamedTuple):
    """One prefill request (an immutable tuple: cheap to make a million of).

    ``hash_ids`` has one id per ``block_tokens`` tokens of the prompt (the last block may be
    partial); equal ids at position i mean an equal prompt prefix up to the end of block i.
    """

    id: int  # position in the source (line or row), stable under filtering
    arrival: float  # seconds since the start of the replay
    input_tokens: int
    output_tokens: int
    hash_ids: tuple[int, ...]
    session: int = -1  # -1: not part of a multi-turn session
    tenant: int = 0  # whose request it is (cache keys are namespaced by tenant)
    shared_blocks: int = 0  # leading blocks that are a public prefix (e.g. a system prompt)
    last_turn: bool = True  # the last request of its session


MAX_BLOCKS = 1 << 20  # blocks in one prompt: 512M tokens at 512-token blocks
MAX_TOKENS = 1 << 30  # sanity ceiling on a trace's token counts (fits every table column)
MAX_HASH = 1 << 63  # hash ids fit in 63 bits (tenant namespacing adds tenant * 2**64)
# arrival times (s) below 2**32 (136 years) keep better than microsecond resolution in a
# float; far later ones would round every TTFT (milliseconds) to nothing
MAX_ARRIVAL_S = float(1 << 32)


def blocks_needed(tokens: int, block_tokens: int, where: str, field: str = "") -> int:
    """Blocks of ``block_tokens`` a prompt of ``tokens`` fills; InputError past MAX_BLOCKS."""
    need = -(-tokens // block_tokens)
    if need > MAX_BLOCKS:
        raise InputError(
            f"{field}{tokens} tokens make {need} blocks of {block_tokens}; "
            f"kvsim handles up to {MAX_BLOCKS} blocks per prompt (raise block_tokens)",
            where=where,
        )
    return need


def check_request(req: Request, block_tokens: int, where: str | None = None) -> None:
    """Refuse a request whose shape the simulator cannot serve (InputError).

    ``where`` names the request's origin (``file:line``); without it, ``request <id>``.
    Trace readers call this on every line, so a bad request is reported where it is."""
    here = where if where is not None else f"request {req.id}"
    t = req.arrival
    if not 0.0 <= t <= MAX_ARRIVAL_S:  # also NaN
        raise InputError(
            f"arrival time {t:g} s is outside [0, {MAX_ARRIVAL_S:g}] s (136 years)", where=here
        )
    if req.input_tokens < 1:
        raise InputError(f"input_tokens must be >= 1, got {req.input_tokens}", where=here)
    need = blocks_needed(req.input_tokens, block_tokens, here)
    ids = req.hash_ids
    if len(ids) != need:
        raise InputError(
            f"{len(ids)} hash_ids, but {req.input_tokens} tokens "
            f"need {need} blocks of {block_tokens}",
            where=here,
        )
    for h in ids:  # compiled: one native shift per id (min() and max() compare objects)
        if h >> 63:  # below 0, or MAX_HASH (2**63) and above
            raise InputError("hash_ids must be integers in [0, 2**63)", where=here)
