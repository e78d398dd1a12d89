"""Load-aware cache affinity: send a request where it saves the most prompt tokens net of
the work queued ahead of it there.

For each engine up: tokens of the request's prefix held in the engine's local tiers,
less ``queue_weight`` times the prompt tokens already waiting on it (each queued token
is time this request waits). The best score wins; ties go to the engine with fewer
requests outstanding, then the lowest index. Unlike the built-in ``cache_affinity``,
which counts queued requests (``affinity_slack``), it weighs queued tokens, so one long
prompt ahead counts for more than several short ones. Use it as
``cluster.router: load_aware``.
"""

from __future__ import annotations

from kvsim.plugins import EngineView, RequestView, RoutingPolicy, SimView, register


@register("load_aware")
class LoadAware(RoutingPolicy):
    queue_weight = 1.0  # cached tokens one queued token is worth

    def setup(self, sim: SimView) -> None:
        self.block_tokens = sim.block_tokens

    def route(self, request: RequestView, engines: list[EngineView]) -> EngineView:
        def score(e: EngineView) -> tuple[float, int, int]:
            saved = min(e.prefix_blocks(request) * self.block_tokens, request.prompt_tokens)
            return (saved - self.queue_weight * e.queued_tokens, -e.outstanding, -e.index)

        return max(engines, key=score)
