"""Tenants and their cache state: whose blocks are where, who can hit them, when they go.

Keys. With ``isolation: tenant`` a block's cache key is ``hash_id + tenant * 2**64``
(hash ids are below 2**63), so equal hash ids of two tenants never meet in any tier, and
tenant 0's keys are the hash ids themselves (a single-tenant run is the same as one without
isolation, and as fast). A request's public prefix (its ``shared_blocks``, such as a shared
system prompt) has the key ``-(hash_id + 1)`` when ``shared_prefixes`` opts in, and then
serves every tenant. With ``isolation: none`` keys are the hash ids: one cache for all.
(Python's hash of these keys varies in its low bits with the hash id, which keeps the
stores' dict lookups fast.)

Quotas and TTL are kept by the stores themselves (:class:`~kvsim.cache.eviction.Rules`).
Deletions - a tenant's offboarding, a session's end, TTL expiry - remove the blocks from
every tier at once and mark puts still in flight so that they land nothing; the time until
the last of them is gone is recorded. Requests of a deleted tenant that were already
running keep nothing when they finish.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Final, cast

from kvsim.cache.eviction import BlockStore, Key, Rules
from kvsim.config.schema import Tenancy as TenancyConfig
from kvsim.sim.rows import RowTable
from kvsim.sim.shared import Shared
from kvsim.workload.request import Request

if TYPE_CHECKING:
    from kvsim.sim.job import Job

SPACE: Final = 1 << 64  # key = hash_id + tenant * SPACE; public blocks: -(hash_id + 1)


def block_of(key: Key, shards: int) -> int:
    """The request cache key that a store key stands for (a server keeps ``shards`` keys
    per block: block key x shards + shard)."""
    return cast(int, key) // shards


def tenant_of(key: int) -> int:
    """The tenant a namespaced key belongs to (-1: a public, shared block)."""
    return -1 if key < 0 else key >> 64


class Tenancy:
    """Key namespacing, quotas, TTL and deletions of one simulation."""

    def __init__(self, sim: Shared, cfg: TenancyConfig) -> None:
        self.sim = sim
        self.cfg = cfg
        self.isolated = cfg.isolation == "tenant"
        self.public = cfg.shared_prefixes
        self.purged_at: dict[int, float] = {}  # tenant -> time of its last deletion
        self.deletions: list[dict[str, Any]] = []  # what was deleted, when, gone after
        self.retention: dict[int, float] = {}  # tenant -> longest idle time before TTL

    # ---- keys ------------------------------------------------------------------------

    def keys(self, req: Request) -> tuple[Key, ...]:
        """Cache keys of a request's blocks."""
        if not self.isolated:
            return req.hash_ids
        ids = req.hash_ids
        n = min(req.shared_blocks, len(ids)) if self.public else 0
        base = req.tenant * SPACE
        own = ids[n:] if not base else tuple(h + base for h in ids[n:])
        return tuple(-h - 1 for h in ids[:n]) + own if n else own

    def key_tenant(self, key: Key) -> int:
        return tenant_of(cast(int, key)) if self.isolated else -1

    # ---- store rules -------------------------------------------------------------------

    def install(self) -> None:
        """Give every store the bookkeeping that quotas and TTL need."""
        cfg = self.cfg
        sim = self.sim
        clock = (lambda: sim.env._now) if cfg.ttl is not None else None
        if not cfg.quota and clock is None:
            return
        quota: dict[str, float] = {tier: q for tier, q in cfg.quota.items()}
        for name, store, shards in self.stores():
            owner = (
                self.key_tenant
                if shards == 1
                else (lambda k, n=shards: self.key_tenant(block_of(k, n)))
            )
            store.rules = Rules(owner, quota.get(name), clock)

    # ---- deletion ---------------------------------------------------------------------

    def keeps(self, job: Job) -> bool:
        """Does a finishing request keep its blocks? (Not when its tenant was deleted
        after it started.)"""
        t = self.purged_at.get(job.req.tenant)
        return t is None or job.start >= t

    def stores(self) -> Iterator[tuple[str, BlockStore, int]]:
        """(tier, store, shards per block key) of every store in the simulation."""
        sim = self.sim
        names = sim.run.names  # the run's tier names by code (kvsim.sim.tiers)
        for engine in sim.engines:
            for t, store in enumerate(engine.local.tiers):
                if store is not None:
                    yield names[t], store, 1
        if sim.remote is not None:
            for _, store in sim.remote.all_stores():
                yield "remote", store, sim.remote.shards
            for _, store in sim.remote.ssd_stores():  # the servers' own SSDs (remote.ssd)
                yield "remote_ssd", store, sim.remote.shards

    def delete(self, what: str, tenant: int, match: Any) -> None:
        """Delete every block whose key satisfies ``match(key)`` from every tier, and from
        puts in flight; record when the last one is gone."""
        sim = self.sim
        now = sim.env._now
        for _, store, shards in self.stores():
            doomed = [k for k in store if match(block_of(k, shards))]
            for k in doomed:
                store.remove(k)
        record = {"what": what, "tenant": tenant, "at": now, "gone_after_s": 0.0}
        self.deletions.append(record)
        remote = sim.remote
        if remote is None:
            return
        shards = remote.shards
        waiting = 0

        def settled() -> None:
            nonlocal waiting
            waiting -= 1
            if waiting == 0:
                record["gone_after_s"] = sim.env._now - now

        for engine in sim.engines:
            for batch in engine.put_queue():
                if any(match(block_of(k, shards)) for ks in batch.keys.values() for k in ks):
                    previous = batch.skip
                    batch.skip = lambda k, p=previous: (
                        match(block_of(k, shards)) or (p is not None and p(k))
                    )
                    batch.on_land.append(settled)
                    waiting += 1

    def delete_tenant(self, tenant: int) -> None:
        """Offboarding: all of a tenant's blocks, everywhere."""
        self.purged_at[tenant] = self.sim.env._now
        self.delete("tenant", tenant, lambda key: tenant_of(key) == tenant)

    def session_ended(self, job: Job) -> None:
        """Delete what a finished session computed (not its shared prefix)."""
        req = job.req
        if not (self.cfg.delete_on_session_end and req.last_turn and req.session >= 0):
            return
        own = set(job.keys[req.shared_blocks :])
        if own:
            self.delete("session", req.tenant, own.__contains__)

    def sweep(self) -> Any:
        """A SimPy process: every ttl/4, delete blocks unused for ttl or longer."""
        ttl = self.cfg.ttl
        assert ttl is not None
        env = self.sim.env
        while True:
            yield env.timeout(ttl / 4)
            now = env._now
            for _, store, shards in self.stores():
                rules = store.rules
                if rules is None:
                    continue
                old = [(k, t) for k, t in rules.stamps.items() if t <= now - ttl]
                for k, t in old:
                    store.remove(k, "expired")
                    tenant = self.key_tenant(block_of(k, shards))
                    self.retention[tenant] = max(self.retention.get(tenant, 0.0), now - t)

    # ---- reports ----------------------------------------------------------------------

    def reporting(self, rows: RowTable) -> bool:
        """Is there anything per tenant to report (several tenants, or tenancy rules)?"""
        c = self.cfg
        if c.quota or c.ttl is not None or c.deletions or c.delete_on_session_end:
            return True
        return bool(rows.column("tenant").any())

    def stored_bytes(self) -> dict[int, dict[str, float]]:
        """Bytes each tenant holds per tier now (isolated keys only)."""
        out: dict[int, dict[str, float]] = {}
        if not self.isolated:
            return out
        remote = self.sim.remote
        for name, store, shards in self.stores():
            copies = (
                remote.servers
                if (remote is not None and name in ("remote", "remote_ssd") and remote.mirrored)
                else 1
            )
            held = store.blocks
            for k in store:  # in eviction order: one fixed order for the float sums
                t = tenant_of(block_of(k, shards))
                per = out.setdefault(t, {})
                per[name] = per.get(name, 0.0) + held[k].size * copies
        return out
