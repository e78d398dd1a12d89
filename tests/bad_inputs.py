"""The catalogue of bad inputs kvsim must refuse cleanly, and the table in docs/ made from it.

Each case is one user mistake: the input, what kvsim is run on, and fragments its message
must contain. ``tests/test_bad_input.py`` runs every case through the CLI and checks the
contract (exit code 2, one line naming the file/line/field, no output folder);
``python tests/bad_inputs.py > docs/bad-inputs.md`` renders the table of cases and the
messages kvsim gives today (a test keeps that file current).
"""

from __future__ import annotations

import contextlib
import io
import re
import sys
import tempfile
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
QS = ROOT / "scenarios" / "quickstart.yaml"
LINE = '{"timestamp": %s, "input_length": %s, "output_length": 1, "hash_ids": %s}'


@dataclass(frozen=True)
class Case:
    label: str
    kind: str  # scenario (over quickstart) | file (a whole scenario) | mooncake | azure
    #            | sweep | args (CLI arguments after `kvsim`)
    body: str | bytes | list[str]
    fragments: tuple[str, ...] = ()
    extra: dict = field(default_factory=dict)


def S(label: str, body: str, *fragments: str) -> Case:
    return Case(label, "scenario", textwrap.dedent(body), fragments)


def M(label: str, lines: list[str], *fragments: str, **extra) -> Case:
    return Case(label, "mooncake", lines, fragments, extra)


CASES: list[Case] = [
    # ---- scenario files: keys, types, units ----
    S(
        "unknown key (typo)",
        "remote:\n  shardng: per_rank\n",
        "bad.yaml:3",
        "did you mean 'sharding'",
    ),
    S("unknown section", "tierz:\n  gpu: {capacity: 1 GB}\n", "bad.yaml:2", "tierz"),
    S("bandwidth without /s", "remote:\n  bandwidth: 12 GB\n", "remote.bandwidth", "unit"),
    S("number without unit", "remote:\n  bandwidth: 12\n", "remote.bandwidth", "missing unit"),
    S("unit typo in a size", "tiers:\n  host: {capacity: 120 GiBs}\n", "tiers.host.capacity"),
    S("unit typo in a duration", "run:\n  warmup: 5 secs\n", "run.warmup"),
    S("word for a number", "remote:\n  bandwidth: fast\n", "expected a bandwidth"),
    S("negative bandwidth", "remote:\n  bandwidth: -3 GB/s\n", "greater than 0"),
    S("negative size", "remote:\n  capacity: -1 GB\n", "remote.capacity"),
    S("negative duration", "run:\n  warmup: -5 s\n", "run.warmup"),
    S("zero block size", "workload:\n  block_tokens: 0\n", "workload.block_tokens"),
    S("NaN", "timing:\n  scale: .nan\n", "timing.scale", "finite"),
    S("infinite size", "remote:\n  capacity: .inf\n", "remote.capacity"),
    S("word for an integer", "cluster:\n  engines: four\n", "cluster.engines", "integer"),
    S("fraction for an integer", "cluster:\n  engines: 2.5\n", "cluster.engines"),
    S("boolean for an integer", "cluster:\n  engines: true\n", "cluster.engines"),
    S("list for a number", "seed: [1, 2]\n", "seed"),
    S("huge engine count", "cluster:\n  engines: 1000000000\n", "cluster.engines"),
    S("huge request count", "workload:\n  requests: 1000000000000\n", "workload.requests"),
    S("probability above 1", "remote:\n  stall: {probability: 1.5}\n", "remote.stall.probability"),
    S("unknown load policy", "cluster:\n  load_policy: lazy\n", "cluster.load_policy"),
    S("unknown router", "cluster:\n  router: random\n", "unknown router", "round_robin"),
    S("unknown eviction", "tiers:\n  host: {eviction: mru}\n", "unknown eviction policy"),
    S("unknown workload kind", "workload:\n  kind: sharegpt\n", "workload"),
    S("unknown profile", "profile: b200\n", "bad.yaml:2", "unknown profile 'b200'"),
    # ---- scenario files: rules across fields ----
    S("host tier over the node's DRAM", "tiers:\n  host: {capacity: 3 TB}\n", "host_dram"),
    S("GPU tier over the node's HBM", "tiers:\n  gpu: {capacity: 2 TB}\n", "tiers.gpu.capacity"),
    S("pcp not dividing gpus", "node:\n  pcp: 3\n", "node.pcp", "divide"),
    S("per-rank sharding without ranks", "node:\n  pcp: 1\n", "remote.sharding", "per_rank"),
    S(
        "timing table not monotone",
        "timing:\n  new_tokens: [1, 2]\n  cached_tokens: [0]\n  seconds: [[0.2], [0.1]]\n",
        "timing.seconds",
    ),
    S(
        "lognormal min above max",
        "workload:\n  prompt_tokens: {dist: lognormal, median: 100, min: 50, max: 10}\n",
        "workload.prompt_tokens.max",
    ),
    S(
        "uniform low above high",
        "workload:\n  output_tokens: {dist: uniform, low: 10, high: 5}\n",
        "workload.output_tokens.high",
    ),
    S(
        "choice weights do not match",
        "workload:\n  output_tokens: {dist: choice, values: [1, 2], weights: [1]}\n",
        "weights",
    ),
    S(
        "window end before start",
        "workload:\n  window: {start: 10 s, end: 5 s}\n",
        "workload.window.end",
    ),
    S(
        "prestored without a remote tier",
        "remote: {enabled: false}\nworkload: {prestored: true}\n",
        "workload.prestored",
    ),
    # ---- faults ----
    S("unknown fault kind", "faults:\n  - {kind: meteor, at: 1 s}\n", "faults[0]"),
    S(
        "fault on a missing server",
        "faults:\n  - {kind: server_down, server: 99, at: 1 s}\n",
        "faults[0].server",
    ),
    S(
        "fault on a missing engine",
        "faults:\n  - {kind: engine_down, engine: 9, at: 1 s}\n",
        "faults[0].engine",
    ),
    S(
        "fault ending before it starts",
        "faults:\n  - {kind: server_down, server: 0, at: 5 s, until: 2 s}\n",
        "faults[0].until",
    ),
    S(
        "stall burst without an end",
        "faults:\n  - {kind: stall_burst, probability: 0.5, duration: 1 s, at: 1 s}\n",
        "faults[0].until",
    ),
    S(
        "zero slow-link factor",
        "faults:\n  - {kind: slow_link, target: nvme, factor: 0, at: 1 s}\n",
        "faults[0].factor",
    ),
    # ---- tenancy ----
    S(
        "quota without isolation",
        "tenancy: {isolation: none, quota: {host: 10 GB}}\n",
        "tenancy.quota",
    ),
    S("TTL too short", "tenancy: {ttl: 10 ms}\n", "tenancy.ttl"),
    S(
        "negative tenant in a deletion",
        "tenancy:\n  deletions: [{tenant: -1, at: 1 s}]\n",
        "tenancy.deletions[0].tenant",
    ),
    S(
        "tenant weights do not match",
        "workload:\n  tenants: {count: 3, weights: [1, 2]}\n",
        "workload.tenants.weights",
    ),
    S("too many tenants", "workload:\n  tenants: {count: 100000}\n", "workload.tenants.count"),
    # ---- scenario files: YAML itself ----
    S("YAML syntax error", "remote: [\n", "YAML syntax error"),
    S("duplicate key", "seed: 1\nseed: 2\n", "bad.yaml:3", "duplicate key"),
    S("python object tag", "name: !!python/object/apply:os.system ['echo pwned']\n", "YAML"),
    Case("empty scenario file", "file", "", ("bad.yaml",)),
    Case("a list instead of a mapping", "file", "- name: x\n", ("bad.yaml", "mapping")),
    Case("not UTF-8", "file", b"name: caf\xe9\n", ("bad.yaml", "UTF-8")),
    Case(
        "a NUL byte in YAML", "file", b"name: x\nseed: \x00\n", ("bad.yaml:2", "control character")
    ),
    Case("extends cycle", "file", "extends: bad.yaml\n", ("extends cycle",)),
    Case("extends a missing file", "file", "extends: gone.yaml\n", ("not found",)),
    S(
        "missing trace file",
        "workload:\n  kind: mooncake\n  path: nowhere.jsonl\n",
        "workload.path",
        "not found",
    ),
    # ---- Mooncake traces ----
    M("unsorted timestamps", [LINE % (5, 10, "[1]"), LINE % (1, 10, "[2]")], ".jsonl:2", "sorted"),
    M(
        "truncated line",
        [LINE % (0, 10, "[1]"), '{"timestamp": 1, "input_le'],
        ".jsonl:2",
        "invalid JSON",
    ),
    M("hash_ids inconsistent with input_length", [LINE % (0, 600, "[1]")], ".jsonl:1", "needs 2"),
    M("negative input_length", [LINE % (0, -4, "[]")], "input_length", ">= 1"),
    M("zero input_length", [LINE % (0, 0, "[]")], "input_length", ">= 1"),
    M("NaN timestamp", [LINE % ("NaN", 4, "[1]")], "timestamp"),
    M("infinite timestamp", [LINE % ("Infinity", 4, "[1]")], "timestamp"),
    M("negative timestamp", [LINE % (-1, 4, "[1]")], "timestamp", ">= 0"),
    M("timestamp as text", [LINE % ('"noon"', 4, "[1]")], "timestamp"),
    M(
        "missing field",
        ['{"timestamp": 0, "output_length": 1, "hash_ids": [1]}'],
        "input_length: missing field",
    ),
    M("hash_ids not integers", [LINE % (0, 4, '["a"]')], "hash_ids"),
    M("hash_ids not a list", [LINE % (0, 4, "7")], "hash_ids"),
    M("a JSON list instead of an object", ["[1, 2, 3]"], ".jsonl:1", "JSON object"),
    M("empty trace", [], "no requests"),
    M(
        "trace not UTF-8",
        [b'{"timestamp": 0, "input_length": 4, "output_length": 1, "hash_ids": [1]}\xff'],
        "UTF-8",
    ),
    M(
        "trace shorter than the warm-up",
        [LINE % (0, 4, "[1]"), LINE % (1000, 4, "[2]")],
        "run.warmup",
        "warm-up",
    ),
    M(
        "huge output_length",
        ['{"timestamp": 0, "input_length": 4, "output_length": 1e19, "hash_ids": [1]}'],
        "output_length",
        "<=",
    ),
    M(
        "negative tenant",
        ['{"timestamp": 0, "input_length": 4, "output_length": 1, "hash_ids": [1], "tenant": -2}'],
        "tenant",
    ),
    # ---- Azure traces ----
    Case(
        "Azure: bad number",
        "azure",
        "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.9799600,12,3\n"
        "2023-11-16 18:17:04.1,many,3\n",
        (".csv:3", "ContextTokens"),
    ),
    Case("Azure: wrong header", "azure", "when,prompt\n1,2\n", ("expected a header",)),
    Case(
        "Azure: bad timestamp",
        "azure",
        "TIMESTAMP,ContextTokens,GeneratedTokens\nyesterday,12,3\n",
        (".csv:2", "TIMESTAMP"),
    ),
    Case(
        "Azure: unsorted",
        "azure",
        "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:05,12,3\n"
        "2023-11-16 18:17:04,12,3\n",
        (".csv:3", "sorted"),
    ),
    Case("Azure: empty", "azure", "", ("csv",)),
    # ---- command line ----
    Case(
        "--set without a value",
        "args",
        ["validate", "{QS}", "--set", "remote.sharding"],
        ("--set remote.sharding", "path=value"),
    ),
    Case(
        "--set a bad value",
        "args",
        ["validate", "{QS}", "--set", "remote.sharding=diagonal"],
        ("remote.sharding",),
    ),
    Case(
        "--set an unknown field",
        "args",
        ["validate", "{QS}", "--set", "remote.speed=1"],
        ("remote.speed",),
    ),
    Case("--out is a file", "args", ["run", "{QS}", "--out", "{FILE}"], ("not a folder",)),
    Case("unknown option", "args", ["run", "{QS}", "--sed", "3"], ("--sed",)),
    Case("unknown command", "args", ["simulate", "{QS}"], ("simulate",)),
    Case("--seed negative", "args", ["run", "{QS}", "--seed", "-1", "--out", "{OUT}"], ("seed",)),
    # ---- sweep files ----
    Case("sweep: unknown key", "sweep", "base: {QS}\ngrids: {seed: [1]}\n", ("grids",)),
    Case(
        "sweep: zip lengths differ",
        "sweep",
        "base: {QS}\nzip:\n  seed: [1, 2]\n  cluster.engines: [1]\n",
        ("zip",),
    ),
    Case("sweep: missing base", "sweep", "base: gone.yaml\n", ("gone.yaml", "not found")),
]


def run_case(case: Case, tmp: Path) -> tuple[int, str, Path]:
    """Run a case through the CLI in folder ``tmp``: (exit code, stderr, output folder)."""
    from kvsim.cli import main

    out = tmp / "out"
    bad = tmp / "bad.yaml"
    qs = str(QS)
    if case.kind in ("scenario", "mooncake", "azure"):
        body = case.body
        if case.kind == "mooncake":
            trace = tmp / "t.jsonl"
            raw = b"".join((x if isinstance(x, bytes) else x.encode()) + b"\n" for x in body)
            trace.write_bytes(raw)
            body = f"workload:\n  kind: mooncake\n  path: {trace}\n"
            if "warm-up" in case.fragments:
                body += "run:\n  warmup: 10 s\n"
        elif case.kind == "azure":
            trace = tmp / "a.csv"
            trace.write_text(str(body), encoding="utf-8")
            body = f"workload:\n  kind: azure\n  path: {trace}\n"
        bad.write_text(f"extends: {qs}\n{body}", encoding="utf-8")
        argv = ["run", str(bad), "--out", str(out), "--quiet"]
    elif case.kind == "file":
        data = case.body if isinstance(case.body, bytes) else str(case.body).encode()
        bad.write_bytes(data)
        argv = ["run", str(bad), "--out", str(out), "--quiet"]
    elif case.kind == "sweep":
        bad.write_text(str(case.body).replace("{QS}", qs), encoding="utf-8")
        argv = ["sweep", str(bad), "--out", str(out), "--quiet"]
    else:
        (tmp / "file").write_text("x")
        subst = {"{QS}": qs, "{FILE}": str(tmp / "file"), "{OUT}": str(out)}
        argv = [subst.get(a, a) for a in case.body]
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            rc = main(argv)
        except SystemExit as e:  # argparse's usage errors
            rc = e.code if isinstance(e.code, int) else 1
    return rc, err.getvalue().strip(), out


def _plain(message: str, tmp: Path) -> str:
    """A message without the temporary folder or this checkout's path."""
    message = message.replace(str(tmp) + "/", "").replace(str(ROOT) + "/", "")
    message = re.sub(r"/tmp/[^ :]*/", "", message)
    return message.removeprefix("kvsim: error: ")


def table() -> str:
    """docs/bad-inputs.md: every case and the message kvsim gives for it."""
    lines = [
        "# Bad inputs and what kvsim says",
        "",
        "Generated from `tests/bad_inputs.py` by",
        "`python tests/bad_inputs.py > docs/bad-inputs.md`;",
        "`tests/test_bad_input.py` runs every case and checks that kvsim exits with code 2,",
        "prints one line naming the file, line or field, and leaves no output behind. On top",
        "of these fixed cases, `tests/test_fuzz.py` throws randomly mutated scenarios and traces",
        "at kvsim with the same contract.",
        "",
        f"{len(CASES)} cases. *Input* is what was changed: for scenario cases, the YAML added",
        "to a child of `scenarios/quickstart.yaml` (whose line 1 is `extends:`); for trace",
        "cases, the trace lines.",
        "",
        "| # | mistake | input | message |",
        "|---|---|---|---|",
    ]
    for i, case in enumerate(CASES, 1):
        with tempfile.TemporaryDirectory() as d:
            tmp = Path(d)
            _, err, _ = run_case(case, tmp)
            msg = _plain(err, tmp)
        if case.kind in ("args",):
            shown = "kvsim " + " ".join(case.body)
            shown = shown.replace("{QS}", "quickstart.yaml").replace("{FILE}", "a-file")
            shown = shown.replace("{OUT}", "out")
        elif isinstance(case.body, list):
            shown = " ⏎ ".join(
                x.decode("latin-1") if isinstance(x, bytes) else x for x in case.body
            )
        elif isinstance(case.body, bytes):
            shown = repr(case.body)
        else:
            shown = case.body.replace("{QS}", "quickstart.yaml").strip().replace("\n", " ⏎ ")
        shown = shown or "(empty)"
        cell = lambda s: s.replace("|", "\\|")  # noqa: E731
        lines.append(f"| {i} | {cell(case.label)} | `{cell(shown)}` | {cell(msg)} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.stdout.write(table())
