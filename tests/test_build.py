"""The compiled core (setup.py) against the pure-Python source it is built from.

``pip install .`` compiles the simulation core with mypyc; an editable install runs the
.py files. Both must give the same results bit for bit. CI runs the suite on both
installs and says which one it expects (KVSIM_EXPECT_COMPILED), so a build that silently
fell back to pure Python fails here.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tomllib

import pytest

import kvsim

from conftest import ROOT

# Scenarios that reach the paths where compiled code could diverge: lockstep remote GETs,
# per-rank shards, stalls and client timeouts, tenant namespacing with quotas, TTL and
# deletions, and the multi-turn generator.
CASES = [
    ("scenarios/paper/sharded-async.yaml", {"workload.requests": 600}),
    ("scenarios/paper/client-bugs.yaml", {"workload.requests": 600}),
    ("scenarios/tenant-isolation.yaml", {"workload.requests": 600}),
    ("benchmarks/scale.yaml", {"workload.requests": 3000}),
]

DIGEST = """
import hashlib, json, sys
from kvsim.api import load
from kvsim.sim.simulation import Simulation
cases = json.loads(sys.argv[1])
for path, overrides in cases:
    out = Simulation(load(path, overrides)).run()
    text = repr(list(out.rows)) + repr(out.tiers) + repr(out.links)
    print(hashlib.sha256(text.encode()).hexdigest())
"""


def _digests_here() -> list[str]:
    from kvsim.api import load
    from kvsim.sim.simulation import Simulation

    out = []
    for path, overrides in CASES:
        res = Simulation(load(ROOT / path, overrides)).run()
        text = repr(list(res.rows)) + repr(res.tiers) + repr(res.links)
        out.append(hashlib.sha256(text.encode()).hexdigest())
    return out


def test_the_compiled_modules_pass_mypy():
    """mypyc compiles only code that type-checks; catch that here, not at install time."""
    api = pytest.importorskip("mypy.api", reason="mypy is in the test extras")
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    core = [str(ROOT / p) for p in pyproject["tool"]["kvsim"]["compiled"]]
    # the same flags as setup.py: the build environment lacks kvsim's dependencies
    out, err, status = api.run(["--ignore-missing-imports", "--follow-imports=silent", *core])
    assert status == 0, out + err


def test_the_installed_core_is_the_one_ci_expects():
    want = os.environ.get("KVSIM_EXPECT_COMPILED")
    if want is None:
        pytest.skip("KVSIM_EXPECT_COMPILED is not set (CI sets it: 1 compiled, 0 pure Python)")
    assert kvsim.compiled() is (want == "1"), f"kvsim.compiled() is {kvsim.compiled()}"


def test_compiled_and_pure_python_cores_give_identical_results():
    if not kvsim.compiled():
        pytest.skip("the pure-Python core is installed: nothing compiled to compare")
    if not (ROOT / "kvsim" / "sim" / "engine.py").is_file():
        pytest.skip("the kvsim sources are not beside the tests")
    # the sources first on the path: a fresh interpreter runs the .py files
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cases = [[str(ROOT / p), o] for p, o in CASES]
    check = subprocess.run(
        [sys.executable, "-c", "import kvsim; print(kvsim.compiled())"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert check.stdout.strip() == "False", "the subprocess did not pick up the sources"
    pure = subprocess.run(
        [sys.executable, "-c", DIGEST, json.dumps(cases)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert _digests_here() == pure
