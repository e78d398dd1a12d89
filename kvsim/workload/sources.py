"""A scenario's workload as a request stream: its source by kind, and the shaping they share.

This module owns ``SOURCES`` (``workload.kind`` -> the reader or generator: Mooncake and
Azure traces, the synthetic generator), :func:`shape` (the time window, ``time_scale``,
``limit``; every arrival checked) and :func:`open_workload`, which applies them and then,
for a trace that asks for it, a resample (:mod:`kvsim.workload.resample`).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator

from kvsim.config.schema import AzureWorkload, MooncakeWorkload, SyntheticWorkload, Workload
from kvsim.errors import InputError
from kvsim.workload.azure import read_azure
from kvsim.workload.mooncake import read_mooncake
from kvsim.workload.request import MAX_ARRIVAL_S, Request
from kvsim.workload.resample import resampled
from kvsim.workload.synthetic import generate


def _mooncake(cfg: MooncakeWorkload, seed: int) -> Iterator[Request]:
    return read_mooncake(cfg.path, cfg.block_tokens, cfg.bucket_spread)


def _azure(cfg: AzureWorkload, seed: int) -> Iterator[Request]:
    return read_azure(cfg.path, cfg.block_tokens)


def _synthetic(cfg: SyntheticWorkload, seed: int) -> Iterator[Request]:
    return generate(cfg, seed)


SOURCES: dict[str, Callable[..., Iterator[Request]]] = {
    "mooncake": _mooncake,
    "azure": _azure,
    "synthetic": _synthetic,
}


def shape(
    requests: Iterable[Request],
    *,
    time_scale: float = 1.0,
    limit: int | None = None,
    start: float = 0.0,
    end: float | None = None,
) -> Iterator[Request]:
    """Keep arrivals in [start, end), rebase them to ``start``, scale, and stop at ``limit``."""
    out: Iterable[Request] = requests
    if start > 0:
        out = itertools.dropwhile(lambda r: r.arrival < start, out)
    if end is not None:
        out = itertools.takewhile(lambda r: r.arrival < end, out)
    out = _retimed(out, start, time_scale)  # also checks every arrival, retimed or not
    if limit is not None:
        out = itertools.islice(out, limit)
    return iter(out)


def _retimed(requests: Iterable[Request], start: float, time_scale: float) -> Iterator[Request]:
    """Each request with only its arrival moved: ``_replace`` copies every other field, so a
    field added to Request later is kept too (rebuilding the tuple once dropped tenants).
    Every arrival is checked against MAX_ARRIVAL_S here, whatever made it that late (a time
    scale, a bucket spread, a generator's rate), so no source can skip the check."""
    retime = start != 0 or time_scale != 1.0
    for r in requests:
        t = (r.arrival - start) * time_scale if retime else r.arrival
        if not t <= MAX_ARRIVAL_S:  # also NaN and inf
            shaped = (
                f"becomes {t:g} s after shaping"
                if retime
                else "is too late (a bucket_spread or arrival rate?)"
            )
            raise InputError(
                f"request {r.id}: arrival {r.arrival:g} s {shaped}; kvsim keeps arrival times "
                f"below {MAX_ARRIVAL_S:g} s (136 years)",
                where="workload.time_scale" if retime else "workload",
            )
        yield r._replace(arrival=t) if retime else r


def open_workload(cfg: Workload, seed: int) -> Iterator[Request]:
    """The shaped request stream a scenario's workload describes (for a trace with
    ``resample: sessions`` or ``windows``, a bootstrap of it drawn by ``seed``)."""
    source = SOURCES[cfg.kind](cfg, seed)
    shaped = shape(
        source,
        time_scale=cfg.time_scale,
        limit=cfg.limit,
        start=cfg.window.start,
        end=cfg.window.end,
    )
    # a trace cut at `limit` requests keeps that many (a draw holds about as many)
    return resampled(shaped, getattr(cfg, "resample", "none"), seed, cfg.limit is not None)
