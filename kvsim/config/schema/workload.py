"""Where requests come from: trace workloads (Mooncake, Azure) and synthetic ones, with
their length distributions, arrival processes, sessions, documents and tenants."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from kvsim.config.schema.fields import (
    MAX_TENANTS,
    ArrivalRate,
    Bounded,
    Duration,
    Fraction,
    PosInt,
    PositiveDuration,
    Record,
    Tokens,
)


class FixedDist(Record):
    dist: Literal["fixed"]
    value: Tokens = Field(description="every draw")


class UniformDist(Record):
    dist: Literal["uniform"]
    low: Tokens = Field(description="smallest draw")
    high: Tokens = Field(description="largest draw")


class LogNormalDist(Record):
    dist: Literal["lognormal"]
    median: Annotated[float, Field(gt=0, allow_inf_nan=False)] = Field(description="median")
    sigma: Annotated[float, Field(ge=0, allow_inf_nan=False)] = Field(
        description="standard deviation of the log"
    )
    min: PosInt = Field(1, description="draws are clipped to [min, max]")
    max: Tokens = Field(1_000_000, description="draws are clipped to [min, max]")


class GeometricDist(Record):
    dist: Literal["geometric"]
    mean: Annotated[float, Field(ge=1, le=1e6, allow_inf_nan=False)] = Field(
        description="mean of a geometric draw on 1, 2, ..."
    )


class ChoiceDist(Record):
    dist: Literal["choice"]
    values: list[Tokens] = Field(min_length=1, description="the possible draws")
    weights: list[Annotated[float, Field(ge=0, allow_inf_nan=False)]] | None = Field(
        None, description="relative weights (default: equal)"
    )


IntDist = Annotated[
    FixedDist | UniformDist | LogNormalDist | GeometricDist | ChoiceDist,
    Field(discriminator="dist"),
]


class PoissonArrivals(Record):
    process: Literal["poisson"]
    rate: ArrivalRate = Field(description="mean arrivals per second")


class ConstantArrivals(Record):
    process: Literal["constant"]
    rate: ArrivalRate = Field(description="arrivals per second, evenly spaced")


class BurstyArrivals(Record):
    """Gamma renewal process: mean rate ``rate``, inter-arrival coefficient of variation ``cv``."""

    process: Literal["bursty"]
    rate: ArrivalRate = Field(description="mean arrivals per second")
    cv: Annotated[float, Field(gt=0, allow_inf_nan=False)] = Field(
        3.0, description="coefficient of variation of the gaps (1 = Poisson)"
    )


class ClosedArrivals(Record):
    """As fast as ``workload.concurrency`` allows (bench_serving's ``--request-rate inf
    --max-concurrency N``): every request is due at t = 0, in order, and is sent when one
    of the N in flight finishes."""

    process: Literal["closed"]


Arrivals = Annotated[
    PoissonArrivals | ConstantArrivals | BurstyArrivals | ClosedArrivals,
    Field(discriminator="process"),
]


class SystemPrompts(Record):
    """Shared system prompts: a fraction of sessions starts with one of ``count`` prompts."""

    count: Bounded(1_000_000) = Field(description="distinct system prompts (equally popular)")
    tokens: Tokens = Field(description="length of each")
    share: Fraction = Field(1.0, description="fraction of sessions that use one")


class Documents(Record):
    """Shared documents: each first turn starts with ``fraction`` of its prompt from one."""

    count: Bounded(1_000_000) = Field(description="distinct documents")
    fraction: Fraction = Field(description="share of a first turn's new tokens from the document")
    share: Fraction = Field(1.0, description="fraction of sessions that start with a document")
    popularity: Literal["uniform", "zipf"] = Field("uniform", description="document popularity")
    zipf_s: Annotated[float, Field(gt=0, allow_inf_nan=False)] = Field(
        1.0, description="Zipf exponent when popularity is zipf"
    )


class Tenants(Record):
    """Each session belongs to one of ``count`` tenants (drawn by ``weights``)."""

    count: Bounded(MAX_TENANTS) = Field(description="number of tenants")
    weights: list[Annotated[float, Field(ge=0, allow_inf_nan=False)]] | None = Field(
        None, description="relative share of sessions per tenant (default: equal)"
    )


class Sessions(Record):
    """Multi-turn sessions: each turn's prompt is the previous prompt + answer + new text."""

    turns: IntDist = Field(description="turns per session")
    think_time: Duration = Field("30 s", description="mean gap between turns (exponential)")


class Window(Record):
    start: Duration = Field("0 s", description="first source time kept (the new zero)")
    end: Duration | None = Field(None, description="source time where the replay stops")


MAX_CONCURRENCY = 10_000_000  # as many as workload.requests may be


class _Common(Record):
    time_scale: Annotated[float, Field(gt=0, allow_inf_nan=False)] = Field(
        1.0, description="multiply arrival times (0.5 = twice as fast)"
    )
    limit: PosInt | None = Field(None, description="keep at most this many requests")
    window: Window = Field(Window(), description="keep arrivals in [start, end) of the source")
    concurrency: Bounded(MAX_CONCURRENCY) | None = Field(
        None,
        description="most requests in flight (closed-loop clients, as bench_serving's "
        "--max-concurrency): a request due while this many are unfinished waits, in order, "
        "until one finishes or is dropped, and is sent then (its arrival_s, and so its TTFT, "
        "count from the send); null: open loop, every request sent when due",
    )


class _Trace(_Common):
    resample: Literal["auto", "none", "windows", "sessions"] = Field(
        "auto",
        description="sessions: replay a bootstrap of the trace drawn by the seed (whole "
        "sessions, or prefix chains where the trace has no session ids, drawn with "
        "replacement and laid at the trace's session start times; keeps prefix reuse); "
        "windows: its span cut into 40 windows, as many drawn with replacement (cuts reuse "
        "across window edges); none: the trace as it is; auto: sessions when a sweep, "
        "capacity search or baseline runs several seeds (so replications differ), none in "
        "a single run",
    )


class MooncakeWorkload(_Trace):
    kind: Literal["mooncake"]
    path: str = Field(description="Mooncake JSONL trace (relative to the scenario file)")
    block_tokens: Tokens = Field(512, description="tokens per hash_ids block")
    bucket_spread: PositiveDuration | None = Field(
        None, description="spread requests sharing a timestamp evenly over this interval"
    )


class AzureWorkload(_Trace):
    kind: Literal["azure"]
    path: str = Field(description="Azure LLM inference CSV (relative to the scenario file)")
    block_tokens: Tokens = Field(512, description="tokens per (generated, unique) block")


class SyntheticWorkload(_Common):
    kind: Literal["synthetic"]
    # 10 million: the generator draws every arrival up front (at most ~120 bytes a
    # request, ~1.1 GB at the bound); 100 million needed over 8 GB: a MemoryError
    requests: Bounded(10_000_000) = Field(description="requests to generate")
    block_tokens: Tokens = Field(512, description="tokens per hash block (cache granularity)")
    arrivals: Arrivals = Field(
        description="arrival process of sessions; closed: every request due at t = 0 and "
        "sent as fast as workload.concurrency allows (bench_serving's --request-rate inf), "
        "without sessions"
    )
    prompt_tokens: IntDist = Field(description="new prompt tokens per turn")
    output_tokens: IntDist = Field(
        FixedDist(dist="fixed", value=256),
        description="answer tokens per turn (they join the history)",
    )
    system_prompts: SystemPrompts | None = Field(None, description="shared system prompts")
    documents: Documents | None = Field(None, description="shared document prefixes")
    sessions: Sessions | None = Field(None, description="multi-turn sessions (default: 1 turn)")
    prestored: bool = Field(
        False,
        description="the remote store holds every system prompt and document prefix at t = 0 "
        "(a long-running system); needs the remote tier",
    )
    tenants: Tenants | None = Field(None, description="sessions belong to tenants")


Workload = Annotated[
    MooncakeWorkload | AzureWorkload | SyntheticWorkload, Field(discriminator="kind")
]
