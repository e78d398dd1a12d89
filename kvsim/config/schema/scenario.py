"""The scenario: :class:`Scenario`, everything one simulation run needs, validated and
immutable; and the order in which its enabled tiers are looked up."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from kvsim.config.schema.cluster import Cluster, Engine, Prefetch
from kvsim.config.schema.faults import Fault, Tenancy
from kvsim.config.schema.fields import Label, Record
from kvsim.config.schema.hardware import Model, Node, Timing
from kvsim.config.schema.run import Cost, ProfileSpec, Run
from kvsim.config.schema.tiers import Remote, Tiers
from kvsim.config.schema.workload import Workload


class Scenario(Record):
    """Everything one simulation run needs, validated and immutable."""

    name: Label(200) = Field(description="scenario name, stamped on every result")
    description: Label(2000) = Field("", description="one line for humans")
    profile: Label(4096) | ProfileSpec = Field(
        "b300-pcp8-glm5",
        description="profile name (`kvsim profiles`), a profile YAML path, or a composition "
        "{model, gpu, gpus, tp, pcp, ep} from the catalogue",
    )
    seed: Annotated[int, Field(ge=0, strict=True)] = Field(
        0, description="seed of every random stream (arrivals, lengths, stalls...)"
    )
    plugins: list[Label(4096)] = Field(
        [],
        description="modules (or .py files, relative to the scenario) whose policies the "
        "scenario may name (docs/extending.md)",
    )
    node: Node = Field(description="the engine's hardware (from the profile)")
    model: Model = Field(description="the served model (from the profile)")
    timing: Timing = Field(description="prefill step-time model or table (from the profile)")
    tiers: Tiers = Field(description="GPU, host and NVMe tiers per engine")
    remote: Remote = Field(description="the remote store shared by all engines")
    cluster: Cluster = Field(Cluster(), description="engines, routing, load policy")
    engine: Engine = Field(Engine(), description="how each engine batches and schedules")
    prefetch: Prefetch = Field(
        Prefetch(), description="fetching KV from NVMe or remote into host ahead of use"
    )
    workload: Workload = Field(
        description="where requests come from (kind: mooncake | azure | synthetic)"
    )
    run: Run = Field(Run(), description="warm-up and time limit")
    cost: Cost | None = Field(None, description="prices for the cost summary (null: none)")
    faults: list[Fault] = Field([], description="scheduled faults (times and targets)")
    tenancy: Tenancy = Field(Tenancy(), description="tenant isolation, quotas, deletion")
    source: str | None = Field(None, description="file the scenario was loaded from")


def lookup_order(sc: Scenario) -> list[str]:
    """The tiers a lookup walks, first to last (only those enabled): gpu, host, nvme,
    peer, remote (with its kind). Each block comes from the first tier holding it."""
    t = sc.tiers
    order = ["gpu"]
    if t.host.enabled:
        order.append("host")
    if t.nvme.enabled:
        order.append("nvme")
    if t.peer.enabled:
        order.append("peer")
    if sc.remote.enabled:
        ssd = ", its SSD below its DRAM" if sc.remote.ssd.enabled else ""
        order.append(f"remote ({sc.remote.kind}{ssd})")
    return order
