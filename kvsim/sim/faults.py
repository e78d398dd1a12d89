"""Scheduled faults: each is a SimPy process that applies the fault at ``at`` and undoes
it at ``until``. They are part of the scenario, so a run with faults is as reproducible
as one without.

- ``server_down``: the server's index is lost (with per-rank sharding every rank's shard
  is needed, so every block becomes unusable until it is stored again); transfers it is
  part of are aborted: GETs fall back to recompute, puts are dropped; it takes no writes
  until it is back, empty.
- ``slow_link``: the targeted links run at ``factor`` times their bandwidth; transfers in
  flight re-share at once.
- ``engine_down``: the engine loses its local tiers and the requests it held (in progress
  and queued), which are re-routed to engines that are up (or dropped); it comes back
  empty.
- ``stall_burst``: remote GETs stall with another probability and duration meanwhile.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any

import simpy

from kvsim.config.schema import EngineDown, Fault, ServerDown, SlowLink, StallBurst
from kvsim.kernel.fabric import FlowAborted, Link
from kvsim.sim.shared import Shared

Undo = Callable[[], None]


def schedule(sim: Shared) -> None:
    """Start one process per fault of the scenario."""
    for fault in sim.run.scenario.faults:
        sim.env.process(_run(sim, fault))


def _run(sim: Shared, fault: Fault) -> Generator[simpy.Event, Any, None]:
    env = sim.env
    yield env.timeout(fault.at)
    undo = APPLY[type(fault)](sim, fault)
    sim.fault_log.append({"kind": fault.kind, "at": env.now, "event": "start"})
    if fault.until is not None:
        yield env.timeout(fault.until - fault.at)
        undo()
        sim.fault_log.append({"kind": fault.kind, "at": env.now, "event": "end"})


def _server_down(sim: Shared, f: ServerDown) -> Undo:
    remote = sim.remote
    assert remote is not None
    links = [remote.links[f.server]]
    if remote.group is not None and remote.mirrored:
        links.append(remote.group)  # lockstep transfers touch every server
    ssd = remote.ssd
    if ssd is not None:  # its SSD's reads too (remote.ssd)
        links.append(ssd.links[f.server])
        if ssd.group is not None and remote.mirrored:
            links.append(ssd.group)
    remote.lose(f.server)
    remote.down.add(f.server)
    error = FlowAborted(f"remote server {f.server} went down")
    for link in links:
        for flow in sim.fabric.flows_on(link):
            sim.fabric.abort(flow, error)
    return lambda: remote.down.discard(f.server)


def _slow_link(sim: Shared, f: SlowLink) -> Undo:
    engines = sim.engines if f.engine is None else [sim.engines[f.engine]]
    links: list[Link] = []
    if f.target == "host":
        links = [e.h2d for e in engines]
    elif f.target == "nvme":
        links = [e.nvme for e in engines if e.nvme is not None]
    elif f.target == "network":
        links = [x for e in engines for x in (e.nic_in, e.nic_out)]
    else:
        remote = sim.remote
        assert remote is not None
        links = list(remote.links) if f.server is None else [remote.links[f.server]]
        if remote.group is not None:
            # in lockstep every transfer waits for its slowest server: a slow server slows
            # the group as a whole by the same factor
            links.append(remote.group)
    before = {link: link.bandwidth for link in links}
    for link, bw in before.items():
        sim.fabric.set_bandwidth(link, bw * f.factor)

    def undo() -> None:
        for link, bw in before.items():
            sim.fabric.set_bandwidth(link, bw)

    return undo


def _engine_down(sim: Shared, f: EngineDown) -> Undo:
    engine = sim.engines[f.engine]
    engine.failure_mode = f.requests
    held = engine.fail()
    sim.listener.engines_changed()  # route around it before its requests go elsewhere
    for job in held:
        sim.listener.displace(job, engine)

    def undo() -> None:
        engine.recover()
        sim.listener.engines_changed()

    return undo


def _stall_burst(sim: Shared, f: StallBurst) -> Undo:
    sim.stall_override = (f.probability, f.duration, f.distribution)

    def undo() -> None:
        sim.stall_override = None

    return undo


APPLY: dict[type, Callable[[Shared, Any], Undo]] = {
    ServerDown: _server_down,
    SlowLink: _slow_link,
    EngineDown: _engine_down,
    StallBurst: _stall_burst,
}
