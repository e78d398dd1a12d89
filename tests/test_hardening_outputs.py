"""Output folders and files are all or nothing; plots, costmodel and the command line
refuse bad input with one line (issue 11, classes 9, 10, 14 and the newcomer points)."""

from __future__ import annotations

import argparse
import errno
import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import kvsim
from kvsim.cli import main
from kvsim.cli.parser import _parser
from kvsim.errors import InputError
from kvsim.plots import RUN_FIGURES
from kvsim.results import writers
from kvsim.results.runfolder import write_results
from kvsim.results.writers import (
    RUN_FILES,
    check_out_folder,
    clean_leftovers,
    write_file,
    write_folder,
)
from kvsim.units import fmt_duration, parse_duration

from conftest import ROOT, SCENARIOS, examples


def _dead_pid() -> int:
    """The id of a process that has exited (and been reaped)."""
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def _text(content: str):
    return lambda p: p.write_text(content, encoding="utf-8")


def _old_run(folder: Path) -> dict[str, str]:
    folder.mkdir(parents=True)
    files = {"summary.json": "old summary", "requests.parquet": "old table", "scenario.yaml": "x"}
    for name, content in files.items():
        (folder / name).write_text(content)
    return files


def _snapshot(folder: Path) -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted(folder.iterdir())}


def _no_leftovers(*folders: Path) -> None:
    for f in folders:
        if f.is_dir():
            names = [n for n in os.listdir(f) if ".kvsim-" in n or ".tmp-" in n]
            assert names == [], f"leftovers in {f}: {names}"


# ---- class 9: all or nothing --------------------------------------------------------------


@pytest.fixture(scope="module")
def results():
    return kvsim.run(SCENARIOS / "mooncake-sample.yaml")


def test_a_crash_between_files_leaves_the_old_folder_whole(tmp_path):
    out = tmp_path / "run"
    old = _old_run(out)

    def boom(p: Path) -> None:
        raise RuntimeError("crash while writing the second file")

    with pytest.raises(RuntimeError):
        write_folder(out, {"summary.json": _text("new"), "requests.parquet": boom}, owned=RUN_FILES)
    assert _snapshot(out) == old  # not new summary.json beside old requests.parquet
    _no_leftovers(tmp_path, out)


def test_a_crash_during_the_swap_leaves_the_old_folder_whole(tmp_path, monkeypatch):
    out = tmp_path / "run"
    old = _old_run(out)

    def exchange(a: Path, b: Path) -> bool:
        raise OSError(errno.EIO, "I/O error")

    monkeypatch.setattr(writers, "_exchange", exchange)
    with pytest.raises(InputError, match="I/O error"):
        write_folder(out, {"summary.json": _text("new")}, owned=RUN_FILES)
    assert _snapshot(out) == old
    _no_leftovers(tmp_path, out)


def test_a_full_disk_leaves_no_folder_and_no_parents(tmp_path):
    out = tmp_path / "a" / "b" / "run"

    def full(p: Path) -> None:
        p.write_text("partial")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    with pytest.raises(InputError) as e:
        write_folder(out, {"summary.json": _text("new"), "requests.csv": full}, owned=RUN_FILES)
    assert "No space left on device" in str(e.value) and "--out" in str(e.value)
    assert list(tmp_path.iterdir()) == []  # no run folder, no a/ or a/b/, no staging


def test_an_interrupt_leaves_nothing(tmp_path):
    out = tmp_path / "run"

    def interrupted(p: Path) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        write_folder(out, {"summary.json": _text("x"), "scenario.yaml": interrupted})
    assert list(tmp_path.iterdir()) == []


def test_replacing_works_without_renameat2(tmp_path, monkeypatch):
    monkeypatch.setattr(writers, "_exchange", lambda a, b: False)
    out = tmp_path / "run"
    _old_run(out)
    write_folder(out, {"summary.json": _text("new")}, owned=RUN_FILES)
    assert _snapshot(out) == {"summary.json": "new"}  # old table and plots went with it
    _no_leftovers(tmp_path, out)


def test_the_folder_appears_only_complete(tmp_path):
    out = tmp_path / "run"
    seen = []

    def second(p: Path) -> None:
        seen.append(out.exists())
        p.write_text("y")

    write_folder(out, {"summary.json": _text("x"), "scenario.yaml": second})
    assert seen == [False]
    assert _snapshot(out) == {"scenario.yaml": "y", "summary.json": "x"}


def test_leftovers_of_dead_processes_are_cleaned_and_live_ones_kept(tmp_path):
    dead, live = _dead_pid(), os.getppid()
    out = tmp_path / "run"
    _old_run(out)
    stale = [
        tmp_path / f".run.kvsim-{dead}.stage",
        tmp_path / f".run.kvsim-{dead}.old",
    ]
    for d in stale:
        d.mkdir()
        (d / "summary.json").write_text("half")
    (out / f".summary.json.tmp-{dead}").write_text("old-style temp")
    (tmp_path / f".x.png.kvsim-{dead}.tmp").write_text("temp")
    keep = tmp_path / f".run.kvsim-{live}.stage"
    keep.mkdir()
    write_folder(out, {"summary.json": _text("new")}, owned=RUN_FILES)
    assert sorted(os.listdir(tmp_path)) == sorted([keep.name, "run"])
    assert _snapshot(out) == {"summary.json": "new"}
    assert clean_leftovers(tmp_path) == []  # the live process's staging stays


def test_lookalike_temporary_files_of_others_are_kept(tmp_path):
    """Only kvsim's own leftovers go: another program's ``.NAME.tmp-PID`` stays beside the
    folder, and inside it counts as a file kvsim did not write."""
    dead = _dead_pid()
    other = tmp_path / f".bashrc.tmp-{dead}"
    other.write_text("someone else's")
    out = tmp_path / "run"
    write_folder(out, {"summary.json": _text("x")}, owned=RUN_FILES)
    assert other.read_text() == "someone else's"
    (out / f".notes.tmp-{dead}").write_text("mine")
    with pytest.raises(InputError, match=r"\.notes\.tmp-"):
        write_folder(out, {"summary.json": _text("y")}, owned=RUN_FILES)
    assert (out / f".notes.tmp-{dead}").exists()


def test_a_symlink_loop_is_refused_up_front(tmp_path):
    loop = tmp_path / "loop"
    loop.symlink_to(loop.name)
    with pytest.raises(InputError, match="symlink loop"):
        check_out_folder(loop, flag="--out", owned=RUN_FILES)


def test_foreign_files_are_refused_and_kept(tmp_path):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("the user's")
    (out / "summary.json").write_text("old")
    (out / "sub").mkdir()
    with pytest.raises(InputError, match=r"notes\.txt, sub/"):
        write_folder(out, {"summary.json": _text("new")}, owned=RUN_FILES)
    assert (out / "notes.txt").read_text() == "the user's"
    assert (out / "summary.json").read_text() == "old"


def test_the_current_folder_is_refused(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for path in (".", "./", str(tmp_path), str(tmp_path.parent)):
        with pytest.raises(InputError, match="current folder"):
            check_out_folder(path, flag="--out", owned=RUN_FILES)
    assert list(tmp_path.iterdir()) == []


def test_a_symlink_to_a_folder_keeps_the_link(tmp_path):
    real = tmp_path / "real"
    _old_run(real)
    link = tmp_path / "link"
    link.symlink_to(real)
    write_folder(link, {"summary.json": _text("new")}, owned=RUN_FILES)
    assert link.is_symlink()
    assert _snapshot(real) == {"summary.json": "new"}


def test_write_file_is_all_or_nothing(tmp_path):
    f = tmp_path / "plot.png"
    f.write_text("old")

    def half(p: Path) -> None:
        p.write_text("half")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    with pytest.raises(InputError, match="No space left"):
        write_file(f, half, flag="--plot")
    assert f.read_text() == "old"
    assert os.listdir(tmp_path) == ["plot.png"]


def test_run_results_crash_between_renames(tmp_path, monkeypatch, results):
    """write_results of a real run: a rename failing midway leaves the old run whole."""
    out = tmp_path / "run"
    write_results(results, out, "csv")
    before = _snapshot(out)
    calls = []
    real_rename = os.rename

    def flaky(a, b):
        calls.append((a, b))
        raise OSError(errno.EIO, "I/O error")

    monkeypatch.setattr(writers, "_exchange", lambda a, b: False)
    monkeypatch.setattr(writers.os, "rename", flaky)
    with pytest.raises(InputError):
        write_results(results, out, "parquet")
    monkeypatch.setattr(writers.os, "rename", real_rename)
    assert calls and _snapshot(out) == before
    _no_leftovers(tmp_path, out)
    write_results(results, out, "parquet")  # and the next run replaces it
    assert sorted(os.listdir(out)) == [
        "requests.parquet",
        "scenario.yaml",
        "summary.json",
        "timeseries.parquet",
    ]


def test_baseline_folder_is_all_or_nothing(tmp_path, monkeypatch):
    from kvsim.experiments import regression

    out = tmp_path / "base"
    regression.write_baseline({"entries": [], "v": 1}, out)
    assert json.loads((out / "baseline.json").read_text())["v"] == 1

    def full(self, *a, **k):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(Path, "write_text", full)
    with pytest.raises(InputError, match=r"--out .*No space left"):
        regression.write_baseline({"entries": [], "v": 2}, out)
    monkeypatch.undo()
    assert json.loads((out / "baseline.json").read_text())["v"] == 1
    (out / "README.md").write_text("the team's notes")
    with pytest.raises(InputError, match=r"README\.md"):
        regression.write_baseline({"entries": [], "v": 3}, out)
    assert (out / "README.md").exists()
    _no_leftovers(tmp_path, out)


@pytest.mark.parametrize(
    "owned,name",
    [
        (writers.REPORT_FILES, "kvsim-check.xml"),
        (writers.CAPACITY_FILES, "capacity.csv"),
        (writers.REPRODUCTION_FILES, "ttft_cdf_no-remote.png"),
        (writers.SENSITIVITY_FILES, "tornado.png"),
        (RUN_FILES, "requests.csv"),
    ],
)
def test_every_folder_kind_refuses_foreign_files_and_accepts_its_own(tmp_path, owned, name):
    out = tmp_path / "f"
    out.mkdir()
    (out / name).write_text("old")
    assert check_out_folder(out, flag="--out", owned=owned) == out
    (out / "junit.xml").write_text("another tool's")
    with pytest.raises(InputError, match=r"junit\.xml"):
        check_out_folder(out, flag="--out", owned=owned)


def test_cli_run_refuses_a_folder_of_foreign_files_before_running(tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / "thesis.tex").write_text("precious")
    rc = main(["run", str(SCENARIOS / "mooncake-sample.yaml"), "--quiet", "--out", str(out)])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and err.count("\n") == 0 and "thesis.tex" in err
    assert os.listdir(out) == ["thesis.tex"]


def test_cli_run_out_never_deletes_the_figures_kvsim_plot_drew(tmp_path, capsys):
    """Issue 24: `kvsim run --out` over a folder `kvsim plot` drew into silently deleted
    the figures (they went with the old folder). They are files `run` does not write: the
    folder is refused, naming them, and left as it was; without them it is replaced."""
    out = tmp_path / "run"
    argv = ["run", str(SCENARIOS / "mooncake-sample.yaml"), "--quiet", "--out", str(out)]
    argv += ["--set", "workload.limit=120"]
    assert main(argv) == 0
    assert main(["plot", str(out), "--format", "svg"]) == 0
    before = {f.name: f.read_bytes() for f in out.iterdir()}
    figures = sorted(n for n in before if n.endswith(".svg"))
    assert len(figures) == len(RUN_FIGURES)
    capsys.readouterr()
    assert main([*argv, "--format", "csv"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and all(f in err for f in figures), err
    assert {f.name: f.read_bytes() for f in out.iterdir()} == before
    for f in figures:
        (out / f).unlink()
    assert main([*argv, "--format", "csv"]) == 0  # its own files (requests.parquet) replaced
    assert sorted(os.listdir(out)) == [
        "requests.csv",
        "scenario.yaml",
        "summary.json",
        "timeseries.csv",
    ]


@pytest.mark.parametrize("name", ["summary.json", "requests.parquet", "ttft_cdf.png"])
def test_no_output_folder_is_written_through_a_symlink_in_it(tmp_path, capsys, name):
    """A symlink in an output folder is never one of kvsim's files: every command that
    writes a folder refuses it up front (the one check, writers.foreign_files), so no
    output is written through it to outside the folder, and the link stays."""
    outside = tmp_path / "outside.txt"
    outside.write_text("precious")
    for argv in (
        ["run", str(SCENARIOS / "mooncake-sample.yaml"), "--quiet"],
        ["sweep", str(tmp_path / "s.yaml"), "--quiet"],
        ["capacity", str(SCENARIOS / "quickstart.yaml"), "--slo", "ttft_p99<=1s"],
    ):
        (tmp_path / "s.yaml").write_text(f"base: {SCENARIOS / 'quickstart.yaml'}\n")
        out = tmp_path / argv[0]
        out.mkdir()
        link = out / ("runs.jsonl" if argv[0] == "sweep" and name != "ttft_cdf.png" else name)
        link.symlink_to(outside)
        capsys.readouterr()
        assert main([*argv, "--out", str(out)]) == 2
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and f"{link.name} (a symlink)" in err, err
        assert os.listdir(out) == [link.name] and link.is_symlink()
        assert outside.read_text() == "precious"
    # a symlink as a file of a folder written by write_folder (owned name): refused too
    with pytest.raises(InputError, match="a symlink"):
        write_folder(tmp_path / "run", {name: _text("new")}, owned=RUN_FILES)


def test_cli_plot_into_a_read_only_folder(tmp_path, capsys, monkeypatch, results):
    out = tmp_path / "run"
    write_results(results, out)

    def denied(a, b):
        raise PermissionError(errno.EACCES, "Permission denied")

    monkeypatch.setattr(writers.os, "replace", denied)
    rc = main(["plot", str(out)])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and err.startswith("kvsim: error: ") and "\n" not in err
    assert "ttft_cdf.png" in err and "Permission denied" in err
    _no_leftovers(out)


# ---- class 14: `--out ''` and friends ----------------------------------------------------

EMPTY_PATHS = [
    ["run", "{QS}", "--out", ""],
    ["run", ""],
    ["validate", ""],
    ["trace", "stats", ""],
    ["trace", "mrc", "{QS}", "--plot", ""],
    ["trace", "generate", "{QS}", ""],
    ["costmodel", "--plot", ""],
    ["sweep", "s.yaml", "--out", ""],
    ["capacity", "{QS}", "--slo", "ttft_p99<=1s", "--out", ""],
    ["capacity", "--sweep", "", "--slo", "ttft_p99<=1s"],
    ["baseline", "suite.yaml", "--out", " "],
    ["check", "suite.yaml", "--baseline", ""],
    ["check", "suite.yaml", "--baseline", "b", "--report", ""],
    ["plot", ""],
    ["reproduce", "paper", "--out", ""],
    ["reproduce", "paper", "--scenarios", ""],
    ["costmodel", "--profile", ""],
    ["trace", "mrc", "{QS}", "--profile", " "],
    ["plot", ".", "--x", ""],
]


@pytest.mark.parametrize("argv", EMPTY_PATHS, ids=lambda a: " ".join(a))
def test_empty_paths_are_refused_on_every_command(argv, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    argv = [a.replace("{QS}", str(SCENARIOS / "quickstart.yaml")) for a in argv]
    with pytest.raises(SystemExit) as e:
        main(argv)
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2
    assert err.startswith("kvsim: error: ") and "\n" not in err and ": empty " in err
    assert list(tmp_path.iterdir()) == []


def test_every_path_argument_refuses_empty_names():
    """A new path argument must not silently accept '' (which `if args.out:` skips)."""
    names = re.compile(r"^(--)?(out|plot|report|baseline|sweep|scenarios|scenario|trace|"
                       r"output|suite|folder)$")  # fmt: skip
    for cmd, sub in _subparsers(_parser()):
        for action in sub._actions:
            opt = action.option_strings[-1] if action.option_strings else action.dest
            if names.match(opt):
                assert action.type is not None, f"{cmd} {opt} accepts an empty path"


def _subparsers(p: argparse.ArgumentParser, prefix: str = ""):
    for action in p._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                full = f"{prefix} {name}".strip()
                inner = list(_subparsers(sub, full))
                yield from inner or [(full, sub)]


# ---- newcomer points ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv,where",
    [
        (["run", "{QS}", "--sed", "3"], "run: unrecognized arguments: --sed 3"),
        (["--sed", "3"], "invalid choice: '3'"),
        (["profiles", "--sed"], "profiles: unrecognized arguments: --sed"),
        (["run"], "run: the following arguments are required"),
        (["trace", "mrc", "x", "--points", "many"], "trace mrc: argument --points"),
    ],
)
def test_usage_errors_have_one_prefix(argv, where, capsys):
    argv = [a.replace("{QS}", str(SCENARIOS / "quickstart.yaml")) for a in argv]
    with pytest.raises(SystemExit) as e:
        main(argv)
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2 and "\n" not in err
    assert err.startswith("kvsim: error: ") and err.count("kvsim:") == 1, err
    assert where in err


def test_help_shows_every_default():
    for cmd, sub in _subparsers(_parser()):
        text = sub.format_help()
        formatter = sub._get_formatter()
        for action in sub._actions:
            d = action.default
            if not action.option_strings or d in (None, False, argparse.SUPPRESS) or d == []:
                continue
            shown = formatter._get_help_string(action) or ""
            assert "default" in shown, f"`kvsim {cmd} --help` hides the default of {action.dest}"
        if cmd == "capacity":
            flat = " ".join(text.split())
            # --reps: 3, or a --sweep file's own seed count (said in its help)
            assert "seeds count, else 3)" in flat and "(default: 0.02)" in flat


# options every command takes, described once under the table rather than on each row
GLOBAL = ("--help", "--debug")


def test_readme_command_table_lists_every_flag():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for flag in GLOBAL[1:]:
        assert f"`{flag}`, on every command" in readme, f"README does not describe {flag}"
    lines = [line for line in readme.splitlines() if line.startswith("| `kvsim ")]
    for cmd, sub in _subparsers(_parser()):
        rows = [ln.split("` |")[0] for ln in lines if re.match(rf"^\| `kvsim {cmd}[ `]", ln)]
        assert len(rows) == 1, f"README's command table has no row for `kvsim {cmd}`"
        rows_cmd = rows[0]
        for action in sub._actions:
            flags = [o for o in action.option_strings if o.startswith("--") and o not in GLOBAL]
            if flags:
                assert re.search(rf"{flags[0]}\b", rows_cmd), f"`kvsim {cmd}` row omits {flags[0]}"


# ---- class 10: costmodel and small durations -------------------------------------------------


@pytest.mark.parametrize(
    "flag,value",
    [
        ("--bandwidth", "0 GB/s"),
        ("--bandwidth", "-1 GiB/s"),
        ("--rate", "0/s"),
        ("--rate", "-5/s"),
        ("--t0", "-1 ms"),
        ("--kv-bytes", "0 B"),
        ("--kv-bytes", "-3 B"),
    ],
)
def test_costmodel_refuses_nonpositive_quantities(flag, value, capsys):
    assert main(["costmodel", f"{flag}={value}"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"kvsim: error: {flag}") and "\n" not in err


def test_costmodel_refuses_overflow(capsys):
    assert main(["costmodel", "--kv-bytes=1e300 B", "--rate=1e300/s"]) == 2
    assert "overflows" in capsys.readouterr().err


def test_costmodel_names_extra_rows_by_value(capsys):
    assert main(["costmodel", "--bandwidth", "10.76 GiB/s", "--bandwidth", "800 Gb/s"]) == 0
    out = capsys.readouterr().out
    assert "--bandwidth 1" not in out
    assert re.search(r"^  10\.76 GiB/s\s+10\.76 GiB/s", out, re.M)
    assert re.search(r"^  93\.13 GiB/s\s+93\.13 GiB/s", out, re.M)


@settings(max_examples=examples(25), deadline=None)
@given(
    bw=st.floats(1e-3, 1e4),
    rate=st.floats(1.0, 1e7),
    t0=st.floats(0, 10),
    kv=st.floats(1.0, 1e7),
    tokens=st.integers(1, 10**7),
)
def test_costmodel_never_prints_a_negative_time(bw, rate, t0, kv, tokens):
    import contextlib
    import io

    argv = [
        "costmodel",
        "--json",
        f"--bandwidth={bw} GiB/s",
        f"--rate={rate}/s",
        f"--t0={t0} s",
        f"--kv-bytes={kv} B",
        f"--tokens={tokens}",
    ]
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(argv)
    assert rc in (0, 2), err.getvalue()
    if rc == 0:

        def strict(name: str) -> None:
            raise AssertionError(f"{name} is not JSON")

        for row in json.loads(out.getvalue(), parse_constant=strict)["paths"]:
            for key in ("restore_s", "recompute_s", "t0_s", "bandwidth"):
                assert math.isfinite(row[key]) and row[key] >= 0, row


@settings(max_examples=examples(200), deadline=None)
@given(st.floats(1e-12, 1e6))
def test_fmt_duration_keeps_three_significant_digits(s):
    text = fmt_duration(s)
    assert not re.match(r"^-?0(\.0*)? ", text), text  # never "0 ms" for a nonzero time
    assert parse_duration(text) == pytest.approx(s, rel=6e-3)


def test_summary_table_prints_tiny_ttfts_precisely(results):
    from kvsim.report import summary_table

    s = dict(results.summary)
    for k in list(s):
        if k.startswith(("ttft_", "queue_wait_")) and k.endswith("_s"):
            s[k] = 4.2e-5
    s["gpu_busy_frac"] = 3e-6
    text = summary_table(s)
    assert "42 µs" in text and " 0 ms" not in text
    assert "GPU busy          0.0003%" in text


# ---- doc images and quoted figures stay generated from the code ----------------------------


def _make_figures():
    import importlib.util

    spec = importlib.util.spec_from_file_location("make_figures", ROOT / "docs" / "make_figures.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


REGENERATE = "regenerate with: python docs/make_figures.py"


def test_doc_images_are_the_ones_recorded():
    mf = _make_figures()
    doc = json.loads(mf.FIGURES.read_text())
    images = {e["image"] for e in doc.values() if "image" in e}
    assert images == {p.name for p in mf.IMG.glob("*.png")}, REGENERATE
    for entry in doc.values():
        if "image" in entry:
            assert mf.sha256(mf.IMG / entry["image"]) == entry["sha256"], REGENERATE


def test_costmodel_figure_is_current():
    mf = _make_figures()
    stored = json.loads(mf.FIGURES.read_text())["costmodel"]["numbers"]
    assert mf.costmodel_numbers() == stored, REGENERATE


def test_sweep_figure_is_current():
    """One run of the docs' sweep (sync loading at 2x load) against the image's numbers."""
    from kvsim.experiments.sweep import load_sweep, run_one

    mf = _make_figures()
    stored = json.loads(mf.FIGURES.read_text())["sweep"]["numbers"]
    sweep = load_sweep(mf.SWEEP)
    assert stored["columns"] == sweep.columns, REGENERATE
    point = {"cluster.load_policy": "sync", "remote.sharding": "none", "workload.time_scale": 0.5}
    spec = next(s for s in sweep.runs if dict(s.params) == point)
    row = mf.sweep_run_numbers(run_one(spec), sweep.columns)
    assert row in stored["runs"] or pytest.fail(f"{row} not in figures.json: {REGENERATE}")
    assert len(stored["runs"]) == len(sweep.runs), REGENERATE


def test_paper_figure_is_current():
    """One configuration of the study's overview CDF (every seed of the reproduction
    pooled) against the image's numbers."""
    import numpy as np

    from kvsim.reproduce.remote_kv_tiers import SEEDS

    mf = _make_figures()
    stored = json.loads(mf.FIGURES.read_text())["paper"]["numbers"]
    assert sorted(stored) == sorted(mf.PAPER_OVERVIEW), REGENERATE
    path = ROOT / "scenarios" / "paper" / "sharded-async.yaml"
    base = kvsim.load(path).seed
    runs = [kvsim.run(path, seed=base + i).requests for i in range(SEEDS)]
    v = np.concatenate([df.loc[~df["warmup"], "ttft_s"].to_numpy(float) for df in runs])
    got = {"ttft_p50_s": float(np.quantile(v, 0.5)), "ttft_p99_s": float(np.quantile(v, 0.99))}
    assert got == pytest.approx(stored["sharded-async"], rel=1e-9), REGENERATE


def test_readme_quotes_the_quickstart_summary_kvsim_prints():
    mf = _make_figures()
    text = mf.README.read_text(encoding="utf-8")
    start, end = mf.readme_quickstart_block(text)
    assert text[start:end] == mf.quickstart_summary(), REGENERATE + " readme"


def test_python_api_progress_false_is_off_and_junk_is_refused():
    import kvsim

    res = kvsim.run(
        ROOT / "scenarios" / "quickstart.yaml", {"workload.requests": 600}, progress=False
    )
    assert res.summary["requests"] > 0
    with pytest.raises(TypeError, match="progress"):
        kvsim.run(ROOT / "scenarios" / "quickstart.yaml", {"workload.requests": 600}, progress=1)
