"""What a simulation's parts share (kvsim.sim.shared.Shared) and the run's constants
(kvsim.sim.constants): block sizes, the remote store's per-operation server work, a
put's operations, a lockstep flow, the stall draws, and the constants a scenario gives
the engines, worked by hand on the toy scenario (1,000 B per token, 100-token blocks;
remote 1 MB/s). The import rule that keeps Shared the simulation's only face to its
parts, and head_share on a shipped scenario, are moved here (from tests/test_batching.py
and tests/test_hardening_outputs_r4.py)."""

from __future__ import annotations

import pytest

from kvsim import api
from kvsim.sim.constants import Constants, head_share
from kvsim.sim.shared import Listener, Shared
from kvsim.sim.simulation import Simulation

from conftest import SCENARIOS, req, toy
from sim_cases import pure_only


def shared(**sections) -> Shared:
    """The Shared of a toy simulation built (not run)."""
    return Simulation(toy(**sections), requests=[req(0, 0.0, 100, [1])]).shared


# one operation per 100-token chunk (100 kB), 1 ms of server time each at 1 MB/s: an
# operation costs the server 1 ms x 1 MB/s = 1,000 B of transfer time
OPS = {"remote": {"enabled": True, "chunk_tokens": 100, "op_overhead": "1 ms"}}


def test_block_sizes_are_full_blocks_then_the_partial_last_one():
    """250 tokens in 100-token blocks of 1,000 B per token: 100 kB, 100 kB, 50 kB."""
    s = shared()
    assert s.block_sizes(req(0, 0.0, 250, [1, 2, 3])) == [1e5, 1e5, 5e4]
    assert s.block_sizes(req(0, 0.0, 300, [1, 2, 3])) == [1e5, 1e5, 1e5]


def test_server_cost_adds_each_operations_overhead_per_byte():
    """250 kB is 3 operations (ceil 2.5): 1 + 3 x 1,000 / 250,000 = 1.012; 50 kB is one:
    1 + 1,000 / 50,000 = 1.02; nothing costs 1. Without overhead every byte costs 1."""
    s = shared(**OPS)
    assert s.server_cost(2.5e5) == pytest.approx(1.012)
    assert s.server_cost(5e4) == pytest.approx(1.02)
    assert s.server_cost(0.0) == 1.0
    assert shared(remote={"enabled": True}).server_cost(2.5e5) == pytest.approx(1.0)


@pure_only
def test_a_put_makes_one_operation_per_chunk_of_each_servers_bytes():
    """100 kB operations: 250 kB to one server is 3; nothing is none; 400 kB over two
    servers is 200 kB each, 2 each: 4. 3 + 0 + 4 = 7."""
    s = shared(**OPS)
    assert s.put_ops([("a", 2.5e5, 1), ("b", 0.0, 1), ("c", 4e5, 2)]) == 7


@pure_only
def test_a_lockstep_flow_counts_progress_in_bytes_of_its_largest_part():
    """Parts of 200 kB and 100 kB over their own server links, both over a NIC: size
    200 kB; each server's cost per byte of progress is its share times its server cost,
    200 kB: 2 ops, 1 + 2,000 / 200,000 = 1.01; 100 kB: 0.5 x (1 + 1,000 / 100,000) =
    0.505; the NIC carries both, 300 / 200 = 1.5 per byte of progress."""
    s = shared(**OPS)
    links, size, costs, shares = s.lockstep([("s1", 2e5, 1), ("s2", 1e5, 1)], ("nic",))
    assert links == ("s1", "s2", "nic") and size == 2e5
    assert costs == pytest.approx((1.01, 0.505, 1.5))
    assert shares == pytest.approx((1.0, 0.5, 1.5))


def test_stalls_are_drawn_as_the_scenario_or_a_burst_says():
    """No stall probability: never; probability 1, fixed 2 s: every GET hangs 2 s; a
    stall burst (the faults' override) replaces the scenario's figures."""
    assert shared(remote={"enabled": True}).draw_stall() == 0.0
    stall = {"probability": 1.0, "duration": "2 s", "distribution": "fixed"}
    s = shared(remote={"enabled": True, "stall": stall})
    assert [s.draw_stall() for _ in range(3)] == [2.0, 2.0, 2.0]
    s.stall_override = (1.0, 3.0, "fixed")
    assert s.draw_stall() == 3.0
    s.stall_override = (0.0, 3.0, "fixed")
    assert s.draw_stall() == 0.0


HOST_ON = {"host": {"enabled": True}}  # prefetches land in host memory


def test_which_prefetch_policies_make_a_request_wait():
    """Prefetches from the remote store into host: wait_complete and timeout hold the
    request until theirs is in (or the timeout); best_effort does not."""

    def waits(**policy):
        return shared(tiers=HOST_ON, remote={"enabled": True}, prefetch=policy).prefetch_waits

    assert waits(policy="wait_complete") and waits(policy="timeout", timeout="1 s")
    assert not waits(policy="best_effort")


@pure_only
def test_a_listener_that_does_not_implement_a_report_says_so():
    listener = Listener()
    with pytest.raises(NotImplementedError):
        listener.engines_changed()
    with pytest.raises(NotImplementedError):
        listener.keeps(None)


# ---- the run's constants (kvsim.sim.constants) -------------------------------------------


def test_a_serial_engine_takes_one_whole_prompt_per_step():
    """Serial: no token budget (2**62) and one request a step; chunked: the scenario's
    8,192 tokens and up to 1,024 requests."""
    serial = Constants(toy())
    assert serial.serial and serial.budget == 2**62 and serial.max_requests == 1
    chunked = Constants(toy(engine={"batching": "chunked", "max_batched_tokens": 4096}))
    assert not chunked.serial and chunked.budget == 4096 and chunked.max_requests == 1024


def test_constants_from_the_toy_scenario():
    """1,000 B per token, 100-token blocks; no remote store: no client timeout; no
    restore limit: 2**62 in flight; 8 GPUs: an unsharded GET's issuing rank sends on 7/8
    of it; no prefetch policy: no prefetching."""
    run = Constants(toy())
    assert run.kv_bytes == 1000 and run.block_tokens == 100
    assert run.timeout is None and run.max_inflight == 2**62
    assert run.handoff_share == 7 / 8
    assert not run.prefetching and run.prefetch_timeout is None
    run = Constants(
        toy(
            remote={"enabled": True, "timeout": "2 s"},
            engine={"max_inflight_restores": 3},
            tiers=HOST_ON,
            prefetch={"policy": "timeout", "timeout": "250 ms"},
        )
    )
    assert run.timeout == 2.0 and run.max_inflight == 3
    assert run.prefetching and run.prefetch_timeout == 0.25


def test_a_model_without_a_kv_layout_is_kept_whole_by_every_rank():
    assert head_share(toy()) == 1.0


def test_track_seen_only_where_a_block_can_be_cached():
    """The toy has no GPU cache, no host, no NVMe, no remote: nothing to track."""
    assert not Constants(toy()).track_seen
    assert Constants(toy(tiers={"gpu": {"capacity": "1 MB"}})).track_seen
    assert Constants(toy(remote={"enabled": True})).track_seen


# ---- moved here ----------------------------------------------------------------------------


def test_head_share_of_the_shipped_llama_scenario():
    """scenarios/llama70b-h100.yaml: Llama-2-70B (8 KV heads) on 8 H100s at TP8."""
    assert head_share(api.load(SCENARIOS / "llama70b-h100.yaml")) == 1 / 8
    assert head_share(api.load(SCENARIOS / "quickstart.yaml")) == 1.0  # GLM-5: MLA


@pytest.mark.parametrize("module", ["engine", "tenancy", "faults", "scheduler", "shared"])
def test_the_simulations_parts_do_not_import_it(module):
    """Engine, tenancy and faults see the simulation through kvsim.sim.shared only: no
    import of kvsim.sim.simulation, even for type checking (no import circle)."""
    import ast
    from pathlib import Path

    import kvsim.sim

    path = Path(kvsim.sim.__file__).parent / f"{module}.py"
    tree = ast.parse(path.read_text(encoding="utf-8"))
    imported = {
        node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module
    } | {a.name for node in ast.walk(tree) if isinstance(node, ast.Import) for a in node.names}
    assert "kvsim.sim.simulation" not in imported
