"""User mistakes: exit code 2, a one-line message naming the file/line/field, no output."""

import textwrap

import pytest

from kvsim.cli import main

from conftest import SCENARIOS

QS = SCENARIOS / "quickstart.yaml"


def child(tmp_path, body, name="bad.yaml"):
    p = tmp_path / name
    p.write_text(f"extends: {QS}\n" + textwrap.dedent(body), encoding="utf-8")
    return p


def run_cli(capsys, tmp_path, args):
    out = tmp_path / "out"
    rc = main([*args, "--out", str(out), "--quiet"])
    err = capsys.readouterr().err.strip()
    return rc, err, out


SCENARIO_MISTAKES = [
    (
        "unknown key",
        "remote:\n  shardng: per_rank\n",
        ["bad.yaml:3", "remote.shardng", "did you mean 'sharding'"],
    ),
    (
        "wrong unit",
        "remote:\n  bandwidth: 12 GB\n",
        ["bad.yaml:3", "remote.bandwidth", "unknown bandwidth unit"],
    ),
    ("missing unit", "remote:\n  bandwidth: 12\n", ["remote.bandwidth", "missing unit"]),
    ("not a number", "remote:\n  bandwidth: fast\n", ["expected a bandwidth"]),
    ("negative bandwidth", "remote:\n  bandwidth: -3 GB/s\n", ["greater than 0"]),
    (
        "zero block size",
        "workload:\n  block_tokens: 0\n",
        ["workload.block_tokens", "greater than 0"],
    ),
    (
        "tier larger than its memory",
        "tiers:\n  host: {capacity: 3 TB}\n",
        ["bad.yaml:3", "tiers.host.capacity", "host_dram"],
    ),
    ("gpu tier larger than HBM", "tiers:\n  gpu: {capacity: 2 TB}\n", ["tiers.gpu.capacity"]),
    ("NaN", "timing:\n  scale: .nan\n", ["timing.scale", "finite"]),
    ("negative size", "remote:\n  capacity: -1 GB\n", ["remote.capacity"]),
    ("wrong type", "cluster:\n  engines: four\n", ["cluster.engines", "integer"]),
    ("unknown choice", "cluster:\n  load_policy: lazy\n", ["cluster.load_policy", "'sync'"]),
    ("unknown router", "cluster:\n  router: random\n", ["unknown router", "round_robin"]),
    ("unknown eviction", "tiers:\n  host: {eviction: mru}\n", ["unknown eviction policy"]),
    ("bad pcp", "node:\n  pcp: 3\n", ["node.pcp", "divide"]),
    ("unknown profile", "profile: b200\n", ["bad.yaml:2", "unknown profile 'b200'"]),
    (
        "missing trace",
        "workload:\n  kind: mooncake\n  path: nowhere.jsonl\n",
        ["workload.path", "not found"],
    ),
    ("yaml syntax", "remote: [\n", ["YAML syntax error"]),
    ("duplicate key", "seed: 1\nseed: 2\n", ["bad.yaml:3", "duplicate key"]),
    (
        "timing not monotone",
        "timing:\n  new_tokens: [1, 2]\n  cached_tokens: [0]\n  seconds: [[0.2], [0.1]]\n",
        ["timing.seconds", "decrease"],
    ),
]


@pytest.mark.parametrize(
    ("label", "body", "fragments"), SCENARIO_MISTAKES, ids=[m[0] for m in SCENARIO_MISTAKES]
)
def test_scenario_mistakes(capsys, tmp_path, label, body, fragments):
    bad = child(tmp_path, body)
    rc, err, out = run_cli(capsys, tmp_path, ["run", str(bad)])
    assert rc == 2, err
    assert err.startswith("kvsim: error: ") and "\n" not in err
    for f in fragments:
        assert f in err, err
    assert not out.exists()


TRACE_MISTAKES = [
    (
        "unsorted",
        [
            '{"timestamp": 5, "input_length": 10, "output_length": 1, "hash_ids": [1]}',
            '{"timestamp": 1, "input_length": 10, "output_length": 1, "hash_ids": [2]}',
        ],
        [".jsonl:2", "sorted"],
    ),
    (
        "truncated line",
        [
            '{"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [1]}',
            '{"timestamp": 1, "input_le',
        ],
        [".jsonl:2", "invalid JSON"],
    ),
    (
        "hash_ids vs length",
        ['{"timestamp": 0, "input_length": 600, "output_length": 1, "hash_ids": [1]}'],
        [".jsonl:1", "hash_ids", "needs 2"],
    ),
    (
        "negative length",
        ['{"timestamp": 0, "input_length": -4, "output_length": 1, "hash_ids": []}'],
        ["input_length", ">= 1"],
    ),
    (
        "NaN timestamp",
        ['{"timestamp": NaN, "input_length": 4, "output_length": 1, "hash_ids": [1]}'],
        ["timestamp"],
    ),
    (
        "missing field",
        ['{"timestamp": 0, "output_length": 1, "hash_ids": [1]}'],
        ["input_length: missing field"],
    ),
    ("empty file", [], ["no requests"]),
]


@pytest.mark.parametrize(
    ("label", "lines", "fragments"), TRACE_MISTAKES, ids=[m[0] for m in TRACE_MISTAKES]
)
def test_trace_mistakes(capsys, tmp_path, label, lines, fragments):
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    bad = child(tmp_path, f"workload:\n  kind: mooncake\n  path: {trace}\n")
    rc, err, out = run_cli(capsys, tmp_path, ["run", str(bad)])
    assert rc == 2, err
    assert "\n" not in err
    for f in fragments:
        assert f in err, err
    assert not out.exists()


def test_azure_mistakes(capsys, tmp_path):
    trace = tmp_path / "a.csv"
    trace.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2023-11-16 18:17:03.9799600,12,3\n2023-11-16 18:17:04.1,many,3\n"
    )
    rc = main(["trace", "stats", str(trace)])
    err = capsys.readouterr().err
    assert rc == 2 and "a.csv:3" in err and "ContextTokens" in err
    trace.write_text("when,prompt\n1,2\n")
    assert main(["trace", "stats", str(trace)]) == 2
    assert "expected a header" in capsys.readouterr().err


def test_bad_override_and_bad_out(capsys, tmp_path):
    assert main(["validate", str(QS), "--set", "remote.sharding"]) == 2
    assert "--set remote.sharding" in capsys.readouterr().err
    assert main(["validate", str(QS), "--set", "remote.sharding=diagonal"]) == 2
    assert "remote.sharding" in capsys.readouterr().err
    f = tmp_path / "file"
    f.write_text("x")
    assert main(["run", str(QS), "--out", str(f), "--quiet"]) == 2
    assert "not a folder" in capsys.readouterr().err


def test_extends_cycle_and_missing_parent(capsys, tmp_path):
    a, b = tmp_path / "a.yaml", tmp_path / "b.yaml"
    a.write_text("extends: b.yaml\n")
    b.write_text("extends: a.yaml\n")
    assert main(["validate", str(a)]) == 2
    assert "extends cycle" in capsys.readouterr().err
    a.write_text("extends: gone.yaml\n")
    assert main(["validate", str(a)]) == 2
    assert "not found" in capsys.readouterr().err


def test_unsafe_yaml_is_refused(capsys, tmp_path):
    p = tmp_path / "evil.yaml"
    p.write_text("name: !!python/object/apply:os.system ['echo pwned']\n")
    assert main(["validate", str(p)]) == 2
    assert "YAML" in capsys.readouterr().err
