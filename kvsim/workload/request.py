"""The request record every workload source emits (trace readers and the generator alike)."""

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


def check_request(req: Request, block_tokens: int) -> None:
    """Refuse a request whose shape the simulator cannot serve (InputError)."""
    if req.input_tokens < 1:
        raise InputError(f"request {req.id}: input_tokens must be >= 1, got {req.input_tokens}")
    need = -(-req.input_tokens // block_tokens)
    if need > MAX_BLOCKS:
        raise InputError(
            f"request {req.id}: {req.input_tokens} tokens make {need} blocks of {block_tokens}; "
            f"kvsim handles up to {MAX_BLOCKS} blocks per prompt (raise block_tokens)"
        )
    ids = req.hash_ids
    if ids and (min(ids) < 0 or max(ids) >= MAX_HASH):
        raise InputError(f"request {req.id}: hash_ids must be integers in [0, 2**63)")
    if len(req.hash_ids) != need:
        raise InputError(
            f"request {req.id}: {len(req.hash_ids)} hash_ids, but {req.input_tokens} tokens "
            f"need {need} blocks of {block_tokens}"
        )
