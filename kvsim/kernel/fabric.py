"""Links with latency and bandwidth, shared fairly by concurrent flows (fluid model).

A flow moves ``size`` bytes over a path of links. It first waits the path's latency (plus
any extra ``delay``, e.g. a stall), then transfers at a rate set by max-min fairness over
all flows in flight (progressive filling): every flow's rate rises together until some link
is full; flows on a full link are frozen; the rest keep rising. A lone flow therefore gets
the bandwidth of its slowest link, and two equal flows on one link take twice as long.

A flow may weigh more on one link than its payload, ``cost`` bytes of link work per payload
byte: a server with a per-operation overhead is such a link (``cost = 1 + ops*overhead*bw /
size``). Rates are recomputed only when a flow starts, ends or is cancelled; one SimPy timer
stands for the next completion, and stale timers are ignored.

Invariant: a link never carries more than its bandwidth (sum of rate x cost <= bandwidth).
"""

from __future__ import annotations

from collections.abc import Sequence

import simpy

_REL_EPS = 1e-9


class Link:
    """A shared resource with a bandwidth (bytes/s) and a latency (s)."""

    __slots__ = (
        "_busy_since",
        "bandwidth",
        "busy_time",
        "bytes",
        "flows",
        "latency",
        "load",
        "name",
    )

    def __init__(self, name: str, bandwidth: float, latency: float = 0.0) -> None:
        if not bandwidth > 0:
            raise ValueError(f"link {name}: bandwidth must be > 0, got {bandwidth}")
        if latency < 0:
            raise ValueError(f"link {name}: latency must be >= 0, got {latency}")
        self.name = name
        self.bandwidth = float(bandwidth)
        self.latency = float(latency)
        self.flows = 0  # flows transferring now
        self.load = 0.0  # sum of their costs on this link
        self.bytes = 0.0  # payload carried (finished flows, and the moved part of cancelled ones)
        self.busy_time = 0.0  # time with at least one flow
        self._busy_since = 0.0

    def __repr__(self) -> str:
        return f"Link({self.name!r}, {self.bandwidth:.4g} B/s, {self.flows} flows)"


class Flow:
    """One transfer; ``done`` succeeds (value: the flow) when its last byte arrives."""

    __slots__ = (
        "costs",
        "done",
        "end",
        "links",
        "rate",
        "remaining",
        "size",
        "start",
        "state",
        "tag",
    )

    def __init__(
        self,
        links: tuple[Link, ...],
        costs: tuple[float, ...],
        size: float,
        done: simpy.Event,
        tag: object,
    ) -> None:
        self.links = links
        self.costs = costs
        self.size = size
        self.remaining = size
        self.rate = 0.0
        self.done = done
        self.tag = tag
        self.state = "waiting"  # waiting -> active -> finished | cancelled
        self.start = float("nan")
        self.end = float("nan")


class Fabric:
    """All links of one simulation and the flows on them."""

    def __init__(self, env: simpy.Environment) -> None:
        self.env = env
        self.links: dict[str, Link] = {}
        self._active: list[Flow] = []
        self._in_use: dict[Link, None] = {}  # links with flows, in first-use order
        self._t = 0.0
        self._timer_at = float("inf")
        self._version = 0

    def link(self, name: str, bandwidth: float, latency: float = 0.0) -> Link:
        """Create a named link (names are unique)."""
        if name in self.links:
            raise ValueError(f"duplicate link name {name!r}")
        link = self.links[name] = Link(name, bandwidth, latency)
        return link

    # ---- flows --------------------------------------------------------------------

    def transfer(
        self,
        links: Sequence[Link],
        size: float,
        *,
        costs: Sequence[float] | None = None,
        delay: float = 0.0,
        tag: object = None,
    ) -> Flow:
        """Start moving ``size`` bytes over ``links``; wait on the returned flow's ``done``."""
        if size < 0 or delay < 0:
            raise ValueError("transfer size and delay must be >= 0")
        path = tuple(links)
        if not path:
            raise ValueError("a transfer needs at least one link")
        cost = tuple(costs) if costs is not None else (1.0,) * len(path)
        if len(cost) != len(path) or any(not k > 0 for k in cost):
            raise ValueError("one cost > 0 per link is required")
        flow = Flow(path, cost, float(size), self.env.event(), tag)
        wait = delay + sum(link.latency for link in path)
        if wait > 0:
            self.env.timeout(wait).callbacks.append(lambda _ev: self._start(flow))
        else:
            self._start(flow)
        return flow

    def cancel(self, flow: Flow) -> None:
        """Abandon a flow (a client timeout); its ``done`` never fires."""
        if flow.state == "active":
            self._advance()
            self._detach(flow)
            moved = flow.size - max(flow.remaining, 0.0)
            for link in flow.links:
                link.bytes += moved
            self._reallocate()
        flow.state = "cancelled"
        flow.end = self.env.now

    def estimate_rate(self, links: Sequence[Link], costs: Sequence[float] | None = None) -> float:
        """Payload rate a new flow would get now (each link's share, slowest link wins)."""
        cost = costs or (1.0,) * len(links)
        return min(ln.bandwidth / (ln.load + k) for ln, k in zip(links, cost, strict=True))

    @property
    def active(self) -> int:
        """Flows transferring now."""
        return len(self._active)

    # ---- internals ------------------------------------------------------------------

    def _start(self, flow: Flow) -> None:
        if flow.state != "waiting":
            return  # cancelled while waiting for its latency
        flow.state = "active"
        flow.start = self.env.now
        if flow.size <= 0:
            self._complete(flow)
            return
        self._advance()
        self._active.append(flow)
        now = self.env.now
        for link, k in zip(flow.links, flow.costs, strict=True):
            if link.flows == 0:
                link._busy_since = now
                self._in_use[link] = None
            link.flows += 1
            link.load += k
        self._reallocate()

    def _detach(self, flow: Flow) -> None:
        self._active.remove(flow)
        now = self.env.now
        for link, k in zip(flow.links, flow.costs, strict=True):
            link.flows -= 1
            link.load -= k
            if link.flows == 0:
                link.load = 0.0
                link.busy_time += now - link._busy_since
                del self._in_use[link]

    def _complete(self, flow: Flow) -> None:
        flow.state = "finished"
        flow.end = self.env.now
        flow.remaining = 0.0
        for link in flow.links:
            link.bytes += flow.size
        flow.done.succeed(flow)

    def _advance(self) -> None:
        now = self.env.now
        dt = now - self._t
        if dt > 0:
            for f in self._active:
                f.remaining -= f.rate * dt
        self._t = now

    def _allocate(self) -> None:
        """Max-min fair rates by progressive filling."""
        flows = self._active
        if len(flows) == 1:
            f = flows[0]
            f.rate = min(ln.bandwidth / k for ln, k in zip(f.links, f.costs, strict=True))
            return
        in_use = self._in_use
        # common case: one link is every flow's bottleneck, so all get its equal share
        tight = min(in_use, key=lambda link: link.bandwidth / link.load)
        if tight.flows == len(flows):
            share = tight.bandwidth / tight.load
            for f in flows:
                f.rate = share
            return
        residual = {link: link.bandwidth for link in in_use}
        demand = {link: link.load for link in in_use}
        level = 0.0  # the common rate of the unfrozen flows
        unfrozen = flows
        while unfrozen:
            step = min(residual[ln] / d for ln, d in demand.items() if d > 0)
            level += step
            full = set()
            for link, d in demand.items():
                if d > 0:
                    r = residual[link] = residual[link] - step * d
                    if r <= _REL_EPS * link.bandwidth:
                        full.add(link)
            still = []
            for f in unfrozen:
                for link in f.links:
                    if link in full:
                        f.rate = level
                        for l2, k in zip(f.links, f.costs, strict=True):
                            demand[l2] -= k
                        break
                else:
                    still.append(f)
            if len(still) == len(unfrozen):  # pragma: no cover - guards float round-off
                for f in still:
                    f.rate = level
                break
            unfrozen = still
            for link in full:
                demand[link] = 0.0

    def _reallocate(self) -> None:
        if not self._active:
            self._timer_at = float("inf")
            return
        self._allocate()
        due = min(f.remaining / f.rate for f in self._active)
        at = self.env.now + max(due, 0.0)
        if at == self._timer_at:
            return  # the pending timer already stands for this completion
        self._timer_at = at
        self._version += 1
        version = self._version
        self.env.timeout(max(due, 0.0)).callbacks.append(lambda _ev: self._on_timer(version))

    def _on_timer(self, version: int) -> None:
        if version != self._version:
            return
        self._timer_at = float("inf")
        self._advance()
        now = self.env.now
        # done: no bytes left, or so few that the clock cannot advance by their time
        finished = [
            f
            for f in self._active
            if f.remaining <= _REL_EPS * f.size + 1e-6 or now + f.remaining / f.rate <= now
        ]
        for f in finished:
            self._detach(f)
        for f in finished:
            self._complete(f)
        self._reallocate()
