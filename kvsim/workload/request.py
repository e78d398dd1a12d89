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


def check_request(req: Request, block_tokens: int) -> None:
    """Refuse a request whose shape the simulator cannot serve (InputError)."""
    if req.input_tokens < 1:
        raise InputError(f"request {req.id}: input_tokens must be >= 1, got {req.input_tokens}")
    need = -(-req.input_tokens // block_tokens)
    if len(req.hash_ids) != need:
        raise InputError(
            f"request {req.id}: {len(req.hash_ids)} hash_ids, but {req.input_tokens} tokens "
            f"need {need} blocks of {block_tokens}"
        )
