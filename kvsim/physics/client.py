"""The client side of a remote GET: how fast one rank's store client can pull chunks.

A GET reads ``n`` chunks ("operations") of ``c`` bytes each. Per operation:

    t_s = op_overhead + c / bandwidth     the server's one thread (Valkey runs commands on
                                          one thread): serial, shared by every client
    t_c = c / copy_bandwidth              the client's receive + copy into pinned host
                                          memory: serial on the rank (LMCache's Python
                                          connectors copy under the GIL)
    r   = round_trip                      request out, first byte back, per operation

A client with ``connections`` connections, each with ``pipeline_depth`` operations in
flight, keeps at most W = connections x pipeline_depth operations outstanding; by Little's
law it completes at most W / (r + t_s + t_c) of them per second. A lone GET of n
operations on one server therefore takes

    T(n) = n * max(t_s, t_c, (r + t_s + t_c) / W)                          (1)

(the server, the copy, or the window binds). The first operation's own latency beyond
one interval (at most r + t_c) is not charged: the model is a rate, as the fabric is.

The client's part alone is a rate (bytes/s),

    client_rate(c) = c / max(t_c, (r + t_s + t_c) / W)                     (2)

which the fabric applies as a per-flow cap: unsharded, one rank's client moves the whole
GET (c = a whole chunk); per rank, every rank's own client moves its shard (c = chunk /
ranks), and the GET's lockstep flow is capped at ranks x that rate. The server's part is
the fabric's server link (payload ``bandwidth``, per-op cost ``op_overhead``), where the
GETs and puts of every client share it.

``RANGES`` is the documented range of every client and server input (docs/data-path.md,
"The single-client GET"): tests/test_client_model.py checks the ordering property over
it, and ``kvsim.profiles.derive`` computes the per-rank speed-up it predicts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Client:
    """One rank's store client (``remote.client``)."""

    connections: int = 1
    round_trip: float = 100e-6  # s
    pipeline_depth: int = 4
    copy_bandwidth: float = 5e9  # B/s

    @classmethod
    def of(cls, cfg: Any) -> Client:
        """The client a scenario's ``remote.client`` block describes."""
        return cls(cfg.connections, cfg.round_trip, cfg.pipeline_depth, cfg.copy_bandwidth)

    @property
    def window(self) -> int:
        """Operations in flight at most."""
        return self.connections * self.pipeline_depth


def op_interval(c: float, client: Client, bandwidth: float, op_overhead: float) -> float:
    """Seconds per operation of ``c`` bytes of a lone GET on one server, equation (1)."""
    t_s = op_overhead + c / bandwidth
    t_c = c / client.copy_bandwidth
    return max(t_s, t_c, (client.round_trip + t_s + t_c) / client.window)


def get_seconds(n: int, c: float, client: Client, bandwidth: float, op_overhead: float) -> float:
    """Equation (1): a lone GET of ``n`` operations of ``c`` bytes on one server."""
    return n * op_interval(c, client, bandwidth, op_overhead)


def client_rate(c: float, client: Client, bandwidth: float, op_overhead: float) -> float:
    """Equation (2): bytes/s one client can pull in operations of ``c`` bytes (the server
    unloaded; its t_s enters only through the round trip of each operation)."""
    t_s = op_overhead + c / bandwidth
    t_c = c / client.copy_bandwidth
    return c / max(t_c, (client.round_trip + t_s + t_c) / client.window)


def get_rate(
    nbytes: float,
    ops: int,
    servers: int,
    ranks: int,
    per_rank: bool,
    client: Client,
    bandwidth: float,
    op_overhead: float,
) -> float:
    """Bytes/s of a lone GET of ``nbytes`` in ``ops`` whole chunks spread evenly over
    ``servers`` (the fluid model the fabric solves for one flow). Unsharded, one client
    issues ``ops`` operations of a whole chunk c and each server serves ops/servers of
    them; per rank, each of ``ranks`` clients issues ``ops`` operations of c/ranks, and
    each server serves ops x ranks / servers of them. The slower of the busiest server
    and a client (every client moves the same share, in lockstep) sets the time."""
    c = nbytes / ops
    if per_rank:
        c /= ranks
        ops_per_server = ops * ranks / servers
    else:
        ops_per_server = ops / servers
    server_s = ops_per_server * (op_overhead + c / bandwidth)
    client_s = ops * c / client_rate(c, client, bandwidth, op_overhead)
    return nbytes / max(server_s, client_s)


@dataclass(frozen=True)
class Range:
    """A documented range of one input, its mark and its source."""

    lo: float
    hi: float
    mark: str
    source: str


# The documented ranges (docs/data-path.md), independent of the study's GET rates. Marks:
# H vendor/model docs or code, M derived or secondary, L our assumption, C calibrated.
RANGES: dict[str, Range] = {
    "connections": Range(
        1,
        8,
        "H",
        "LMCache's Valkey connector: one multiplexed valkey-glide client (glide sends "
        "every request on one connection per node, pipelined); the thread-pool connector "
        "that replaced it opens one client per worker thread (num_workers, 8 by default)",
    ),
    "pipeline_depth": Range(
        1,
        4,
        "H",
        "LMCache's remote backend submits a GET's chunks together and the connector's "
        "priority executor runs 4 at a time (AsyncPQExecutor, max_workers=4); a chunk-by-"
        "chunk blocking retrieve, or the thread-pool connector's synchronous clients, "
        "keep 1 per connection in flight",
    ),
    "round_trip": Range(
        20e-6,
        500e-6,
        "L",
        "2 x node.network_latency (50 us one way, L) is the default; same-data-centre "
        "TCP round trips are tens of microseconds, and the client's own per-request path "
        "(Python event-loop hand-offs, glide's FFI) adds up to a few hundred",
    ),
    "copy_bandwidth": Range(
        2e9,
        10e9,
        "L",
        "one thread copying each received byte twice (glide's reply object, then the "
        "pinned buffer) at ~10 GB/s per copy (one core's memcpy); LMCache's Python copy "
        "holds the GIL, so it is serial on the rank whatever the connections",
    ),
    "bandwidth": Range(
        1.7e9,
        2.0e9,
        "M",
        "published single-instance Valkey GET rates for multi-MB values (HARDWARE.md)",
    ),
    "op_overhead": Range(
        2e-6,
        20e-6,
        "M",
        "Valkey/Redis serve 100k-1M small commands a second on their one thread (1-10 us "
        "each); up to 20 us allowed for a large value's reply set-up",
    ),
}
