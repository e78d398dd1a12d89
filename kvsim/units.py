"""Unit strings in, SI base units out: bytes, bytes/s, seconds, events/s.

Inside kvsim every quantity is a float in a base unit. Scenario files may write
"2 TiB", "10.76 GB/s", "800 Gb/s" (bits, for bandwidths only), "330 ms" or "5/s"; these
pure functions turn such strings into floats and refuse anything else with a message that
says what a valid value looks like. A bare number is refused too: a unit-less "12" for a
bandwidth is the kind of mistake that silently costs a factor of a billion. The ``fmt_*``
functions write base-unit numbers back as unit strings that parse to the same float.
"""

from __future__ import annotations

import math
import re

from kvsim.errors import shown

# unit -> (multiplier, divisor): value = number * multiplier / divisor, so that "80 us"
# is exactly 80 / 1e6 and sub-unit scales add no rounding noise
_BYTE_UNITS: dict[str, tuple[float, float]] = {
    "B": (1.0, 1.0),
    "kB": (1e3, 1.0),
    "KB": (1e3, 1.0),
    "MB": (1e6, 1.0),
    "GB": (1e9, 1.0),
    "TB": (1e12, 1.0),
    "PB": (1e15, 1.0),
    "EB": (1e18, 1.0),
    "KiB": (2.0**10, 1.0),
    "MiB": (2.0**20, 1.0),
    "GiB": (2.0**30, 1.0),
    "TiB": (2.0**40, 1.0),
    "PiB": (2.0**50, 1.0),
}
# bits: network gear is sold in bits per second, so bandwidths may use them; sizes may not
_BIT_UNITS: dict[str, tuple[float, float]] = {
    "b": (1.0, 8.0),
    "kb": (1e3, 8.0),
    "Kb": (1e3, 8.0),
    "Mb": (1e6, 8.0),
    "Gb": (1e9, 8.0),
    "Tb": (1e12, 8.0),
}
_RATE_BASE_UNITS = {**_BYTE_UNITS, **_BIT_UNITS}
_TIME_UNITS: dict[str, tuple[float, float]] = {
    "ns": (1.0, 1e9),
    "us": (1.0, 1e6),
    "µs": (1.0, 1e6),
    "ms": (1.0, 1e3),
    "s": (1.0, 1.0),
    "min": (60.0, 1.0),
    "h": (3600.0, 1.0),
}

# applied to stripped text, with no lazy group before a trailing \s* (that backtracked
# quadratically on long runs of spaces)
_NUMBER_UNIT = re.compile(r"([-+]?(?:\d[\d_]*\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*(.*)")

SIZE_EXAMPLE = '"2 TiB" or "51168 B"'
BANDWIDTH_EXAMPLE = '"12 GB/s", "1.71 GiB/s" or "800 Gb/s"'
DURATION_EXAMPLE = '"330 ms" or "5 s"'
RATE_EXAMPLE = '"5/s" or "300/min"'


def _split(value: object, what: str, example: str) -> tuple[float, str]:
    """Split "10.76 GB/s" into (10.76, "GB/s"); refuse bare numbers and non-finite values."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise ValueError(f"expected a {what} such as {example}, got {shown(value)}")
    if isinstance(value, (int, float)):
        raise ValueError(f"missing unit: expected a {what} such as {example}, got {shown(value)}")
    m = _NUMBER_UNIT.fullmatch(value.strip())
    if not m:
        raise ValueError(f"expected a {what} such as {example}, got {shown(value)}")
    number = float(m.group(1))
    if not math.isfinite(number):  # digits beyond a float's range, e.g. 1e999
        raise ValueError(f"expected a finite {what}, got {shown(value)}")
    unit = m.group(2)
    if not unit:
        raise ValueError(f"missing unit: expected a {what} such as {example}, got {shown(value)}")
    return number, unit


def _finite(result: float, value: object, what: str) -> float:
    """Refuse a value whose number is finite but overflows once scaled (1e300 EB)."""
    if not math.isfinite(result):
        raise ValueError(f"{what} {shown(value)} is too large to represent")
    return result


def _apply(number: float, scale: tuple[float, float]) -> float:
    mul, div = scale
    return number * mul / div if div != 1.0 else number * mul


def _unknown(
    unit: str, what: str, example: str, choices: dict[str, tuple[float, float]], suffix: str = ""
) -> ValueError:
    near = [u for u in choices if u.lower() == unit.lower() and u != unit]
    hint = ""
    if what == "size" and unit in _BIT_UNITS:
        hint = f" (sizes are in bytes: did you mean {unit[:-1] + 'B'!r}?)"
    elif near:
        named = [
            f"{u + suffix!r} ({'bits' if u in _BIT_UNITS else 'bytes'})"
            if u in _BIT_UNITS or len(near) > 1
            else repr(u + suffix)
            for u in near
        ]
        hint = f" (units are case-sensitive: did you mean {' or '.join(named)}?)"
    return ValueError(
        f"unknown {what} unit {shown(unit + suffix)}{hint}; expected a {what} such as {example}"
    )


def parse_size(value: object) -> float:
    """Bytes from a size string such as "2 TiB", "51168 B" or "1.5 TB"."""
    number, unit = _split(value, "size", SIZE_EXAMPLE)
    if unit not in _BYTE_UNITS:
        raise _unknown(unit, "size", SIZE_EXAMPLE, _BYTE_UNITS)
    return _finite(_apply(number, _BYTE_UNITS[unit]), value, "size")


def parse_bandwidth(value: object) -> float:
    """Bytes per second from "12 GB/s", "1.71 GiB/s", "800 Gb/s" or "100 Gbps"."""
    number, unit = _split(value, "bandwidth", BANDWIDTH_EXAMPLE)
    unit = unit.replace(" ", "")
    if unit.endswith("/s"):
        base, suffix = unit[:-2], "/s"
    elif unit.lower().endswith("ps"):
        base, suffix = unit[:-2], "ps"
    else:
        raise ValueError(
            f"unknown bandwidth unit {shown(unit)}; "
            f"expected a bandwidth such as {BANDWIDTH_EXAMPLE}"
        )
    if base not in _RATE_BASE_UNITS:
        raise _unknown(base, "bandwidth", BANDWIDTH_EXAMPLE, _RATE_BASE_UNITS, suffix)
    return _finite(_apply(number, _RATE_BASE_UNITS[base]), value, "bandwidth")


def parse_duration(value: object) -> float:
    """Seconds from "330 ms", "5 s", "2 min" or "80 us"."""
    number, unit = _split(value, "duration", DURATION_EXAMPLE)
    if unit not in _TIME_UNITS:
        raise _unknown(unit, "duration", DURATION_EXAMPLE, _TIME_UNITS)
    return _finite(_apply(number, _TIME_UNITS[unit]), value, "duration")


def parse_rate(value: object) -> float:
    """Events per second from "5/s", "5 req/s", "300/min" or "10/h"."""
    number, unit = _split(value, "rate", RATE_EXAMPLE)
    unit = unit.replace(" ", "")
    for prefix in ("req", "requests", "sessions", "tokens"):
        if unit.startswith(prefix + "/"):
            unit = unit[len(prefix) :]
    if not unit.startswith("/") or unit[1:] not in _TIME_UNITS:
        raise ValueError(f"unknown rate unit {shown(unit)}; expected a rate such as {RATE_EXAMPLE}")
    mul, div = _TIME_UNITS[unit[1:]]
    return _finite(number * div / mul, value, "rate")


# ---- writing base-unit numbers back (exact: repr round-trips a float) ------------------

UNIT_WRITERS = {
    "size": lambda v: f"{v!r} B",
    "bandwidth": lambda v: f"{v!r} B/s",
    "duration": lambda v: f"{v!r} s",
    "rate": lambda v: f"{v!r}/s",
}


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
    """Human-readable duration to three or four significant digits: 312 ms, 17.3 s,
    41.2 µs, 7 ns (never a misleading "0 ms" for a small nonzero time)."""
    if not math.isfinite(s):
        return str(s)
    a = float(f"{abs(s):.3g}")  # the unit of the rounded value: 999.9 µs is 1 ms
    if a == 0.0:
        return "0 s"
    if a < 1e-6:
        return f"{s * 1e9:.3g} ns"
    if a < 1e-3:
        return f"{s * 1e6:.3g} µs"
    if a < 1.0:
        return f"{s * 1e3:.3g} ms"
    return f"{s:.4g} s"
