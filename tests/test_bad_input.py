"""User mistakes: exit code 2, a one-line message naming the file/line/field, no output.

The cases live in tests/bad_inputs.py, which also renders docs/bad-inputs.md."""

import pytest
from bad_inputs import CASES, ROOT, run_case, table

from kvsim.cli import main


@pytest.mark.parametrize("case", CASES, ids=[c.label for c in CASES])
def test_bad_input_is_refused_cleanly(tmp_path, case):
    rc, err, out = run_case(case, tmp_path)
    assert rc == 2, err
    assert err.startswith("kvsim: error: ") and "\n" not in err, err
    assert "Traceback" not in err
    for f in case.fragments:
        assert f in err, err
    assert not out.exists()  # nothing written, not even an empty folder


def test_the_catalogue_has_at_least_fifty_distinct_cases():
    assert len({c.label for c in CASES}) == len(CASES) >= 50


def test_docs_table_is_current():
    doc = ROOT / "docs" / "bad-inputs.md"
    assert doc.read_text(encoding="utf-8") == table(), (
        "regenerate: python tests/bad_inputs.py > docs/bad-inputs.md"
    )


def test_extends_cycle_over_two_files(capsys, tmp_path):
    a, b = tmp_path / "a.yaml", tmp_path / "b.yaml"
    a.write_text("extends: b.yaml\n")
    b.write_text("extends: a.yaml\n")
    assert main(["validate", str(a)]) == 2
    assert "extends cycle" in capsys.readouterr().err


def test_relative_paths_resolve_against_the_scenario_folder(capsys, tmp_path, monkeypatch):
    # a trace named relative to the scenario is found from any working directory, and a
    # relative `extends` does not look in the working directory
    sub = tmp_path / "deep"
    sub.mkdir()
    (sub / "t.jsonl").write_text(
        '{"timestamp": 0, "input_length": 4, "output_length": 1, "hash_ids": [1]}\n'
    )
    sc = sub / "s.yaml"
    sc.write_text(
        f"extends: {ROOT / 'scenarios' / 'quickstart.yaml'}\nrun: {{warmup: 0 s}}\n"
        "workload: {kind: mooncake, path: t.jsonl}\n"
    )
    monkeypatch.chdir(tmp_path)
    assert main(["run", str(sc), "--quiet"]) == 0
    (tmp_path / "parent.yaml").write_text("name: decoy\n")
    (sub / "child.yaml").write_text("extends: parent.yaml\n")
    assert main(["validate", str(sub / "child.yaml")]) == 2
    assert "not found" in capsys.readouterr().err
