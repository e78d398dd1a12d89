"""The per-request records of a run: one declaration of the columns, and the table.

What this module owns: :class:`Column` and :func:`columns`, the one declaration of a
request's record (README.md, Outputs, is the contract): each column's name, storage code
(``q`` int64, ``d`` float64, ``?`` bool, ``s`` text), meaning, and where its value comes
from on a finished request (:class:`~kvsim.sim.job.Job`): an attribute path
(``req.arrival``), a tier's entry of a per-tier list (``tier_s`` of the host tier), or
arithmetic on other columns (``ttft_s``). The per-tier columns follow the run's tiers
(kvsim.sim.tiers: ``load_host_s``, ``tokens_host``, ``bytes_host``, ..., and a user's tier
kind's own). :data:`SCHEMA`/:data:`COLUMNS`/:data:`COLUMN_NAMES` are the declaration for
the built-in tiers; and :class:`RowTable`, the records kept column by column.

A :class:`RowTable` takes finished requests (:meth:`RowTable.add`) and keeps each column
as NumPy arrays (text: a list of shared strings): requests wait in a small batch, whose
records (``Job.record()``: its fields in :attr:`Job.RECORD <kvsim.sim.job.Job.RECORD>`
order, one call a request) are then read column by column, by the declared sources, into
one array per column. A million requests take about 270 MB this way against about 1 GB as
tuples of Python objects, and the columns become the results DataFrame without a
conversion pass.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from operator import attrgetter, methodcaller
from typing import Any, Final, NamedTuple

import numpy as np

from kvsim.sim.job import Job

_DTYPES: dict[str, Any] = {"q": np.int64, "d": np.float64, "?": np.bool_}
_BATCH: Final = 1024  # requests read into the columns at a time
RECORD: Final = Job.RECORD  # a finished request's fields (Job.record), by name


class Column(NamedTuple):
    """One column of the per-request record (see the module docstring)."""

    name: str
    code: str  # storage: q int64, d float64, ? bool, s text
    meaning: str
    # where the value comes from: an attribute path on the finished request, or
    # (list attribute, tier code) for a per-tier column (code -1: the last entry)
    source: str | tuple[str, int] = ""
    # or arithmetic on other columns (by name), given the batch's columns
    derived: Callable[[dict[str, Any]], Any] | None = None


def _ttft(c: dict[str, Any]) -> Any:
    return c["finish_s"] - c["arrival_s"]


def _load(c: dict[str, Any]) -> Any:
    return c["_restore_s"] + c["load_prefetch_s"]


# (name, code, meaning, source) of the columns before, between and after the per-tier ones
_HEAD: tuple[Column, ...] = (
    Column("id", "q", "request id: position in the source trace, or generation order", "req.id"),
    Column("session", "q", "multi-turn session id, -1 when none", "req.session"),
    Column("tenant", "q", "tenant the request belongs to", "req.tenant"),
    Column("engine", "q", "engine (node) that served it; -1 when dropped", "served_by"),
    Column(
        "arrival_s",
        "d",
        "arrival time (with workload.concurrency: when it was sent, after any wait for a "
        "request in flight to finish)",
        "req.arrival",
    ),
    Column("start_s", "d", "first time the engine took the request from its queue", "start"),
    Column("finish_s", "d", "prefill end (first token)", "finish"),
    Column(
        "ttft_s",
        "d",
        "time to first token = finish_s - arrival_s (NaN when dropped)",
        derived=_ttft,
    ),
    Column(
        "queue_wait_s",
        "d",
        "time in the engine queue (both waits under async loading)",
        "queue_wait",
    ),
    Column(
        "load_s",
        "d",
        "waiting for its KV: the wait for its prefetch into host (load_prefetch_s) plus the "
        "wall time of the restore phase (T0s and transfers, tiers in parallel; preempted: "
        "every attempt's restore)",
        derived=_load,
    ),
    Column(
        "compute_s",
        "d",
        "from its first step (after its own restore) to the end of its last chunk's compute; "
        "batch-mates' synchronous restores in those steps included (preempted: plus each "
        "preempted attempt's, from its first step to its preemption)",
        "compute_s",
    ),
    Column(
        "store_s",
        "d",
        "GPU-to-host staging of the blocks to put in its last step, which the step waits for",
        "store_s",
    ),
    Column("lost_s", "d", "time spent on engines that failed under the request", "lost_s"),
    Column(
        "frontend_s",
        "d",
        "time outside the engine (engine.frontend): in the API server (its queue included), "
        "tokenizer and prefix hashing before the engine's queue, and the first token's way "
        "out after the prefill; 0 without a frontend",
        "frontend_s",
    ),
)
_AFTER_LOADS: tuple[Column, ...] = (
    Column(
        "load_prefetch_s",
        "d",
        "of load_s, the wait for its prefetch into host before it joined the queue "
        "(prefetch.policy wait_complete, timeout, or a plugin's that waits; 0 otherwise)",
        "prefetch_s",
    ),
    Column(
        "remote_get_s", "d", "remote GET time after T0 (stalls, latency, transfer)", "remote_get_s"
    ),
    Column(
        "remote_ssd_s",
        "d",
        "of remote_get_s, the wait for the store's own SSDs (remote.ssd): the read's latency "
        "and its transfer off the drives, before the network moves those bytes; 0 when the "
        "GET read none",
        "remote_ssd_s",
    ),
    Column(
        "remote_ssd_tokens",
        "q",
        "of tokens_remote, those in blocks read off the store's own SSDs (remote.ssd: held "
        "in no server's DRAM at the GET); 0 without",
        "remote_ssd_tokens",
    ),
    Column(
        "restore_lookup_s",
        "d",
        "of the restore (load_s - load_prefetch_s), the critical tier's lookup: its T0 "
        "(index lookup, first byte) and its path's link latency (the critical tier: the "
        "one whose KV was usable last); 0 with no restore, NaN when dropped",
        "restore_lookup",
    ),
    Column(
        "restore_queue_s",
        "d",
        "of the restore, what the other parts leave: bandwidth shared with other transfers, "
        "stalls, waiting for the other tiers (restore - lookup - read - h2d, never below 0)",
        "restore_queue",
    ),
    Column(
        "restore_read_s",
        "d",
        "of the restore, the critical transfer's unloaded time (bytes / the bottleneck rate "
        "of its links and client cap, alone on an idle fabric) when that bottleneck is not "
        "the host-to-GPU link",
        "restore_read",
    ),
    Column(
        "restore_h2d_s",
        "d",
        "of the restore, the critical transfer's unloaded time when its bottleneck is the "
        "host-to-GPU link, plus what follows the bytes' arrival before use (decode, the "
        "NVLink hand-off)",
        "restore_h2d",
    ),
    Column("input_tokens", "q", "prompt tokens", "req.input_tokens"),
    Column(
        "output_tokens", "q", "output tokens (not simulated: prefill only)", "req.output_tokens"
    ),
)
_AFTER_TOKENS: tuple[Column, ...] = (
    Column("tokens_compute", "q", "prompt tokens computed", ("tokens", -1)),
    Column(
        "recomputed_tokens",
        "q",
        "of tokens_compute, those in blocks computed (or prestored) before anywhere in the "
        "cluster: evicted since, out of the lookup's reach, or skipped by the load policy",
        "recomputed",
    ),
    Column(
        "preemptions",
        "q",
        "times it was preempted (engine.preemption: recompute): its KV freed, it was computed "
        "again from its lookup on; 0 under hold",
        "preemptions",
    ),
    Column(
        "preempted_tokens",
        "q",
        "prompt tokens its preempted attempts computed (work lost, outside tokens_compute; "
        "what a re-run finds of them in a cache tier is a hit)",
        "preempted_tokens",
    ),
    Column(
        "gpu_compute_s",
        "d",
        "its share of the GPU (SM) compute time of the steps it took part in: each step's "
        "SM time x its chunk tokens / the step's tokens",
        "gpu_s",
    ),
)
_TAIL: tuple[Column, ...] = (
    Column(
        "decision",
        "s",
        "cold | gpu | restore | skipped (auto chose recompute) | fallback (the "
        "remote GET was abandoned: client timeout or a server lost mid-GET) | dropped",
        "decision",
    ),
    Column("stalled", "?", "a remote GET of this request stalled", "stalled"),
    Column(
        "timed_out", "?", "the remote GET hit the client timeout (decision fallback)", "timed_out"
    ),
    Column("retries", "q", "times re-routed after an engine failure", "retries"),
    Column("drop_reason", "s", "why it was dropped (empty when it finished)", "drop_reason"),
    Column("warmup", "?", "arrived during the warm-up; left out of the summary", "warmup"),
    Column(
        "warm",
        "?",
        "not the first request of its session (or, without a session, of the prefix its "
        "first block starts) in arrival order; false: cold",
        "warm",
    ),
    Column("steps", "q", "engine steps it took part in (chunks of its prompt computed)", "steps"),
)
# what the built-in tiers' per-tier columns say of each tier (a user's kind: its name)
_WHAT: dict[str, str] = {
    "gpu": "GPU HBM",
    "host": "host DRAM",
    "nvme": "NVMe",
    "remote": "the remote store",
    "peer": "other engines' host DRAM (tiers.peer)",
}
_NOTES: dict[str, str] = {
    "bytes_host": "bytes read from host DRAM (over all attempts, if re-routed)",
    "bytes_nvme": "bytes read from NVMe (over all attempts, if re-routed)",
    "bytes_remote": "bytes read from the remote store (also when abandoned; all attempts)",
    "bytes_peer": "bytes read from other engines' host DRAM (over all attempts)",
}


#: the hand-off's columns, after the others: only in runs with ``cluster.handoff`` on
HANDOFF: tuple[Column, ...] = (
    Column(
        "handoff_s",
        "d",
        "cluster.handoff: its KV's hand-off to the decode pool, from the prefill's end to "
        "the last byte received (its latency included; not part of ttft_s); NaN when the "
        "hand-off was lost with its engine or the run stopped first, or it was dropped",
        "handoff_s",
    ),
    Column(
        "handoff_bytes",
        "d",
        "cluster.handoff: bytes its hand-off moved (the whole prompt's KV; a lost hand-off: "
        "what had moved)",
        "handoff_bytes",
    ),
)


#: engine.mode colocated: the decode's columns, after the others (and output_tokens reads
#: the tokens the request made)
COLOCATED: tuple[Column, ...] = (
    Column(
        "e2e_s",
        "d",
        "engine.mode colocated: end-to-end latency, its last token out - arrival_s (= ttft_s "
        "for a single output token)",
        "e2e",
    ),
    Column(
        "tpot_s",
        "d",
        "engine.mode colocated: time per output token after the first, (last token - first "
        "token) / (output_tokens - 1); NaN for a single output token",
        "tpot",
    ),
    Column(
        "itl_p99_s",
        "d",
        "engine.mode colocated: p99 of its inter-token latencies (the gaps between its "
        "successive tokens; NaN for a single output token)",
        "itl_p99",
    ),
    Column(
        "swapped_bytes",
        "d",
        "engine.preemption swap: bytes of its KV copied to host memory and back over the "
        "GPU-to-host and host-to-GPU links (both directions counted); 0 otherwise",
        "swapped_bytes",
    ),
)
_OUTPUT_MADE = Column(
    "output_tokens",
    "q",
    "engine.mode colocated: output tokens it made, the first (from its prefill) included: "
    "its trace's or distribution's output length, at least 1",
    "out_target",
)


def columns(
    tiers: Sequence[str], handoff: bool = False, colocated: bool = False
) -> tuple[Column, ...]:
    """The per-request columns of a run whose tiers are named ``tiers`` (by tier code:
    gpu first). Per lower tier: its restore time, tokens and bytes read. ``handoff``: the
    hand-off's columns last (:data:`HANDOFF`); ``colocated``: the decode's
    (:data:`COLOCATED`)."""
    lower = list(enumerate(tiers))[1:]

    def what(name: str) -> str:
        return _WHAT.get(name, f"the {name} tier")

    loads = tuple(
        Column(f"load_{n}_s", "d", f"restore from {what(n)}, T0 included", ("tier_s", t))
        for t, n in lower
    )
    tokens = (
        Column(
            f"tokens_{tiers[0]}", "q", f"prompt tokens found in {what(tiers[0])}", ("tokens", 0)
        ),
        *(
            Column(f"tokens_{n}", "q", f"prompt tokens restored from {what(n)}", ("tokens", t))
            for t, n in lower
        ),
    )
    read = tuple(
        Column(
            f"bytes_{n}",
            "d",
            _NOTES.get(f"bytes_{n}", f"bytes read from {what(n)} (over all attempts)"),
            ("bytes", t),
        )
        for t, n in lower
    )
    after_loads = _AFTER_LOADS
    if colocated:  # output_tokens: what it made
        after_loads = tuple(_OUTPUT_MADE if c.name == "output_tokens" else c for c in after_loads)
    return (
        *_HEAD,
        *loads,
        *after_loads,
        *tokens,
        *_AFTER_TOKENS,
        *read,
        *_TAIL,
        *(HANDOFF if handoff else ()),
        *(COLOCATED if colocated else ()),
    )


#: The declaration for the built-in tiers (gpu, host, nvme, remote, peer).
DEFAULT: tuple[Column, ...] = columns(("gpu", "host", "nvme", "remote", "peer"))
#: (name, storage code, meaning) of each column, for the built-in tiers.
SCHEMA: tuple[tuple[str, str, str], ...] = tuple((c.name, c.code, c.meaning) for c in DEFAULT)
COLUMNS: tuple[tuple[str, str], ...] = tuple((name, meaning) for name, _, meaning in SCHEMA)
COLUMN_NAMES: tuple[str, ...] = tuple(name for name, _, _ in SCHEMA)
# a column the table reads but does not keep: the restore's own wall time (load_s's part)
_RESTORE = Column("_restore_s", "d", "", "load_s")
_RECORD = methodcaller("record")


class RowTable:
    """Finished requests' records, kept column by column (see the module docstring)."""

    __slots__ = ("_batch", "_parts", "_plan", "_rows", "_split", "columns", "names")

    def __init__(self, columns: Sequence[Column] = DEFAULT, fields: Sequence[str] = RECORD) -> None:
        """``fields``: what a record's ``record()`` returns, by name (Job.RECORD): the
        columns' sources are among them (``req.id``: the ``id`` of the ``req`` field)."""
        self.columns: tuple[Column, ...] = tuple(columns)
        self.names: tuple[str, ...] = tuple(c.name for c in self.columns)
        names = tuple(fields)
        # how a batch is read: per column, its field's index and, for one entry of a field
        # (a per-tier list's, or an attribute of the request), the entry's index (-1: the
        # last); None: the field itself, or a derived column (field index -1)
        req: list[str] = []  # the request's attributes read
        self._plan: list[tuple[int, int | None]] = []
        for col in (*self.columns, _RESTORE):
            if col.derived is not None:
                self._plan.append((-1, None))
                continue
            path, t = (col.source, None) if isinstance(col.source, str) else col.source
            head, _, attr = path.partition(".")
            if head not in names:
                raise ValueError(f"column {col.name}: no field {head!r} in the record")
            if attr:
                if attr not in req:
                    req.append(attr)
                t = req.index(attr)
            self._plan.append((names.index(head), t))
        # how a field splits into its entries: a list by position; the request by the
        # attributes read (a tuple of values per request, even for one attribute)
        self._split: dict[int, Any] = {}
        if req:
            self._split[names.index("req")] = attrgetter(*(req if len(req) > 1 else req * 2))
        self._batch: list[Any] = []  # requests not read into the columns yet
        self._parts: list[list[Any]] = [[] for _ in self.columns]  # arrays, or str
        self._rows = 0  # rows in _parts

    def add(self, record: Any) -> None:
        """A finished (or dropped) request: its ``record()`` is read when the batch is full,
        or a column is read (the request must not change)."""
        self._batch.append(record)
        if len(self._batch) >= _BATCH:
            self._flush()

    def _flush(self) -> None:
        batch = self._batch
        if not batch:
            return
        n = len(batch)
        by_field = list(zip(*map(_RECORD, batch), strict=True))  # a tuple per field
        nested: dict[int, list[tuple[Any, ...]]] = {}  # a field's entries, by field
        values: dict[str, Any] = {}
        cols = (*self.columns, _RESTORE)
        for col, (i, t) in zip(cols, self._plan, strict=True):
            if i < 0:
                continue  # derived: below
            if t is None:
                got = by_field[i]
            else:  # one entry of a per-tier list, or an attribute of the request
                parts = nested.get(i)
                if parts is None:
                    split = self._split.get(i)
                    rows = by_field[i] if split is None else map(split, by_field[i])
                    parts = nested[i] = list(zip(*rows, strict=True))
                got = parts[t]
            if col.code == "s":
                values[col.name] = list(got)
            else:
                values[col.name] = np.fromiter(got, _DTYPES[col.code], n)
        for col in cols:
            if col.derived is not None:
                values[col.name] = col.derived(values)
        for parts, col in zip(self._parts, self.columns, strict=True):
            v = values[col.name]
            if col.code == "s":
                parts.extend(v)
            else:
                parts.append(v)
        self._rows += n
        self._batch = []

    def column(self, name: str) -> Any:
        """One column: a NumPy array, or a list of strings for text."""
        return self._column(self.names.index(name))

    def _column(self, i: int) -> Any:
        self._flush()
        parts, code = self._parts[i], self.columns[i].code
        if code == "s":
            return parts
        if len(parts) != 1:  # join the chunks once
            whole = np.concatenate(parts) if parts else np.empty(0, _DTYPES[code])
            self._parts[i] = parts = [whole]
        return parts[0]

    def __len__(self) -> int:
        return self._rows + len(self._batch)

    def __getitem__(self, i: int) -> tuple:
        """Row ``i`` as a tuple in column order (Python values)."""
        cols = [self._column(c) for c in range(len(self.columns))]
        return tuple(
            c[i] if col.code == "s" else c[i].item()
            for c, col in zip(cols, self.columns, strict=True)
        )

    def __iter__(self) -> Iterator[tuple]:
        cols = [self._column(c) for c in range(len(self.columns))]
        values = [
            c if col.code == "s" else c.tolist() for c, col in zip(cols, self.columns, strict=True)
        ]
        return zip(*values, strict=True)
