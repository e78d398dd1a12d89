"""The per-request records of a run: one row per request, kept column by column.

``SCHEMA`` names each field, how it is stored and what it means (README.md, Outputs, is
the contract; ``COLUMNS`` is the same without the storage code). A :class:`RowTable`
keeps each column as NumPy arrays (``q`` int64, ``d`` float64, ``?`` bool) or, for text,
a list of shared strings: a million requests take about 270 MB this way against about
1 GB as tuples of Python objects, and the columns become the results DataFrame without a
conversion pass.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Final

import numpy as np

SCHEMA: tuple[tuple[str, str, str], ...] = (
    ("id", "q", "request id: position in the source trace, or generation order"),
    ("session", "q", "multi-turn session id, -1 when none"),
    ("tenant", "q", "tenant the request belongs to"),
    ("engine", "q", "engine (node) that served it; -1 when dropped"),
    ("arrival_s", "d", "arrival time"),
    ("start_s", "d", "first time the engine took the request from its queue"),
    ("finish_s", "d", "prefill end (first token)"),
    ("ttft_s", "d", "time to first token = finish_s - arrival_s (NaN when dropped)"),
    ("queue_wait_s", "d", "time in the engine queue (both waits under async loading)"),
    (
        "load_s",
        "d",
        "waiting for its KV: the wait for its prefetch into host (load_prefetch_s) plus the "
        "wall time of the restore phase (T0s and transfers, tiers in parallel)",
    ),
    (
        "compute_s",
        "d",
        "from its first step (after its own restore) to the end of its last chunk's compute; "
        "batch-mates' synchronous restores in those steps included",
    ),
    (
        "store_s",
        "d",
        "GPU-to-host staging of the blocks to put in its last step, which the step waits for",
    ),
    ("lost_s", "d", "time spent on engines that failed under the request"),
    ("load_host_s", "d", "restore from host DRAM, T0 included"),
    ("load_nvme_s", "d", "restore from NVMe, T0 included"),
    ("load_remote_s", "d", "restore from the remote store, T0 included"),
    ("load_peer_s", "d", "restore from other engines' host DRAM (tiers.peer), T0 included"),
    (
        "load_prefetch_s",
        "d",
        "of load_s, the wait for its prefetch into host before it joined the queue "
        "(prefetch.policy wait_complete, timeout, or a plugin's that waits; 0 otherwise)",
    ),
    ("remote_get_s", "d", "remote GET time after T0 (stalls, latency, transfer)"),
    (
        "restore_lookup_s",
        "d",
        "of the restore (load_s - load_prefetch_s), the critical tier's lookup: its T0 "
        "(index lookup, first byte) and its path's link latency (the critical tier: the "
        "one whose KV was usable last); 0 with no restore, NaN when dropped",
    ),
    (
        "restore_queue_s",
        "d",
        "of the restore, what the other parts leave: bandwidth shared with other transfers, "
        "stalls, waiting for the other tiers (restore - lookup - read - h2d, never below 0)",
    ),
    (
        "restore_read_s",
        "d",
        "of the restore, the critical transfer's unloaded time (bytes / the bottleneck rate "
        "of its links and client cap, alone on an idle fabric) when that bottleneck is not "
        "the host-to-GPU link",
    ),
    (
        "restore_h2d_s",
        "d",
        "of the restore, the critical transfer's unloaded time when its bottleneck is the "
        "host-to-GPU link, plus what follows the bytes' arrival before use (decode, the "
        "NVLink hand-off)",
    ),
    ("input_tokens", "q", "prompt tokens"),
    ("output_tokens", "q", "output tokens (not simulated: prefill only)"),
    ("tokens_gpu", "q", "prompt tokens found in GPU HBM"),
    ("tokens_host", "q", "prompt tokens restored from host DRAM"),
    ("tokens_nvme", "q", "prompt tokens restored from NVMe"),
    ("tokens_remote", "q", "prompt tokens restored from the remote store"),
    ("tokens_peer", "q", "prompt tokens restored from other engines' host DRAM (tiers.peer)"),
    ("tokens_compute", "q", "prompt tokens computed"),
    (
        "recomputed_tokens",
        "q",
        "of tokens_compute, those in blocks computed (or prestored) before anywhere in the "
        "cluster: evicted since, out of the lookup's reach, or skipped by the load policy",
    ),
    (
        "gpu_compute_s",
        "d",
        "its share of the GPU (SM) compute time of the steps it took part in: each step's "
        "SM time x its chunk tokens / the step's tokens",
    ),
    ("bytes_host", "d", "bytes read from host DRAM (over all attempts, if re-routed)"),
    ("bytes_nvme", "d", "bytes read from NVMe (over all attempts, if re-routed)"),
    ("bytes_remote", "d", "bytes read from the remote store (also when abandoned; all attempts)"),
    ("bytes_peer", "d", "bytes read from other engines' host DRAM (over all attempts)"),
    (
        "decision",
        "s",
        "cold | gpu | restore | skipped (auto chose recompute) | fallback (the "
        "remote GET was abandoned: client timeout or a server lost mid-GET) | dropped",
    ),
    ("stalled", "?", "a remote GET of this request stalled"),
    ("timed_out", "?", "the remote GET hit the client timeout (decision fallback)"),
    ("retries", "q", "times re-routed after an engine failure"),
    ("drop_reason", "s", "why it was dropped (empty when it finished)"),
    ("warmup", "?", "arrived during the warm-up; left out of the summary"),
    (
        "warm",
        "?",
        "not the first request of its session (or, without a session, of the prefix its "
        "first block starts) in arrival order; false: cold",
    ),
    ("steps", "q", "engine steps it took part in (chunks of its prompt computed)"),
)
COLUMNS: tuple[tuple[str, str], ...] = tuple((name, meaning) for name, _, meaning in SCHEMA)
COLUMN_NAMES: tuple[str, ...] = tuple(name for name, _, _ in SCHEMA)
_CODES = tuple(code for _, code, _ in SCHEMA)
_DTYPES: dict[str, Any] = {"q": np.int64, "d": np.float64, "?": np.bool_}
_BATCH: Final = 1024  # rows converted to columns at a time


class RowTable:
    """Rows in ``SCHEMA`` order, appended as tuples, stored as columns.

    Appended rows wait in a small batch, which is then turned into one NumPy array per
    column (text columns: a list of shared strings). Reads give tuples back (``table[i]``,
    iteration) with the same values and Python types as appended; :meth:`column` gives a
    whole column as a NumPy array (text: a list).
    """

    __slots__ = ("_batch", "_parts", "_rows")

    def __init__(self) -> None:
        self._batch: list[tuple] = []
        self._parts: list[list[Any]] = [[] for _ in SCHEMA]  # per column: arrays, or str
        self._rows = 0  # rows in _parts

    def append(self, row: tuple) -> None:
        self._batch.append(row)
        if len(self._batch) >= _BATCH:
            self._flush()

    def _flush(self) -> None:
        batch = self._batch
        if not batch:
            return
        fields = list(zip(*batch, strict=True))  # ValueError: rows of unequal length
        if len(fields) != len(SCHEMA):
            raise ValueError(f"rows have {len(fields)} fields; the table has {len(SCHEMA)}")
        for parts, code, values in zip(self._parts, _CODES, fields, strict=True):
            if code == "s":
                parts.extend(values)
            else:
                parts.append(np.fromiter(values, _DTYPES[code], len(values)))
        self._rows += len(batch)
        self._batch = []

    def column(self, name: str) -> Any:
        """One column: a NumPy array, or a list of strings for text."""
        return self._column(COLUMN_NAMES.index(name))

    def _column(self, i: int) -> Any:
        self._flush()
        parts, code = self._parts[i], _CODES[i]
        if code == "s":
            return parts
        if len(parts) != 1:  # join the chunks once
            whole = np.concatenate(parts) if parts else np.empty(0, _DTYPES[code])
            self._parts[i] = parts = [whole]
        return parts[0]

    def __len__(self) -> int:
        return self._rows + len(self._batch)

    def __getitem__(self, i: int) -> tuple:
        columns = [self._column(c) for c in range(len(SCHEMA))]
        return tuple(
            c[i] if code == "s" else c[i].item() for c, code in zip(columns, _CODES, strict=True)
        )

    def __iter__(self) -> Iterator[tuple]:
        columns = [self._column(c) for c in range(len(SCHEMA))]
        values = [c if code == "s" else c.tolist() for c, code in zip(columns, _CODES, strict=True)]
        return zip(*values, strict=True)
