"""Unit strings in, SI base units out: bytes, bytes/s, seconds, events/s.

Inside kvsim every quantity is a float in a base unit. Scenario files may write
"2 TiB", "10.76 GB/s", "800 Gb/s" (bits), "330 ms" or "5/s"; these pure functions turn
such strings into floats and refuse anything else with a message that says what a valid
value looks like. A bare number is refused too: a unit-less "12" for a bandwidth is the
kind of mistake that silently costs a factor of a billion.
"""

from __future__ import annotations

import math
import re

_SIZE_UNITS: dict[str, float] = {
    "B": 1.0,
    "kB": 1e3,
    "KB": 1e3,
    "MB": 1e6,
    "GB": 1e9,
    "TB": 1e12,
    "PB": 1e15,
    "KiB": 2.0**10,
    "MiB": 2.0**20,
    "GiB": 2.0**30,
    "TiB": 2.0**40,
    "PiB": 2.0**50,
    # bits (network gear is sold in bits per second)
    "b": 1 / 8,
    "kb": 1e3 / 8,
    "Kb": 1e3 / 8,
    "Mb": 1e6 / 8,
    "Gb": 1e9 / 8,
    "Tb": 1e12 / 8,
}

_TIME_UNITS: dict[str, float] = {
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "min": 60.0,
    "h": 3600.0,
}

_NUMBER_UNIT = re.compile(r"^\s*([-+]?(?:\d[\d_]*\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*(.*?)\s*$")

SIZE_EXAMPLE = '"2 TiB" or "51168 B"'
BANDWIDTH_EXAMPLE = '"12 GB/s", "1.71 GiB/s" or "800 Gb/s"'
DURATION_EXAMPLE = '"330 ms" or "5 s"'
RATE_EXAMPLE = '"5/s" or "300/min"'


def _split(value: object, what: str, example: str) -> tuple[float, str]:
    """Split "10.76 GB/s" into (10.76, "GB/s"); refuse bare numbers and non-finite values."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise ValueError(f"expected a {what} such as {example}, got {value!r}")
    if isinstance(value, (int, float)):
        raise ValueError(f"missing unit: expected a {what} such as {example}, got {value!r}")
    m = _NUMBER_UNIT.match(value)
    if not m:
        raise ValueError(f"expected a {what} such as {example}, got {value!r}")
    number = float(m.group(1))
    if not math.isfinite(number):  # pragma: no cover - the regex admits only finite numbers
        raise ValueError(f"expected a finite {what}, got {value!r}")
    unit = m.group(2)
    if not unit:
        raise ValueError(f"missing unit: expected a {what} such as {example}, got {value!r}")
    return number, unit


def _unknown(unit: str, what: str, example: str, choices: dict[str, float]) -> ValueError:
    hint = ""
    lowered = {u.lower(): u for u in choices}
    if unit.lower() in lowered and lowered[unit.lower()] != unit:
        hint = f" (units are case-sensitive: did you mean {lowered[unit.lower()]!r}?)"
    return ValueError(f"unknown {what} unit {unit!r}{hint}; expected a {what} such as {example}")


def parse_size(value: object) -> float:
    """Bytes from a size string such as "2 TiB", "51168 B" or "1.5 TB"."""
    number, unit = _split(value, "size", SIZE_EXAMPLE)
    if unit not in _SIZE_UNITS:
        raise _unknown(unit, "size", SIZE_EXAMPLE, _SIZE_UNITS)
    return number * _SIZE_UNITS[unit]


def parse_bandwidth(value: object) -> float:
    """Bytes per second from "12 GB/s", "1.71 GiB/s", "800 Gb/s" or "100 Gbps"."""
    number, unit = _split(value, "bandwidth", BANDWIDTH_EXAMPLE)
    unit = unit.replace(" ", "")
    if unit.endswith("/s"):
        base = unit[:-2].strip()
    elif unit.endswith("ps") and unit[:-2] in _SIZE_UNITS:
        base = unit[:-2]
    else:
        raise ValueError(
            f"unknown bandwidth unit {unit!r}; expected a bandwidth such as {BANDWIDTH_EXAMPLE}"
        )
    if base not in _SIZE_UNITS:
        raise _unknown(base, "bandwidth", BANDWIDTH_EXAMPLE, _SIZE_UNITS)
    return number * _SIZE_UNITS[base]


def parse_duration(value: object) -> float:
    """Seconds from "330 ms", "5 s", "2 min" or "80 us"."""
    number, unit = _split(value, "duration", DURATION_EXAMPLE)
    if unit not in _TIME_UNITS:
        raise _unknown(unit, "duration", DURATION_EXAMPLE, _TIME_UNITS)
    return number * _TIME_UNITS[unit]


def parse_rate(value: object) -> float:
    """Events per second from "5/s", "5 req/s", "300/min" or "10/h"."""
    number, unit = _split(value, "rate", RATE_EXAMPLE)
    unit = unit.replace(" ", "")
    for prefix in ("req", "requests", "sessions"):
        if unit.startswith(prefix + "/"):
            unit = unit[len(prefix) :]
    if not unit.startswith("/") or unit[1:] not in _TIME_UNITS:
        raise ValueError(f"unknown rate unit {unit!r}; expected a rate such as {RATE_EXAMPLE}")
    return number / _TIME_UNITS[unit[1:]]


def fmt_bytes(n: float) -> str:
    """Human-readable decimal size: 838.9 MB."""
    for unit, scale in (("PB", 1e15), ("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:.4g} {unit}"
    return f"{n:.0f} B"


def fmt_bandwidth(bps: float) -> str:
    """Human-readable bandwidth in decimal GB/s (the paper's GiB/s are converted on input)."""
    return f"{bps / 1e9:.4g} GB/s"


def fmt_duration(s: float) -> str:
    """Human-readable duration: 312 ms, 17.3 s."""
    if not math.isfinite(s):
        return str(s)
    if abs(s) < 1.0:
        return f"{s * 1e3:.3g} ms"
    return f"{s:.4g} s"
