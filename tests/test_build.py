"""The compiled core (setup.py) against the pure-Python source it is built from.

``pip install .`` compiles the simulation core with mypyc; an editable install runs the
.py files. Both must give the same results bit for bit. CI runs the suite on both
installs and says which one it expects (KVSIM_EXPECT_COMPILED), so a build that silently
fell back to pure Python fails here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import kvsim

from conftest import ROOT

# Scenarios that reach the paths where compiled code could diverge: lockstep remote GETs,
# per-rank shards, stalls and client timeouts, tenant namespacing with quotas, TTL and
# deletions, the multi-turn generator, P/D hand-offs queueing on the decode link, and
# co-located decoding with swaps.
CASES = [
    ("scenarios/paper/sharded-async.yaml", {"workload.requests": 600}),
    ("scenarios/paper/client-bugs.yaml", {"workload.requests": 600}),
    ("scenarios/tenant-isolation.yaml", {"workload.requests": 600}),
    (
        "scenarios/pd-handoff.yaml",
        {"workload.requests": 600, "cluster.handoff.bandwidth": "5 GB/s"},
    ),
    ("benchmarks/scale.yaml", {"workload.requests": 3000}),
    (  # co-located decoding, swapping KV out and in when its small pool fills
        "scenarios/colocated.yaml",
        {"workload.requests": 300, "engine.preemption": "swap", "node.kv_per_gpu": "1 GB"},
    ),
]

# prints which core it ran on, then one digest of rows, tiers and links per case
DIGEST = """
import hashlib, json, sys
import kvsim
from kvsim.api import load
from kvsim.sim.simulation import Simulation
print(kvsim.compiled())
for path, overrides in json.loads(sys.argv[1]):
    out = Simulation(load(path, overrides)).run()
    text = repr(list(out.rows)) + repr(out.tiers) + repr(out.links)
    print(hashlib.sha256(text.encode()).hexdigest())
"""


def _digests(cwd: Path, pythonpath: str | None) -> list[str]:
    """Run DIGEST in a fresh interpreter: [compiled?, digest per case]."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if pythonpath is not None:
        env["PYTHONPATH"] = pythonpath
    cases = json.dumps([[str(ROOT / p), o] for p, o in CASES])
    return subprocess.run(
        [sys.executable, "-c", DIGEST, cases],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()


def test_the_compiled_modules_pass_mypy():
    """mypyc compiles only code that type-checks; catch that here, not at install time."""
    api = pytest.importorskip("mypy.api", reason="mypy is in the test extras")
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    core = [str(ROOT / p) for p in pyproject["tool"]["kvsim"]["compiled"]]
    # the same flags as setup.py: the build environment lacks kvsim's dependencies
    limit = sys.getrecursionlimit()  # mypy raises it for the whole process: put it back
    try:
        out, err, status = api.run(["--ignore-missing-imports", "--follow-imports=silent", *core])
    finally:
        sys.setrecursionlimit(limit)
    assert status == 0, out + err


def test_the_installed_core_is_the_one_ci_expects():
    want = os.environ.get("KVSIM_EXPECT_COMPILED")
    if want is None:
        pytest.skip("KVSIM_EXPECT_COMPILED is not set (CI sets it: 1 compiled, 0 pure Python)")
    assert kvsim.compiled() is (want == "1"), f"kvsim.compiled() is {kvsim.compiled()}"


def test_compiled_and_pure_python_cores_give_identical_results(tmp_path):
    if not kvsim.compiled():
        pytest.skip("the pure-Python core is installed: nothing compiled to compare")
    if not (ROOT / "kvsim" / "sim" / "engine.py").is_file():
        pytest.skip("the kvsim sources are not beside the tests")
    # away from the checkout, a fresh interpreter imports the installed (compiled) core;
    # with the checkout first on its path, it runs the .py sources
    compiled = _digests(tmp_path, None)
    pure = _digests(tmp_path, str(ROOT))
    assert compiled[0] == "True" and pure[0] == "False", "the two runs did not get both cores"
    assert compiled[1:] == pure[1:]
