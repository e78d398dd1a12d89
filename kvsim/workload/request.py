"""The request record every workload source emits (trace readers and the generator alike)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True, frozen=True)
class Request:
    """One prefill request.

    ``hash_ids`` has one id per ``block_tokens`` tokens of the prompt (the last block may be
    partial); equal ids at position i mean an equal prompt prefix up to the end of block i.
    """

    id: int  # position in the source (line or row), stable under filtering
    arrival: float  # seconds since the start of the replay
    input_tokens: int
    output_tokens: int
    hash_ids: tuple[int, ...]
    session: int = -1  # -1: not part of a multi-turn session
