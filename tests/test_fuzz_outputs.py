"""Fuzzing ``kvsim plot`` over damaged output folders.

A run folder (summary.json + requests table), a sweep folder (results.parquet) and a
capacity folder (capacity.csv) are made once, valid; each example copies one and damages
it: truncates a file, overwrites a stretch with random bytes, empties it, deletes it,
swaps it for a folder or a symlink loop, drops or retypes a table column, fills a column
with NaN, inf, negatives or text, removes or retypes a summary field, empties a table.

Contract: exit 0 (and the figures written), or exit 2 with one line
``kvsim: error: ...`` naming the file; never a traceback, exit 1 or a hidden temporary
file left behind.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

import kvsim
from kvsim.cli import main
from kvsim.results import writers
from kvsim.results.runfolder import write_results

from conftest import SCENARIOS, examples

SETTINGS = settings(
    max_examples=examples(20),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("valid")
    res = kvsim.run(SCENARIOS / "mooncake-sample.yaml")
    res.requests = res.requests.head(300)  # small: figures draw quickly
    run = base / "run"
    write_results(res, run)
    sweep = base / "sweep"
    sweep.mkdir()
    rows = []
    for i, (policy, ts, seed) in enumerate(
        (p, t, s) for p in ("sync", "async") for t in (1.0, 0.5) for s in (1, 2)
    ):
        rows.append(
            {
                "run": i,
                "run_id": f"r{i}",
                "cluster.load_policy": policy,
                "workload.time_scale": ts,
                "seed": seed,
                "status": "ok",
                "error": "",
                "ttft_p50_s": 0.1 / ts + 0.01 * seed,
                "ttft_p99_s": 0.5 / ts + 0.02 * seed,
            }
        )
    table = pd.DataFrame(rows)
    table.attrs["swept"] = ["cluster.load_policy", "workload.time_scale"]  # as kvsim sweep does
    table.to_parquet(sweep / "results.parquet", index=False)
    cap = base / "capacity"
    cap.mkdir()
    pd.DataFrame(
        {
            "configuration": ["a", "b"],
            "capacity_rps": [3.5, 7.25],
            "ci95_rps": [0.1, 0.3],
            "factor": [1.75, 3.6],
            "slo": ["ttft_p99_s<=1", "ttft_p99_s<=1"],
        }
    ).to_csv(cap / "capacity.csv", index=False)
    return {"run": run, "sweep": sweep, "capacity": cap}


FILES = {
    "run": ["summary.json", "requests.parquet", "requests.csv", "timeseries.parquet"],
    "sweep": ["results.parquet"],
    "capacity": ["capacity.csv"],
}
JUNK_VALUES = [None, "text", -1, 0, 1e308, float("nan"), [], {}, True, "", 10**30]


def _damage_bytes(path: Path, data: st.DataObject) -> None:
    raw = path.read_bytes()
    how = data.draw(st.sampled_from(["truncate", "overwrite", "random", "empty"]), label="how")
    event(f"bytes: {how}")
    if how == "truncate":
        raw = raw[: data.draw(st.integers(0, max(0, len(raw) - 1)), label="cut")]
    elif how == "overwrite":
        at = data.draw(st.integers(0, max(0, len(raw) - 1)), label="at")
        junk = data.draw(st.binary(min_size=1, max_size=64), label="junk")
        raw = raw[:at] + junk + raw[at + len(junk) :]
    elif how == "random":
        raw = data.draw(st.binary(max_size=300), label="random")
    else:
        raw = b""
    path.write_bytes(raw)


def _damage_table(path: Path, data: st.DataObject) -> None:
    df = pd.read_parquet(path) if path.suffix == ".parquet" else pd.read_csv(path)
    col = data.draw(st.sampled_from(list(df.columns)), label="column")
    how = data.draw(
        st.sampled_from(["drop", "text", "nan", "inf", "negative", "empty", "one row", "huge"]),
        label="how",
    )
    event(f"table: {how}")
    if how == "drop":
        df = df.drop(columns=[col])
    elif how == "text":
        df[col] = "junk"
    elif how == "nan":
        df[col] = np.nan
    elif how == "inf":
        df[col] = np.inf
    elif how == "negative":
        df[col] = -1.0
    elif how == "empty":
        df = df.head(0)
    elif how == "one row":
        df = df.head(1)
    else:
        df[col] = 1e300
    if path.suffix == ".parquet":
        df.to_parquet(path, index=False)
    else:
        df.to_csv(path, index=False)


def _damage_summary(path: Path, data: st.DataObject) -> None:
    doc: dict[str, Any] = json.loads(path.read_text())
    key = data.draw(st.sampled_from(["scenario", "engines", "token_source_frac"]), label="key")
    if data.draw(st.booleans(), label="delete"):
        doc.pop(key, None)
        event("summary: field deleted")
    else:
        doc[key] = data.draw(st.sampled_from(JUNK_VALUES), label="value")
        event("summary: field retyped")
    path.write_text(json.dumps(doc))


def _damage(folder: Path, kind: str, data: st.DataObject) -> None:
    name = data.draw(st.sampled_from(FILES[kind]), label="file")
    path = folder / name
    if name == "requests.csv":  # the run as a CSV table instead
        pd.read_parquet(folder / "requests.parquet").to_csv(path, index=False)
        (folder / "requests.parquet").unlink()
    how = data.draw(
        st.sampled_from(["bytes", "content", "delete", "folder", "loop"]), label="damage"
    )
    if how == "bytes":
        _damage_bytes(path, data)
    elif how == "content":
        (_damage_summary if path.suffix == ".json" else _damage_table)(path, data)
    elif how == "delete":
        path.unlink()
        event("deleted")
    elif how == "folder":
        path.unlink()
        path.mkdir()
        event("a folder")
    else:
        path.unlink()
        path.symlink_to(path.name)
        event("symlink loop")


def _plot(folder: Path, *extra: str) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            rc = main(["plot", str(folder), *extra])
        except SystemExit as e:
            rc = e.code if isinstance(e.code, int) else 1
    return rc, err.getvalue().strip()


FIGURES = {
    "run": {
        "ttft_cdf.png",
        "ttft_breakdown.png",
        "token_sources.png",
        "engine_timeline.png",
        "timeseries.png",
        "tiers.png",
    },
    "sweep": {"ttft_vs_load.png"},
    "capacity": {"capacity.png"},
}


def _check_contract(folder: Path, kind: str, rc: int, err: str) -> None:
    assert rc in (0, 2), f"exit {rc}: {err}"
    if rc == 2:
        assert err.startswith("kvsim: error: ") and "\n" not in err, err
    else:
        figures = {n for n in os.listdir(folder) if n.endswith(".png")}
        assert figures == FIGURES[kind], figures
    leftovers = [n for n in os.listdir(folder) if ".kvsim-" in n or ".tmp" in n]
    assert leftovers == [], leftovers


@pytest.mark.parametrize("kind", ["run", "sweep", "capacity"])
def test_valid_folders_plot(folders, kind):
    with tempfile.TemporaryDirectory() as d:
        folder = Path(d) / kind
        shutil.copytree(folders[kind], folder)
        rc, err = _plot(folder)
        assert rc == 0, err
        assert {n for n in os.listdir(folder) if n.endswith(".png")} == FIGURES[kind]


class Pinned:
    """A fixed example for a test drawing from ``st.data()``: each draw answered by its
    label from ``values``; the example is for one ``kind`` of folder only."""

    def __init__(self, kind: str, **values: Any) -> None:
        self.kind, self.values = kind, values

    def draw(self, strategy: Any, label: str) -> Any:
        return self.values[label]

    def __repr__(self) -> str:
        return f"Pinned({self.kind!r}, {self.values!r})"


@pytest.mark.parametrize("kind", ["run", "sweep", "capacity"])
@SETTINGS
# failed once in CI: the swept column workload.time_scale dropped from a sweep's table,
# and `kvsim plot` drew bars per configuration instead of refusing the damaged table
@example(
    data=Pinned(
        "sweep",
        file="results.parquet",
        damage="content",
        column="workload.time_scale",
        how="drop",
        **{"--x": False},
    )
)
@given(data=st.data())
def test_plot_of_a_damaged_folder_is_clean(folders, kind, data):
    if isinstance(data, Pinned) and data.kind != kind:
        return  # a pinned example of another kind of folder
    with tempfile.TemporaryDirectory() as d:
        folder = Path(d) / kind
        shutil.copytree(folders[kind], folder, symlinks=True)
        _damage(folder, kind, data)
        extra = []
        if kind == "sweep" and data.draw(st.booleans(), label="--x"):
            extra = ["--x", data.draw(st.sampled_from(["workload.time_scale", "seed", "nope"]))]
        rc, err = _plot(folder, *extra)
        _check_contract(folder, kind, rc, err)


# ---- write_folder under injected faults --------------------------------------------------

FAULTS = [
    "none",
    "writer",  # a file's writer fails
    "mkdir",  # the staging folder cannot be made
    "exchange",  # the atomic swap fails
    "rename",  # the rename into place fails (the path without renameat2)
    "rename-back",  # ... and so does the first rename after moving the old folder away
    "rmtree",  # removing the old folder fails (after the new one is in place)
]
REAL_EXCHANGE = writers._exchange
REAL_MKDIR = Path.mkdir
ERRORS = {
    "ENOSPC": lambda: OSError(28, "No space left on device"),
    "EIO": lambda: OSError(5, "Input/output error"),
    "interrupt": KeyboardInterrupt,
}


@SETTINGS
@given(
    before=st.sampled_from(["absent", "empty", "old run", "old run + leftovers"]),
    deep=st.booleans(),
    fault=st.sampled_from(FAULTS),
    error=st.sampled_from(sorted(ERRORS)),
    failing=st.integers(0, 2),
    exchange=st.booleans(),
)
def test_write_folder_is_all_or_nothing_under_faults(before, deep, fault, error, failing, exchange):
    from unittest import mock

    from kvsim.errors import InputError

    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        out = root / "a" / "b" / "run" if deep else root / "run"
        if before != "absent":
            out.mkdir(parents=True)
        if before.startswith("old run"):
            for name in ("summary.json", "requests.parquet", "ttft_cdf.png"):
                (out / name).write_text(f"old {name}")
        if before.endswith("leftovers"):
            (out.parent / f".run.kvsim-{2**22 + 7}.stage").mkdir()  # pid past pid_max
        old = {p.name: p.read_text() for p in out.iterdir()} if out.is_dir() else None

        def writer(i):
            def write(p: Path) -> None:
                p.write_text(f"new {i}")
                if fault == "writer" and i == failing:
                    raise ERRORS[error]()

            return write

        files = {n: writer(i) for i, n in enumerate(("summary.json", "requests.csv", "x.yaml"))}
        real_rename, real_rmtree = os.rename, shutil.rmtree
        renames = []

        def rename(a, b):
            renames.append((a, b))
            if fault == "rename" or (fault == "rename-back" and len(renames) == 2):
                raise ERRORS[error]()
            return real_rename(a, b)

        def rmtree(p, *a, **k):
            if fault == "rmtree":  # removing anything fails (silently where ignored)
                if k.get("ignore_errors"):
                    return None
                raise OSError(5, "Input/output error")
            return real_rmtree(p, *a, **k)

        def exch(a, b):
            if fault == "exchange":
                raise ERRORS[error]()
            return exchange and REAL_EXCHANGE(a, b)

        def mkdir(self, *a, **k):
            if fault == "mkdir" and ".stage" in self.name:
                raise ERRORS[error]()
            return REAL_MKDIR(self, *a, **k)

        with (
            mock.patch.object(writers.os, "rename", rename),
            mock.patch.object(writers.shutil, "rmtree", rmtree),
            mock.patch.object(writers, "_exchange", exch),
            mock.patch.object(Path, "mkdir", mkdir),
        ):
            try:
                writers.write_folder(out, files, owned=writers.RUN_FILES)
                ok = True
            except (InputError, KeyboardInterrupt):
                ok = False
        event(f"{fault}: {'written' if ok else 'refused'}")
        if ok:
            assert {p.name: p.read_text() for p in out.iterdir()} == {
                "summary.json": "new 0",
                "requests.csv": "new 1",
                "x.yaml": "new 2",
            }
        elif old is None:
            assert not out.exists() and not (root / "a").exists()
        else:
            assert {p.name: p.read_text() for p in out.iterdir()} == old
        names = [n for _, dirs, files in os.walk(root) for n in dirs + files]
        mine = [n for n in names if f".kvsim-{os.getpid()}." in n]
        if fault != "rmtree":
            assert mine == [], mine
        dead = [n for n in names if f".kvsim-{2**22 + 7}." in n]
        assert dead == [] or not ok or fault == "rmtree", dead  # they go with a write


@pytest.mark.parametrize(("column", "value"), [("ttft_s", -5.0), ("arrival_s", np.inf)])
def test_plot_refuses_times_kvsim_never_writes(folders, column, value):
    # found by the attack round: a negative TTFT or an infinite arrival plotted with exit 0
    # and matplotlib warnings; NaN (a dropped request) stays fine
    with tempfile.TemporaryDirectory() as d:
        folder = Path(d) / "run"
        shutil.copytree(folders["run"], folder)
        table = folder / "requests.parquet"
        df = pd.read_parquet(table)
        df.loc[3, column] = value
        df.to_parquet(table, index=False)
        rc, err = _plot(folder)
        assert rc == 2, err
        assert f"column {column}" in err and "requests.parquet (row 3)" in err, err
