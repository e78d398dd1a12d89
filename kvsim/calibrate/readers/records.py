"""JSON result files of benchmark clients: one object, or several (JSON Lines, or objects
appended one after another as ``vllm bench serve --append-result`` writes them), each
with the line it starts on; and the ``key=value`` notes a run can carry (vLLM's
``--metadata``, SGLang's ``--tag``), where the cached prefix's length and tier are said.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from kvsim.errors import InputError


def objects(path: str, text: str) -> list[tuple[int, dict[str, Any]]]:
    """(line, object) of every JSON object in the file, in order; InputError naming the
    line of the first thing that is not one."""
    out: list[tuple[int, dict[str, Any]]] = []
    decoder = json.JSONDecoder()
    i, n = 0, len(text)
    while True:
        while i < n and text[i] in " \t\r\n":
            i += 1
        if i >= n:
            break
        line = text.count("\n", 0, i) + 1
        try:
            obj, end = decoder.raw_decode(text, i)
        except json.JSONDecodeError as e:
            bad = text.count("\n", 0, e.pos) + 1
            raise InputError(f"not JSON: {e.msg}", where=f"{path}:{bad}") from None
        if not isinstance(obj, dict):
            raise InputError(
                f"expected a JSON object (a benchmark result), got {type(obj).__name__}",
                where=f"{path}:{line}",
            )
        out.append((line, obj))
        i = end
    if not out:
        raise InputError("empty file: expected a benchmark result", where=path)
    return out


def notes(text: Any) -> dict[str, str]:
    """``"cached_tokens=2048,tier=host"`` (commas or spaces between) as a dict."""
    out: dict[str, str] = {}
    if not isinstance(text, str):
        return out
    for part in text.replace(",", " ").split():
        if "=" in part:
            k, v = part.split("=", 1)
            out[k.strip()] = v.strip()
    return out


def need(obj: Mapping[str, Any], key: str, where: str, what: str) -> Any:
    """``obj[key]``, or InputError saying the file is not ``what`` without it."""
    if key not in obj or obj[key] is None:
        raise InputError(f"no {key!r}: not {what}", where=where)
    return obj[key]


def per_request(total: Any, count: Any, where: str) -> float:
    """``total / count`` (a mean per request), InputError naming ``where``."""
    try:
        n, c = float(total), float(count)
    except (TypeError, ValueError):
        raise InputError(
            f"total_input_tokens and completed must be numbers, got {total!r}, {count!r}",
            where=where,
        ) from None
    if not c >= 1:
        raise InputError(f"completed: no request completed ({count!r})", where=where)
    return n / c


def milliseconds(value: Any) -> Any:
    """A TTFT in ms as seconds (a value that is not a number passes, for make_row)."""
    if isinstance(value, bool):
        return value
    try:
        return float(value) / 1e3
    except (TypeError, ValueError):
        return value
