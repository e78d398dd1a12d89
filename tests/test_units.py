"""Unit strings: accepted forms, base-unit values, and the refusals users will meet."""

import math

import pytest

from kvsim.units import parse_bandwidth, parse_duration, parse_rate, parse_size


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("2 TiB", 2 * 2**40),
        ("51168 B", 51168),
        ("1.5 TB", 1.5e12),
        ("288 GB", 288e9),
        ("0 B", 0.0),
        ("1e3 kB", 1e6),
        ("4 MiB", 4 * 2**20),
    ],
)
def test_sizes(text, value):
    assert parse_size(text) == pytest.approx(value)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("10.76 GB/s", 10.76e9),
        ("1.71 GiB/s", 1.71 * 2**30),
        ("800 Gb/s", 100e9),
        ("100 Gbps", 12.5e9),
        ("12 GBps", 12e9),
        ("50 GB / s", 50e9),
    ],
)
def test_bandwidths(text, value):
    assert parse_bandwidth(text) == pytest.approx(value)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("330 ms", 0.33),
        ("5 s", 5.0),
        ("80 us", 80e-6),
        ("80 µs", 80e-6),
        ("2 min", 120.0),
        ("1 h", 3600.0),
        ("-1 s", -1.0),
    ],
)
def test_durations(text, value):
    assert parse_duration(text) == pytest.approx(value)


@pytest.mark.parametrize(
    ("text", "value"), [("5/s", 5.0), ("300/min", 5.0), ("2 req/s", 2.0), ("36 / h", 0.01)]
)
def test_rates(text, value):
    assert parse_rate(text) == pytest.approx(value)


@pytest.mark.parametrize(
    ("parse", "text", "fragment"),
    [
        (parse_size, 12, "missing unit"),
        (parse_size, "12", "missing unit"),
        (parse_size, "fast", "expected a size"),
        (parse_size, "2 TiBs", "unknown size unit"),
        (parse_size, "nan GB", "expected a size"),
        (parse_bandwidth, "12 GB", "unknown bandwidth unit"),
        (parse_bandwidth, "10 gb/s", "case-sensitive"),
        (parse_duration, "3 sec", "unknown duration unit"),
        (parse_duration, True, "expected a duration"),
        (parse_rate, "5", "missing unit"),
        (parse_rate, "5/fortnight", "unknown rate unit"),
    ],
)
def test_refusals(parse, text, fragment):
    with pytest.raises(ValueError, match=fragment):
        parse(text)


def test_infinity_is_refused():
    with pytest.raises(ValueError):
        parse_size("inf GB")
    assert math.isfinite(parse_size("1e300 B"))
