"""The scenario's field types: unit-carrying numbers (``Bandwidth`` is bytes/s parsed from
"12 GB/s"), bounded counts, one-line labels, and :class:`Record`, the base of every config
record (immutable, unknown keys refused, every float finite)."""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Callable
from typing import Annotated, Any, get_args

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field

from kvsim.errors import UNSAFE_CATEGORIES
from kvsim.units import parse_bandwidth, parse_duration, parse_rate, parse_size


def _unit(parse: Callable[[object], float], unit: str) -> BeforeValidator:
    """A validator that parses unit strings; it carries the unit's kind for the tools that
    write scenarios back (kvsim.config.dump) and document them (kvsim.config.reference)."""

    def check(value: object) -> float:
        return parse(value)

    check.unit = unit  # type: ignore[attr-defined]
    return BeforeValidator(check)


def field_unit(annotation: Any, metadata: list[Any] | None = None) -> str | None:
    """The unit kind ("size", "bandwidth", "duration", "rate") of a field, or None."""
    for m in metadata or []:
        unit = getattr(getattr(m, "func", None), "unit", None)
        if unit:
            return unit
    for arg in get_args(annotation):
        found = field_unit(arg, list(getattr(arg, "__metadata__", ())))
        if found:
            return found
    return None


Size = Annotated[float, _unit(parse_size, "size"), Field(ge=0)]
PositiveSize = Annotated[float, _unit(parse_size, "size"), Field(gt=0)]
Bandwidth = Annotated[float, _unit(parse_bandwidth, "bandwidth"), Field(gt=0)]
Duration = Annotated[float, _unit(parse_duration, "duration"), Field(ge=0)]
PositiveDuration = Annotated[float, _unit(parse_duration, "duration"), Field(gt=0)]
Rate = Annotated[float, _unit(parse_rate, "rate"), Field(gt=0)]
_INFINITE = re.compile(r"\s*\+?\.?inf(inity)?\b", re.IGNORECASE)


def _arrival_rate(value: object) -> float:
    """An arrival rate; infinity is refused with what a bench_serving user means by it."""
    if (isinstance(value, float) and math.isinf(value)) or (
        isinstance(value, str) and _INFINITE.match(value)
    ):
        raise ValueError(
            "no infinite rate: to send every request as fast as workload.concurrency allows "
            "(bench_serving's --request-rate inf --max-concurrency N), write arrivals: "
            "{process: closed}"
        )
    return parse_rate(value)


ArrivalRate = Annotated[float, _unit(_arrival_rate, "rate"), Field(gt=0)]
PosInt = Annotated[int, Field(gt=0, strict=True)]


def Bounded(high: int) -> Any:
    """A positive integer with a sanity ceiling (a value past it is a typo, not a plan,
    and would otherwise run for days or exhaust memory)."""
    return Annotated[int, Field(gt=0, le=high, strict=True)]


def _one_line(text: str) -> str:
    """Text that reports print: one line, no control characters (an escape sequence in a
    scenario name would otherwise be run by the terminal of whoever reads the summary)."""
    text = text.strip()
    bad = next((c for c in text if unicodedata.category(c) in UNSAFE_CATEGORIES), None)
    if bad is not None:
        raise ValueError(
            f"must be one line of printable text; found the control character U+{ord(bad):04X}"
        )
    return text


def Label(max_length: int) -> Any:
    """One line of printable text of at most ``max_length`` characters."""
    return Annotated[str, Field(max_length=max_length), AfterValidator(_one_line)]


Tokens = Bounded(2**24)  # 16.7M tokens in one prompt or block
MAX_TENANTS = 65535  # a sanity ceiling on tenants
NonNegInt = Annotated[int, Field(ge=0, strict=True)]
Fraction = Annotated[float, Field(ge=0.0, le=1.0, allow_inf_nan=False)]


class Record(BaseModel):
    """Base of every config record: immutable, unknown keys refused, every float finite
    (a value that overflows to infinity, such as 1e999, is refused, never run)."""

    model_config = ConfigDict(
        extra="forbid", frozen=True, validate_default=True, allow_inf_nan=False
    )
