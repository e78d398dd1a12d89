"""The engine's writes to the remote store: what to put, and the queue of puts.

After a prefill the blocks the store lacks are staged (``stage``: reserved as pending so no
other engine stages them too) and put in the background, one put at a time in order (an
LMCache-style store queue); remote write-back puts blocks leaving the last local tier
(``put_back``). A tier kind with its own write path adds its queue next to this one.
What this module owns: :class:`Puts`, one per engine, which sees its engine as a
:class:`~kvsim.sim.node.Node` (links, local tiers, counters).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

from kvsim.cache.eviction import Key
from kvsim.cache.local import GPU, REMOTE, SELECTIVE
from kvsim.cache.remote import Batch
from kvsim.kernel.fabric import Flow
from kvsim.physics.step import kernel_copy_seconds
from kvsim.sim.job import Job
from kvsim.sim.node import Node
from kvsim.sim.shared import Shared


class Puts:
    """One engine's puts to the remote store, queued or in flight."""

    __slots__ = ("_queue", "ctx", "engine", "pending")

    def __init__(self, engine: Node, ctx: Shared) -> None:
        self.engine = engine
        self.ctx = ctx
        self.pending = 0  # puts queued or in flight
        self._queue: deque[Batch] = deque()

    def stage(self, job: Job) -> Batch:
        """The shards the remote store lacks, reserved at once as pending so that no
        other engine stages them too."""
        ctx = self.ctx
        keys: Sequence[Key] = job.keys
        sizes = job.sizes = ctx.block_sizes(job.req)
        if ctx.run.put_policy == SELECTIVE:  # only blocks hit often enough on this engine
            uses = self.engine.local.uses
            assert uses is not None
            least = ctx.run.put_threshold
            hot = [i for i, k in enumerate(keys) if uses.get(k, 0) >= least]
            keys, sizes = [keys[i] for i in hot], [sizes[i] for i in hot]
        return self._claim(keys, sizes)

    def _claim(self, keys: Sequence[Key], sizes: Sequence[float]) -> Batch:
        """Of blocks (``sizes`` raw), the shards the store lacks and would admit, as it
        would store them (its codec), reserved as pending so no other engine puts them."""
        ctx = self.ctx
        remote = ctx.remote
        assert remote is not None
        r = ctx.run.ratio[REMOTE]
        if r != 1.0:  # the store's codec: it holds (and puts move) fewer bytes
            sizes = [x * r for x in sizes]
        gate = ctx.remote_admission
        if gate is not None:  # second hit: store only blocks offered before
            keys, sizes, _, _ = gate.filter(keys, sizes, remote)
        batch = remote.missing(keys, sizes)
        remote.reserve(batch)
        return batch

    def put_back(self, keys: Sequence[Key], sizes: Sequence[float]) -> None:
        """Remote write-back: blocks leaving the last local tier are put (when the store
        lacks them); leaving HBM itself (no lower tier), they are copied out first, on the
        GPU-to-host link in the background."""
        ctx = self.ctx
        if ctx.remote is None or not ctx.run.max_pending_puts or not self.engine.up:
            return
        batch = self._claim(keys, sizes)
        if not batch:
            return
        engine = self.engine
        if engine.local.below[GPU] < 0:
            nbytes = batch.total_bytes()
            lands = engine.d2h.send(ctx.env._now, nbytes, ctx.stage_share)
            if ctx.run.copy_sm_share > 0.0:  # a copy kernel: SM work while it runs
                work = kernel_copy_seconds(
                    nbytes * ctx.stage_share, engine.d2h.bandwidth, ctx.run.copy_sm_share
                )
                engine.busy += work
                engine.gpu_spans.append(lands - work)
                engine.gpu_spans.append(lands)
        self.put(batch)

    def put(self, batch: Batch) -> None:
        """Queue the put of what the remote store lacks: one lockstep flow over the servers
        involved (each rank's part to its own server). Puts leave one at a time, in order
        (an LMCache-style background store); a full queue drops the put."""
        ctx = self.ctx
        remote = ctx.remote
        assert remote is not None
        if self.pending >= ctx.run.max_pending_puts:
            remote.release(batch)
            return
        self.pending += 1
        self._queue.append(batch)
        if len(self._queue) == 1:  # the connection is idle
            self._start_put()

    def _start_put(self) -> None:
        """Send the oldest queued put."""
        ctx = self.ctx
        remote = ctx.remote
        assert remote is not None
        batch = self._queue[0]
        parts = remote.put_parts(batch)
        links, size, costs, shares = ctx.lockstep(parts, (self.engine.nic_out,))
        remote.puts += 1
        remote.put_bytes += batch.total_bytes()
        remote.put_ops += ctx.put_ops(parts)
        # the clients' cap (an object store's connections), in progress units
        cap = ctx.put_cap / shares[-1] if ctx.put_cap is not None else None
        # a background write: no one waits for it to start, so no latency is charged
        ctx.fabric.transfer(
            links, size, costs=costs, shares=shares, latency=False, on_done=self._landed, cap=cap
        )

    def _landed(self, flow: Flow) -> None:
        batch = self._queue.popleft()
        self.pending -= 1
        remote = self.ctx.remote
        assert remote is not None
        if flow.state == "finished":
            before = remote.landed_bytes
            remote.land(batch)
            self.engine.landed_bytes += remote.landed_bytes - before  # per-engine write_bytes
        else:  # aborted: a server it wrote to went down
            remote.release(batch)
        if self._queue:
            self._start_put()

    def queue(self) -> tuple[Batch, ...]:
        """Puts queued or in flight, oldest first."""
        return tuple(self._queue)
