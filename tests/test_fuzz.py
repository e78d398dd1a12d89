"""Fuzzing the inputs: randomly mutated scenario YAML and traces, thrown at the CLI.

Contract for every generated case: kvsim either runs (exit 0, a complete output folder)
or refuses it (exit 2, one line ``kvsim: error: ...`` naming the file, line or field, and
no output folder). Anything else - a traceback, exit 1, a partial folder, a hang - fails.

Mutations of a small valid scenario: delete a key, misspell a key, add an unknown key,
scale a value to an extreme of the same unit (0, 1e-6x ... 1e6x), or replace a value
with junk (wrong types, unit typos, NaN/inf, negative, zero, huge values, lists,
mappings, null); then, sometimes, damage the text itself (truncate it, splice in a
character, write bytes that are not UTF-8). Traces: valid Mooncake lines and Azure rows
with fields dropped, retyped, made negative/NaN/huge, lines truncated or reordered or
duplicated, invalid bytes, an empty file, or a trace shorter than the warm-up.
``workload.requests`` stays small so that a valid mutation runs in moments
(``run.max_time`` caps the simulated time too); the catalogue of fixed cases with their
messages is tests/bad_inputs.py.
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import re
import signal
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from kvsim.cli import main

from conftest import ROOT, examples

BASE: dict[str, Any] = {
    "name": "fuzz",
    "profile": "b300-pcp8-glm5",
    "seed": 1,
    "run": {
        "warmup": "auto",
        "max_time": "600 s",
        "timeseries_window": "10 s",
        "prompt_range": "0..2M",  # issue 28: every prompt (the field, parsed)
    },
    # a policy as {name, params} (issue 29: the built-ins take no params, so fuzzed ones
    # are refused naming them) and as a bare name
    "cluster": {
        "engines": 2,
        "router": {"name": "cache_affinity", "params": {}},
        "load_policy": "async",
    },
    "node": {
        "nvme_write_per_drive": "7 GB/s",
        "nvlink_per_gpu": "900 GB/s",
        "copy_engine": "kernel",
        "copy_kernel_sm_share": 0.5,
        "gpu_memory_utilization": 0.9,  # HBM pools (issue 25)
        "activation_reserve": "15 GB",
        "kv_per_gpu": None,
        "gpudirect_rdma": True,  # issue 27
    },
    "model": {"weight_bytes": "744 GB"},
    # the roofline's parallel terms (issue 26) at their defaults: a node-level roofline
    "timing": {
        "roofline": {
            "window": 128,
            "window_pair_flops": 0.0,
            "hbm_efficiency": 1.0,
            "dense_weight_shards": None,
            "expert_weight_shards": None,
            "tp": 1,
            "ep": 1,
            "allreduce_bytes_per_token": 0.0,
            "alltoall_bytes_per_token": 0.0,
            "pcp_exchange_bytes_per_token": 0.0,
        }
    },
    "tiers": {
        "gpu": {"capacity": "40 GB"},
        "host": {"capacity": "120 GB", "t0": "1 ms", "write_queue": "1 GB", "on_backlog": "drop"},
        "nvme": {
            "capacity": "400 GB",
            "write_policy": "write_through_selective",
            "write_threshold": 2,
            "promote": True,  # NVMe -> host on a hit (issue 25)
            "codec": {"ratio": 0.5, "encode_bandwidth": "20 GB/s", "decode_bandwidth": "40 GB/s"},
        },
        # other engines' host tiers (issue 27)
        "peer": {"enabled": True, "t0": "1 ms", "t0_engine": "0 s", "streams": False},
    },
    "remote": {
        "kind": "kv_server",  # issue 27: kv_server | object_store | shared_nvme
        "path": None,
        "servers": 8,
        "sharding": "per_rank",
        "timeout": "2 s",
        "bandwidth": "10 GB/s",
        "write_policy": "write_back",
        "client": {
            "connections": 2,
            "round_trip": "100 us",
            "pipeline_depth": 4,
            "copy_bandwidth": "5 GB/s",
            "connection_bandwidth": None,
        },
    },
    "prefetch": {"policy": {"name": "timeout"}, "timeout": "50 ms", "on_session": True},
    "cost": {
        "gpu_node_hour": 98.0,
        "dram_gb_month": 3.0,
        "remote_server_hour": 0.5,
        "object_store_get_per_1k": 0.0004,
        "object_store_put_per_1k": 0.005,
    },
    "faults": [{"kind": "server_down", "server": 1, "at": "5 s", "until": "8 s"}],
    "tenancy": {"isolation": "tenant", "ttl": "60 s"},
    "workload": {
        "kind": "synthetic",
        "requests": 30,
        "arrivals": {"process": "poisson", "rate": "4/s"},
        "tenants": {"count": 2},
        "sessions": {"turns": {"dist": "geometric", "mean": 3}, "think_time": "2 s"},
        "system_prompts": {"count": 2, "tokens": 2000, "share": 0.8},
        "prompt_tokens": {"dist": "lognormal", "median": 1500, "sigma": 0.8, "max": 32768},
        "output_tokens": {"dist": "fixed", "value": 100},
    },
}
PINNED = {("workload", "requests"), ("run", "max_time")}  # keep every run short

UNITS = [
    "B",
    "kB",
    "GB",
    "GiB",
    "TB",
    "GB/s",
    "Gb/s",
    "GiBs",
    "gb",
    "s",
    "ms",
    "us",
    "sec",
    "/s",
    "",
    "%",
    "GB/h",
]
junk = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**12), 10**12),
    st.sampled_from([0, -1, 1, 2**31, 2**63, 10**30]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.builds(
        lambda x, u: f"{x} {u}".strip(),
        st.sampled_from(["0", "-3", "1e400", "nan", "inf", "2.5", "12", "1e-30"]),
        st.sampled_from(UNITS),
    ),
    st.lists(st.integers(-5, 5), max_size=3),
    st.dictionaries(
        st.sampled_from(["x", "kind", "dist", "value"]), st.integers(-5, 5), max_size=2
    ),
)


def paths(node: Any, prefix: tuple = ()) -> list[tuple]:
    """Every key path in a nested mapping/list (lists by index)."""
    out = []
    items = (
        node.items()
        if isinstance(node, dict)
        else enumerate(node)
        if isinstance(node, list)
        else []
    )
    for k, v in items:
        p = (*prefix, k)
        if p not in PINNED:
            out.append(p)
        out += paths(v, p)
    return out


def get_parent(root: Any, path: tuple) -> Any:
    node = root
    for k in path[:-1]:
        node = node[k]
    return node


def rescale(value: Any, factor: float) -> Any:
    """A value of the same kind times ``factor`` ("40 GB" -> "0.04 GB"; 3 -> 3000)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return value
    if isinstance(value, int):
        return int(value * factor)
    if isinstance(value, float):
        return value * factor
    m = re.fullmatch(r"([0-9.eE+-]+)\s*(.*)", value)
    try:
        return f"{float(m.group(1)) * factor:g} {m.group(2)}".strip() if m else value
    except ValueError:  # not "number unit" (a range such as run.prompt_range's "0..2M")
        return value


@st.composite
def mutated_scenario(draw) -> bytes:
    data = copy.deepcopy(BASE)
    for _ in range(draw(st.integers(1, 3))):
        candidates = paths(data)
        if not candidates:
            break
        path = draw(st.sampled_from(candidates))
        parent = get_parent(data, path)
        key = path[-1]
        op = draw(st.sampled_from(["delete", "misspell", "unknown", "value", "value", "scale"]))
        if op == "delete":
            del parent[key]
        elif op == "misspell" and isinstance(parent, dict) and isinstance(key, str):
            i = draw(st.integers(0, max(len(key) - 1, 0)))
            parent[key[:i] + key[i + 1 :] + draw(st.sampled_from(["", "s", "_"]))] = parent.pop(key)
        elif op == "unknown" and isinstance(parent, dict):
            parent[draw(st.sampled_from(["speed", "colour", "extends_", "tier", "x"]))] = draw(junk)
        elif op == "scale":  # same type and unit, an extreme magnitude: often still valid
            parent[key] = rescale(parent[key], draw(st.sampled_from([0, 1e-6, 1e-3, 1e3, 1e6])))
        else:
            parent[key] = draw(junk)
    text = yaml.safe_dump(data, sort_keys=False, allow_unicode=True).encode()
    damage = draw(st.sampled_from(["none", "none", "none", "truncate", "splice", "bytes"]))
    if damage == "truncate":
        text = text[: draw(st.integers(0, len(text)))]
    elif damage == "splice":
        i = draw(st.integers(0, len(text)))
        text = (
            text[:i]
            + draw(
                st.sampled_from(
                    [b":", b"[", b"{", b"\t", b"&a", b"*b", b"!!x", b"'", b'"', b"\n- ", b"#"]
                )
            )
            + text[i:]
        )
    elif damage == "bytes":
        i = draw(st.integers(0, len(text)))
        text = text[:i] + draw(st.sampled_from([b"\xff", b"\xc3", b"\x00", b"\xe9\x80"])) + text[i:]
    return text


GOOD_LINE = {"timestamp": 0, "input_length": 1000, "output_length": 10, "hash_ids": [1, 2]}


@st.composite
def mutated_mooncake(draw) -> bytes:
    n = draw(st.integers(0, 6))
    lines = []
    for i in range(n):
        rec: dict[str, Any] = dict(GOOD_LINE, timestamp=100 * i, hash_ids=[1, 2 + i])
        if draw(st.integers(0, 3)) == 0:
            field = draw(
                st.sampled_from(
                    ["timestamp", "input_length", "output_length", "hash_ids", "tenant"]
                )
            )
            how = draw(st.sampled_from(["drop", "junk", "negative", "huge", "nan"]))
            if how == "drop":
                rec.pop(field, None)
            elif how == "junk":
                rec[field] = draw(junk)
            elif how == "negative":
                rec[field] = -5
            elif how == "huge":
                rec[field] = 10**15
            else:
                rec[field] = float("nan")
        lines.append(json.dumps(rec).encode())
    if lines and draw(st.booleans()):
        op = draw(st.sampled_from(["swap", "duplicate", "truncate", "bytes", "blank"]))
        i = draw(st.integers(0, len(lines) - 1))
        if op == "swap" and len(lines) > 1:
            lines[0], lines[-1] = lines[-1], lines[0]
        elif op == "duplicate":
            lines.insert(i, lines[i])
        elif op == "truncate":
            lines[i] = lines[i][: draw(st.integers(0, len(lines[i])))]
        elif op == "bytes":
            lines[i] = lines[i] + b"\xff\xfe"
        else:
            lines.insert(i, b"   ")
    return b"".join(x + b"\n" for x in lines)


@st.composite
def mutated_azure(draw) -> bytes:
    rows = ["TIMESTAMP,ContextTokens,GeneratedTokens"]
    for i in range(draw(st.integers(0, 5))):
        cells = [f"2023-11-16 18:17:{10 + i:02d}.5", "1200", "30"]
        if draw(st.integers(0, 3)) == 0:
            j = draw(st.integers(0, 2))
            cells[j] = draw(
                st.sampled_from(["", "-1", "nan", "1e99", "x", "2023-13-45 99:99", "1.5", "0"])
            )
        if draw(st.integers(0, 8)) == 0:
            cells = cells[: draw(st.integers(0, 2))]
        rows.append(",".join(cells))
    if draw(st.integers(0, 5)) == 0:
        rows[0] = draw(st.sampled_from(["", "TIMESTAMP,Context", "a,b,c"]))
    if len(rows) > 2 and draw(st.booleans()):
        rows[1], rows[-1] = rows[-1], rows[1]
    return "\n".join(rows).encode() + draw(st.sampled_from([b"\n", b"", b"\xff\n"]))


# what a refusal starts with: a file (and line), a field path, or a command-line option
WHERE = re.compile(r"(\S+\.(yaml|jsonl|csv)(:\d+)?|[a-z_]+(\.[a-z_0-9\[\]]+)*|--\S+( \S+)?): ")


class Hang(Exception):
    pass


def check_contract(argv: list[str], out: Path) -> None:
    """Run the CLI; exit 0 with a complete folder, or exit 2 with one line and no folder."""

    def alarm(*_):
        raise Hang(f"kvsim did not finish within 120 s: {argv}")

    old = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(120)  # a liveness guard against hangs, not a speed check
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            rc = main(argv)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    msg = err.getvalue().strip()
    event(f"exit {rc}")  # `pytest --hypothesis-show-statistics` shows the mix
    assert rc in (0, 2), (rc, msg)
    if rc == 2:
        assert msg.startswith("kvsim: error: ") and "\n" not in msg, msg
        assert "Traceback" not in msg
        # it names where: a file (and line), a field path, or the override
        body = msg.removeprefix("kvsim: error: ")
        assert WHERE.match(body), msg
        assert not out.exists(), "a refused run left an output folder"
    else:
        assert sorted(p.name for p in out.iterdir()) == [
            "requests.parquet",
            "scenario.yaml",
            "summary.json",
            "timeseries.parquet",
        ]


FUZZ = settings(
    max_examples=examples(200),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


@FUZZ
@given(text=mutated_scenario())
def test_fuzzed_scenarios_run_or_are_refused_cleanly(tmp_path_factory, text):
    tmp = tmp_path_factory.mktemp("fuzz")
    path = tmp / "fuzzed.yaml"
    path.write_bytes(text)
    check_contract(["run", str(path), "--out", str(tmp / "out"), "--quiet"], tmp / "out")


def replay(tmp: Path, kind: str, name: str, trace: bytes, warmup: str) -> None:
    """Run quickstart over a fuzzed trace file and check the contract."""
    (tmp / name).write_bytes(trace)
    sc = tmp / "s.yaml"
    sc.write_text(
        f"extends: {ROOT / 'scenarios' / 'quickstart.yaml'}\nrun: {{warmup: {warmup}}}\n"
        f"workload: {{kind: {kind}, path: {name}}}\n"
    )
    check_contract(["run", str(sc), "--out", str(tmp / "out"), "--quiet"], tmp / "out")


@FUZZ
@given(trace=mutated_mooncake(), warmup=st.sampled_from(["0 s", "0 s", "0.3 s", "1 h"]))
def test_fuzzed_mooncake_traces_run_or_are_refused_cleanly(tmp_path_factory, trace, warmup):
    replay(tmp_path_factory.mktemp("fuzz"), "mooncake", "t.jsonl", trace, warmup)


@FUZZ
@given(trace=mutated_azure())
def test_fuzzed_azure_traces_run_or_are_refused_cleanly(tmp_path_factory, trace):
    replay(tmp_path_factory.mktemp("fuzz"), "azure", "a.csv", trace, "0 s")


def test_the_unmutated_base_runs(tmp_path):
    # the fuzz starts from a scenario that works, so refusals come from the mutations
    p = tmp_path / "base.yaml"
    p.write_text(yaml.safe_dump(BASE))
    assert main(["run", str(p), "--out", str(tmp_path / "out"), "--quiet"]) == 0
