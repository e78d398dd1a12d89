"""Scheduled faults (a server down, a slow link, an engine down, a stall burst) and
tenancy (isolation, quotas, ttl, deletions)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from kvsim.config.schema.fields import Duration, Fraction, NonNegInt, PositiveDuration, Record, Size


class _Fault(Record):
    at: Duration = Field(description="when the fault starts")
    until: Duration | None = Field(None, description="when it ends (null: never)")


class ServerDown(_Fault):
    """A remote server is lost: its index is gone, transfers to it fail; it comes back
    empty at ``until``."""

    kind: Literal["server_down"]
    server: NonNegInt = Field(description="server index")


class SlowLink(_Fault):
    """Links run at ``factor`` times their bandwidth for a while (congestion)."""

    kind: Literal["slow_link"]
    target: Literal["host", "nvme", "network", "remote"] = Field(
        description="host: PCIe host-to-GPU; nvme: drives; network: NICs; remote: servers"
    )
    factor: Annotated[float, Field(gt=0, allow_inf_nan=False)] = Field(
        description="bandwidth multiplier, e.g. 0.25"
    )
    engine: NonNegInt | None = Field(None, description="host/nvme/network: one engine (null: all)")
    server: NonNegInt | None = Field(None, description="remote: one server (null: all)")


class EngineDown(_Fault):
    """An engine fails: its work in progress is lost; its queued and running requests are
    re-routed to the other engines (or dropped). It comes back empty at ``until``."""

    kind: Literal["engine_down"]
    engine: NonNegInt = Field(description="engine index")
    requests: Literal["reroute", "drop"] = Field(
        "reroute", description="what happens to the requests it held"
    )


class StallBurst(_Fault):
    """A window in which remote GETs stall more (overrides remote.stall meanwhile)."""

    kind: Literal["stall_burst"]
    probability: Fraction = Field(description="chance that a GET stalls")
    duration: Duration = Field(description="stall length (the mean if exponential)")
    distribution: Literal["fixed", "exponential"] = "exponential"


Fault = Annotated[ServerDown | SlowLink | EngineDown | StallBurst, Field(discriminator="kind")]


# ---- tenancy ------------------------------------------------------------------------


class Deletion(Record):
    tenant: NonNegInt = Field(description="tenant whose blocks are deleted")
    at: Duration = Field(description="when")


class Tenancy(Record):
    """Whose prompt state is where, who can hit it, and when it is deleted."""

    isolation: Literal["tenant", "none"] = Field(
        "tenant", description="tenant: cache keys are namespaced by tenant; none: one cache"
    )
    shared_prefixes: bool = Field(
        False,
        description="opt in: a request's public prefix (a shared system prompt) is shared "
        "across tenants; anyone who sends the same prefix learns that it is cached",
    )
    quota: dict[Literal["gpu", "host", "nvme", "remote"], Size] = Field(
        {}, description="per tenant and tier: bytes a tenant may hold (per engine / server)"
    )
    ttl: PositiveDuration | None = Field(
        None, description="delete blocks not used for this long (>= 1 s), from every tier"
    )
    delete_on_session_end: bool = Field(
        False, description="delete a session's own blocks when its last turn finishes"
    )
    deletions: list[Deletion] = Field([], description="delete all of a tenant's blocks at a time")
