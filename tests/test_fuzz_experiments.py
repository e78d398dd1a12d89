"""Fuzzing the experiment inputs: baselines, sweep journals, sweep grids, scheduler
addresses (issue 11), thrown at the CLI.

Contract for every generated case: kvsim runs (exit 0; ``check`` may also exit 1 for a
regression, with its report) or refuses (exit 2, one line ``kvsim: error: ...``), and a
refused sweep leaves its folder as it was. A traceback or an exception out of ``main``
fails. The simulations themselves are stubbed (a fixed fake row, a fixed measurement), so
each example takes milliseconds: what is fuzzed is the reading and checking of the files.
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import math
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument

from kvsim.cli import main
from kvsim.errors import InputError
from kvsim.experiments import regression, sweep
from kvsim.experiments.sweep import JOURNAL, executor
from kvsim.experiments.sweep.cluster import parse_scheduler
from kvsim.experiments.sweep.journal import journal_line

from conftest import SCENARIOS, examples

FUZZ = settings(
    max_examples=examples(60),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)

SUITE = f"""
name: fuzz
seeds: [0, 1]
entries:
  - scenario: {SCENARIOS / "paper" / "micro.yaml"}
    name: micro
    set: {{workload.requests: 20, run.warmup: 0 s}}
    loads: [1.0, 2.0]
"""

JUNK: list[Any] = [
    None,
    True,
    "x",
    "",
    "\x1b[31m",
    [],
    {},
    [1, [2]],
    {"a": 1},
    -1,
    0,
    1,
    2**70,
    1e308,
    -1e-300,
    math.nan,
    math.inf,
    -math.inf,
]


def run_cli(argv: list[str]) -> tuple[int, str, str]:
    err, out = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        rc = main(argv)
    msg = err.getvalue().strip()
    with contextlib.suppress(InvalidArgument):  # outside a hypothesis test
        event(f"exit {rc}")
    assert "Traceback" not in msg, msg
    if rc == 2:
        last = msg.splitlines()[-1]
        assert last.startswith("kvsim: error: "), msg
    return rc, msg, out.getvalue()


# ---- baselines --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    """A tiny suite, its real baseline document, measured once."""
    d = tmp_path_factory.mktemp("fuzzbase")
    suite = d / "suite.yaml"
    suite.write_text(SUITE)
    doc = regression.measure(regression.load_suite(suite), workers=1)
    return suite, doc


def _paths(obj: Any, here: tuple = ()) -> list[tuple]:
    out = [here]
    if isinstance(obj, dict):
        for k, v in obj.items():
            out += _paths(v, (*here, k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            out += _paths(v, (*here, i))
    return out


@st.composite
def mutated_baseline(draw, doc: dict) -> bytes:
    doc = copy.deepcopy(doc)
    for _ in range(draw(st.integers(0, 3))):
        paths = [p for p in _paths(doc) if p]
        path = draw(st.sampled_from(paths))
        parent = doc
        for k in path[:-1]:
            parent = parent[k]
        key = path[-1]
        op = draw(st.sampled_from(["delete", "junk", "junk", "scale", "extra"]))
        if op == "delete":
            del parent[key]
        elif op == "junk":  # a copy: JUNK's lists and dicts must not collect later edits
            parent[key] = copy.deepcopy(draw(st.sampled_from(JUNK)))
        elif op == "scale" and isinstance(parent[key], (int, float)):
            parent[key] = parent[key] * draw(st.sampled_from([0, -1, 1e-9, 1e9, 1.0001]))
        elif op == "extra" and isinstance(parent[key], dict):
            parent[key][draw(st.sampled_from(["zzz", "mean", "values", ""]))] = copy.deepcopy(
                draw(st.sampled_from(JUNK))
            )
    text = json.dumps(doc, indent=draw(st.sampled_from([None, 2]))).encode()
    damage = draw(st.integers(0, 6))
    if damage == 0 and text:
        text = text[: draw(st.integers(0, len(text) - 1))]
    elif damage == 1:
        i = draw(st.integers(0, len(text)))
        junk = draw(st.sampled_from([b"\xff", b"\x00", b",", b"]", b"{", b"1e99999"]))
        text = text[:i] + junk + text[i:]  # inserted, the rest kept
    elif damage == 2:
        text = b"\xef\xbb\xbf" + text
    return text


@FUZZ
@given(data=st.data())
def test_fuzzed_baselines_are_checked_or_refused_cleanly(
    measured, tmp_path_factory, monkeypatch, data
):
    suite, doc = measured
    text = data.draw(mutated_baseline(doc))
    tmp = tmp_path_factory.mktemp("b")
    (tmp / "baseline.json").write_bytes(text)
    monkeypatch.setattr(regression, "measure", lambda *a, **k: copy.deepcopy(doc))
    rc, msg, out = run_cli(["check", str(suite), "--baseline", str(tmp), "--workers", "1"])
    assert rc in (0, 1, 2), (rc, msg)
    if rc == 2:
        assert "\n" not in msg, msg
        assert "nan%" not in msg
    else:
        assert ("passed" if rc == 0 else "FAILED") in out
        assert "+nan%" not in out and "ok nan" not in out


def test_the_unmutated_baseline_passes(measured, tmp_path, monkeypatch):
    suite, doc = measured
    (tmp_path / "baseline.json").write_text(json.dumps(doc))
    monkeypatch.setattr(regression, "measure", lambda *a, **k: copy.deepcopy(doc))
    assert run_cli(["check", str(suite), "--baseline", str(tmp_path)])[0] == 0


# ---- sweep journals ---------------------------------------------------------------------

TINY = f"""
base: {SCENARIOS / "paper" / "micro.yaml"}
grid:
  cluster.load_policy: [sync, async]
set: {{workload.requests: 20}}
replications: 2
"""


def fake_run(spec: sweep.RunSpec) -> dict[str, Any]:
    return {
        "run": spec.index,
        "run_id": spec.run_id,
        **dict(spec.params),
        "seed": spec.seed,
        "status": "ok",
        "error": "",
        "ttft_p99_s": 0.25 + spec.index,
    }


@st.composite
def journal_bytes(draw, rows: list[dict]) -> bytes:
    lines: list[bytes] = []
    for _ in range(draw(st.integers(0, 6))):
        kind = draw(st.integers(0, 9))
        if kind <= 4:
            row = dict(draw(st.sampled_from(rows)))
            if draw(st.integers(0, 3)) == 0:
                row[draw(st.sampled_from(["status", "run_id", "error", "seed", "x"]))] = draw(
                    st.sampled_from(JUNK)
                )
            # a row as kvsim writes it (with its checksum), or one edited after (without)
            signed = draw(st.booleans())
            line = journal_line(row) if signed else json.dumps(row) + "\n"
            lines.append(line.encode())
        else:
            lines.append(
                draw(
                    st.sampled_from(
                        [b"\n", b"  \n", b"[]\n", b"null\n", b"{}\n", b"\xff\n", b"{\n", b"1\n"]
                    )
                )
            )
    text = b"".join(lines)
    if text and draw(st.booleans()):  # a torn tail: cut inside the last line
        text = text[: draw(st.integers(max(0, len(text) - 40), len(text)))]
    return text


@pytest.fixture(scope="module")
def sweep_file(tmp_path_factory):
    d = tmp_path_factory.mktemp("sw")
    p = d / "s.yaml"
    p.write_text(TINY)
    rows = [fake_run(r) for r in sweep.load_sweep(p).runs]
    return p, rows


@FUZZ
@given(data=st.data())
def test_fuzzed_journals_resume_or_are_refused_cleanly(
    sweep_file, tmp_path_factory, monkeypatch, data
):
    p, rows = sweep_file
    journal = data.draw(journal_bytes(rows))
    out = tmp_path_factory.mktemp("j") / "out"
    out.mkdir()
    (out / JOURNAL).write_bytes(journal)
    monkeypatch.setattr(executor, "run_one", fake_run)
    rc, msg, _ = run_cli(["sweep", str(p), "--out", str(out), "--quiet", "--workers", "1"])
    assert rc in (0, 2), (rc, msg)
    if rc == 2:
        assert "\n" not in msg and f"{JOURNAL}:" in msg, msg
        assert sorted(x.name for x in out.iterdir()) == [JOURNAL]
        assert (out / JOURNAL).read_bytes() == journal  # a refused journal is not touched
        return
    df = pd.read_parquet(out / "results.parquet")
    assert sorted(df["run_id"]) == sorted(r["run_id"] for r in rows)  # each run once
    final = (out / JOURNAL).read_bytes()
    assert not final or final.endswith(b"\n")
    for line in final.splitlines():  # no row glued to a torn one
        if line.strip():
            assert isinstance(json.loads(line), dict)


# ---- sweep grids ------------------------------------------------------------------------

KEYS = [
    "cluster.engines",
    "cluster.load_policy",
    "remote.servers",
    "workload.arrivals.rate",
    "seed",
    "status",
    "run",
    "error",
    "ttft_p99_s",
    "profile",
    "name",
    "a..b",
    "tiers.gpu.capacity",
    "node.activation_reserve",
    "node.gpu_memory_utilization",
    "tiers.nvme.promote",  # the write path (issue 25)
    "tiers.host.write_queue",
    "workload.requests",
]
VALUES: list[Any] = [*JUNK, "2020-01-01", 1, 2, 3, "sync", "async", "1 GB", 10**30]


@st.composite
def sweep_text(draw) -> str:
    spec: dict[str, Any] = {"base": str(SCENARIOS / "paper" / "micro.yaml")}
    for section in draw(st.lists(st.sampled_from(["grid", "zip", "set"]), max_size=3)):
        keys = draw(st.lists(st.sampled_from(KEYS), min_size=1, max_size=3, unique=True))
        if section == "set":
            spec[section] = {k: draw(st.sampled_from(VALUES)) for k in keys}
        else:
            n = draw(st.integers(0, 3))
            spec[section] = {
                k: draw(st.lists(st.sampled_from(VALUES), min_size=n, max_size=n)) for k in keys
            }
    spec.setdefault("set", {})
    if isinstance(spec["set"], dict):
        spec["set"].setdefault("workload.requests", 5)
    seeds = draw(st.integers(0, 5))
    if seeds == 1:
        spec["seeds"] = draw(st.lists(st.sampled_from([0, 1, 1, -1, "x", 2**70]), max_size=3))
    elif seeds == 2:
        spec["replications"] = draw(st.sampled_from([0, 1, 2, -1, 10**6, 10**12, "two"]))
    if draw(st.integers(0, 3)) == 0:  # the configuration the others are compared with
        spec["reference"] = draw(
            st.one_of(
                st.sampled_from(VALUES),
                st.dictionaries(st.sampled_from(KEYS), st.sampled_from(VALUES), max_size=2),
            )
        )
    text = json.dumps(spec, default=str, allow_nan=True)  # JSON is YAML
    text = text.replace("NaN", ".nan").replace("-Infinity", "-.inf").replace("Infinity", ".inf")
    if "2020-01-01" in text and draw(st.booleans()):
        text = text.replace('"2020-01-01"', "2020-01-01")  # a YAML date, not a string
    return text


@FUZZ
@given(text=sweep_text())
def test_fuzzed_sweep_grids_run_or_are_refused_cleanly(tmp_path_factory, monkeypatch, text):
    tmp = tmp_path_factory.mktemp("g")
    p = tmp / "s.yaml"
    p.write_text(text)
    out = tmp / "out"
    monkeypatch.setattr(executor, "run_one", fake_run)
    rc, msg, _ = run_cli(["sweep", str(p), "--out", str(out), "--quiet", "--workers", "1"])
    assert rc in (0, 2), (rc, msg)
    if rc == 2:
        assert "\n" not in msg and "\x1b" not in msg, msg
        assert not out.exists()
    else:
        df = pd.read_parquet(out / "results.parquet")
        assert len(df) == len(sweep.load_sweep(p).runs) and df["run_id"].is_unique
        assert len(set(df.columns)) == len(df.columns)


# ---- scheduler addresses ----------------------------------------------------------------

ADDRESS_PARTS = st.lists(
    st.sampled_from(
        [
            "tcp://",
            "tls://",
            "inproc://",
            "ucx://",
            "ws://",
            "localhost",
            "127.0.0.1",
            "[::1]",
            "::1",
            ":",
            ":8786",
            ":0",
            ":65535",
            ":65536",
            ":99999999999999999999",
            ":-1",
            "/",
            "?x=1",
            "#f",
            "@",
            "user@",
            " ",
            "\x00",
            "\x1b",
            "é",
            "",
        ]
    ),
    max_size=6,
).map("".join)


@settings(max_examples=examples(300), deadline=None)
@given(address=st.one_of(ADDRESS_PARTS, st.text(max_size=40)))
def test_fuzzed_scheduler_addresses_parse_or_are_refused(address):
    try:
        host, port = parse_scheduler(address)
    except InputError as e:
        msg = str(e)
        assert "\n" not in msg and "\x1b" not in msg and "\x00" not in msg
        assert msg.startswith("--scheduler")
        return
    assert 0 < port < 65536 and host and not any(c.isspace() for c in host)


@settings(
    max_examples=examples(40),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],  # monkeypatch: same stub
)
@given(address=ADDRESS_PARTS.filter(lambda a: a.count(":") < 2 and "8786" not in a))
def test_fuzzed_scheduler_addresses_on_the_command_line(tmp_path_factory, address, monkeypatch):
    # a well-formed address is then dialled: stub that, so nothing leaves the machine
    def refuse(scheduler):
        parse_scheduler(scheduler)
        raise InputError("cannot reach the Dask scheduler: stub", where="--scheduler")

    monkeypatch.setattr(executor, "connect", refuse)
    tmp = tmp_path_factory.mktemp("a")
    p = tmp / "s.yaml"
    p.write_text(TINY)
    out = tmp / "out"
    rc, msg, _ = run_cli(["sweep", str(p), "--out", str(out), "--quiet", "--scheduler", address])
    assert rc == 2 and "\n" not in msg and "--scheduler" in msg
    assert not out.exists()


def test_scheduler_address_examples(tmp_path: Path):
    assert parse_scheduler(" tcp://h:1 ") == ("h", 1)
    for bad in ("tcp://h:65536", "h", "tls://h:1", "inproc://x", "tcp://h:1?x"):
        with pytest.raises(InputError):
            parse_scheduler(bad)
