"""The client side of a remote GET: how fast one rank's store client can pull chunks.

A GET reads ``n`` chunks ("operations") of ``c`` bytes each. Per operation:

    t_s = op_overhead + c / bandwidth     the server's one thread (Valkey runs commands on
                                          one thread): serial, shared by every client
    t_c = c / copy_bandwidth              the client's receive + copy into pinned host
                                          memory: serial on the rank (LMCache's Python
                                          connectors copy under the GIL)
    r   = round_trip                      request out, first byte back, per operation

A connection may also have a rate of its own (``connection_bandwidth`` b, an object
store's per-connection rate: S3 serves one request at 85-90 MB/s); then each operation
also spends

    t_n = c / b                           on its connection (0 when b is null: unlimited)

and the operations on one connection share its rate, so N connections move at most N x b.

A client with ``connections`` (N) connections, each with ``pipeline_depth`` operations in
flight, keeps at most W = N x pipeline_depth operations outstanding; by Little's law it
completes at most W / (r + t_s + t_c + t_n) of them per second. A lone GET of n
operations on one server therefore takes

    T(n) = n * max(t_s, t_c, t_n / N, (r + t_s + t_c + t_n) / W)           (1)

(the server, the copy, the connections' rate, or the window binds). The first
operation's own latency beyond one interval is not charged: the model is a rate, as the
fabric is; the request's fixed first-byte cost is the store's T0 (``remote.t0``). For an
object store (r = first-byte latency, b = per-connection rate, pipeline_depth 1, server
and copy negligible) this is T(n) = n * (r + c/b) / N: N connections each fetching one
ranged GET after another.

The client's part alone is a rate (bytes/s),

    client_rate(c) = c / max(t_c, t_n / N, (r + t_s + t_c + t_n) / W)      (2)

A GET read by GPUDirect RDMA straight into HBM (``remote.path: gpudirect``) has no
client copy: the simulation passes copy_bandwidth = inf, so t_c = 0. Puts are capped by
``put_rate`` (the same window and connections, no copy) only when the connections have a
rate of their own; otherwise they are uncapped (the server and the NIC bind), as before.

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

import math
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Client:
    """One rank's store client (``remote.client``)."""

    connections: int = 1
    round_trip: float = 100e-6  # s
    pipeline_depth: int = 4
    copy_bandwidth: float = 5e9  # B/s (inf: no copy, GPUDirect)
    connection_bandwidth: float | None = None  # B/s per connection (None: unlimited)

    @classmethod
    def of(cls, cfg: Any) -> Client:
        """The client a scenario's ``remote.client`` block describes."""
        return cls(
            cfg.connections,
            cfg.round_trip,
            cfg.pipeline_depth,
            cfg.copy_bandwidth,
            cfg.connection_bandwidth,
        )

    @property
    def window(self) -> int:
        """Operations in flight at most."""
        return self.connections * self.pipeline_depth


def op_interval(c: float, client: Client, bandwidth: float, op_overhead: float) -> float:
    """Seconds per operation of ``c`` bytes of a lone GET on one server, equation (1)."""
    t_s = op_overhead + c / bandwidth
    t_c = c / client.copy_bandwidth
    if client.connection_bandwidth is None:
        return max(t_s, t_c, (client.round_trip + t_s + t_c) / client.window)
    t_n = c / client.connection_bandwidth
    return max(
        t_s, t_c, t_n / client.connections, (client.round_trip + t_s + t_c + t_n) / client.window
    )


def get_seconds(n: int, c: float, client: Client, bandwidth: float, op_overhead: float) -> float:
    """Equation (1): a lone GET of ``n`` operations of ``c`` bytes on one server."""
    return n * op_interval(c, client, bandwidth, op_overhead)


def client_rate(c: float, client: Client, bandwidth: float, op_overhead: float) -> float:
    """Equation (2): bytes/s one client can pull in operations of ``c`` bytes (the server
    unloaded; its t_s enters only through the round trip of each operation)."""
    t_s = op_overhead + c / bandwidth
    t_c = c / client.copy_bandwidth
    if client.connection_bandwidth is None:
        return c / max(t_c, (client.round_trip + t_s + t_c) / client.window)
    t_n = c / client.connection_bandwidth
    return c / max(
        t_c, t_n / client.connections, (client.round_trip + t_s + t_c + t_n) / client.window
    )


def put_rate(c: float, client: Client, bandwidth: float, op_overhead: float) -> float:
    """Bytes/s one client can push in operations of ``c`` bytes when its connections have a
    rate of their own: equation (2) without the receive copy; inf when they have none (the
    server's link and the NIC bind puts, as they always did)."""
    if client.connection_bandwidth is None:
        return math.inf
    t_s = op_overhead + c / bandwidth
    t_n = c / client.connection_bandwidth
    return c / max(t_n / client.connections, (client.round_trip + t_s + t_n) / client.window)


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
    "connection_bandwidth": Range(
        85e6,
        90e6,
        "H",
        "an object store's rate per connection: AWS's S3 performance guidelines advise one "
        "concurrent request for each 85-90 MB/s of desired throughput (null, unlimited, for "
        "a KV server: its one thread binds first)",
    ),
    "op_overhead": Range(
        2e-6,
        20e-6,
        "M",
        "Valkey/Redis serve 100k-1M small commands a second on their one thread (1-10 us "
        "each); up to 20 us allowed for a large value's reply set-up",
    ),
}
