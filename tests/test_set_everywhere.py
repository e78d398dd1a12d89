"""``--set`` reaches the run in every command that takes it (issue 39, class 9).

``kvsim capacity --sweep FILE --set profile=...`` used to apply the ``--set`` to scenarios
already loaded, where a new profile changes nothing but the name: it returned the default
profile's figures. Every command now takes ``--set`` the way ``kvsim run`` does (below the
profile merge: kvsim.config.loader.with_sets). Each test runs a command three ways: on a
scenario with ``--set profile=...``, on the same scenario with that profile written in the
file, and on the scenario alone. The first must give the second's answer exactly (same
seeds: bit for bit) and not the third's. Every command that accepts --set
(kvsim/cli/parser.py's ``_add_overrides``) is here: run, validate, trace generate, costmodel,
capacity (plain, --minimize, --sweep, --sweep --cheapest), sensitivity, baseline, check.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvsim.cli import main

TINY = """\
name: tiny
seed: 0
cluster: {engines: 1, load_policy: sync}
tiers:
  host: {enabled: false}
  nvme: {enabled: false}
remote: {enabled: false}
run: {warmup: 0 s}
cost: {gpu_node_hour: 10}
workload:
  kind: synthetic
  requests: 40
  arrivals: {process: poisson, rate: 4/s}
  prompt_tokens: {dist: fixed, value: 8192}
"""

# a shipped profile, and a composition from the catalogue (a mapping given as one --set)
PROFILES = {
    "named": "h200-tp8-glm5",
    "composed": "{model: llama-3.1-8b, gpu: H100-SXM, tp: 1}",
}


@pytest.fixture(params=sorted(PROFILES))
def files(request, tmp_path: Path) -> tuple[Path, Path, str]:
    """(a: the scenario, b: the same with the profile written in it, the --set)."""
    profile = PROFILES[request.param]
    a = tmp_path / "a.yaml"
    a.write_text(TINY)
    b = tmp_path / "b.yaml"
    b.write_text(TINY + f"profile: {profile}\n")
    return a, b, f"profile={profile}"


def out_of(capsys, argv: list[str], code: int = 0) -> str:
    rc = main(argv)
    captured = capsys.readouterr()
    assert rc == code, captured.err
    return captured.out


def same_as_the_file(capsys, argv_of, files, *, key=lambda out: out) -> None:
    """``argv_of(path, extra)`` run on a + --set, on b, and on a: the first two agree,
    the third differs (so the --set changed the answer, and changed it to the file's)."""
    a, b, expr = files
    with_set = key(out_of(capsys, argv_of(a, ["--set", expr])))
    in_file = key(out_of(capsys, argv_of(b, [])))
    without = key(out_of(capsys, argv_of(a, [])))
    assert with_set == in_file
    assert with_set != without


def metrics(out: str) -> tuple:
    d = json.loads(out)
    return (d["ttft_p50_s"], d["ttft_p99_s"], d["gpu_busy_frac"], d["requests"])


def test_run(capsys, files):
    same_as_the_file(
        capsys, lambda p, x: ["run", str(p), "--json", "--quiet", *x], files, key=metrics
    )


def test_validate(capsys, files):
    # the GPU memory pools it prints come from the profile's node and model
    same_as_the_file(
        capsys,
        lambda p, x: ["validate", str(p), *x],
        files,
        key=lambda out: out.replace("b.yaml", "a.yaml"),
    )


def test_trace_generate(capsys, tmp_path):
    # the workload does not depend on the profile: a --set of the workload, against the
    # file that writes it
    a = tmp_path / "a.yaml"
    a.write_text(TINY)
    b = tmp_path / "b.yaml"
    b.write_text(TINY.replace("value: 8192", "value: 4096"))
    traces = []
    for path, extra in ((a, ["--set", "workload.prompt_tokens.value=4096"]), (b, []), (a, [])):
        out = tmp_path / f"t{len(traces)}.jsonl"
        out_of(capsys, ["trace", "generate", str(path), str(out), *extra])
        traces.append(out.read_text())
    assert traces[0] == traces[1] != traces[2]


def test_costmodel(capsys, files):
    def key(out: str) -> str:
        d = json.loads(out)
        d.pop("scenario", None)
        return json.dumps(d, sort_keys=True).replace("b.yaml", "a.yaml")

    same_as_the_file(capsys, lambda p, x: ["costmodel", str(p), "--json", *x], files, key=key)


CAPACITY = ["--slo", "ttft_p99<=2s", "--reps", "1", "--tol", "0.2", "--json"]


def rates(out: str) -> list:
    rows = json.loads(out)
    return [(r["capacity_rps"], r["evaluations"]) for r in rows]


def test_capacity(capsys, files):
    same_as_the_file(capsys, lambda p, x: ["capacity", str(p), *CAPACITY, *x], files, key=rates)


def test_capacity_minimize(capsys, files):
    def key(out: str) -> tuple:
        d = json.loads(out)
        return json.dumps(d, sort_keys=True)

    same_as_the_file(
        capsys,
        lambda p, x: [
            "capacity",
            str(p),
            *CAPACITY,
            "--minimize",
            "cluster.engines",
            "--range",
            "1..16",
            "--set",
            "workload.arrivals.rate=8/s",
            *x,
        ],
        files,
        key=key,
    )


def sweep_of(path: Path) -> Path:
    sweep = path.with_name(f"sweep-{path.stem}.yaml")
    sweep.write_text(f"base: {path.name}\ngrid:\n  workload.prompt_tokens.value: [4096, 8192]\n")
    return sweep


def test_capacity_sweep(capsys, files):
    same_as_the_file(
        capsys,
        lambda p, x: ["capacity", "--sweep", str(sweep_of(p)), *CAPACITY, "--workers", "1", *x],
        files,
        key=rates,
    )


def test_capacity_sweep_cheapest(capsys, files):
    def key(out: str) -> list:
        return [(r["ttft_p99_s"], r["meets"], r["usd_per_hour"]) for r in json.loads(out)]

    def argv(p: Path, x: list[str]) -> list[str]:
        return ["capacity", "--sweep", str(sweep_of(p)), *CAPACITY, "--cheapest", *x]

    a, b, expr = files
    got = []
    for path, extra in ((a, ["--set", expr]), (b, []), (a, [])):
        rc = main(argv(path, extra))
        captured = capsys.readouterr()
        assert rc in (0, 1), captured.err  # 1: no layout meets the SLO (a verdict)
        got.append(key(captured.out))
    assert got[0] == got[1] != got[2]


def test_sensitivity(capsys, files):
    same_as_the_file(
        capsys,
        lambda p, x: [
            "sensitivity",
            str(p),
            "--metric",
            "ttft_p99_s",
            "--vary",
            "workload.arrivals.rate",
            *x,
        ],
        files,
        key=lambda out: out.replace("b.yaml", "a.yaml"),
    )


def suite_of(path: Path) -> Path:
    suite = path.with_name(f"suite-{path.stem}.yaml")
    suite.write_text(
        f"name: gate\nseeds: [0]\nentries:\n  - scenario: {path.name}\n    name: tiny\n"
        "    loads: [1.0]\n"
    )
    return suite


def points(folder: Path) -> list:
    doc = json.loads((folder / "baseline.json").read_text())
    return [p["metrics"] for e in doc["entries"] for p in e["points"]]


def test_baseline(capsys, files):
    a, b, expr = files
    made = []
    for i, (path, extra) in enumerate(((a, ["--set", expr]), (b, []), (a, []))):
        out = a.parent / f"base{i}"
        out_of(capsys, ["baseline", str(suite_of(path)), "--out", str(out), *extra])
        made.append(points(out))
    assert made[0] == made[1] != made[2]


def test_check(capsys, files):
    """Against a baseline made from the file that names the profile: with the --set, the
    same scenario (--strict passes) and the same figures; without it, another scenario."""
    a, b, expr = files
    base = a.parent / "base"
    out_of(capsys, ["baseline", str(suite_of(b)), "--out", str(base)])
    report = a.parent / "report"
    argv = ["check", str(suite_of(a)), "--baseline", str(base), "--strict", "--report"]
    out_of(capsys, [*argv, str(report), "--set", expr])
    rows = [
        r for r in (report / "kvsim-check.md").read_text().splitlines() if r.startswith("| tiny")
    ]
    assert rows and all("| +0 (+0.0%) |" in r for r in rows), rows  # the baseline's figures
    rc = main([*argv, str(a.parent / "report2")])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "differs from the baseline's" in err, err


def test_a_new_profile_for_a_loaded_scenario_is_refused(files):
    """The mechanism of the silent drop: a Scenario has its profile's values merged in,
    so a ``profile`` override of it would rename it and change nothing else."""
    from kvsim import api
    from kvsim.errors import InputError

    a, _, expr = files
    sc = api.load(a)
    for overrides in ({"profile": expr.split("=", 1)[1]}, [expr]):
        with pytest.raises(InputError, match="profile's values merged in already"):
            api.load(sc, overrides)
    assert api.load(a, [expr]).profile != sc.profile  # from the file: it works


@pytest.mark.parametrize("mode", [[], ["--cheapest"]])
def test_a_set_that_makes_a_swept_value_impossible_is_refused_as_run_refuses_it(
    capsys, tmp_path, mode
):
    """The issue's case: per-rank sharding needs PCP ranks, which the h200 profile has
    not. `kvsim run` of the combination refuses it; so does capacity --sweep, naming the
    sweep file's swept value (it used to answer with the default profile's figures)."""
    a = tmp_path / "a.yaml"
    a.write_text(TINY)
    sweep = tmp_path / "s.yaml"
    sweep.write_text(
        "base: a.yaml\ngrid:\n  remote.sharding: [none, per_rank]\nset:\n  remote.enabled: true\n"
    )
    profile = ["--set", "profile=h200-tp8-glm5"]
    rc = main(
        [
            "run",
            str(a),
            *profile,
            "--set",
            "remote.enabled=true",
            "--set",
            "remote.sharding=per_rank",
            "--quiet",
        ]
    )
    ran = capsys.readouterr().err.strip()
    assert rc == 2 and ran.endswith("remote.sharding: per_rank needs ranks: node.pcp is 1")
    out = tmp_path / "out"
    argv = ["capacity", "--sweep", str(sweep), *CAPACITY, "--workers", "1", *profile, *mode]
    rc = main([*argv, *(["--out", str(out)] if not mode else [])])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "\n" not in err, err
    assert err == (
        f"kvsim: error: {sweep}: grid remote.sharding=per_rank: remote.sharding: per_rank "
        "needs ranks: node.pcp is 1"
    )
    assert not out.exists()
