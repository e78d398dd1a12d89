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
import json
import re
import sys
import tempfile
import textwrap
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from test_hardening_cards import GPU_CARD, LLAMA
from test_mrc_replay import HOLES

ROOT = Path(__file__).resolve().parent.parent
QS = ROOT / "scenarios" / "quickstart.yaml"
LINE = '{"timestamp": %s, "input_length": %s, "output_length": 1, "hash_ids": %s}'


@dataclass(frozen=True)
class Case:
    label: str
    kind: str  # scenario (over quickstart) | file (a whole scenario) | mooncake | azure
    #            | sweep | args (CLI arguments after `kvsim`) | cmd (files, then arguments)
    body: str | bytes | list[str]
    fragments: tuple[str, ...] = ()
    extra: dict = field(default_factory=dict)


def S(label: str, body: str, *fragments: str) -> Case:
    return Case(label, "scenario", textwrap.dedent(body), fragments)


def M(label: str, lines: list[str], *fragments: str, **extra) -> Case:
    return Case(label, "mooncake", lines, fragments, extra)


def C(
    label: str,
    argv: list[str],
    *fragments: str,
    files: dict | None = None,
    shown: str | None = None,
) -> Case:
    """A command line run in a temporary folder after writing ``files`` there.

    Placeholders in argv and file contents: {TMP} the folder, {QS} quickstart.yaml,
    {ROOT} this checkout, {OUT} the output path whose absence the test checks
    (``{TMP}/out``). A file's content is text, bytes, or a function that returns either
    (for files built when the case runs, such as an edited accesses.parquet). ``shown``
    is what the table shows as the input, where the command line alone does not say
    what the mistake is (the table adds the command)."""
    extra: dict = {"files": files or {}}
    if shown is not None:
        extra["shown"] = shown
    return Case(label, "cmd", argv, fragments, extra)


def SW(label: str, *fragments: str, out: dict) -> Case:
    """``kvsim sweep`` over quickstart into ``{TMP}/o``, which already holds ``out``."""
    files = {"s.yaml": "base: {QS}\n", **{f"o/{name}": body for name, body in out.items()}}
    return C(
        label, ["sweep", "{TMP}/s.yaml", "--out", "{TMP}/o", "--quiet"], *fragments, files=files
    )


# ---- builders of the files some cases need --------------------------------------------

# a recorded stream (kvsim run --record-accesses writes accesses.parquet so): engine 0,
# blocks of 10 B; rows are counted from 0, as the messages count them
STREAM = HOLES[:12]  # r1 stores (1, 2, 3) in gpu; 2 moves to host; r2 hits 1


def accesses(column: str | None = None, row: int = 0, value: object = None) -> Callable:
    """A builder of STREAM's accesses.parquet with one cell set (``column`` "bytes:str":
    the whole bytes column as text): run when the case runs."""

    def build() -> bytes:
        import pandas as pd

        df = pd.DataFrame(
            STREAM, columns=["time", "engine", "tier", "key", "bytes", "event", "request"]
        )
        df = df.astype({"engine": "int32", "key": "int64", "request": "int64"})
        if column == "bytes:str":
            df["bytes"] = df["bytes"].astype(str)
        elif column is not None:
            df.loc[row, column] = value
        return df.to_parquet()

    return build


# what `trace mrc --run DIR` reads of a run folder: its summary and scenario
RUN_FOLDER = {
    "run/summary.json": '{"engines": 1, "tiers": {"gpu": {"hits": 3, "misses": 6,'
    ' "capacity_bytes": 1e9}}}',
    "run/scenario.yaml": "extends: {QS}\n",
}

# the good cards the card cases edit (LLAMA, GPU_CARD: tests/test_hardening_cards.py's)
CARD_SCENARIO = """\
name: cards
profile: {{model: {model}, gpu: {gpu}, gpus: 1}}
workload:
  kind: synthetic
  requests: 20
  arrivals: {{process: poisson, rate: 2/s}}
  prompt_tokens: {{dist: fixed, value: 2048}}
"""


def config_json(**changes: object) -> str:
    """LLAMA's config.json with ``changes``, one key a line."""
    return json.dumps({**LLAMA, **changes}, indent=1)


def CARD(
    label: str, *fragments: str, shown: str, config: str | None = None, gpu: str | None = None
) -> Case:
    """``kvsim run`` of a scenario whose profile composes a model's config.json and/or a
    GPU card written beside it."""
    files = {
        "s.yaml": CARD_SCENARIO.format(
            model="./config.json" if config else "llama-3.1-8b",
            gpu="./g.yaml" if gpu else "H100-SXM",
        )
    }
    if config:
        files["config.json"] = config
    if gpu:
        files["g.yaml"] = gpu
    argv = ["run", "{TMP}/s.yaml", "--out", "{OUT}", "--quiet"]
    return C(label, argv, *fragments, files=files, shown=shown)


DUPLICATE = config_json(num_hidden_layers=32).replace(
    '"num_hidden_layers": 32,', '"num_hidden_layers": 32,\n "num_hidden_layers": 16,'
)
DUPLICATE_LINE = DUPLICATE.splitlines().index(' "num_hidden_layers": 16,') + 1

# the paper study's scenario files, the last one with a typo
PAPER = {
    f"paper/{p.name}": p.read_text(encoding="utf-8")
    for p in sorted((ROOT / "scenarios" / "paper").glob("*.yaml"))
}
PAPER["paper/throughput-sharded.yaml"] += "\ncluster:\n  enignes: 2\n"
PAPER_TYPO_LINE = len(PAPER["paper/throughput-sharded.yaml"].splitlines())


# kvsim calibrate's cases: measurements on the shipped example scenario (a composed
# profile), one worker, into {OUT}
CAL_SCENARIO = "{ROOT}/examples/measurements/scenario.yaml"
MEASURED = "prompt_tokens,cached_tokens,concurrency,ttft_ms\n128,0,1,7.5\n512,0,1,20.1\n"
VLLM_UNSAID = json.dumps(
    {
        "date": "20260101-000000",
        "num_prompts": 10,
        "request_rate": "inf",
        "burstiness": 1.0,
        "max_concurrency": 2,
        "completed": 10,
        "total_input_tokens": 20480,
        "mean_ttft_ms": 60.0,
        "median_ttft_ms": 60.0,
    }
)


def CAL(label: str, measurements: list[str], *fragments: str, files: dict | None = None) -> Case:
    """``kvsim calibrate MEASUREMENTS... --scenario`` the example scenario, into {OUT}."""
    argv = ["calibrate", *measurements, "--scenario", CAL_SCENARIO, "--workers", "1"]
    return C(label, [*argv, "--quiet", "--out", "{OUT}"], *fragments, files=files)


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
    # ---- plugins (docs/extending.md; the guard rails are in tests/test_plugins.py) ----
    S(
        "plugin module not found",
        "plugins: [no_such_kvsim_plugin]\n",
        "bad.yaml:2",
        "cannot import",
    ),
    S("plugin file not found", "plugins: [missing.py]\n", "plugin", "no such file"),
    S("plugins not a list", "plugins: lfu.py\n", "plugins"),
    S(
        "plugin scheduler name without its plugin",
        "engine:\n  scheduler: longest_first\n",
        "unknown scheduler 'longest_first'",
        "plugins:",
    ),
    C(
        "--plugin that does not import",
        ["run", "{QS}", "--plugin", "{TMP}/broken.py"],
        "--plugin",
        "SyntaxError",
        files={"broken.py": "def f(:\n"},
    ),
    S("unknown profile", "profile: b200\n", "bad.yaml:2", "unknown profile 'b200'"),
    # ---- scenario files: rules across fields ----
    S("host tier over the node's DRAM", "tiers:\n  host: {capacity: 3 TB}\n", "host_dram"),
    S("GPU tier over the node's HBM", "tiers:\n  gpu: {capacity: 2 TB}\n", "tiers.gpu.capacity"),
    S("pcp not dividing gpus", "node:\n  pcp: 3\n", "node.pcp", "divide"),
    S("per-rank sharding without ranks", "node:\n  pcp: 1\n", "remote.sharding", "per_rank"),
    # the remote store's own SSD below its DRAM (remote.ssd; tests/test_remote_ssd.py)
    S(
        "store SSD: negative capacity",
        "remote:\n  ssd: {enabled: true, capacity: -1 TB}\n",
        "remote.ssd.capacity",
    ),
    S(
        "store SSD: negative read bandwidth",
        "remote:\n  ssd: {enabled: true, read_bandwidth: -2 GB/s}\n",
        "remote.ssd.read_bandwidth",
        "greater than 0",
    ),
    S(
        "store SSD: zero write bandwidth",
        "remote:\n  ssd: {enabled: true, write_bandwidth: 0 GB/s}\n",
        "remote.ssd.write_bandwidth",
    ),
    S(
        "store SSD: negative latency",
        "remote:\n  ssd: {enabled: true, latency: -1 ms}\n",
        "remote.ssd.latency",
    ),
    S(
        "store SSD without the remote tier",
        "remote:\n  enabled: false\n  ssd: {enabled: true}\n",
        "remote.ssd.enabled",
        "needs the remote tier",
    ),
    S(
        "store SSD: unknown key",
        "remote:\n  ssd: {enabled: true, iops: 1000000}\n",
        "remote.ssd",
        "iops",
    ),
    S(
        "store SSD: unknown eviction",
        "remote:\n  ssd: {enabled: true, eviction: lfu}\n",
        "remote.ssd.eviction",
    ),
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
    # ---- the engine and its step model ----
    S(
        "token budget smaller than a block",
        "engine:\n  max_batched_tokens: 100\n",
        "engine.max_batched_tokens",
        "smaller than a block",
    ),
    S("zero token budget", "engine:\n  max_batched_tokens: 0\n", "engine.max_batched_tokens"),
    S("zero batch requests", "engine:\n  max_batch_requests: 0\n", "engine.max_batch_requests"),
    S(
        "negative long-prefill threshold",
        "engine:\n  long_prefill_token_threshold: -1\n",
        "engine.long_prefill_token_threshold",
    ),
    S("zero in-flight restores", "engine:\n  max_inflight_restores: 0\n", "max_inflight_restores"),
    S("negative sjf aging", "engine:\n  sjf_aging: -5\n", "engine.sjf_aging"),
    S("unknown scheduler", "engine:\n  scheduler: edf\n", "engine.scheduler", "fcfs"),
    S("unknown batching", "engine:\n  batching: continuous\n", "engine.batching", "chunked"),
    S(
        "unknown preemption",
        "engine:\n  preemption: evict\n",
        "engine.preemption",
        "hold",
        "recompute",
    ),
    S(
        "layerwise with a tier that cannot stream",
        "engine:\n  layerwise: true\n",
        "engine.layerwise",
        "remote tier cannot stream",
    ),
    S("negative engine part of T0", "remote:\n  t0_engine: -1 ms\n", "remote.t0_engine"),
    S(
        "engine part of T0 above T0",
        "tiers:\n  host: {t0: 20 ms, t0_engine: 30 ms}\n",
        "tiers.host.t0_engine",
        "larger than t0",
    ),
    S(
        "more experts per token than experts",
        "timing:\n  roofline: {experts: 8, experts_per_token: 9}\n",
        "timing.roofline.experts_per_token",
    ),
    S(
        "roofline and table together",
        "timing:\n  roofline: {achievable_flops: 1.0e+15, linear_flops_per_token: 1.0,"
        " pair_flops: 1.0, dense_weight_bytes: 1 GB}\n  new_tokens: [1]\n"
        "  cached_tokens: [0]\n  seconds: [[0.1]]\n",
        "timing.roofline",
        "not both",
    ),
    S(
        "roofline with zero FLOP/s",
        "timing:\n  roofline: {achievable_flops: 0}\n",
        "timing.roofline.achievable_flops",
    ),
    S(
        "roofline without FLOP/s or per-operation model",
        "timing:\n  roofline: {achievable_flops: null}\n",
        "timing.roofline.achievable_flops",
        "missing",
    ),
    S(
        "pipeline stages without the per-operation model",
        "timing:\n  roofline: {pp: 2}\n",
        "timing.roofline.pp",
        "need `ops`",
    ),
    S(
        "pipeline stages not dividing the GPUs",
        "profile: {model: llama-3.1-8b, gpu: H100-SXM, gpus: 3, pp: 2}\n",
        "profile.gpus",
        "tp x pcp x pp",
    ),
    S(
        "roofline without HBM bandwidth",
        "node:\n  hbm_bandwidth_per_gpu: null\n",
        "node.hbm_bandwidth_per_gpu",
    ),
    # ---- the data path ----
    S(
        "gds without an NVMe tier",
        "tiers:\n  nvme: {enabled: false, path: gds}\n",
        "tiers.nvme.path",
        "disabled",
    ),
    S("unknown NVMe path", "tiers:\n  nvme: {path: p2p}\n", "tiers.nvme.path", "gds"),
    S("unknown admission", "tiers:\n  host: {admission: third_hit}\n", "tiers.host.admission"),
    S(
        "write threshold below 1",
        "tiers:\n  host: {write_policy: write_through_selective, write_threshold: 0}\n",
        "tiers.host.write_threshold",
    ),
    S("unknown write policy", "remote:\n  write_policy: write_around\n", "remote.write_policy"),
    S("negative write queue", "tiers:\n  nvme: {write_queue: -1 GB}\n", "tiers.nvme.write_queue"),
    S("unknown backlog rule", "tiers:\n  host: {on_backlog: spill}\n", "tiers.host.on_backlog"),
    S(
        "prefetch into a disabled host tier",
        "tiers:\n  host: {enabled: false}\nprefetch: {policy: best_effort}\n",
        "prefetch.policy",
        "host tier is disabled",
    ),
    S("prefetch timeout missing", "prefetch: {policy: timeout}\n", "prefetch.timeout"),
    S(
        "codec ratio above 1",
        "tiers:\n  host:\n    codec: {ratio: 1.5, encode_bandwidth: 10 GB/s, "
        "decode_bandwidth: 10 GB/s}\n",
        "tiers.host.codec.ratio",
    ),
    S(
        "codec ratio of 0",
        "remote:\n  codec: {ratio: 0, encode_bandwidth: 10 GB/s, decode_bandwidth: 10 GB/s}\n",
        "remote.codec.ratio",
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
    # ---- round 2: YAML structure, file kinds, numbers in config ----
    S(
        "YAML 1.1 base-60 number (1:0 is not 60)",
        "cluster:\n  engines: 1:0\n",
        "bad.yaml:",
        "cluster.engines",
        "integer",
    ),
    C(
        "synthetic requests past 10 million (memory)",
        ["run", "{QS}", "--set", "workload.requests=100000000"],
        "workload.requests",
        "10000000",
    ),
    S(
        "YAML alias bomb (billion laughs)",
        "a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n"
        + "".join(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]\n" for i in range(1, 9)),
        "bad.yaml:",
        "more than 100,000 values once aliases are expanded",
    ),
    S(
        "YAML merge-key bomb",
        "a0: &a0 {k0: 0, k1: 1, k2: 2, k3: 3, k4: 4, k5: 5, k6: 6, k7: 7, k8: 8, k9: 9}\n"
        + "".join(
            f"a{i}: &a{i} {{<<: [" + ", ".join([f"*a{i - 1}"] * 10) + "]}\n" for i in range(1, 9)
        ),
        "aliases are expanded",
    ),
    S(
        "recursive YAML alias",
        "cluster: &c {engines: 2, more: *c}\n",
        "bad.yaml:",
        "recursive alias",
    ),
    S("YAML nested 100 deep", "x: " + "[" * 100 + "]" * 100 + "\n", "nested deeper than 40"),
    S(
        "YAML nested deep through a chain of aliases",
        "a0: &a0 [1]\n" + "".join(f"a{i}: &a{i} [*a{i - 1}]\n" for i in range(1, 60)),
        "nested deeper than 40 levels (aliases included)",
    ),
    S("mapping key that is a list", "? [a, b]\n: 1\n", "bad.yaml:", "key must be a plain value"),
    S(
        "duplicate merge key",
        "tiers:\n  host: {capacity: 1 GB}\n  <<: {}\n  <<: {}\n",
        "<<: duplicate",
    ),
    S("integer of 5,000 digits", "seed: " + "9" * 5000 + "\n", "bad.yaml:2", "integer of 5,000"),
    C(
        "--set integer of 5,000 digits",
        ["run", "{QS}", "--set", "seed=" + "9" * 5000, "--out", "{OUT}", "--quiet"],
        "--set seed=999",
        "too large",
    ),
    C(
        "--set value nested 100 deep",
        ["run", "{QS}", "--set", "seed=" + "[" * 100 + "]" * 100, "--out", "{OUT}", "--quiet"],
        "--set seed=[[[",
        "nested deeper",
    ),
    C(
        "--set recursive alias",
        ["run", "{QS}", "--set", "cluster=&c {engines: 2, x: *c}", "--out", "{OUT}", "--quiet"],
        "recursive alias",
    ),
    S(
        "float overflowing to infinity (no unit)",
        "model:\n  kv_layout:\n    extra_bytes_per_layer: 1e999\n",
        "model.kv_layout.extra_bytes_per_layer",
        "finite",
    ),
    S(
        "size overflowing once scaled",
        "remote:\n  capacity: 1e300 EB\n",
        "remote.capacity",
        "too large to represent",
    ),
    S("rate overflowing once scaled", "workload:\n  arrivals: {rate: 1e308/ns}\n", "too large"),
    S("day out of range in a date", "name: 2024-02-30\n", "bad.yaml:2", "day is out of range"),
    S(
        "terminal escape sequence in an unknown key",
        '"\\e[2J\\e[31mred": 1\n',
        "\\x1b[2J\\x1b[31mred",
        "unknown field",
    ),
    S(
        "terminal escape sequence in the scenario name (printed by reports)",
        'name: "\\e[2J\\e[31mX"\n',
        "name",
        "printable",
    ),
    S("newline in an unknown key", '"a\\nb": 1\n', "a\\x0ab", "unknown field"),
    S("bidi override in a value", 'cluster: {router: "\\u202eevil"}\n', "\\u202eevil"),
    Case("extends a device", "file", "extends: /dev/zero\n", ("/dev/zero", "is a device")),
    S("timing.table a device", "timing:\n  table: /dev/zero\n", "is a device"),
    C(
        "timing.table a folder",
        ["run", "{TMP}/bad.yaml", "--out", "{OUT}", "--quiet"],
        "is a folder",
        files={"bad.yaml": "extends: {QS}\ntiming:\n  table: {TMP}\n"},
    ),
    C(
        "profile file that is a folder",
        ["run", "{TMP}/bad.yaml", "--out", "{OUT}", "--quiet"],
        "p.yaml",
        "is a folder",
        files={"bad.yaml": "extends: {QS}\nprofile: p.yaml\n", "p.yaml/x": ""},
    ),
    C(
        "extends chain of 40 files",
        ["run", "{TMP}/s0.yaml", "--out", "{OUT}", "--quiet"],
        "extends chain longer than 32",
        files={
            **{f"s{i}.yaml": f"extends: s{i + 1}.yaml\n" for i in range(40)},
            "s40.yaml": "extends: {QS}\n",
        },
    ),
    C(
        "scenario larger than the 1 MiB bound",
        ["run", "{TMP}/big.yaml", "--out", "{OUT}", "--quiet"],
        "big.yaml",
        "kvsim reads at most",
        files={"big.yaml": "# " + "x" * (1 << 20) + "\n"},
    ),
    C(
        "timing table: a diagonal of 20,000 rows (a 20,000 x 20,000 grid)",
        ["run", "{TMP}/bad.yaml", "--out", "{OUT}", "--quiet"],
        "t.csv",
        "incomplete",
        files={
            "bad.yaml": "extends: {QS}\ntiming:\n  table: t.csv\n",
            "t.csv": "new_tokens,cached_tokens,seconds\n"
            + "".join(f"{i + 1},{i},1.0\n" for i in range(20_000)),
        },
    ),
    C(
        "timing table: seconds 1e999",
        ["run", "{TMP}/bad.yaml", "--out", "{OUT}", "--quiet"],
        "t.csv:2",
        "finite",
        files={
            "bad.yaml": "extends: {QS}\ntiming:\n  table: t.csv\n",
            "t.csv": "new_tokens,cached_tokens,seconds\n1,0,1e999\n",
        },
    ),
    C(
        "timing table: integer of 5,000 digits",
        ["run", "{TMP}/bad.yaml", "--out", "{OUT}", "--quiet"],
        "t.csv:2",
        "bad number",
        files={
            "bad.yaml": "extends: {QS}\ntiming:\n  table: t.csv\n",
            "t.csv": "new_tokens,cached_tokens,seconds\n" + "9" * 5000 + ",0,1.0\n",
        },
    ),
    C(
        "timing table: a CSV field over the csv module's limit",
        ["run", "{TMP}/bad.yaml", "--out", "{OUT}", "--quiet"],
        "t.csv",
        "malformed CSV",
        files={
            "bad.yaml": "extends: {QS}\ntiming:\n  table: t.csv\n",
            "t.csv": 'new_tokens,cached_tokens,seconds\n1,0,"' + "1" * 200_000 + '"\n',
        },
    ),
    Case(
        "sweep: alias bomb",
        "sweep",
        "base: {QS}\n"
        + "a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n"
        + "".join(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]\n" for i in range(1, 9))
        + "grid:\n  seed: [1]\n",
        ("aliases are expanded",),
    ),
    C(
        "suite: nested 5,000 deep",
        ["baseline", "{TMP}/suite.yaml", "--out", "{OUT}"],
        "suite.yaml:1",
        "nested deeper",
        files={"suite.yaml": "entries: " + "[" * 5000 + "]" * 5000 + "\n"},
    ),
    # ---- round 2: traces ----
    Case(
        "Azure: token count with an underscore",
        "azure",
        "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03,1_000,3\n",
        (".csv:2", "ContextTokens", "ASCII digits"),
    ),
    Case(
        "Azure: token count in Arabic-Indic digits",
        "azure",
        "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03,\u0661\u0662,3\n",
        (".csv:2", "ContextTokens", "ASCII digits"),
    ),
    Case(
        "Azure: row with more fields than the header",
        "azure",
        "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03,1,000,3\n",
        (".csv:2", "4 fields"),
    ),
    M(
        "trace: a key given twice",
        [
            '{"timestamp": 0, "timestamp": 5, "input_length": 4, "output_length": 1, '
            '"hash_ids": [1]}'
        ],
        ".jsonl:1",
        "'timestamp': duplicate key",
    ),
    M(
        "trace: shared_blocks past the prompt",
        [
            '{"timestamp": 0, "input_length": 4, "output_length": 1, "hash_ids": [1], '
            '"session": 0, "shared_blocks": 2}'
        ],
        ".jsonl:1",
        "shared_blocks",
    ),
    C(
        "run: run.max_time before the first arrival",
        ["run", "{QS}", "--set", "run.max_time=1 ms"],
        "run.max_time",
        "no request arrived",
    ),
    S(
        "workload: a session's prompts outgrow the block limit",
        "workload:\n  block_tokens: 16\n  prompt_tokens: {dist: fixed, value: 16777216}\n"
        "  sessions: {turns: {dist: fixed, value: 3}, think_time: 1 s}\n",
        "workload",
        "blocks per prompt",
    ),
    M(
        "trace: timestamp overflowing a float",
        [LINE % ("1e400", 4, "[1]")],
        ".jsonl:1",
        "timestamp",
    ),
    M("trace: timestamp past 136 years", [LINE % (10**13, 4, "[1]")], ".jsonl:1", "136 years"),
    M(
        "trace: prompt over the block limit",
        [LINE % (0, 4, "[1]"), LINE % (1, 2**29 + 1, "[]")],
        ".jsonl:2",
        "blocks per prompt",
    ),
    M("trace: JSON nested 5,000 deep", ["[" * 5000 + "]" * 5000], ".jsonl:1", "nested"),
    M(
        "trace: not UTF-8 on line 3",
        [LINE % (0, 4, "[1]"), LINE % (1, 4, "[2]"), b'{"timestamp": 2\xff}'],
        ".jsonl:3",
        "UTF-8",
    ),
    S(
        "trace: workload.path is a device",
        "workload:\n  kind: mooncake\n  path: /dev/zero\n",
        "workload.path",
        "device",
    ),
    S(
        "workload: time_scale pushing arrivals past 136 years",
        "workload:\n  time_scale: 1e300\n",
        "workload.time_scale",
        "136 years",
    ),
    Case(
        "Azure: header with a BOM, then a bad row",
        "azure",
        "\ufeffTIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03,many,3\n",
        (".csv:2", "ContextTokens"),
    ),
    Case(
        "Azure: time zones mixed with naive times",
        "azure",
        "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03+00:00,12,3\n"
        "2023-11-16 18:17:04,12,3\n",
        (".csv:3", "time zone"),
    ),
    Case(
        "Azure: prompt over the block limit",
        "azure",
        "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03,12,3\n"
        "2023-11-16 18:17:04,536870913,3\n",
        (".csv:3", "blocks per prompt"),
    ),
    Case(
        "Azure: timestamps 8,000 years apart",
        "azure",
        "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03,12,3\n"
        "9999-12-31 23:59:59,12,3\n",
        (".csv:3", "136 years"),
    ),
    C(
        "trace mrc: --points in the billions",
        ["trace", "mrc", "{TMP}/t.jsonl", "--points", "3000000000"],
        "--points",
        files={"t.jsonl": LINE % (0, 4, "[1]") + "\n"},
    ),
    C(
        "trace stats: --block-tokens beyond 2**24",
        ["trace", "stats", "{TMP}/t.jsonl", "--block-tokens", "99999999999"],
        "--block-tokens",
        files={"t.jsonl": LINE % (0, 4, "[1]") + "\n"},
    ),
    C(
        "trace generate: a rate so low arrivals pass 136 years",
        ["trace", "generate", "{QS}", "{TMP}/g.jsonl", "--set", "workload.arrivals.rate=1e-300/s"],
        "workload.arrivals",
        "136 years",
    ),
    C(
        "trace generate: no requests in the window",
        ["trace", "generate", "{QS}", "{TMP}/g.csv", "--set", "workload.window.start=1e6 s"],
        "g.csv",
        "no requests",
    ),
    # ---- round 2: sweeps, suites, baselines, journals, scheduler addresses ----
    SW(
        "sweep journal: a row edited by hand (its checksum does not match)",
        "runs.jsonl:1",
        "checksum",
        "delete this line",
        out={"runs.jsonl": '{"run_id": "a", "status": "weird", "check": "26b605360cc8fe70"}\n'},
    ),
    SW(
        "sweep journal: a row without a checksum",
        "runs.jsonl:1",
        "without its checksum",
        out={"runs.jsonl": '{"run_id": "a", "status": "ok"}\n'},
    ),
    SW(
        "sweep --out: a folder holding the user's own files",
        "--out",
        "notes.txt",
        out={"notes.txt": "mine"},
    ),
    Case(
        "sweep: a key below a field holding one value (seed.x)",
        "sweep",
        "base: {QS}\ngrid:\n  seed.x: [1, 2]\n",
        ("grid.seed.x", "single value"),
    ),
    Case(
        "sweep: a key naming no field (cluster.engins)",
        "sweep",
        "base: {QS}\ngrid:\n  cluster.engins: [1, 2]\n",
        ("grid.cluster.engins", "no field"),
    ),
    *(
        C(
            f"check: baseline {label}",
            ["check", "{TMP}/suite.yaml", "--baseline", "{TMP}/b"],
            "baseline.json",
            fragment,
            files={
                "suite.yaml": "entries:\n  - scenario: {QS}\n",
                "b/baseline.json": '{"kvsim_version": "0", "seeds": [0, 1, 2], "entries": ['
                + body
                + "]}",
            },
        )
        for label, body, fragment in (
            (
                "with an entry twice",
                '{"id": "q", "scenario": "q", "hash": "x", "points": []}, '
                '{"id": "q", "scenario": "q", "hash": "x", "points": []}',
                "entries[1].id: entry 'q' is listed twice",
            ),
            (
                "with a load point twice",
                '{"id": "q", "scenario": "q", "hash": "x", "points": [{"load": 1, "metrics": {}}, '
                '{"load": 1.0, "metrics": {}}]}',
                "entries[0].points[1].load: load point 1 is listed twice",
            ),
            (
                "with two values for three seeds",
                '{"id": "q", "scenario": "q", "hash": "x", "points": [{"load": 1, "metrics": '
                '{"ttft_p99_s": {"mean": 1, "lo": 1, "hi": 1, "values": [1, 1]}}}]}',
                "metrics.ttft_p99_s.values: 2 values for 3 seeds",
            ),
            (
                "with a mean that is not its values' mean",
                '{"id": "q", "scenario": "q", "hash": "x", "points": [{"load": 1, "metrics": '
                '{"ttft_p99_s": {"mean": 1, "lo": 0, "hi": 9, "values": [5, 5, 5]}}}]}',
                "metrics.ttft_p99_s.mean: 1 is not the mean of its values",
            ),
            (
                "with an absurd magnitude",
                '{"id": "q", "scenario": "q", "hash": "x", "points": [{"load": 1, "metrics": '
                '{"ttft_p99_s": {"mean": 1, "lo": -1e301, "hi": 1}}}]}',
                "metrics.ttft_p99_s.lo: -1e+301 is out of range",
            ),
        )
    ),
    Case(
        "sweep: seed as a grid key",
        "sweep",
        "base: {QS}\ngrid:\n  seed: [1, 2]\n",
        ("bad.yaml", "grid.seed", "seeds: [...]", "replications"),
    ),
    Case("sweep: seed in set", "sweep", "base: {QS}\nset: {seed: 3}\n", ("set.seed", "seeds")),
    Case(
        "sweep: a result column as a grid key",
        "sweep",
        "base: {QS}\ngrid:\n  status: [a, b]\n",
        ("grid.status", "not a scenario field"),
    ),
    Case(
        "sweep: a grid value listed twice",
        "sweep",
        "base: {QS}\ngrid:\n  cluster.engines: [2, 2]\n",
        ("grid.cluster.engines", "listed twice"),
    ),
    Case("sweep: empty seeds list", "sweep", "base: {QS}\nseeds: []\n", ("seeds",)),
    Case("sweep: negative seed", "sweep", "base: {QS}\nseeds: [-1]\n", ("seeds",)),
    Case(
        "sweep: 7 x 60 grid (counted, not expanded)",
        "sweep",
        "base: {QS}\ngrid:\n"
        + "".join(
            f"  {k}: [{', '.join(str(i + 1) for i in range(60))}]\n"
            for k in (
                "workload.arrivals.rate",
                "cluster.engines",
                "remote.servers",
                "remote.bandwidth",
                "remote.t0",
                "tiers.host.capacity",
                "tiers.nvme.capacity",
            )
        ),
        ("2,799,360,000,000 runs", "at most 100,000"),
    ),
    Case(
        "sweep: a million replications",
        "sweep",
        "base: {QS}\nreplications: 1000000\n",
        ("1,000,000 runs",),
    ),
    SW(
        "sweep journal: a line that is not an object",
        "runs.jsonl:2",
        "JSON object",
        out={"runs.jsonl": '{"run_id": "a", "status": "ok", "check": "26b605360cc8fe70"}\n[1]\n'},
    ),
    SW(
        "sweep journal: a row without run_id",
        "runs.jsonl:1",
        "run_id",
        out={"runs.jsonl": '{"status": "ok"}\n'},
    ),
    SW(
        "sweep journal: not UTF-8",
        "runs.jsonl:1",
        "UTF-8",
        out={"runs.jsonl": b"\xff\xfe{}\n"},
    ),
    SW(
        "sweep journal: a damaged line in the middle",
        "runs.jsonl:1",
        "not a JSON row",
        out={"runs.jsonl": '{"run_id": "a", "sta\n{}\n'},
    ),
    SW(
        "sweep journal: a folder",
        "runs.jsonl",
        "folder",
        out={"runs.jsonl/x": ""},
    ),
    *(
        C(
            f"sweep --scheduler {address or 'empty'}",
            ["sweep", "{TMP}/s.yaml", "--out", "{OUT}", "--quiet", "--scheduler", address],
            "--scheduler",
            fragment,
            files={"s.yaml": "base: {QS}\n"},
        )
        for address, fragment in (
            ("tcp://127.0.0.1:70000", "out of range"),
            ("tcp://127.0.0.1", "no port"),
            ("tls://127.0.0.1:8786", "tls:// protocol is not supported"),
            ("inproc://10.0.0.1/42/1", "inproc:// protocol is not supported"),
            ("scheduler", "no port"),
            ("", "not an address"),
            ("tcp://127.0.0.1:1", "cannot reach the Dask scheduler"),
        )
    ),
    *(
        C(
            f"suite: {label}",
            ["baseline", "{TMP}/suite.yaml", "--out", "{OUT}"],
            "suite.yaml",
            fragment,
            files={"suite.yaml": body},
        )
        for label, body, fragment in (
            ("zero load", "entries:\n  - scenario: {QS}\n    loads: [0]\n", "loads"),
            ("negative load", "entries:\n  - scenario: {QS}\n    loads: [-1]\n", "loads"),
            ("infinite load", "entries:\n  - scenario: {QS}\n    loads: [.inf]\n", "loads"),
            ("load twice", "entries:\n  - scenario: {QS}\n    loads: [1, 1.0]\n", "twice"),
            ("negative seed", "seeds: [-1]\nentries:\n  - scenario: {QS}\n", "seeds"),
            ("seed twice", "seeds: [1, 1]\nentries:\n  - scenario: {QS}\n", "twice"),
            (
                "metric that is a setting",
                "metrics: {engines: {}}\nentries:\n  - scenario: {QS}\n",
                "not an outcome metric",
            ),
            (
                "infinite tolerance",
                "metrics: {ttft_p99_s: {rel: .inf}}\nentries:\n  - scenario: {QS}\n",
                "metrics.ttft_p99_s.rel",
            ),
        )
    ),
    *(
        C(
            f"check: baseline {label}",
            ["check", "{TMP}/suite.yaml", "--baseline", "{TMP}/b"],
            "baseline.json",
            fragment,
            files={"suite.yaml": "entries:\n  - scenario: {QS}\n", "b/baseline.json": body},
        )
        for label, body, fragment in (
            ("truncated", '{"entries": [', "not a baseline"),
            ("is a list", "[]", "expected a JSON object"),
            ("without seeds", '{"kvsim_version": "0", "entries": []}', "seeds: missing"),
            (
                "with entries not a list",
                '{"kvsim_version": "0", "seeds": [0], "entries": {}}',
                "entries: expected a list",
            ),
            (
                "holding NaN",
                '{"kvsim_version": "0", "seeds": [0, 1, 2], "entries": [{"id": "quickstart", '
                '"scenario": "quickstart", "hash": "x", "points": [{"load": 1.0, "metrics": '
                '{"ttft_p99_s": {"mean": NaN, "lo": 0, "hi": 1}}}]}]}',
                "entries[0].points[0].metrics.ttft_p99_s.mean: not a finite number",
            ),
            (
                "with a text load",
                '{"kvsim_version": "0", "seeds": [0, 1, 2], "entries": [{"id": "quickstart", '
                '"scenario": "quickstart", "hash": "x", "points": [{"load": "1x", "metrics": '
                "{}}]}]}",
                "entries[0].points[0].load: expected a number",
            ),
            (
                "without the suite's metrics",
                '{"kvsim_version": "0", "seeds": [0, 1, 2], "entries": [{"id": "quickstart", '
                '"scenario": "quickstart", "hash": "x", "points": [{"load": 1.0, "metrics": '
                "{}}]}]}",
                "no metric",
            ),
            ("nested 100,000 deep", "[" * 100_000, "not a baseline"),
        )
    ),
    C(
        "check --set seed (a suite's runs take its seeds)",
        ["check", "{TMP}/suite.yaml", "--baseline", "{TMP}/b", "--set", "seed=5"],
        "--set seed=5",
        "seeds",
        files={
            "suite.yaml": "entries:\n  - scenario: {QS}\n",
            "b/baseline.json": '{"kvsim_version": "0", "seeds": [0], "entries": [{"id": "q", '
            '"scenario": "q", "hash": "x", "points": []}]}',
        },
    ),
    C(
        "suite: seed in an entry's set",
        ["baseline", "{TMP}/suite.yaml", "--out", "{OUT}"],
        "entries[0]",
        "set.seed",
        files={"suite.yaml": "entries:\n  - scenario: {QS}\n    set: {seed: 4}\n"},
    ),
    C(
        "check: baseline.json is a folder",
        ["check", "{TMP}/suite.yaml", "--baseline", "{TMP}/b"],
        "baseline.json",
        "folder",
        files={"suite.yaml": "entries:\n  - scenario: {QS}\n", "b/baseline.json/x": ""},
    ),
    C(
        "check --workers 0",
        ["check", "{TMP}/suite.yaml", "--baseline", "{TMP}/b", "--workers", "0"],
        "--workers",
        files={"suite.yaml": "entries:\n  - scenario: {QS}\n"},
    ),
    C(
        "capacity: an SLO on a setting (seed)",
        ["capacity", "{QS}", "--slo", "seed<=3"],
        "--slo seed<=3",
        "unknown metric",
    ),
    C(
        "capacity: an SLO threshold of NaN",
        ["capacity", "{QS}", "--slo", "hit_ratio>=nan"],
        "--slo",
        "finite",
    ),
    C(
        "capacity: a joint SLO naming an unknown metric",
        ["capacity", "{QS}", "--slo", "ttft_p99<=2s,tpot_p999<=50ms"],
        "--slo ttft_p99<=2s,tpot_p999<=50ms",
        "unknown metric 'tpot_p999'",
    ),
    C(
        "capacity: a joint SLO on TPOT of a prefill-mode run",
        ["capacity", "{QS}", "--slo", "ttft_p99<=2s,tpot_p99<=50ms"],
        "--slo",
        "tpot_p99_s",
        "engine.mode: colocated",
    ),
    C(
        "run: a joint SLO with an empty term",
        ["run", "{QS}", "--slo", "ttft_p99<=2s,", "--out", "{OUT}", "--quiet"],
        "--slo",
        "expected METRIC<=VALUE",
    ),
    C(
        "capacity --sweep --workers 0",
        ["capacity", "--sweep", "{TMP}/s.yaml", "--slo", "ttft_p99<=2s", "--workers", "0"],
        "--workers",
        files={"s.yaml": "base: {QS}\ngrid:\n  cluster.engines: [1, 2]\n"},
    ),
    # ---- round 2: outputs, plots, costmodel and other commands ----
    C(
        "a sweep file given to run",
        ["run", "{TMP}/sw.yaml", "--out", "{OUT}", "--quiet"],
        "this is a sweep file, not a scenario",
        "kvsim sweep",
        files={"sw.yaml": "base: {QS}\ngrid: {cluster.engines: [1, 2]}\n"},
    ),
    C(
        "a scenario given to sweep",
        ["sweep", "{QS}", "--out", "{OUT}", "--quiet"],
        "this is a scenario file, not a sweep",
        "base:",
    ),
    C(
        "a suite given to validate",
        ["validate", "{TMP}/suite.yaml"],
        "this is a suite file, not a scenario",
        "kvsim baseline",
        files={"suite.yaml": "entries: [{scenario: {QS}}]\nloads: [1]\nseeds: [1]\n"},
    ),
    C(
        "a trace given to run",
        ["run", "{TMP}/t.jsonl", "--out", "{OUT}", "--quiet"],
        "this is a trace file, not a scenario",
        "workload.path",
        files={
            "t.jsonl": '{"timestamp": 0, "input_length": 4, "output_length": 1, "hash_ids": [1]}\n'
        },
    ),
    C("--out is an empty name", ["run", "{QS}", "--out", ""], "--out", "empty path"),
    C(
        "--report is an empty name",
        ["check", "s.yaml", "--baseline", "b", "--report", ""],
        "--report",
        "empty path",
    ),
    C("reproduce --out ''", ["reproduce", "paper", "--out", ""], "--out", "empty path"),
    C(
        "--out holds the user's files",
        ["run", "{QS}", "--out", "{TMP}/mine"],
        "--out",
        "notes.txt",
        "does not write",
        files={"mine/notes.txt": "mine"},
    ),
    C(
        "plot: truncated summary.json",
        ["plot", "{TMP}/run"],
        "summary.json:1",
        "not JSON",
        files={"run/summary.json": '{"scenario": "x", "eng', "run/requests.csv": "id\n1\n"},
    ),
    C(
        "plot: summary.json without a scenario",
        ["plot", "{TMP}/run"],
        "summary.json",
        "scenario",
        files={"run/summary.json": '{"engines": 2}', "run/requests.csv": "id\n1\n"},
    ),
    C(
        "plot: corrupt requests table",
        ["plot", "{TMP}/run"],
        "requests.parquet",
        "not a readable parquet",
        files={
            "run/summary.json": '{"scenario": "x", "token_source_frac": {"gpu": 1}}',
            "run/requests.parquet": b"PAR1\x00garbage",
        },
    ),
    C(
        "plot: requests table missing",
        ["plot", "{TMP}/run"],
        "no requests.parquet or requests.csv",
        files={"run/summary.json": '{"scenario": "x", "token_source_frac": {"gpu": 1}}'},
    ),
    C(
        "plot: requests table lacks columns",
        ["plot", "{TMP}/run"],
        "requests.csv",
        "missing column",
        files={
            "run/summary.json": '{"scenario": "x", "token_source_frac": {"gpu": 1}}',
            "run/requests.csv": "id,ttft_s\n1,0.5\n",
        },
    ),
    C(
        "plot: summary.json is a folder",
        ["plot", "{TMP}/run"],
        "summary.json",
        "folder",
        files={"run/summary.json/x": "", "run/requests.csv": "id\n1\n"},
    ),
    C(
        "plot: capacity.csv lacks columns",
        ["plot", "{TMP}/cap"],
        "capacity.csv",
        "missing column",
        files={"cap/capacity.csv": "configuration,capacity\na,3\n"},
    ),
    C(
        "plot: negative capacity interval",
        ["plot", "{TMP}/cap"],
        "capacity.csv:2",
        "ci95_rps",
        files={"cap/capacity.csv": "configuration,capacity_rps,ci95_rps,slo\na,3,-1,x\n"},
    ),
    C(
        "plot: garbled sweep results",
        ["plot", "{TMP}/sw"],
        "results.parquet",
        "not a readable parquet",
        files={"sw/results.parquet": b"\x00\x01not parquet"},
    ),
    C("costmodel: zero bandwidth", ["costmodel", "--bandwidth=0 GB/s"], "--bandwidth", "> 0"),
    C("costmodel: negative rate", ["costmodel", "--rate=-5/s"], "--rate", "> 0"),
    C("costmodel: negative T0", ["costmodel", "--t0=-1 ms"], "--t0", ">= 0"),
    C("costmodel: zero KV bytes", ["costmodel", "--kv-bytes=0 B"], "--kv-bytes", "> 0"),
    C(
        "costmodel: overflowing values",
        ["costmodel", "--kv-bytes=1e300 B", "--rate=1e300/s"],
        "overflows",
    ),
    C(
        "costmodel: a denormal size (B* underflows to 0)",
        ["costmodel", "--kv-bytes=5e-324 B"],
        "underflows",
    ),
    C(
        "costmodel: --plot is a folder",
        ["costmodel", "--plot", "{TMP}/d.png"],
        "--plot",
        "folder",
        files={"d.png/x": ""},
    ),
    # ---- planning: warm-up, resampling, --minimize, cost, --cheapest, sensitivity ----
    S("warm-up neither a duration nor auto", "run:\n  warmup: soon\n", "run.warmup", '"auto"'),
    S("negative price", "cost:\n  gpu_node_hour: -3\n", "cost.gpu_node_hour"),
    S("price as a word", "cost:\n  dram_gb_month: cheap\n", "cost.dram_gb_month"),
    C(
        "--minimize on a non-numeric field",
        ["capacity", "{QS}", "--slo", "ttft_p99<=2s", "--minimize", "cluster.router"],
        "--minimize cluster.router",
        "not a numeric field",
    ),
    C(
        "--minimize with an empty range",
        [
            *("capacity", "{QS}", "--slo", "ttft_p99<=2s"),
            *("--minimize", "tiers.host.capacity", "--range", "200 GB..100 GB"),
        ],
        "--range",
        "empty range",
    ),
    C(
        "--cheapest without prices",
        ["capacity", "--sweep", "{TMP}/sw.yaml", "--slo", "ttft_p99<=2s", "--cheapest"],
        "needs prices",
        files={"sw.yaml": "base: {QS}\ngrid: {cluster.engines: [1, 2]}\n"},
    ),
    C(
        "sensitivity --by 0",
        ["sensitivity", "{QS}", "--metric", "ttft_p99_s", "--by", "0", "--out", "{OUT}"],
        "--by",
        "between 0% and 100%",
    ),
    C(
        "sensitivity on an unknown metric",
        ["sensitivity", "{QS}", "--metric", "p99", "--out", "{OUT}"],
        "--metric",
        "unknown metric",
    ),
    # ---- issue 24: intervals, duplicates, config messages ----
    Case(
        "Azure: header names a column twice",
        "azure",
        "TIMESTAMP,ContextTokens,GeneratedTokens,ContextTokens\n2023-11-16 18:17:03,12,3,99999\n",
        (".csv:1", "'ContextTokens' twice"),
    ),
    Case(
        "Azure: header names a column twice in another case",
        "azure",
        "TIMESTAMP,ContextTokens,GeneratedTokens,contexttokens\n2023-11-16 18:17:03,12,3,9\n",
        (".csv:1", "'contexttokens' twice"),
    ),
    M(
        "trace: a key given twice in another case",
        [
            '{"timestamp": 0, "Timestamp": 5, "input_length": 4, "output_length": 1, '
            '"hash_ids": [1]}'
        ],
        ".jsonl:1",
        "'Timestamp': duplicate key",
    ),
    C(
        "timing table: one point given twice",
        ["run", "{TMP}/bad.yaml", "--out", "{OUT}", "--quiet"],
        "t.csv:5",
        "second row for new_tokens 1024, cached_tokens 0",
        files={
            "bad.yaml": "extends: {QS}\ntiming:\n  table: t.csv\n",
            "t.csv": "# measured\nnew_tokens,cached_tokens,seconds\n1024,0,0.1\n2048,0,0.2\n"
            "1024,0,0.15\n",
        },
    ),
    C(
        "timing table: a column named twice",
        ["run", "{TMP}/bad.yaml", "--out", "{OUT}", "--quiet"],
        "t.csv:1",
        "'Seconds' twice",
        files={
            "bad.yaml": "extends: {QS}\ntiming:\n  table: t.csv\n",
            "t.csv": "new_tokens,cached_tokens,seconds,Seconds\n1024,0,0.1,0.3\n",
        },
    ),
    S(
        "timing grid: a point listed twice",
        "timing:\n  new_tokens: [1024, 2048, 1024]\n  cached_tokens: [0]\n"
        "  seconds: [[0.1], [0.2], [0.3]]\n",
        "timing.new_tokens",
        "1024 is listed twice",
    ),
    C(
        "--set of one field twice",
        ["run", "{QS}", "--set", "seed=1", "--set", "seed=2", "--out", "{OUT}", "--quiet"],
        "--set seed=2",
        "set twice",
    ),
    S(
        "a key `true:` in a section",
        "cluster:\n  engines: 1\n\n  true: x\n",
        "bad.yaml:5",
        "cluster.true",
    ),
    S(
        "a key `null:` in a section",
        "cluster:\n  engines: 1\n  null: x\n",
        "bad.yaml:4",
        "cluster.null",
    ),
    S("a key `1:` in a section", "cluster:\n  engines: 1\n  1: x\n", "bad.yaml:4", "cluster.1:"),
    S("a list as a key", "cluster:\n  engines: 1\n  [a]: x\n", "bad.yaml:4", "plain value"),
    # ---- issue 24: plots and output folders ----
    C(
        "plot: --slo on a run folder",
        ["plot", "{TMP}/run", "--slo", "ttft_p99<=1s"],
        "--slo",
        "run folder",
        files={
            "run/summary.json": '{"scenario": "x", "token_source_frac": {"gpu": 1}}',
            "run/requests.csv": "id\n1\n",
        },
    ),
    C(
        "plot: --x on a run folder",
        ["plot", "{TMP}/run", "--x", "workload.time_scale"],
        "--x",
        "run folder",
        files={
            "run/summary.json": '{"scenario": "x", "token_source_frac": {"gpu": 1}}',
            "run/requests.csv": "id\n1\n",
        },
    ),
    C(
        "plot: --slo on a capacity folder (no TTFT figure)",
        ["plot", "{TMP}/cap", "--slo", "ttft_p99<=1s"],
        "--slo",
        "no TTFT figure",
        files={"cap/capacity.csv": "configuration,capacity_rps,ci95_rps,slo\na,3,1,x\n"},
    ),
    C(
        "plot: --x on a capacity folder (no TTFT figure)",
        ["plot", "{TMP}/cap", "--x", "workload.time_scale"],
        "--x",
        "no TTFT figure",
        files={"cap/capacity.csv": "configuration,capacity_rps,ci95_rps,slo\na,3,1,x\n"},
    ),
    C(
        "plot: an overlay onto a capacity folder",
        ["plot", "{TMP}/cap", "{TMP}/cap2"],
        "cap",
        "to overlay",
        files={
            "cap/capacity.csv": "configuration,capacity_rps,ci95_rps,slo\na,3,1,x\n",
            "cap2/capacity.csv": "configuration,capacity_rps,ci95_rps,slo\na,3,1,x\n",
        },
    ),
    C(
        "plot: a negative TTFT in requests.csv",
        ["plot", "{TMP}/run"],
        "requests.csv:3",
        "column ttft_s: -1.0",
        files={
            "run/summary.json": '{"scenario": "x", "token_source_frac": {"gpu": 1}}',
            "run/requests.csv": "warmup,arrival_s,start_s,finish_s,ttft_s,queue_wait_s,"
            "load_s,compute_s,store_s\nFalse,0,0,1,1,0,0,1,0\nFalse,2,2,1,-1,0,0,1,0\n",
        },
    ),
    C(
        "plot: a negative compute time in requests.csv",
        ["plot", "{TMP}/run"],
        "requests.csv:2",
        "column compute_s",
        files={
            "run/summary.json": '{"scenario": "x", "token_source_frac": {"gpu": 1}}',
            "run/requests.csv": "warmup,arrival_s,start_s,finish_s,ttft_s,queue_wait_s,"
            "load_s,compute_s,store_s\nFalse,0,0,1,1,0,0,-1,0\n",
        },
    ),
    C(
        "plot: a TTFT that is not first token - arrival",
        ["plot", "{TMP}/run"],
        "requests.csv:2",
        "ttft_s is not finish_s - arrival_s",
        files={
            "run/summary.json": '{"scenario": "x", "token_source_frac": {"gpu": 1}}',
            "run/requests.csv": "warmup,arrival_s,start_s,finish_s,ttft_s,queue_wait_s,"
            "load_s,compute_s,store_s\nFalse,0,0,1,7,0,0,1,0\n",
        },
    ),
    C(
        "plot: a warm-up flag that is not true/false",
        ["plot", "{TMP}/run"],
        "requests.csv:2",
        "column warmup",
        files={
            "run/summary.json": '{"scenario": "x", "token_source_frac": {"gpu": 1}}',
            "run/requests.csv": "warmup,arrival_s,start_s,finish_s,ttft_s,queue_wait_s,"
            "load_s,compute_s,store_s\n2,0,0,1,1,0,0,1,0\n",
        },
    ),
    C(
        "plot: a negative token fraction in summary.json",
        ["plot", "{TMP}/run"],
        "summary.json",
        "token_source_frac",
        files={
            "run/summary.json": '{"scenario": "x", "token_source_frac": {"gpu": -0.5}}',
            "run/requests.csv": "id\n1\n",
        },
    ),
    C(
        "run --out over a folder `kvsim plot` drew figures into",
        ["run", "{QS}", "--out", "{TMP}/r", "--quiet"],
        "--out",
        "ttft_cdf.png",
        "never deletes files it did not write",
        files={"r/summary.json": "{}", "r/ttft_cdf.png": "a figure"},
    ),
    # ---- issue 24: plugins ----
    C(
        "plugin that calls sys.exit(0) when imported",
        ["run", "{QS}", "--plugin", "{TMP}/quits.py", "--out", "{OUT}", "--quiet"],
        "--plugin",
        "failed while loading (SystemExit: 0)",
        "quits.py:2",
        files={"quits.py": "import sys\nsys.exit(0)\n"},
    ),
    C(
        "plugin that raises KeyboardInterrupt when imported",
        ["validate", "{TMP}/s.yaml"],
        "s.yaml:2",
        "KeyboardInterrupt",
        "ctrl_c.py:1",
        files={
            "s.yaml": "extends: {QS}\nplugins: [ctrl_c.py]\n",
            "ctrl_c.py": "raise KeyboardInterrupt\n",
        },
    ),
    C(
        "plugin method that calls sys.exit(0)",
        [
            "run",
            "{QS}",
            "--plugin",
            "{TMP}/p.py",
            "--set",
            "engine.scheduler=quits",
            "--out",
            "{OUT}",
            "--quiet",
        ],
        "(scheduler 'quits')",
        "priority() raised SystemExit: 0",
        "p.py:5",
        files={
            "p.py": "import sys\nfrom kvsim.plugins import SchedulingPolicy, register\n"
            "@register('quits')\nclass Q(SchedulingPolicy):\n"
            "    def priority(self, request, engine): sys.exit(0)\n"
        },
    ),
    C(
        "plugin priority of 10**400",
        [
            "run",
            "{QS}",
            "--plugin",
            "{TMP}/p.py",
            "--set",
            "engine.scheduler=huge",
            "--out",
            "{OUT}",
            "--quiet",
        ],
        "priority() broke a rule",
        "beyond a float's range",
        files={
            "p.py": "from kvsim.plugins import SchedulingPolicy, register\n"
            "@register('huge')\nclass H(SchedulingPolicy):\n"
            "    def priority(self, request, engine): return 10**400\n"
        },
    ),
    C(
        "plugin load policy calling estimate(-1)",
        [
            "run",
            "{QS}",
            "--plugin",
            "{TMP}/p.py",
            "--set",
            "cluster.load_policy=neg",
            "--out",
            "{OUT}",
            "--quiet",
        ],
        "restore_blocks() broke a rule",
        "called estimate(-1)",
        files={
            "p.py": "from kvsim.plugins import LoadPolicy, register\n"
            "@register('neg')\nclass N(LoadPolicy):\n"
            "    def restore_blocks(self, request, sources, estimate):\n"
            "        return 0 if estimate(-1) else 0\n"
        },
    ),
    C(
        "plugin registering one name twice",
        ["validate", "{QS}", "--plugin", "{TMP}/twice.py"],
        "scheduler 'x' is registered twice by this plugin",
        "twice.py:2 and at",
        files={
            "twice.py": "from kvsim.plugins import SchedulingPolicy, register\n"
            "@register('x')\nclass A(SchedulingPolicy):\n    def priority(self, r, e): return 1\n"
            "@register('x')\nclass B(SchedulingPolicy):\n    def priority(self, r, e): return 2\n"
        },
    ),
    C(
        "plugin path that is a folder",
        ["validate", "{TMP}/s.yaml"],
        "plugin",
        "cannot import it (is a folder",
        files={"s.yaml": "extends: {QS}\nplugins: [dir.py]\n", "dir.py/x": ""},
    ),
    C(
        "--no-plugins and a scenario naming a plugin policy",
        ["run", "{TMP}/s.yaml", "--no-plugins", "--out", "{OUT}", "--quiet"],
        "s.yaml:4",
        "tiers.gpu.eviction",
        "needs plugin code, which --no-plugins does not run",
        files={
            "s.yaml": "extends: {QS}\nplugins: [lfu.py]\ntiers:\n  gpu: {eviction: lfu}\n",
            "lfu.py": "raise SystemExit('never imported')\n",
        },
    ),
    C(
        "--no-plugins with --plugin",
        ["run", "{QS}", "--no-plugins", "--plugin", "{TMP}/p.py", "--out", "{OUT}"],
        "--plugin runs plugin code, --no-plugins runs none",
        files={"p.py": "x = 1\n"},
    ),
    # ---- issue 24: sweeps, run ids, the regression gate ----
    Case(
        "sweep: an unknown router in the grid (refused before any run)",
        "sweep",
        "base: {QS}\ngrid:\n  cluster.router: [round_robin, nosuch]\n",
        ("bad.yaml: grid cluster.router=nosuch", "unknown router 'nosuch'"),
    ),
    Case(
        "sweep: a grid plugin file that is not there",
        "sweep",
        "base: {QS}\ngrid:\n  plugins: [[nothere.py]]\n",
        ("bad.yaml: grid plugins=", "nothere.py", "cannot import it"),
    ),
    C(
        "sweep: a router from a plugin one grid row does not list",
        ["sweep", "{TMP}/s.yaml", "--out", "{OUT}", "--quiet"],
        "s.yaml: set cluster.router=from_plugin",
        "comes from plugin",
        files={
            "s.yaml": "base: {QS}\nset: {cluster.router: from_plugin}\n"
            "grid:\n  plugins: [[r.py], []]\n",
            "r.py": "from kvsim.plugins import RoutingPolicy, register\n"
            "@register('from_plugin')\nclass R(RoutingPolicy):\n"
            "    def route(self, request, engines): return engines[0]\n",
        },
    ),
    C(
        "mooncake: a bucket_spread past the next timestamp",
        ["run", "{TMP}/s.yaml", "--out", "{OUT}", "--quiet"],
        "t.jsonl:2",
        "workload.bucket_spread",
        "out of time order",
        files={
            "s.yaml": "extends: {QS}\nworkload: {kind: mooncake, path: t.jsonl, "
            "bucket_spread: 60 s}\n",
            "t.jsonl": "".join(LINE % (ts, 4, f"[{i}]") + "\n" for i, ts in enumerate((0, 0, 10))),
        },
    ),
    C(
        "mooncake: a bucket_spread past kvsim's time range",
        ["trace", "stats", "{TMP}/s.yaml"],
        "t.jsonl:2",
        "workload.bucket_spread",
        "136 years",
        files={
            "s.yaml": "extends: {QS}\nworkload: {kind: mooncake, path: t.jsonl, "
            "bucket_spread: 1e300 s}\n",
            "t.jsonl": "".join(LINE % (0, 4, f"[{i}]") + "\n" for i in range(2)),
        },
    ),
    C(
        "check: a baseline's file digest that is not text",
        ["check", "{TMP}/suite.yaml", "--baseline", "{TMP}/b"],
        "baseline.json",
        "entries[0].files.t.jsonl",
        "expected text",
        files={
            "suite.yaml": "entries:\n  - scenario: {QS}\n",
            "b/baseline.json": '{"kvsim_version": "0", "seeds": [0, 1, 2], "entries": [{"id": '
            '"q", "scenario": "q", "hash": "x", "files": {"t.jsonl": 1}, "points": []}]}',
        },
    ),
    # ---- issue 24: the planner's tools (sensitivity, --minimize, cost) ----
    S(
        "a price given as true (read as $1/h)",
        "cost:\n  gpu_node_hour: true\n",
        "bad.yaml:3",
        "cost.gpu_node_hour",
        "not true",
    ),
    S(
        "a price past any real one",
        "cost:\n  dram_gb_month: 1.0e308\n",
        "bad.yaml:3",
        "cost.dram_gb_month",
        "past any real price",
    ),
    S(
        "prices whose product with the layout overflows",
        "cost:\n  remote_memory_gb_month: 1.0\nremote:\n  capacity: 1.0e300 B\n",
        "cost.remote_memory_gb_month",
        "past any real plan",
    ),
    C(
        "sensitivity --vary seed (not the simulated system)",
        ["sensitivity", "{QS}", "--metric", "ttft_p99_s", "--vary", "seed", "--out", "{OUT}"],
        "--vary seed",
        "does not change the simulated system",
    ),
    C(
        "sensitivity --vary a run: setting",
        ["sensitivity", "{QS}", "--metric", "ttft_p99_s", "--vary", "run.warmup", "--out", "{OUT}"],
        "--vary run.warmup",
        "does not change the simulated system",
    ),
    C(
        "sensitivity --vary a field of a disabled section",
        [
            *("sensitivity", "{QS}", "--metric", "ttft_p99_s", "--set", "remote.enabled=false"),
            *("--vary", "remote.t0", "--out", "{OUT}"),
        ],
        "--vary remote.t0",
        "remote is disabled",
    ),
    C(
        "--minimize seed",
        ["capacity", "{QS}", "--slo", "ttft_p99<=2s", "--minimize", "seed"],
        "--minimize seed",
        "does not change the simulated system",
    ),
    C(
        "--minimize a field of a disabled tier",
        [
            *("capacity", "{QS}", "--slo", "ttft_p99<=2s", "--set", "tiers.nvme.enabled=false"),
            *("--minimize", "tiers.nvme.capacity"),
        ],
        "--minimize tiers.nvme.capacity",
        "tiers.nvme is disabled",
    ),
    # ---- issue 24: TTFT breakdown and memory ----
    S(
        "a long-prefill threshold splitting a prompt into too many steps",
        "engine:\n  long_prefill_token_threshold: 1\n"
        "workload:\n  requests: 2\n  prompt_tokens: {dist: fixed, value: 100000}\n",
        "engine.long_prefill_token_threshold",
        "at most 65,536 a prompt",
    ),
    # ---- issue 25: the remote client ----
    S(
        "a negative client round trip",
        "remote:\n  client:\n    round_trip: -1 ms\n",
        "remote.client.round_trip",
    ),
    S(
        "zero client connections",
        "remote:\n  client:\n    connections: 0\n",
        "remote.client.connections",
    ),
    S(
        "zero pipeline depth",
        "remote:\n  client:\n    pipeline_depth: 0\n",
        "remote.client.pipeline_depth",
    ),
    S(
        "zero client copy bandwidth",
        "remote:\n  client:\n    copy_bandwidth: 0 GB/s\n",
        "remote.client.copy_bandwidth",
    ),
    S(
        "the removed remote.client_bandwidth",
        "remote:\n  client_bandwidth: 8 GiB/s\n",
        "remote.client_bandwidth",
        "remote.client (connections, round_trip, pipeline_depth, copy_bandwidth",
    ),
    Case(
        "sweep: the removed remote.client_bandwidth in a grid",
        "sweep",
        "base: {QS}\ngrid:\n  remote.client_bandwidth: [4 GiB/s, 8 GiB/s]\n",
        ("grid.remote.client_bandwidth", "remote.client"),
    ),
    # ---- issue 41: the per-operation roofline ----
    S(
        "one per-operation field on a profile without a per-operation roofline",
        "timing:\n  roofline:\n    ops:\n      eager_launch: 20 us\n",
        "timing.roofline.ops.dense",
        "composed profile",
    ),
    # ---- issue 25: restores cost the GPU ----
    S("an unknown copy engine", "node:\n  copy_engine: nccl\n", "node.copy_engine"),
    S(
        "a zero copy-kernel SM share",
        "node:\n  copy_kernel_sm_share: 0\n",
        "node.copy_kernel_sm_share",
    ),
    S(
        "a negative copy-kernel SM share",
        "node:\n  copy_kernel_sm_share: -0.5\n",
        "node.copy_kernel_sm_share",
    ),
    S(
        "a copy-kernel SM share above 1",
        "node:\n  copy_kernel_sm_share: 1.5\n",
        "node.copy_kernel_sm_share",
    ),
    # ---- issue 25: HBM as pools ----
    S(
        "an activation reserve above HBM",
        "node:\n  activation_reserve: 300 GB\n",
        "node.activation_reserve",
        "is not below hbm_per_gpu",
    ),
    S(
        "weights and reserve leaving no KV memory",
        "node:\n  activation_reserve: 170 GB\n",
        "node.activation_reserve",
        "leave no KV",
    ),
    S(
        "weights larger than usable HBM",
        "model:\n  weight_bytes: 3 TB\n",
        "model.weight_bytes",
        "usable HBM",
    ),
    S(
        "GPU memory utilization above 1",
        "node:\n  gpu_memory_utilization: 1.5\n",
        "node.gpu_memory_utilization",
    ),
    S(
        "GPU memory utilization of 0",
        "node:\n  gpu_memory_utilization: 0\n",
        "node.gpu_memory_utilization",
    ),
    S(
        "a prefix cache larger than the KV pool",
        "tiers:\n  gpu: {capacity: 1.3 TB}\n",
        "tiers.gpu.capacity",
        "exceeds the node's KV pool",
    ),
    S(
        "a synthetic prompt that cannot fit the KV pool",
        "node:\n  kv_per_gpu: 10 MB\ntiers:\n  gpu: {capacity: 0 GB}\n"
        "workload:\n  sessions: null\n  prompt_tokens: {dist: fixed, value: 4000}\n",
        "workload.prompt_tokens.value",
        "more than the node's KV pool",
    ),
    C(
        "a trace prompt that cannot fit the KV pool",
        ["run", "{TMP}/s.yaml", "--out", "{OUT}", "--quiet"],
        "workload",
        "more than the node's KV pool",
        files={
            "s.yaml": "extends: {QS}\nnode:\n  kv_per_gpu: 10 MB\ntiers:\n  gpu: {capacity: 0 GB}\n"
            "workload:\n  kind: mooncake\n  path: t.jsonl\n",
            "t.jsonl": f"{LINE % (0, 100, '[1]')}\n{LINE % (1000, 4000, list(range(2, 10)))}\n",
        },
    ),
    # ---- issue 25: the write path ----
    S(
        "promotion without an NVMe tier",
        "tiers:\n  nvme: {enabled: false, promote: true}\n",
        "tiers.nvme.promote",
        "NVMe tier is disabled",
    ),
    S(
        "promotion without a host tier",
        "tiers:\n  host: {enabled: false}\n  nvme: {promote: true}\n",
        "tiers.nvme.promote",
        "host tier is disabled",
    ),
    S(
        "promotion that is not a boolean",
        "tiers:\n  nvme: {promote: sometimes}\n",
        "tiers.nvme.promote",
    ),
    S(
        "a negative staging buffer",
        "tiers:\n  host: {write_queue: -5 GB}\n",
        "tiers.host.write_queue",
    ),
    # ---- issue 26: composed profiles ----
    S(
        "a composed profile with an unknown model",
        "profile: {model: llama-9b, gpu: H100-SXM}\n",
        "profile.model",
        "llama-3.1-8b",
    ),
    S(
        "a composed profile with an unknown GPU name",
        "profile: {model: llama-3.1-8b, gpu: X100}\n",
        "profile.gpu",
    ),
    S(
        "tp that does not divide the attention heads",
        "profile: {model: llama-3.1-8b, gpu: H100-SXM, tp: 3}\n",
        "profile.tp",
        "32 heads",
    ),
    S(
        "gpus not equal to tp x pcp",
        "profile: {model: llama-3.1-8b, gpu: H100-SXM, gpus: 8, tp: 2}\n",
        "profile.gpus",
        "tp x pcp",
    ),
    S(
        "expert parallelism on a dense model",
        "profile: {model: llama-3.1-8b, gpu: H100-SXM, tp: 2, ep: 2}\n",
        "profile.ep",
    ),
    S(
        "a model whose weights do not fit its GPUs",
        "profile: {model: llama-3.1-70b, gpu: H100-SXM}\n",
        "profile:",
        "raise tp",
    ),
    S(
        "an unknown field in a composed profile",
        "profile: {model: llama-3.1-8b, gpu: H100-SXM, pq: 2}\n",
        "profile.pq",
    ),
    S(
        "a compute dtype the GPU lacks",
        "profile: {model: llama-3.1-8b, gpu: A100-80GB, dtype: fp8}\n",
        "profile.dtype",
    ),
    C(
        "a config.json missing a field the card needs",
        ["run", "{TMP}/bad.yaml", "--out", "{OUT}", "--quiet"],
        "num_key_value_heads",
        files={
            "bad.yaml": "extends: {QS}\nprofile: {model: config.json, gpu: H100-SXM}\n",
            "config.json": '{"num_hidden_layers": 32, "hidden_size": 4096, '
            '"num_attention_heads": 32, "intermediate_size": 14336, "vocab_size": 128256}',
        },
    ),
    C(
        "a config.json that is not JSON",
        ["run", "{TMP}/bad.yaml", "--out", "{OUT}", "--quiet"],
        "config.json",
        files={
            "bad.yaml": "extends: {QS}\nprofile: {model: config.json, gpu: H100-SXM}\n",
            "config.json": "{oops",
        },
    ),
    C(
        "a config.json with negative layers",
        ["run", "{TMP}/bad.yaml", "--out", "{OUT}", "--quiet"],
        "num_hidden_layers",
        files={
            "bad.yaml": "extends: {QS}\nprofile: {model: config.json, gpu: H100-SXM}\n",
            "config.json": '{"num_hidden_layers": -32, "hidden_size": 4096, '
            '"num_attention_heads": 32, "num_key_value_heads": 8, '
            '"intermediate_size": 14336, "vocab_size": 128256}',
        },
    ),
    C(
        "kvsim profiles show with a tp that does not divide the heads",
        ["profiles", "show", "llama-3.1-8b", "H100-SXM", "--tp", "3"],
        "--tp",
    ),
    # ---- issue 26: GPU cards ----
    *(
        C(
            label,
            ["run", "{TMP}/bad.yaml", "--out", "{OUT}", "--quiet"],
            *fragments,
            files={
                "bad.yaml": "extends: {QS}\nprofile: {model: llama-3.1-8b, gpu: my-gpu.yaml}\n",
                "my-gpu.yaml": card,
            },
        )
        for label, card, fragments in [
            (
                "a user's GPU card without hbm",
                "name: G\ngeneration: hopper\nflops: {bf16: 1 PFLOP/s}\n"
                "hbm_bandwidth: 4 TB/s\nhost_link: PCIe Gen5 x16\n"
                "host_link_per_direction: 64 GB/s\nnvlink_per_gpu: 450 GB/s\n"
                "nic_per_gpu: 400 Gb/s\n",
                ("my-gpu.yaml:1", "hbm: missing"),
            ),
            (
                "a user's GPU card with a negative bandwidth",
                "name: G\ngeneration: hopper\nflops: {bf16: 1 PFLOP/s}\nhbm: 96 GB\n"
                "hbm_bandwidth: -4 TB/s\nhost_link: PCIe Gen5 x16\n"
                "host_link_per_direction: 64 GB/s\nnvlink_per_gpu: 450 GB/s\n"
                "nic_per_gpu: 400 Gb/s\n",
                ("my-gpu.yaml:5", "hbm_bandwidth", "positive"),
            ),
            (
                "a user's GPU card with an unknown dtype",
                "name: G\ngeneration: hopper\nflops:\n  bf16: 1 PFLOP/s\n  fp16: 1 PFLOP/s\n"
                "hbm: 96 GB\nhbm_bandwidth: 4 TB/s\nhost_link: PCIe Gen5 x16\n"
                "host_link_per_direction: 64 GB/s\nnvlink_per_gpu: 450 GB/s\n"
                "nic_per_gpu: 400 Gb/s\n",
                ("my-gpu.yaml:5", "flops.fp16", "bf16, fp8, fp4"),
            ),
            (
                "a user's GPU card with FLOP/s without a unit",
                "name: G\ngeneration: hopper\nflops: {bf16: 1000}\nhbm: 96 GB\n"
                "hbm_bandwidth: 4 TB/s\nhost_link: PCIe Gen5 x16\n"
                "host_link_per_direction: 64 GB/s\nnvlink_per_gpu: 450 GB/s\n"
                "nic_per_gpu: 400 Gb/s\n",
                ("my-gpu.yaml:3", "flops.bf16", "TFLOP/s"),
            ),
            (
                "a GPU card that is not YAML",
                "name: [G\ngeneration: hopper\n",
                ("my-gpu.yaml", "YAML syntax error"),
            ),
        ]
    ),
    # ---- issue 27: time series ----
    S("a time-series window of 0 s", "run:\n  timeseries_window: 0 s\n", "run.timeseries_window"),
    S(
        "a negative time-series window",
        "run:\n  timeseries_window: -10 s\n",
        "run.timeseries_window",
    ),
    C(
        "run: a time-series window too narrow for the run",
        [
            "run",
            "{QS}",
            "--set",
            "workload.requests=50",
            "--set",
            "run.warmup=0 s",
            "--set",
            "run.timeseries_window=1 ns",
            "--out",
            "{OUT}",
            "--quiet",
        ],
        "run.timeseries_window",
        "windows",
    ),
    # ---- issue 27: remote kinds ----
    S(
        "an object store with zero connections",
        "remote:\n  kind: object_store\n  client: {connections: 0}\n",
        "remote.client.connections",
        "greater than 0",
    ),
    S(
        "a shared NVMe store without a NIC path into HBM",
        "node:\n  gpudirect_rdma: false\nremote:\n  kind: shared_nvme\n",
        "remote.path",
        "gpudirect_rdma",
    ),
    S(
        "an object store read by GPUDirect",
        "remote:\n  kind: object_store\n  path: gpudirect\n",
        "remote.path",
        "HTTP",
    ),
    S(
        "a CPU codec on a GPUDirect GET",
        "remote:\n  kind: shared_nvme\n  codec:\n    ratio: 0.5\n"
        "    encode_bandwidth: 10 GB/s\n    decode_bandwidth: 10 GB/s\n    on: cpu\n",
        "remote.codec.on",
        "HBM",
    ),
    S("an unknown remote kind", "remote:\n  kind: s3\n", "remote.kind", "object_store"),
    S(
        "a per-connection rate of 0",
        "remote:\n  client: {connection_bandwidth: 0 MB/s}\n",
        "remote.client.connection_bandwidth",
    ),
    C(
        "--set remote.kind: a kind that does not exist",
        ["validate", "{QS}", "--set", "remote.kind=nvme"],
        "remote.kind",
        "shared_nvme",
    ),
    # ---- issue 27: peer tier ----
    S(
        "a peer tier with one engine",
        "cluster:\n  engines: 1\ntiers:\n  peer: {enabled: true}\n",
        "tiers.peer.enabled",
        "at least two engines",
    ),
    S(
        "a peer tier without a host tier",
        "tiers:\n  host: {enabled: false}\n  peer: {enabled: true}\nprefetch: {policy: none}\n",
        "tiers.peer.enabled",
        "host tier is disabled",
    ),
    S(
        "a peer tier whose engine part of T0 exceeds T0",
        "tiers:\n  peer: {enabled: true, t0: 1 ms, t0_engine: 2 ms}\n",
        "tiers.peer.t0_engine",
        "larger than t0",
    ),
    C(
        "--set tiers.peer.enabled on one engine",
        ["run", "{QS}", "--set", "cluster.engines=1", "--set", "tiers.peer.enabled=true"],
        "tiers.peer.enabled",
        "two engines",
    ),
    # ---- issue 28: prompt range ----
    S(
        "a prompt range with LO above HI",
        "run:\n  prompt_range: 32k..8k\n",
        "run.prompt_range",
        "empty range",
    ),
    S(
        "a negative prompt range",
        "run:\n  prompt_range: -1k..8k\n",
        "run.prompt_range",
        "at least 0",
    ),
    S(
        "a prompt range that is not one",
        "run:\n  prompt_range: short\n",
        "run.prompt_range",
        "LO..HI",
    ),
    S("a prompt range as a number", "run:\n  prompt_range: 32000\n", "run.prompt_range", "LO..HI"),
    S(
        "a prompt range with no bound",
        "run:\n  prompt_range: '..'\n",
        "run.prompt_range",
        "at least one bound",
    ),
    S(
        "a prompt range no measured request falls in",
        "run:\n  warmup: 0 s\n  prompt_range: 10M..\nworkload:\n  requests: 300\n",
        "run.prompt_range",
        "no measured request",
    ),
    C(
        "--prompt-range that is not a range",
        ["capacity", "{QS}", "--slo", "ttft_p99<=2s", "--prompt-range", "32k"],
        "prompt_range",
        "LO..HI",
    ),
    # ---- issue 28: gate ----
    C(
        "suite: a metric direction that is not one",
        ["baseline", "{TMP}/suite.yaml", "--out", "{OUT}"],
        "metrics.ttft_p99_s.direction",
        "lower",
        files={
            "suite.yaml": "metrics: {ttft_p99_s: {direction: up}}\nentries:\n  - scenario: {QS}\n"
        },
    ),
    C(
        "suite: prompt_range and set run.prompt_range both",
        ["baseline", "{TMP}/suite.yaml", "--out", "{OUT}"],
        "entries[0]",
        "not both",
        files={
            "suite.yaml": "entries:\n  - scenario: {QS}\n    prompt_range: 0..8k\n"
            "    set: {run.prompt_range: 0..4k}\n"
        },
    ),
    # ---- issue 28: sweeps ----
    Case(
        "sweep: a reference that matches no configuration",
        "sweep",
        "base: {QS}\ngrid: {cluster.load_policy: [sync, async]}\n"
        "reference: {cluster.load_policy: recompute}\n",
        ("reference", "matches no configuration"),
    ),
    Case(
        "sweep: a reference on a field the sweep does not sweep",
        "sweep",
        "base: {QS}\ngrid: {cluster.load_policy: [sync, async]}\nreference: {cluster.engines: 2}\n",
        ("reference.cluster.engines", "not a swept field"),
    ),
    # ---- issue 29: plugin parameters ----
    S(
        "params for a built-in policy (which takes none)",
        """
        tiers:
          host:
            eviction: {name: lru, params: {small_frac: 0.2}}
        """,
        "tiers.host.eviction.params.small_frac",
        "the built-in eviction policy 'lru' takes no parameters",
    ),
    S(
        "a policy field that is neither a name nor {name, params}",
        """
        cluster:
          router: [round_robin]
        """,
        "cluster.router",
        "expected a router's name or a mapping {name: NAME, params: {...}}",
    ),
    S(
        "a misspelt params key in a policy field",
        """
        cluster:
          load_policy: {name: sync, parms: {}}
        """,
        "cluster.load_policy.parms",
        "did you mean 'params'",
    ),
    C(
        "an unknown parameter of a plugin policy",
        ["validate", "{TMP}/s.yaml"],
        "s.yaml:4",
        "tiers.gpu.eviction.params.small_frc",
        "unknown parameter of eviction policy 'frac_lru'; did you mean 'small_frac'?",
        files={
            "s.yaml": "extends: {QS}\nplugins: [p.py]\ntiers:\n"
            "  gpu: {eviction: {name: frac_lru, params: {small_frc: 0.2}}}\n",
            "p.py": "from kvsim.plugins import EvictionPolicy, register\n"
            "@register('frac_lru')\nclass F(EvictionPolicy):\n"
            "    def __init__(self, small_frac: float, ways: int = 2): pass\n"
            "    def victim(self, tier): return next(iter(tier))\n",
        },
    ),
    C(
        "a parameter of the wrong type, set on a bare name",
        [
            "run",
            "{TMP}/s.yaml",
            "--set",
            "tiers.gpu.eviction.params.small_frac=a fifth",
            "--out",
            "{OUT}",
            "--quiet",
        ],
        "--set tiers.gpu.eviction.params.small_frac=a fifth",
        "tiers.gpu.eviction.params.small_frac: Input should be a valid number",
        "takes small_frac: float",
        files={
            "s.yaml": "extends: {QS}\nplugins: [p.py]\ntiers: {gpu: {eviction: frac_lru}}\n",
            "p.py": "from kvsim.plugins import EvictionPolicy, register\n"
            "@register('frac_lru')\nclass F(EvictionPolicy):\n"
            "    def __init__(self, small_frac: float, ways: int = 2): pass\n"
            "    def victim(self, tier): return next(iter(tier))\n",
        },
    ),
    C(
        "a plugin policy's required parameter not given",
        ["validate", "{TMP}/s.yaml"],
        "tiers.gpu.eviction.params.small_frac",
        "missing required parameter of eviction policy 'frac_lru' (float)",
        files={
            "s.yaml": "extends: {QS}\nplugins: [p.py]\ntiers: {gpu: {eviction: frac_lru}}\n",
            "p.py": "from kvsim.plugins import EvictionPolicy, register\n"
            "@register('frac_lru')\nclass F(EvictionPolicy):\n"
            "    def __init__(self, small_frac: float, ways: int = 2): pass\n"
            "    def victim(self, tier): return next(iter(tier))\n",
        },
    ),
    # ---- issue 29: recording accesses ----
    Case(
        "--record-accesses without --out",
        "args",
        ["run", "{QS}", "--record-accesses"],
        ("--record-accesses", "--out"),
    ),
    # ---- issue 29: mrc ----
    C(
        "trace mrc: an unknown eviction policy",
        ["trace", "mrc", "{TMP}/t.jsonl", "--policy", "lru,mru"],
        "--policy",
        "unknown eviction policy 'mru'",
        files={"t.jsonl": LINE % (0, 4, "[1]") + "\n"},
    ),
    C(
        "trace mrc: a policy's parameters not closed",
        ["trace", "mrc", "{TMP}/t.jsonl", "--policy", "lfu(k=1"],
        "--policy",
        "NAME(k=v, ...)",
        files={"t.jsonl": LINE % (0, 4, "[1]") + "\n"},
    ),
    C(
        "trace mrc: an accesses.parquet without the bytes and event columns",
        ["trace", "mrc", "{TMP}/a.parquet"],
        "a.parquet",
        "missing column(s) bytes, event",
        files={
            "a.parquet": __import__("pandas")
            .DataFrame({"time": [0.0], "engine": [0], "tier": ["gpu"], "key": [1], "request": [0]})
            .to_parquet()
        },
    ),
    C(
        "trace mrc: a tier the accesses.parquet has no rows of",
        ["trace", "mrc", "{TMP}/a.parquet", "--tier", "host"],
        "a.parquet",
        "no rows for tier 'host'",
        files={
            "a.parquet": __import__("pandas")
            .DataFrame(
                {"time": [0.0], "engine": [0], "tier": ["gpu"], "key": [1], "bytes": [1.0]}
                | {"event": ["miss"], "request": [0]}
            )
            .to_parquet()
        },
    ),
    C(
        "trace reuse: --engine with a trace file",
        ["trace", "reuse", "{TMP}/t.jsonl", "--engine", "0"],
        "--engine",
        "accesses.parquet",
        files={"t.jsonl": LINE % (0, 4, "[1]") + "\n"},
    ),
    # ---- issue 39: recorded streams (kvsim.results.accesses.check) and trace mrc --run ----
    C(
        "trace mrc: a negative block size in a recorded file",
        ["trace", "mrc", "{TMP}/a.parquet"],
        "a.parquet: row 5: bytes is -10.0",
        files={"a.parquet": accesses("bytes", 5, -10.0)},
        shown="row 5's bytes set to -10",
    ),
    C(
        "trace mrc: a NaN block size in a recorded file",
        ["trace", "mrc", "{TMP}/a.parquet"],
        "a.parquet: row 7: bytes is nan",
        files={"a.parquet": accesses("bytes", 7, float("nan"))},
        shown="row 7's bytes NaN",
    ),
    C(
        "trace reuse: an infinite block size in a recorded file",
        ["trace", "reuse", "{TMP}/a.parquet"],
        "a.parquet: row 2: bytes is inf",
        files={"a.parquet": accesses("bytes", 2, float("inf"))},
        shown="row 2's bytes inf",
    ),
    C(
        "trace mrc: recorded rows out of time order",
        ["trace", "mrc", "{TMP}/a.parquet"],
        "a.parquet: row 9: time 0.05 s is before row 8's",
        "rows out of time order",
        files={"a.parquet": accesses("time", 9, 0.05)},
        shown="row 9's time set before row 8's",
    ),
    C(
        "trace mrc: a NaN time in a recorded file",
        ["trace", "mrc", "{TMP}/a.parquet"],
        "a.parquet: row 3: time is nan",
        files={"a.parquet": accesses("time", 3, float("nan"))},
        shown="row 3's time NaN",
    ),
    C(
        "trace mrc: a recorded bytes column of text",
        ["trace", "mrc", "{TMP}/a.parquet"],
        "a.parquet: column bytes",
        "expected numbers",
        files={"a.parquet": accesses("bytes:str")},
        shown="the bytes column as text",
    ),
    C(
        "trace mrc: a recorded stream's capacity without a unit",
        ["trace", "mrc", "{TMP}/run", "--capacities", "1000"],
        "--capacities",
        "missing unit",
        files={"run/accesses.parquet": accesses()},
    ),
    C(
        "trace mrc: --run with a recorded stream",
        ["trace", "mrc", "{TMP}/run", "--run", "{TMP}/run"],
        "--run: ",
        "a recorded stream is the run's own",
        files={"run/accesses.parquet": accesses(), **RUN_FOLDER},
    ),
    C(
        "trace mrc: --run on a folder that is not a run's",
        ["trace", "mrc", "{TMP}/t.jsonl", "--run", "{TMP}/nope"],
        "nope: not a run folder",
        files={"t.jsonl": LINE % (0, 4, "[1]") + "\n"},
    ),
    C(
        "trace mrc: --run on a folder without a summary.json",
        ["trace", "mrc", "{TMP}/t.jsonl", "--run", "{TMP}/run"],
        "run: no summary.json here",
        files={"t.jsonl": LINE % (0, 4, "[1]") + "\n", "run/accesses.parquet": accesses()},
    ),
    C(
        "trace mrc: --run with another block size",
        ["trace", "mrc", "{TMP}/t.jsonl", "--run", "{TMP}/run", "--block-tokens", "256"],
        "--run: the run's blocks are 512 tokens, the trace's 256",
        files={"t.jsonl": LINE % (0, 4, "[1]") + "\n", **RUN_FOLDER},
    ),
    # ---- issue 39: plugin answers and annotations, study files ----
    C(
        "an eviction plugin's victim() returns a float",
        ["run", "{TMP}/s.yaml", "--out", "{OUT}", "--quiet"],
        "plugin ",
        "fz.py (eviction 'fz_evict' on gpu): victim() broke a rule: returned 58.0",
        "a key must be an int",
        "fz.py:4)",
        files={
            "s.yaml": "extends: {QS}\nplugins: [fz.py]\ntiers:\n"
            "  gpu: {capacity: 1 GB, eviction: fz_evict}\nworkload: {requests: 200}\n",
            "fz.py": "from kvsim.plugins import EvictionPolicy, register\n"
            "@register('fz_evict')\nclass E(EvictionPolicy):\n"
            "    def victim(self, tier): return 58.0\n",
        },
        shown="fz.py: def victim(self, tier): return 58.0",
    ),
    C(
        "a plugin parameter annotated with a type its module does not define",
        ["run", "{TMP}/s.yaml", "--out", "{OUT}", "--quiet"],
        "s.yaml:2: plugin ",
        "eviction 'unresolved' (Unresolved): the annotation of its parameter 'x' cannot be",
        "NoSuchType",
        "pl.py:8)",
        files={
            "s.yaml": "extends: {QS}\nplugins: [pl.py]\ntiers:\n  gpu: {eviction: unresolved}\n",
            "pl.py": "from __future__ import annotations\n\n"
            "from kvsim.plugins import EvictionPolicy, register\n\n\n"
            "@register('unresolved')\nclass Unresolved(EvictionPolicy):\n"
            "    def __init__(self, frac: float = 0.5, x: NoSuchType = 1):\n"
            "        self.x = x\n\n"
            "    def victim(self, tier):\n        return next(iter(tier))\n",
        },
        shown="pl.py:8: def __init__(self, frac: float = 0.5, x: NoSuchType = 1)",
    ),
    C(
        "a typo in a study's last scenario file (found before any run)",
        ["reproduce", "paper", "--scenarios", "{TMP}/paper", "--no-ranges", "--out", "{OUT}"],
        f"paper/throughput-sharded.yaml:{PAPER_TYPO_LINE}: cluster.enignes: unknown field",
        files=PAPER,
        shown="cluster: {enignes: 2} added to throughput-sharded.yaml",
    ),
    # ---- issue 39: config messages (given X; allowed Y), policy mappings, --set ----
    S(
        "a section given a number",
        "workload: 5\n",
        "bad.yaml:2: workload: given 5; allowed a mapping with kind: 'mooncake'",
    ),
    S(
        "an unknown tag",
        "workload:\n  kind: nope\n",
        "bad.yaml:3: workload.kind: given 'nope'; allowed 'mooncake', 'azure' or 'synthetic'",
    ),
    S(
        "a tagged list item without its tag",
        "faults:\n  - {at: 5 s}\n",
        "bad.yaml:3: faults[0]: given a mapping without kind; allowed kind: 'server_down'",
    ),
    S(
        "a record given a number",
        "tiers:\n  host:\n    codec: 5\n",
        "bad.yaml:4: tiers.host.codec: given 5; allowed a mapping {ratio",
    ),
    S(
        "a record given a list",
        "run: [1]\n",
        "bad.yaml:2: run: given a list of 1; allowed a mapping",
    ),
    Case(
        "--set a word for a count",
        "args",
        ["validate", "{QS}", "--set", "cluster.engines=four"],
        ("--set cluster.engines=four: cluster.engines: given 'four'; allowed a valid integer",),
    ),
    S(
        "a composed profile's model of the wrong type",
        "profile: {model: 5, gpu: B300}\n",
        "bad.yaml:2: profile.model: given 5; allowed a name from `kvsim profiles`, or a path",
    ),
    Case(
        "sweep: a list for a count",
        "sweep",
        "base: {QS}\nreplications: [2]\n",
        ("bad.yaml:2: replications: given a list of 1; allowed a valid integer",),
    ),
    Case(
        "sweep: an empty list of seeds",
        "sweep",
        "base: {QS}\nseeds: []\n",
        ("bad.yaml:2: seeds: given a list of 0; allowed at least 1 item",),
    ),
    S(
        "a policy mapping without a name",
        "tiers:\n  host:\n    eviction: {params: {}}\n",
        "bad.yaml:4: tiers.host.eviction: given a mapping of params without a name",
        "{name: NAME, params: {...}}",
    ),
    C(
        "a parameter set where no file names the policy",
        [
            "run",
            "{QS}",
            "--set",
            "tiers.host.eviction.params.small_frac=0.2",
            "--out",
            "{OUT}",
            "--quiet",
        ],
        "--set tiers.host.eviction.params.small_frac=0.2: tiers.host.eviction: given a mapping"
        " of params without a name",
    ),
    C(
        "capacity --sweep: a --set that makes a swept value impossible (as kvsim run of it)",
        [
            "capacity",
            "--sweep",
            "{ROOT}/scenarios/sweeps/load-policy.yaml",
            "--slo",
            "ttft_p99<=2s",
            "--set",
            "profile=h200-tp8-glm5",
            "--out",
            "{OUT}",
        ],
        "load-policy.yaml: grid remote.sharding=per_rank: remote.sharding: per_rank needs ranks",
    ),
    # ---- issue 39: model cards (config.json) and GPU cards ----
    CARD(
        "config.json: a key given twice",
        f"config.json:{DUPLICATE_LINE}: ",
        "num_hidden_layers: duplicate key",
        config=DUPLICATE,
        shown='config.json: "num_hidden_layers": 32, ⏎ "num_hidden_layers": 16,',
    ),
    CARD(
        "config.json: zero experts but experts per token",
        "config.json: ",
        "num_experts_per_tok: 2 experts per token but num_local_experts is 0",
        config=config_json(num_local_experts=0, num_experts_per_tok=2),
        shown='config.json: "num_local_experts": 0, "num_experts_per_tok": 2',
    ),
    CARD(
        "config.json: experts per token without an expert count",
        "config.json: ",
        "num_experts_per_tok: 2 experts per token but no expert count",
        config=config_json(num_experts_per_tok=2),
        shown='config.json: "num_experts_per_tok": 2',
    ),
    CARD(
        "config.json: an MoE key kvsim does not read (Llama 4's)",
        "config.json: ",
        "MoE key kvsim does not read: interleave_moe_layer_step",
        config=config_json(
            num_local_experts=16, num_experts_per_tok=1, interleave_moe_layer_step=2
        ),
        shown='config.json: "interleave_moe_layer_step": 2 with 16 experts',
    ),
    CARD(
        "config.json: two expert counts that disagree",
        "config.json: ",
        "moe_num_experts: 16 disagrees with num_experts (8)",
        config=config_json(num_experts=8, moe_num_experts=16, num_experts_per_tok=2),
        shown='config.json: "num_experts": 8, "moe_num_experts": 16',
    ),
    C(
        "config.json: 2^40 layers (once hung kvsim validate)",
        ["validate", "{TMP}/s.yaml"],
        "config.json: ",
        "num_hidden_layers: 1,099,511,627,776 layers: more than 10,000",
        files={
            "s.yaml": CARD_SCENARIO.format(model="./config.json", gpu="H100-SXM"),
            "config.json": config_json(
                num_hidden_layers=1099511627776,
                n_routed_experts=8,
                num_experts_per_tok=2,
                moe_intermediate_size=1024,
                first_k_dense_replace=1,
            ),
        },
        shown='config.json: "num_hidden_layers": 1099511627776 with MoE fields',
    ),
    CARD(
        "GPU card: an absurd HBM size",
        "g.yaml:4: ",
        "hbm: ",
        "outside the physical range",
        gpu=GPU_CARD.replace("hbm: 80 GiB", "hbm: 1e30 B"),
        shown="g.yaml: hbm: 1e30 B",
    ),
    CARD(
        "GPU card: an absurd FLOP rate",
        "g.yaml:3: ",
        "flops_sparse.bf16: ",
        "outside the physical range",
        gpu=GPU_CARD.replace("{bf16: 1979 TFLOP/s}", "{bf16: 1e40 PFLOP/s}"),
        shown="g.yaml: flops_sparse: {bf16: 1e40 PFLOP/s}",
    ),
    CARD(
        "GPU card: one dtype in both flops and flops_sparse",
        "g.yaml:3: ",
        "flops_sparse.bf16: bf16 is given in both flops (dense) and flops_sparse",
        gpu=GPU_CARD + "flops: {bf16: 989.5 TFLOP/s}\n",
        shown="g.yaml: flops_sparse: {bf16: 1979 TFLOP/s} ⏎ flops: {bf16: 989.5 TFLOP/s}",
    ),
    CARD(
        "GPU card: no NIC (named at the card's line)",
        "g.yaml:9: ",
        "nic_per_gpu: 0 Gb/s is outside the physical range",
        gpu=GPU_CARD.replace("nic_per_gpu: 400 Gb/s", "nic_per_gpu: 0 Gb/s"),
        shown="g.yaml: nic_per_gpu: 0 Gb/s",
    ),
    CARD(
        "GPU card: an efficiency above 1",
        "g.yaml:11: ",
        "efficiency.host_link_frac: expected a fraction in (0, 1], got 1.5",
        gpu=GPU_CARD + "efficiency:\n  host_link_frac: 1.5\n",
        shown="g.yaml: efficiency: {host_link_frac: 1.5}",
    ),
    CARD(
        "GPU card: an unknown generation",
        "g.yaml:2: ",
        "generation: unknown generation 'rdna3'",
        gpu=GPU_CARD.replace("generation: hopper", "generation: rdna3"),
        shown="g.yaml: generation: rdna3",
    ),
    CARD(
        "GPU card: an escape sequence in the card's name",
        "g.yaml:1: ",
        "name: unsafe character U+001B",
        gpu=GPU_CARD.replace("name: Test-GPU", 'name: "Test\\x1b[31mGPU"'),
        shown='g.yaml: name: "Test\\x1b[31mGPU"',
    ),
    # ---- closed-loop clients (workload.concurrency) ----
    S("concurrency 0", "workload:\n  concurrency: 0\n", "workload.concurrency"),
    S("negative concurrency", "workload:\n  concurrency: -4\n", "workload.concurrency"),
    S("fractional concurrency", "workload:\n  concurrency: 2.5\n", "workload.concurrency"),
    S("NaN concurrency", "workload:\n  concurrency: .nan\n", "workload.concurrency"),
    S(
        "closed arrivals without a concurrency",
        "workload:\n  sessions: null\n  arrivals: {process: closed}\n",
        "workload.concurrency",
        "set it",
    ),
    S(
        "closed arrivals with sessions",
        "workload:\n  concurrency: 8\n  arrivals: {process: closed}\n",
        "workload.sessions",
    ),
    S(
        "an infinite arrival rate",
        "workload:\n  arrivals: {process: poisson, rate: inf}\n",
        "workload.arrivals.rate",
        "process: closed",
    ),
    C(
        "capacity: closed-loop clients",
        ["capacity", "{QS}", "--slo", "ttft_p99<=1s", "--set", "workload.concurrency=8"],
        "workload.concurrency",
        "sweep it",
    ),
    # ---- issue 42: the P/D hand-off (cluster.handoff) ----
    S(
        "P/D hand-off without a bandwidth",
        "cluster:\n  handoff: {enabled: true}\n",
        "cluster.handoff.bandwidth",
        "decode pool",
    ),
    S(
        "negative hand-off bandwidth",
        "cluster:\n  handoff: {enabled: true, bandwidth: -50 GB/s}\n",
        "cluster.handoff.bandwidth",
        "greater than 0",
    ),
    S(
        "negative hand-off latency",
        "cluster:\n  handoff: {enabled: true, bandwidth: 50 GB/s, latency: -1 ms}\n",
        "cluster.handoff.latency",
    ),
    S(
        "unknown hand-off key",
        "cluster:\n  handoff: {enabled: true, bandwith: 50 GB/s}\n",
        "cluster.handoff.bandwith",
        "bandwidth",
    ),
    # ---- issue 42: co-located serving (engine.mode colocated) ----
    S(
        "colocated: negative output tokens",
        "engine: {mode: colocated}\nworkload:\n  output_tokens: {dist: fixed, value: -5}\n",
        "workload.output_tokens.value",
        "greater than 0",
    ),
    M(
        "negative output_length",
        ['{"timestamp": 0, "input_length": 4, "output_length": -3, "hash_ids": [1]}'],
        "output_length",
        ">= 0",
    ),
    Case(
        "Azure: negative GeneratedTokens",
        "azure",
        "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03,12,-3\n",
        ("GeneratedTokens",),
    ),
    S(
        "colocated: a token budget below max_batch_requests",
        "engine: {mode: colocated, max_batched_tokens: 512, max_batch_requests: 1024}\n",
        "engine.max_batched_tokens",
        "max_batch_requests",
    ),
    S(
        "colocated: serial batching",
        "engine: {mode: colocated, batching: serial}\n",
        "engine.batching",
        "chunked",
    ),
    S(
        "swap in prefill mode",
        "engine: {preemption: swap}\n",
        "engine.preemption",
        "colocated",
    ),
    S(
        "colocated with a P/D hand-off",
        "engine: {mode: colocated}\ncluster:\n  handoff: {enabled: true, bandwidth: 50 GB/s}\n",
        "cluster.handoff.enabled",
        "colocated",
    ),
    S(
        "unknown engine mode",
        "engine: {mode: decode}\n",
        "engine.mode",
        "colocated",
    ),
    S(
        "colocated: prompt and output outgrow the KV pool",
        "engine: {mode: colocated}\nnode: {kv_per_gpu: 10 GB}\n"
        "workload:\n  output_tokens: {dist: fixed, value: 2000000}\n",
        "workload",
        "output tokens need more KV",
    ),
    # ---- kvsim calibrate (issue 43) ----
    CAL(
        "calibrate: a scenario given as measurements",
        ["{QS}"],
        "quickstart.yaml",
        "not a measurement file",
    ),
    CAL(
        "calibrate: a CSV named as a vllm result",
        ["vllm:{TMP}/m.csv"],
        "m.csv:1",
        "not JSON",
        files={"m.csv": MEASURED},
    ),
    CAL(
        "calibrate: a vllm result named as SGLang's",
        ["sglang:{ROOT}/examples/measurements/vllm-c8-cold.json"],
        "vllm-c8-cold.json:1",
        "not an SGLang",
    ),
    CAL(
        "calibrate: a row with TTFT 0",
        ["{TMP}/m.csv"],
        "m.csv:3",
        "ttft_ms",
        "> 0",
        files={"m.csv": MEASURED.replace("512,0,1,20.1", "512,0,1,0")},
    ),
    CAL(
        "calibrate: a row with a negative TTFT",
        ["{TMP}/m.csv"],
        "m.csv:2",
        "ttft_ms",
        files={"m.csv": MEASURED.replace("128,0,1,7.5", "128,0,1,-7.5")},
    ),
    CAL(
        "calibrate: cached tokens as many as the prompt's",
        ["{TMP}/m.csv"],
        "m.csv:2",
        "cached tokens",
        files={"m.csv": MEASURED.replace("128,0,1,7.5", "128,128,1,7.5")},
    ),
    CAL(
        "calibrate: a misspelt column",
        ["{TMP}/m.csv"],
        "m.csv:1",
        "unknown column 'cached_token'",
        files={"m.csv": MEASURED.replace("cached_tokens", "cached_token")},
    ),
    CAL(
        "calibrate: --fit a scenario field",
        ["{TMP}/m.csv", "--fit", "node.h2d_per_gpu"],
        "--fit node.h2d_per_gpu",
        "not a fittable field",
        files={"m.csv": MEASURED},
    ),
    CAL(
        "calibrate: --fit a kernel count",
        ["{TMP}/m.csv", "--fit", "dense.e_max,launch.kernels_per_layer"],
        "--fit launch.kernels_per_layer",
        "a whole count",
        files={"m.csv": MEASURED},
    ),
    CAL(
        "calibrate: --fit an expert curve of a dense model",
        ["{TMP}/m.csv", "--fit", "experts.e_max"],
        "--fit experts.e_max",
        "cannot change",
        files={"m.csv": MEASURED},
    ),
    CAL(
        "calibrate: --fit a field no row depends on",
        ["{TMP}/m.csv", "--fit", "dense.e_max,host_link_frac", "--holdout", "0"],
        "--fit host_link_frac",
        "cannot be fitted from these rows",
        files={"m.csv": MEASURED + "2048,0,1,55\n8192,0,1,230\n"},
    ),
    CAL(
        "calibrate: fewer rows than fields",
        ["{TMP}/m.csv", "--fit", "dense.e_max,attention.e_max,cpu.per_step", "--holdout", "0"],
        "--fit",
        "2 rows to fit",
        files={"m.csv": MEASURED},
    ),
    CAL(
        "calibrate: a vllm result that does not say what was cached",
        ["{TMP}/r.json"],
        "r.json:1",
        "--metadata cached_tokens=N",
        files={"r.json": VLLM_UNSAID},
    ),
    CAL(
        "calibrate: a scrape without the clients' concurrency",
        ["{ROOT}/examples/measurements/vllm-metrics.prom"],
        "vllm-metrics.prom:3",
        "--concurrency N",
    ),
    C(
        "calibrate: a scenario on a named profile",
        ["calibrate", "{TMP}/m.csv", "--scenario", "{QS}", "--workers", "1", "--out", "{OUT}"],
        "quickstart.yaml",
        "named profile",
        files={"m.csv": MEASURED},
    ),
    CAL(
        "calibrate: --holdout 1",
        ["{TMP}/m.csv", "--holdout", "1"],
        "--holdout",
        "[0, 1)",
        files={"m.csv": MEASURED},
    ),
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
    elif case.kind == "cmd":
        subst = {"{TMP}": str(tmp), "{QS}": qs, "{ROOT}": str(ROOT), "{OUT}": str(out)}

        def fill(text: str) -> str:
            for k, v in subst.items():
                text = text.replace(k, v)
            return text

        for name, content in case.extra.get("files", {}).items():
            target = tmp / name
            target.parent.mkdir(parents=True, exist_ok=True)
            if callable(content):
                content = content()
            if isinstance(content, bytes):
                target.write_bytes(content)
            else:
                target.write_text(fill(content), encoding="utf-8")
        argv = [fill(a) for a in case.body]
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
    # (a notice that plugin code is imported precedes the error: not part of the contract)
    lines = err.getvalue().strip().splitlines()
    notices = [x for x in lines if x.startswith("kvsim: importing plugin code: ")]
    return rc, "\n".join(x for x in lines if x not in notices), out


def _plain(message: str, tmp: Path) -> str:
    """A message without the temporary folder or this checkout's path."""
    message = message.replace(str(tmp) + "/", "").replace(str(ROOT) + "/", "")
    message = re.sub(r"/tmp/[^ :]*/", "", message)
    message = message.replace(str(tmp), ".")
    return message.removeprefix("kvsim: error: ")


def _clip(text: str, limit: int = 160) -> str:
    """A table cell of at most ``limit`` characters (some inputs are kilobytes long)."""
    return text if len(text) <= limit else f"{text[: limit - 20]}… ({len(text):,} characters)"


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
        "at kvsim with the same contract (and `tests/test_fuzz_cards.py` mutated model and GPU",
        "cards, `tests/test_mrc_replay.py` edited recorded streams).",
        "",
        f"{len(CASES)} cases. *Input* is what was changed: for scenario cases, the YAML added",
        "to a child of `scenarios/quickstart.yaml` (whose line 1 is `extends:`); for trace",
        "cases, the trace lines; for commands, the command line, and *with* the mistake in a",
        "file it reads (`a.parquet` a recorded stream, `config.json` a model's config,",
        "`g.yaml` a GPU card, each composed by the profile of a scenario `s.yaml`).",
        "",
        "| # | mistake | input | message |",
        "|---|---|---|---|",
    ]
    for i, case in enumerate(CASES, 1):
        with tempfile.TemporaryDirectory() as d:
            tmp = Path(d)
            _, err, _ = run_case(case, tmp)
            msg = _plain(err, tmp)
        if case.kind in ("args", "cmd"):
            shown = "kvsim " + " ".join(case.body)
            shown = shown.replace("{TMP}/", "").replace("{TMP}", ".")
            shown = shown.replace("{QS}", "quickstart.yaml").replace("{FILE}", "a-file")
            shown = shown.replace("{OUT}", "out").replace("{ROOT}/", "")
        elif isinstance(case.body, list):
            shown = " ⏎ ".join(
                x.decode("latin-1") if isinstance(x, bytes) else x for x in case.body
            )
        elif isinstance(case.body, bytes):
            shown = repr(case.body)
        else:
            shown = case.body.replace("{QS}", "quickstart.yaml").strip().replace("\n", " ⏎ ")
        shown = _clip(shown or "(empty)")
        msg = _clip(msg, 400)
        cell = lambda s: s.replace("|", "\\|")  # noqa: E731
        note = f" with `{cell(case.extra['shown'])}`" if "shown" in case.extra else ""
        lines.append(f"| {i} | {cell(case.label)} | `{cell(shown)}`{note} | {cell(msg)} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.stdout.write(table())
