"""Links with latency and bandwidth, shared fairly by concurrent flows (fluid model).

A flow moves ``size`` bytes over a path of links. It first waits the path's latency (plus
any extra ``delay``, e.g. a stall), then transfers at a rate set by max-min fairness over
all flows in flight (progressive filling): every flow's rate rises together until some link
is full; flows on a full link are frozen; the rest keep rising. A lone flow therefore gets
the bandwidth of its slowest link, and two equal flows on one link take twice as long.

A flow may weigh more on one link than its payload, ``cost`` bytes of link work per payload
byte: a server with a per-operation overhead is such a link (``cost = 1 + ops*overhead*bw /
size``).

Keeping it fast. A flow's *cap* is its rate when alone (its slowest link). A link is
*binding* only when its flows' caps could overfill it; other links can never constrain
anyone and are left out. Flows connected through binding links form a component, and a
flow starting or ending re-solves only its own component; flows in other components keep
their rates and their finish times, which wait in a heap. One SimPy timer stands for the
earliest finish.

Invariant: a link never carries more than its bandwidth (sum of rate x cost <= bandwidth).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from heapq import heappop, heappush
from typing import Final, cast

import simpy

_EPS: Final = 1e-9
_INF: Final = math.inf
_NAN: Final = math.nan


class FlowAborted(Exception):
    """A transfer was abandoned because something it needed failed (a server went down)."""


class Link:
    """A shared resource with a bandwidth (bytes/s) and a latency (s)."""

    __slots__ = (
        "_busy_since",
        "bandwidth",
        "binding",
        "busy_time",
        "bytes",
        "capsum",
        "latency",
        "load",
        "members",
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
        self.members: dict[Flow, float] = {}  # flows transferring now -> their cost here
        self.load = 0.0  # sum of their costs
        self.capsum = 0.0  # sum of cost x cap: the most they could ever ask of this link
        self.binding = False  # could they, each at its cap, overfill it? (capsum > bandwidth)
        self.bytes = 0.0  # payload carried (finished flows, and the moved part of cancelled ones)
        self.busy_time = 0.0  # time with at least one flow
        self._busy_since = 0.0

    @property
    def flows(self) -> int:
        """Flows transferring now."""
        return len(self.members)

    def __repr__(self) -> str:
        return f"Link({self.name!r}, {self.bandwidth:.4g} B/s, {self.flows} flows)"


class Flow:
    """One transfer; ``done`` succeeds (value: the flow) when its last byte arrives, or is
    a callback the fabric calls then."""

    __slots__ = (
        "cap",
        "costs",
        "done",
        "end",
        "links",
        "rate",
        "remaining",
        "shares",
        "since",
        "size",
        "start",
        "state",
        "tag",
        "version",
    )

    def __init__(
        self,
        links: tuple[Link, ...],
        costs: tuple[float, ...],
        size: float,
        done: simpy.Event | Callable[[Flow], None],
        tag: object,
        shares: tuple[float, ...] | None = None,
    ) -> None:
        self.links = links
        self.costs = costs
        self.shares = shares  # payload moved on each link per unit of progress (None: 1)
        self.size = size
        self.remaining = size  # as of time `since`
        self.since = 0.0
        self.rate = 0.0
        cap = _INF  # its rate when alone: its slowest link
        for link, k in zip(links, costs):
            r = link.bandwidth / k
            if r < cap:
                cap = r
        self.cap = cap
        self.done = done
        self.tag = tag
        self.state = "waiting"  # waiting -> active -> finished | cancelled
        self.version = 0  # bumps when the rate changes (stale heap entries are skipped)
        self.start = _NAN
        self.end = _NAN

    def settle(self, now: float) -> None:
        """Bring ``remaining`` up to ``now`` at the current rate."""
        if now > self.since:
            self.remaining -= self.rate * (now - self.since)
            self.since = now


class Fabric:
    """All links of one simulation and the flows on them."""

    def __init__(self, env: simpy.Environment) -> None:
        # the clock is read as env._now, the attribute behind SimPy's ``now`` property: the
        # property is a Python call from compiled code (so throughout the compiled core)
        self.env = env
        self.links: dict[str, Link] = {}
        self._heap: list[tuple[float, int, int, Flow]] = []  # (finish, seq, version, flow)
        self._starts: list[tuple[float, int, Flow]] = []  # (start, seq, flow) after latency
        self._seq = 0
        self._timer_at = _INF

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
        shares: Sequence[float] | None = None,
        delay: float = 0.0,
        latency: bool = True,
        on_done: Callable[[Flow], None] | None = None,
        tag: object = None,
        cap: float | None = None,
    ) -> Flow:
        """Start moving ``size`` bytes over ``links``; wait on the returned flow's ``done``.

        ``shares`` lets one flow stand for parts that move in lockstep over different
        links (the ranks of a request, each on its own server): on link i it carries
        ``shares[i]`` bytes per byte of progress, and ``costs[i]`` is its work there.
        ``latency=False`` skips the links' latency (a background write, whose start nobody
        waits for). With ``on_done`` the flow calls it when it finishes instead of
        triggering a SimPy event (``done`` is then None): cheaper for fire-and-forget flows.
        ``cap`` bounds the flow's own rate (progress per second) below what its links
        allow alone (a client's per-connection rate).
        """
        if size < 0 or delay < 0:
            raise ValueError("transfer size and delay must be >= 0")
        path = links if type(links) is tuple else tuple(links)
        if not path:
            raise ValueError("a transfer needs at least one link")
        if costs is None:
            cost = (1.0,) * len(path)
        else:
            cost = costs if type(costs) is tuple else tuple(costs)
            if len(cost) != len(path) or not _positive(cost):
                raise ValueError("one cost > 0 per link is required")
        share = None
        if shares is not None:
            share = shares if type(shares) is tuple else tuple(shares)
            if len(share) != len(path) or _negative(share):
                raise ValueError("one share >= 0 per link is required")
        done = self.env.event() if on_done is None else on_done
        flow = Flow(path, cost, float(size), done, tag, share)
        if cap is not None:
            if not cap > 0:
                raise ValueError("a transfer's cap must be > 0")
            if cap < flow.cap:
                flow.cap = cap
        lat = 0.0
        if latency:
            for link in path:
                lat += link.latency
        wait = delay + lat
        if wait > 0:
            now = self.env._now
            self._seq += 1
            heappush(self._starts, (now + wait, self._seq, flow))
            self._arm(now)
        else:
            self._activate([flow])
        return flow

    def cancel(self, flow: Flow) -> None:
        """Abandon a flow (a client timeout); its ``done`` never fires."""
        if flow.state == "active":
            now = self.env._now
            flow.settle(now)
            self._credit(flow, flow.size - max(flow.remaining, 0.0))
            touched = self._detach(flow, now)
            self._rebalance(now, touched)
            self._arm(now)
        flow.state = "cancelled"
        flow.end = self.env._now

    def abort(self, flow: Flow, error: Exception) -> None:
        """Cancel a flow and tell its owner: its ``done`` event fails with ``error`` (or its
        callback is called with the flow, whose state is then "cancelled")."""
        if flow.state not in ("waiting", "active"):
            return
        self.cancel(flow)
        if isinstance(flow.done, simpy.Event):
            flow.done.fail(error)
        else:
            flow.done(flow)

    def flows_on(self, link: Link) -> list[Flow]:
        """Flows using a link now, or waiting to start on it."""
        waiting = [f for _, _, f in self._starts if f.state == "waiting" and link in f.links]
        return list(link.members) + waiting

    def set_bandwidth(self, link: Link, bandwidth: float) -> None:
        """Change a link's bandwidth now (a slowdown, or its end); flows re-share at once."""
        if not bandwidth > 0:
            raise ValueError(f"link {link.name}: bandwidth must be > 0, got {bandwidth}")
        now = self.env._now
        flows = list(link.members)
        for f in flows:  # progress so far at the old rates
            f.settle(now)
        touched: dict[Link, bool] = {}
        for f in flows:
            for other, k in zip(f.links, f.costs):
                touched.setdefault(other, other.binding)
                other.capsum -= k * f.cap
        link.bandwidth = float(bandwidth)
        for f in flows:
            f.cap = min(ln.bandwidth / k for ln, k in zip(f.links, f.costs))
            for other, k in zip(f.links, f.costs):
                other.capsum += k * f.cap
        for other in touched:
            other.binding = other.capsum > other.bandwidth * (1 + _EPS)
        for f in flows:
            f.rate = -1.0  # force a new finish time for every flow on the link
        self._rebalance(now, touched.items(), flows)
        self._arm(now)

    def estimate_rate(self, links: Sequence[Link], costs: Sequence[float] | None = None) -> float:
        """Payload rate a new flow would get now (each link's share, slowest link wins)."""
        cost = costs or (1.0,) * len(links)
        if len(cost) != len(links):
            raise ValueError("one cost per link is required")
        return min(ln.bandwidth / (ln.load + k) for ln, k in zip(links, cost))

    # ---- internals ------------------------------------------------------------------

    def _activate(self, flows: list[Flow]) -> None:
        """Put flows whose latency has passed onto their links, and re-solve once."""
        now = self.env._now
        touched: dict[Link, bool] = {}
        new = []
        for flow in flows:
            if flow.state != "waiting":
                continue  # cancelled while waiting for its latency
            flow.state = "active"
            flow.start = now
            if flow.size <= 0:
                self._complete(flow, now)
                continue
            flow.since = now
            new.append(flow)
            for link, k in zip(flow.links, flow.costs):
                if not link.members:
                    link._busy_since = now
                touched.setdefault(link, link.binding)
                link.members[flow] = k
                link.load += k
                link.capsum += k * flow.cap
                link.binding = link.capsum > link.bandwidth * (1 + _EPS)
        if new:
            self._rebalance(now, touched.items(), new)
        self._arm(now)

    def _detach(self, flow: Flow, now: float) -> list[tuple[Link, bool]]:
        """Take a flow off its links; return (link, was it binding) for each."""
        touched = []
        for link, k in zip(flow.links, flow.costs):
            touched.append((link, link.binding))
            del link.members[flow]
            if link.members:
                link.load -= k
                link.capsum -= k * flow.cap
                link.binding = link.capsum > link.bandwidth * (1 + _EPS)
            else:
                link.load = link.capsum = 0.0
                link.binding = False
                link.busy_time += now - link._busy_since
        flow.version += 1  # its heap entries are stale now
        return touched

    def _complete(self, flow: Flow, now: float) -> None:
        flow.state = "finished"
        flow.end = now
        flow.remaining = 0.0
        self._credit(flow, flow.size)
        if isinstance(flow.done, simpy.Event):
            flow.done.succeed(flow)
        else:
            flow.done(flow)

    @staticmethod
    def _credit(flow: Flow, moved: float) -> None:
        """Count the payload a flow moved on each of its links."""
        if flow.shares is None:
            for link in flow.links:
                link.bytes += moved
        else:
            for link, share in zip(flow.links, flow.shares):
                link.bytes += moved * share

    def _rebalance(
        self, now: float, touched: Iterable[tuple[Link, bool]], new: Sequence[Flow] = ()
    ) -> None:
        """Re-solve the component(s) around links whose flows changed."""
        seeds = [link for link, was in touched if was or link.binding]
        if not seeds:  # nothing can bind: every new flow runs at its cap
            for f in new:
                self._set_rate(now, f, f.cap)
            return
        flows: dict[Flow, None] = {}
        links: dict[Link, None] = {}
        stack = seeds
        for link in stack:  # the stack grows as the component is found
            for f in link.members:
                if f not in flows:
                    flows[f] = None
                    for other in f.links:
                        if other not in links and other.binding:
                            links[other] = None
                            stack.append(other)
        for f in new:
            if f not in flows:
                self._set_rate(now, f, f.cap)  # nothing it shares can bind: it runs at its cap
        if flows:
            self._fill(now, list(flows), [link for link in links])

    def _fill(self, now: float, flows: list[Flow], links: list[Link]) -> None:
        """Progressive filling of ``flows`` over ``links`` (the binding ones), each flow also
        capped by its own solo rate."""
        flows.sort(key=lambda f: f.cap)
        if len(links) == 1:  # the common case: water-filling on one link
            link = links[0]
            members = link.members
            residual, demand = link.bandwidth, link.load
            share = 0.0
            saturated = False
            for f in flows:
                k = members.get(f)
                if k is None:  # reached through a link that no longer binds: its cap rules
                    self._set_rate(now, f, f.cap)
                    continue
                if not saturated:
                    share = residual / demand
                    if f.cap < share:
                        self._set_rate(now, f, f.cap)
                        residual -= f.cap * k
                        demand -= k
                        continue
                    saturated = True  # this flow and every later member get the share
                self._set_rate(now, f, share)
            return
        left = {link: link.bandwidth for link in links}
        wants = {link: link.load for link in links}
        unfrozen = flows
        level = 0.0
        while unfrozen:
            step = unfrozen[0].cap - level  # the next cap to be reached
            for link, d in wants.items():
                if d > _EPS:
                    s = left[link] / d
                    if s < step:
                        step = s
            level += step
            full = set()
            for link, d in wants.items():
                if d > _EPS:
                    r = left[link] = left[link] - step * d
                    if r <= _EPS * link.bandwidth:
                        full.add(link)
            still = []
            for f in unfrozen:
                if f.cap - level <= _EPS * f.cap or any(link in full for link in f.links):
                    self._set_rate(now, f, level)
                    for link, k in zip(f.links, f.costs):
                        if link in wants:
                            wants[link] -= k
                else:
                    still.append(f)
            if len(still) == len(unfrozen):  # pragma: no cover - guards float round-off
                for f in still:
                    self._set_rate(now, f, level)
                break
            unfrozen = still

    def _set_rate(self, now: float, flow: Flow, rate: float) -> None:
        if rate == flow.rate and flow.version:
            return
        if now > flow.since:
            flow.remaining -= flow.rate * (now - flow.since)
            flow.since = now
        flow.rate = rate
        flow.version += 1
        remaining = flow.remaining if flow.remaining > 0.0 else 0.0
        self._seq += 1
        heappush(self._heap, (now + remaining / rate, self._seq, flow.version, flow))

    def _arm(self, now: float) -> None:
        """Make sure a timer fires at the earliest finish or start."""
        heap = self._heap
        while heap and heap[0][2] != heap[0][3].version:
            heappop(heap)  # stale
        at = heap[0][0] if heap else _INF
        if self._starts and self._starts[0][0] < at:
            at = self._starts[0][0]
        if at < self._timer_at:
            self._timer_at = at
            delay = at - now
            timer = self.env.timeout(delay if delay > 0.0 else 0.0, at)
            timer.callbacks.append(self._on_timer_event)

    def _on_timer_event(self, event: simpy.Event) -> None:
        at = cast(float, event.value)
        self._on_timer(at)

    def _on_timer(self, at: float) -> None:
        if at != self._timer_at:
            return  # superseded by an earlier timer
        self._timer_at = _INF
        now = self.env._now
        heap = self._heap
        finished = []
        while heap and heap[0][0] <= now:
            _, _, version, flow = heappop(heap)
            if version == flow.version and flow.state == "active":
                finished.append(flow)
        touched: dict[Link, bool] = {}
        for flow in finished:
            for link, was in self._detach(flow, now):
                touched.setdefault(link, was)
        for flow in finished:
            self._complete(flow, now)
        if touched:
            self._rebalance(now, touched.items())
        starts = self._starts
        due = []
        while starts and starts[0][0] <= now:
            due.append(heappop(starts)[2])
        if due:
            self._activate(due)  # arms the timer
        else:
            self._arm(now)


# (any/all over a generator compile to loops; the builtin min over a tuple is a generic call)
def _positive(values: tuple[float, ...]) -> bool:
    """Every value is > 0 (NaN is not)."""
    return all(v > 0.0 for v in values)


def _negative(values: tuple[float, ...]) -> bool:
    """Some value is < 0."""
    return any(v < 0.0 for v in values)
