"""Writing request streams in the public trace formats (Mooncake JSONL, Azure CSV).

This module owns the two trace writers (to ship samples, or to share a synthetic
workload with other simulators); files appear only when complete
(:func:`kvsim.results.writers.write_file`)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator
from datetime import datetime, timedelta
from pathlib import Path

from kvsim.errors import InputError
from kvsim.results.writers import write_file
from kvsim.workload.request import Request

AZURE_EPOCH = datetime(2023, 11, 16, 18, 0, 0)


def _write_lines(lines: Iterable[str], path: str | os.PathLike[str], header: int = 0) -> int:
    """Write lines all or nothing (kvsim's one file writer: a hidden temporary file renamed
    into place, leftovers of killed writes removed); return how many requests were written
    (lines less ``header``). A stream with no requests is refused, not written."""
    n = 0

    def write(tmp: Path) -> None:
        nonlocal n
        with tmp.open("w", encoding="utf-8") as fh:
            for line in lines:
                fh.write(line)
                n += 1
        if n <= header:
            raise InputError(
                "no requests to write (check workload.window and workload.limit)",
                where=str(path),
            )

    write_file(path, write)
    return n - header


def _mooncake_lines(requests: Iterable[Request]) -> Iterator[str]:
    for r in requests:
        rec = {
            "timestamp": round(r.arrival * 1000),
            "input_length": r.input_tokens,
            "output_length": r.output_tokens,
            "hash_ids": list(r.hash_ids),
        }
        if r.tenant:
            rec["tenant"] = r.tenant
        # kvsim's own fields, only when not the default (a plain trace stays plain)
        if r.session >= 0:
            rec["session"] = r.session
        if r.shared_blocks:
            rec["shared_blocks"] = r.shared_blocks
        if not r.last_turn:
            rec["last_turn"] = False
        yield json.dumps(rec) + "\n"


def _azure_lines(requests: Iterable[Request]) -> Iterator[str]:
    yield "TIMESTAMP,ContextTokens,GeneratedTokens\n"
    for r in requests:
        stamp = AZURE_EPOCH + timedelta(seconds=r.arrival)
        yield f"{stamp.strftime('%Y-%m-%d %H:%M:%S.%f')}0,{r.input_tokens},{r.output_tokens}\n"


def write_mooncake(requests: Iterable[Request], path: str | os.PathLike[str]) -> int:
    """Mooncake JSONL (timestamp in whole ms; ``tenant`` when not 0, ``session`` when not
    -1, ``shared_blocks`` when not 0, ``last_turn`` when false); returns the number of
    requests written."""
    return _write_lines(_mooncake_lines(requests), path)


def write_azure(requests: Iterable[Request], path: str | os.PathLike[str]) -> int:
    """Azure 2023 CSV (wall-clock timestamps from an arbitrary epoch; prefixes are lost)."""
    return _write_lines(_azure_lines(requests), path, header=1)
