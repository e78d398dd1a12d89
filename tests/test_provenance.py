"""Provenance in summary.json (kvsim.results.provenance) and kvsim check's note when a
baseline's differs: every field checked against what Python and hashlib say directly."""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest

import kvsim
from kvsim import api, plugins
from kvsim.cli import main
from kvsim.experiments.sweep.tables import flat_summary
from kvsim.results import provenance as prov

from conftest import ROOT, SCENARIOS

ROUTER = '''
from kvsim.plugins import RoutingPolicy, register


@register("e29_first_engine")
class FirstEngine(RoutingPolicy):
    """Every request to engine 0."""

    def route(self, request, engines):
        return 0
'''


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def scenario(tmp_path):
    """A scenario that extends the shipped Mooncake sample (its trace) and routes with a
    plugin file: every kind of file a run reads."""
    (tmp_path / "router.py").write_text(ROUTER)
    path = tmp_path / "child.yaml"
    path.write_text(
        f"extends: {SCENARIOS / 'mooncake-sample.yaml'}\n"
        "name: e29-child\nplugins: [router.py]\n"
        "cluster: {router: e29_first_engine}\n"
        "workload: {limit: 60}\nrun: {warmup: 0 s}\n"
    )
    return path


def test_provenance_fields_are_what_python_and_hashlib_say(scenario):
    p = api.run(scenario).summary["provenance"]
    assert set(p) == {
        "kvsim_version",
        "git_commit",
        "git_dirty",
        "core",
        "python",
        "platform",
        "packages",
        "files",
    }  # fmt: skip  (no clock time: same-seed runs keep identical bytes)
    assert p["kvsim_version"] == kvsim.__version__
    assert p["python"] == platform.python_version()
    engine = sys.modules["kvsim.sim.engine"].__file__
    assert p["core"] == ("pure" if engine.endswith(".py") else "compiled")
    assert p["core"] == ("compiled" if kvsim.compiled() else "pure")
    assert p["packages"] == {name: version(name) for name in prov.PACKAGES}
    files = {(f["role"], Path(f["path"]).name): f["sha256"] for f in p["files"]}
    trace = ROOT / "traces" / "sample_chat.jsonl"
    assert files == {
        ("scenario", "child.yaml"): sha(scenario),
        ("extends", "mooncake-sample.yaml"): sha(SCENARIOS / "mooncake-sample.yaml"),
        ("profile", "b300-pcp8-glm5.yaml"): sha(ROOT / "kvsim/profiles/b300-pcp8-glm5.yaml"),
        ("trace", "sample_chat.jsonl"): sha(trace),
        ("plugin", "router.py"): sha(scenario.parent / "router.py"),
    }
    assert [f["role"] for f in p["files"]] == ["scenario", "extends", "profile", "trace", "plugin"]


@pytest.mark.parametrize("scenario_name", ["mooncake-sample.yaml", "llama70b-h100.yaml"])
def test_files_named_from_another_folder_are_the_files_read(tmp_path, monkeypatch, scenario_name):
    """A scenario given by a relative path from another folder: its trace and its
    profile's timing table are the files the run read (the loader resolved them against
    the files that named them), by a normalised absolute path, with their digests."""
    monkeypatch.chdir(tmp_path)
    relative = os.path.relpath(SCENARIOS / scenario_name, tmp_path)
    files = {f["role"]: f for f in prov.provenance(api.load(relative))["files"]}
    assert files["scenario"]["path"] == str((SCENARIOS / scenario_name).resolve())
    for role in ("trace", "timing table"):
        if role in files:
            path = Path(files[role]["path"])
            assert path.is_absolute() and ".." not in path.parts
            assert files[role]["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    assert "trace" in files or "timing table" in files


def test_the_git_commit_is_the_checkouts():
    root = prov.checkout_root()
    p = prov.environment()
    if root is None:  # an installed kvsim: no checkout to name
        assert p["git_commit"] is None and p["git_dirty"] is None
        return
    if shutil.which("git") is None:
        pytest.skip("no git to compare with")
    head = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, check=True
    ).stdout.strip()
    assert p["git_commit"] == head
    assert isinstance(p["git_dirty"], bool)


def test_git_commit_reads_loose_and_packed_refs_and_a_detached_head(tmp_path):
    a, b = "a" * 40, "b" * 40
    git = tmp_path / ".git"
    (git / "refs" / "heads").mkdir(parents=True)
    (git / "HEAD").write_text("ref: refs/heads/main\n")
    (git / "packed-refs").write_text(f"# pack-refs with: peeled\n{a} refs/heads/main\n")
    assert prov.git_commit(tmp_path) == a
    (git / "refs" / "heads" / "main").write_text(b + "\n")  # a loose ref wins
    assert prov.git_commit(tmp_path) == b
    (git / "HEAD").write_text(a + "\n")
    assert prov.git_commit(tmp_path) == a
    (git / "HEAD").write_text("ref: refs/heads/gone\n")
    assert prov.git_commit(tmp_path) is None


def test_an_installed_kvsim_has_no_checkout_even_inside_one(tmp_path):
    (tmp_path / ".git").mkdir()
    inside = tmp_path / ".venv" / "lib" / "python3" / "site-packages" / "kvsim" / "x.py"
    assert prov.checkout_root(inside) is None
    assert prov.checkout_root(tmp_path / "kvsim" / "x.py") == tmp_path.resolve()


def test_a_changed_file_gets_its_new_digest(tmp_path):
    # hashed once per process while unchanged; an edit (another size) is seen
    f = tmp_path / "trace.jsonl"
    f.write_text("one\n")
    assert prov.sha256_file(f) == sha(f)
    f.write_text("two lines\n")
    assert prov.sha256_file(f) == sha(f)
    assert prov.sha256_file(tmp_path / "gone") is None


def test_a_policy_registered_by_the_callers_code_names_its_file(tmp_path):
    from kvsim.plugins import RoutingPolicy

    class Caller(RoutingPolicy):
        def route(self, request, engines):
            return 0

    path = tmp_path / "s.yaml"
    path.write_text(
        f"extends: {SCENARIOS / 'mooncake-sample.yaml'}\ncluster: {{router: e29_caller}}\n"
    )
    with plugins.registered("e29_caller", Caller):
        sc = api.load(path)
        files = prov.provenance(sc)["files"]
    mine = [f for f in files if f["role"] == "plugin"]
    assert [Path(f["path"]).name for f in mine] == [Path(__file__).name]
    assert mine[0]["sha256"] == sha(Path(__file__))


def test_sweep_rows_carry_no_provenance(scenario):
    row = flat_summary(api.run(scenario).summary)
    assert not [k for k in row if k.startswith("provenance")]


# ---- kvsim check's note ------------------------------------------------------------------

SUITE = f"""
name: provenance-test
seeds: [0]
entries:
  - scenario: {SCENARIOS / "paper" / "no-remote.yaml"}
    name: small
    set: {{workload.requests: 200, run.warmup: 0 s}}
    loads: [1.0]
"""


@pytest.fixture(scope="module")
def baseline(tmp_path_factory):
    d = tmp_path_factory.mktemp("prov")
    (d / "suite.yaml").write_text(SUITE)
    assert main(["baseline", str(d / "suite.yaml"), "--out", str(d / "base")]) == 0
    return d


def _check(d: Path, doc: dict, report: Path) -> int:
    (d / "edited").mkdir(exist_ok=True)
    (d / "edited" / "baseline.json").write_text(json.dumps(doc))
    argv = ["check", str(d / "suite.yaml"), "--baseline", str(d / "edited")]
    return main([*argv, "--report", str(report)])


def test_the_baseline_records_provenance(baseline):
    doc = json.loads((baseline / "base" / "baseline.json").read_text())
    assert doc["provenance"] == json.loads(json.dumps(prov.environment()))


def test_check_notes_an_edited_provenance_without_failing(baseline, tmp_path, capsys):
    doc = json.loads((baseline / "base" / "baseline.json").read_text())
    doc["provenance"]["packages"]["numpy"] = "0.0.1"
    doc["provenance"]["core"] = "compiled" if doc["provenance"]["core"] == "pure" else "pure"
    doc["provenance"]["git_commit"] = "f" * 40
    capsys.readouterr()
    assert _check(baseline, doc, tmp_path) == 0  # a note, never a failure
    out = capsys.readouterr().out
    (note,) = [x for x in out.splitlines() if "baseline was made by other code" in x]
    assert note.startswith("note: ")
    assert f"numpy 0.0.1 -> {version('numpy')}" in note
    assert f"git_commit {'f' * 40} -> " in note and "core " in note
    assert "baseline was made by other code" in (tmp_path / "kvsim-check.md").read_text()


def test_an_unchanged_or_older_baseline_gets_no_provenance_note(baseline, tmp_path, capsys):
    doc = json.loads((baseline / "base" / "baseline.json").read_text())
    for edit in (lambda d: None, lambda d: d.pop("provenance")):
        edit(doc)
        capsys.readouterr()
        assert _check(baseline, doc, tmp_path) == 0
        assert "other code" not in capsys.readouterr().out


def test_a_provenance_that_is_not_an_object_is_refused(baseline, tmp_path, capsys):
    doc = json.loads((baseline / "base" / "baseline.json").read_text())
    doc["provenance"] = "yesterday"
    capsys.readouterr()
    assert _check(baseline, doc, tmp_path) == 2
    assert "provenance: expected an object" in capsys.readouterr().err


def test_differences_name_each_changed_field_and_file():
    now = {
        **prov.environment(),
        "files": [{"role": "trace", "path": "/a/t.jsonl", "sha256": "1" * 64}],
    }
    then = json.loads(json.dumps(now))
    assert prov.differences(then, now) == []
    then["python"] = "2.7.18"
    then["packages"]["pandas"] = None  # not installed then
    then["files"][0].update(path="/elsewhere/t.jsonl", sha256="2" * 64)  # moved and edited
    assert prov.differences(then, now) == [
        f"python 2.7.18 -> {now['python']}",
        f"pandas none -> {now['packages']['pandas']}",
        "trace t.jsonl sha256 222222222222 -> 111111111111",
    ]
    assert prov.differences("not an object", now) == []
