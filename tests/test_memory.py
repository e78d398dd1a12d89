"""Running out of memory: a clean one-line error (exit 2, no output), never a crash.

The compiled core can die with SIGSEGV when an allocation fails inside it, so the
simulation does not wait for one: a memory guard (kvsim.sim.simulation.MemoryGuard)
checks the process's size at its progress points and stops first. The CLI runs here use
whatever kvsim this test session imports (run from a folder outside the checkout, so an
installed compiled core is the one run), under a low RLIMIT_AS.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from kvsim.errors import InputError
from kvsim.sim.simulation import MAX_PROMPT_STEPS, MemoryGuard, Simulation

from conftest import req, toy

resource = pytest.importorskip("resource")
linux = pytest.mark.skipif(
    not Path("/proc/self/statm").exists(), reason="the memory guard reads /proc"
)
MIB = 1 << 20

# a workload whose queued requests hold ever more blocks: 12,500 blocks a prompt at
# 1,000 arrivals a second; it needs gigabytes within seconds
GROW = """\
name: grow
extends: {qs}
workload:
  kind: synthetic
  requests: 20000
  block_tokens: 16
  arrivals: {{process: constant, rate: 1000/s}}
  sessions: null
  system_prompts: null
  prompt_tokens: {{dist: fixed, value: 200000}}
"""
TINY = "name: tiny\nextends: {qs}\nworkload: {{requests: 200}}\nrun: {{warmup: 0 s}}\n"
QS = Path(__file__).resolve().parent.parent / "scenarios" / "quickstart.yaml"

# runs a command in this interpreter, then prints the process's peak virtual size
PEAK = """\
import sys
from kvsim.cli import main
code = main(sys.argv[1:])
for line in open("/proc/self/status"):
    if line.startswith("VmPeak:"):
        print("VMPEAK", int(line.split()[1]) * 1024)
sys.exit(code)
"""


def kvsim(args: list[str], cwd: Path, limit: int | None = None, code: str | None = None):
    """``python -m kvsim ARGS`` (or ``code`` with ARGS) in ``cwd`` under RLIMIT_AS ``limit``."""

    def cap() -> None:
        if limit is not None:
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    cmd = [sys.executable, "-m", "kvsim"] if code is None else [sys.executable, "-c", code]
    return subprocess.run(
        [*cmd, *args], cwd=cwd, preexec_fn=cap, capture_output=True, text=True, timeout=600
    )


@pytest.fixture(scope="module")
def baseline(tmp_path_factory) -> int:
    """Peak virtual size of a small run of this kvsim (imports, numpy's threads...)."""
    d = tmp_path_factory.mktemp("baseline")
    (d / "tiny.yaml").write_text(TINY.format(qs=QS))
    done = kvsim(["run", "tiny.yaml", "--quiet"], d, code=PEAK)
    assert done.returncode == 0, done.stderr
    return int(next(x for x in done.stdout.splitlines() if x.startswith("VMPEAK")).split()[1])


@linux
def test_running_out_of_memory_is_one_clean_line(tmp_path, baseline):
    """Under an address-space limit a run that outgrows it stops with exit 2 and one
    line (the compiled core used to die with SIGSEGV, exit 139, in some such runs), and
    writes nothing."""
    (tmp_path / "grow.yaml").write_text(GROW.format(qs=QS))
    done = kvsim(
        ["run", "grow.yaml", "--quiet", "--out", "out"], tmp_path, limit=baseline + 384 * MIB
    )
    assert done.returncode == 2, (done.returncode, done.stderr[-2000:])
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "out of memory" in lines[0], done.stderr[-2000:]
    assert "Traceback" not in done.stderr and done.stdout == ""
    assert not (tmp_path / "out").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["grow.yaml"]  # no staging folder left


GUARDED = """\
import sys
from kvsim.config.loader import load_scenario
from kvsim.sim.simulation import Simulation
try:
    Simulation(load_scenario(sys.argv[1])).run()
except MemoryError as e:
    print("STOPPED", e)
"""


@linux
def test_the_guard_stops_the_run_before_an_allocation_fails(tmp_path, baseline):
    """The stop comes from the guard (it names the limit), not from the allocator."""
    (tmp_path / "grow.yaml").write_text(GROW.format(qs=QS))
    done = kvsim(["grow.yaml"], tmp_path, limit=baseline + 384 * MIB, code=GUARDED)
    assert "STOPPED" in done.stdout and "RLIMIT_AS" in done.stdout, (done.stdout, done.stderr)


@linux
def test_the_guard():
    guard = MemoryGuard()
    guard.check()  # no limit set here (or far from it): nothing happens
    guard.vm_limit = 1  # as if the limit were a byte away
    with pytest.raises(MemoryError, match="RLIMIT_AS"):
        guard.check()
    guard.vm_limit = -1
    guard.data_limit = 1
    with pytest.raises(MemoryError, match="RLIMIT_DATA"):
        guard.check()
    # the machine running short, once the process holds a good share of it
    guard.data_limit = -1
    guard.watch_rss = 1
    guard.reserve = 1 << 62  # more than any machine has left
    with pytest.raises(MemoryError, match="left"):
        guard.check()
    guard.watch_rss = 1 << 60  # a small process: the kernel would pick a larger one
    guard.check()
    # headroom below a limit: an eighth of it, at least 128 MiB
    assert MemoryGuard._below(-1) == -1
    assert MemoryGuard._below(100 * MIB) == 0  # a limit below the headroom: stop at once
    assert MemoryGuard._below(1024 * MIB) == 896 * MIB
    assert MemoryGuard._below(8192 * MIB) == 7168 * MIB


@linux
def test_the_simulation_checks_memory_as_it_goes():
    """Steps, arrivals and finished requests all reach the guard (a run of one long
    prompt in many steps too: it finishes no request for a long time)."""
    calls: list[str] = []
    sc = toy(engine={"batching": "chunked", "max_batched_tokens": 100})
    sim = Simulation(sc, requests=[req(0, 0.0, 250_000, list(range(2500)))])
    sim.check_memory = lambda: calls.append("sim")
    for e in sim.engines:
        e.guard = lambda: calls.append("engine")
    sim.run()
    assert sim.engines[0].steps == 2500
    assert calls == ["sim"] + ["engine"] * (2500 // 1024)  # the arrival, then steps

    def stop() -> None:
        raise MemoryError("stopped in a step")

    # raised inside an engine's process, it leaves the run as it is (SimPy re-raises it)
    sim = Simulation(sc, requests=[req(0, 0.0, 250_000, list(range(2500)))])
    for e in sim.engines:
        e.guard = stop
    with pytest.raises(MemoryError, match="stopped in a step"):
        sim.run()


def test_a_threshold_that_makes_a_prompt_too_many_steps_is_refused():
    """long_prefill_token_threshold: 1 is legal (vLLM's knob is a token count), but it
    would make a million-token prompt a million steps, each recorded: a prompt may take
    at most MAX_PROMPT_STEPS steps under the threshold, and the message says how far to
    raise it."""
    sc = toy(engine={"batching": "chunked", "long_prefill_token_threshold": 1})
    n = MAX_PROMPT_STEPS + 1
    with pytest.raises(InputError, match=r"engine\.long_prefill_token_threshold") as e:
        Simulation(sc, requests=[req(0, 0.0, n, list(range(-(-n // 100))))]).run()
    assert "at least 2" in str(e.value)
    # under the bound it runs; with the threshold off, or above the budget (which then
    # caps a step), nothing is refused (the clock stops early: only the arrival counts)
    brief = {"warmup": "0 s", "max_time": "1 s"}
    for engine in ({"long_prefill_token_threshold": 1}, {}, {"long_prefill_token_threshold": 1000}):
        sc = toy(engine={"batching": "chunked", "max_batched_tokens": 100, **engine}, run=brief)
        n = MAX_PROMPT_STEPS * (1 if engine.get("long_prefill_token_threshold") == 1 else 200)
        sim = Simulation(sc, requests=[req(0, 0.0, n, list(range(-(-n // 100))))])
        sim.run()
        assert sim.arrived == 1
