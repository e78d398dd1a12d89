"""What a transfer engine adds to a KV read beyond the link's bytes.

What this module owns: :func:`operations`, :func:`transfer_terms` and
:func:`transfer_seconds` for a :class:`~kvsim.config.schema.TransferEngine`
(``remote.transfer``, ``tiers.peer.transfer``; docs/data-path.md, "Transfer engines"). A
read of n tokens makes, on each rank (every rank moves its part at once)::

    ops   = ceil(n / op_tokens / pcp) x ops_per_block
    delay = setup + ceil(ops / batch) x per_batch          (before the first byte)
    cap   = bytes / (ops x per_op / threads)                (the read's rate at most)

so a read alone takes ``delay + max(ops x per_op / threads, bytes / link)``: the
operations' software and the wire overlap (a pipelined engine; the bytes' share of the link
is the fabric's). ``ops_per_block`` null: one operation per layer and per K and V (one per
layer for an MLA latent), vLLM's NIXL connector's descriptors.
"""

from __future__ import annotations

import math
from typing import Any


def operations(te: Any, tokens: int, pcp: int, ops_per_block: int) -> int:
    """Operations one rank makes to read ``tokens`` tokens (``pcp`` ranks split the
    blocks; each block is ``ops_per_block`` operations)."""
    if tokens <= 0:
        return 0
    blocks = math.ceil(tokens / te.op_tokens / pcp)
    return blocks * ops_per_block


def transfer_terms(
    te: Any, tokens: int, nbytes: float, pcp: int, ops_per_block: int
) -> tuple[float, float]:
    """(delay before the first byte, the read's rate cap in bytes/s of all its bytes)."""
    ops = operations(te, tokens, pcp, ops_per_block)
    if ops == 0:
        return 0.0, math.inf
    batches = math.ceil(ops / te.batch) if te.batch > 0 else 1
    delay = te.setup + batches * te.per_batch
    posting = ops * te.per_op / te.threads
    cap = nbytes / posting if posting > 0.0 else math.inf
    return delay, cap


def transfer_seconds(
    te: Any, tokens: int, nbytes: float, link: float, pcp: int, ops_per_block: int
) -> float:
    """A read alone on a link of ``link`` bytes/s: its delay, then its bytes at the lower
    of the link and the operations' cap."""
    delay, cap = transfer_terms(te, tokens, nbytes, pcp, ops_per_block)
    rate = link if link < cap else cap
    return delay + (nbytes / rate if nbytes > 0.0 else 0.0)
