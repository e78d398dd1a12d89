"""Measurement readers, one per format, and the one place that maps format names to them.

What this package owns: :data:`READERS` (``csv``, ``vllm``, ``sglang``, ``prometheus``: each
a module with ``read(path, text, given) -> list[Row]``), :func:`detect` (a file's format
from its content: a CSV header naming ``prompt_tokens``, a Prometheus exposition with
vLLM's TTFT histogram, JSON objects with vLLM's or SGLang's result keys) and
:func:`read_measurements`, which reads every file a user names (``FILE`` or
``FORMAT:FILE`` to say the format), stamps each row with its file's SHA-256 and refuses a
file that is none of the formats, or not the one named, with one line naming it.
Each reader's module docstring says what its format holds and where the cached prefix's
length comes from when the format does not say it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from types import ModuleType

from kvsim.calibrate.readers import csvfile, prometheus, records, sglang, vllm
from kvsim.calibrate.rows import Given, Row
from kvsim.errors import InputError
from kvsim.files import MAX_TABLE_BYTES, read_bytes

READERS: dict[str, ModuleType] = {
    "csv": csvfile,
    "vllm": vllm,
    "sglang": sglang,
    "prometheus": prometheus,
}
FORMATS = (
    "a CSV with a prompt_tokens column, a vllm bench serve --save-result JSON, an SGLang "
    "bench_serving JSONL or a Prometheus scrape of vLLM's /metrics"
)


def detect(path: str, text: str) -> str:
    """The format of a file's content (see the package docstring); InputError when it is
    none of them."""
    head = text.lstrip()
    if head.startswith("{"):  # JSON results (a broken one is refused at its line)
        obj = records.objects(path, text)[0][1]
        if vllm.looks_like(obj):
            return "vllm"
        if sglang.looks_like(obj):
            return "sglang"
    elif prometheus.looks_like(text):
        return "prometheus"
    elif csvfile.looks_like(text):
        return "csv"
    raise InputError(f"not a measurement file kvsim reads: expected {FORMATS}", where=path)


def split_spec(spec: str) -> tuple[str | None, str]:
    """``FORMAT:FILE`` as (format, file); a plain path as (None, path)."""
    head, sep, rest = spec.partition(":")
    if sep and head in READERS and rest:
        return head, rest
    return None, spec


def read_measurements(specs: Sequence[str], given: Given) -> list[Row]:
    """Every row of every file, in order, each with its file's SHA-256."""
    rows: list[Row] = []
    for spec in specs:
        fmt, path = split_spec(spec)
        data = read_bytes(path, what="measurement file", max_bytes=MAX_TABLE_BYTES)
        try:
            text = data.decode("utf-8-sig")
        except UnicodeDecodeError:
            raise InputError(f"not a text file: expected {FORMATS}", where=path) from None
        fmt = fmt or detect(path, text)
        digest = hashlib.sha256(data).hexdigest()
        rows += [r.with_digest(digest) for r in READERS[fmt].read(path, text, given)]
    return rows
