"""A sweep's output folder: the journal ``runs.jsonl`` (one checksummed row per finished
run, appended as runs complete; a torn last line cut off, an edited row refused), the
lock that lets one sweep at a time write the folder, and what the folder may hold."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import stat
from pathlib import Path
from typing import Any

from kvsim.errors import InputError, clean
from kvsim.experiments.sweep.files import digest
from kvsim.experiments.sweep.spec import RunSpec, counted
from kvsim.experiments.sweep.tables import TABLES
from kvsim.files import check_regular
from kvsim.results.writers import clean_leftovers

JOURNAL = "runs.jsonl"
LOCK = ".kvsim-sweep.lock"  # held (flock) by the sweep writing the folder
#: what a sweep folder may hold (besides leftovers of interrupted writes): the journal, the
#: tables, what `kvsim plot` and `kvsim capacity --sweep --out` write there, and the lock
SWEEP_FILES = (
    JOURNAL,
    *TABLES,
    LOCK,
    "capacity.csv",
    *(f"{stem}.{ext}" for stem in ("ttft_vs_load", "capacity") for ext in ("png", "svg", "pdf")),
)
CHECK = "check"  # a journal row's checksum of its own content
MAX_JOURNAL_LINE = 1 << 20  # bytes; a journal row is a few kB


def read_journal(out_dir: Path) -> dict[str, dict[str, Any]]:
    """Rows already finished, by run id (see :func:`read_journal_lines`)."""
    return {k: row for k, (_, row) in read_journal_lines(out_dir).items()}


def read_journal_lines(out_dir: Path) -> dict[str, tuple[int, dict[str, Any]]]:
    """Rows already finished, by run id, with their line numbers (the last row of a run
    wins: ``--retry-failed`` appends a run's new row).

    Every row carries a checksum of its content: a row edited by hand (a metric, a seed, a
    status), or one without a checksum, is refused by file and line, for a person to
    delete it (its run is then done again).

    A last line without its newline is a write torn by an interrupt: it is left out here
    (and :func:`repair_journal` cuts it off before new rows are appended). Any other line
    that is not a JSON object with a ``run_id`` is damage a person must look at: an
    InputError naming the file and line."""
    path = out_dir / JOURNAL
    done: dict[str, tuple[int, dict[str, Any]]] = {}
    if not os.path.lexists(path):
        return done
    check_regular(path, what="sweep journal")
    try:
        with path.open("rb") as fh:
            lineno = 0
            while True:
                raw = fh.readline(MAX_JOURNAL_LINE + 1)
                if not raw:
                    break
                lineno += 1
                where = f"{path}:{lineno}"
                if len(raw) > MAX_JOURNAL_LINE:
                    raise InputError(f"a journal line over {MAX_JOURNAL_LINE:,} bytes", where=where)
                torn = not raw.endswith(b"\n")
                row = _journal_row(raw, where, torn=torn)
                if row is not None:
                    done[row["run_id"]] = (lineno, row)
    except OSError as e:
        raise InputError(f"cannot read: {e.strerror or e}", where=str(path)) from None
    return done


def _journal_row(raw: bytes, where: str, *, torn: bool) -> dict[str, Any] | None:
    """One journal line as a row; None for a blank line or a torn (unterminated) tail."""
    try:
        text = raw.decode("utf-8-sig")  # a BOM (a journal saved by an editor) is dropped
    except UnicodeDecodeError as e:
        if torn:
            return None
        raise InputError(f"not UTF-8 text ({e.reason})", where=where) from None
    if not text.strip():
        return None
    try:
        row = json.loads(text)
    except (ValueError, RecursionError) as e:
        if torn:
            return None
        reason = e.msg if isinstance(e, json.JSONDecodeError) else type(e).__name__
        raise InputError(
            f"not a JSON row ({reason}); a damaged sweep journal: delete this line to "
            "re-run its run",
            where=where,
        ) from None
    if not isinstance(row, dict):
        if torn:
            return None
        raise InputError(
            f"a journal row must be a JSON object, got {type(row).__name__}", where=where
        )
    for key in ("run_id", "status"):
        if not isinstance(row.get(key), str):
            if torn:
                return None
            raise InputError(f"a journal row needs a text {key!r}", where=where)
    redo = "delete this line to re-run that run"
    if not isinstance(row.get(CHECK), str):
        if torn:
            return None
        raise InputError(
            f"a journal row without its checksum (written by hand, or by an older kvsim); {redo}",
            where=where,
        )
    if row[CHECK] != _row_check(row):
        if torn:
            return None
        raise InputError(
            f"this row was edited or damaged (its checksum does not match its content); {redo}",
            where=where,
        )
    if row["status"] not in ("ok", "error"):
        raise InputError(
            f"status {clean(row['status'], 40)!r} is neither ok nor error; {redo}", where=where
        )
    del row[CHECK]
    return row


def _row_check(row: dict[str, Any]) -> str:
    """The checksum a journal row carries: of its content, as JSON, without the checksum."""
    return digest({k: v for k, v in row.items() if k != CHECK})


def journal_line(row: dict[str, Any]) -> str:
    """A row as a journal line, with its checksum (computed on what reading it gives back)."""
    plain = json.loads(json.dumps(row, default=str))
    plain.pop(CHECK, None)
    plain[CHECK] = _row_check(plain)
    return json.dumps(plain) + "\n"


def repair_journal(path: Path) -> None:
    """Make the journal end at a line boundary before rows are appended to it: a torn tail
    (an interrupted write) is cut off, a complete last row missing its newline gets one."""
    try:
        with path.open("rb+") as fh:
            size = fh.seek(0, os.SEEK_END)
            if size == 0:
                return
            fh.seek(size - 1)
            if fh.read(1) == b"\n":
                return
            # find the start of the last line
            pos = size
            start = 0
            while pos > 0:
                step = min(65536, pos)
                pos -= step
                fh.seek(pos)
                chunk = fh.read(step)
                i = chunk.rfind(b"\n")
                if i >= 0:
                    start = pos + i + 1
                    break
            fh.seek(start)
            tail = fh.read()
            if _journal_row(tail, str(path), torn=True) is not None:
                fh.seek(0, os.SEEK_END)
                fh.write(b"\n")
            else:
                fh.truncate(start)
    except FileNotFoundError:
        return
    except OSError as e:
        raise InputError(f"cannot write: {e.strerror or e}", where=str(path)) from None


def check_row_matches(row: dict[str, Any], spec: RunSpec, where: str) -> None:
    """A journal row must be the row of its run: the seed and swept values of its run id."""
    redo = "delete this line to re-run that run"
    if row.get("seed") != spec.seed or isinstance(row.get("seed"), bool):
        raise InputError(
            f"seed {clean(str(row.get('seed')), 40)} is not the seed of run {spec.run_id} "
            f"({spec.seed}); {redo}",
            where=where,
        )
    for key, value in spec.params:
        want = json.dumps(value, sort_keys=True, default=str)
        got = json.dumps(row.get(key), sort_keys=True, default=str)
        if key not in row or got != want:
            raise InputError(
                f"{key} = {clean(got, 60)} is not the value of run {spec.run_id} "
                f"({clean(want, 60)}); {redo}",
                where=where,
            )


def lock_folder(out: Path) -> int | None:
    """Take the sweep folder's exclusive lock (the folder made if needed), or refuse: two
    sweeps writing one folder would interleave their journals and tables."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX: no lock
        return None
    path = out / LOCK
    try:
        out.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o644)
    except OSError as e:
        raise InputError(f"cannot write: {e.strerror or e}", where=str(path)) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        same = os.fstat(fd).st_ino == os.stat(path).st_ino  # not a lock file just removed
    except OSError:
        same = False
    if not same:
        os.close(fd)
        raise InputError(
            "another kvsim sweep is writing to this folder; wait for it to end (or give "
            "another --out)",
            where=str(out),
        )
    return fd


def unlock_folder(fd: int | None, out: Path, *, remove: bool) -> None:
    """Release the lock; the lock file goes (and the folder, when this sweep made it and
    wrote nothing to it)."""
    if fd is None:
        return
    with contextlib.suppress(OSError):
        (out / LOCK).unlink()
    with contextlib.suppress(OSError):
        os.close(fd)
    if remove:
        with contextlib.suppress(OSError):
            out.rmdir()  # only when empty


def open_journal(out: Path) -> Any:
    """The journal, opened for appending at a line boundary (the folder made if needed)."""
    try:
        out.mkdir(parents=True, exist_ok=True)
        clean_leftovers(out, TABLES)  # temporary tables of sweeps that died
        path = out / JOURNAL
        if os.path.lexists(path):
            journal_inside(path)
            check_regular(path, what="sweep journal")
            repair_journal(path)
        # never through a link put in its place meanwhile (O_NOFOLLOW), nor to a file with
        # another name elsewhere (a hard link: checked on what was opened)
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0)
        fd = os.open(path, flags, 0o644)
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_nlink > 1:
            os.close(fd)
            journal_inside(path)
            raise InputError("is not a regular file only this folder holds", where=str(path))
        return os.fdopen(fd, "a", encoding="utf-8")
    except OSError as e:
        if e.errno == errno.ELOOP:  # O_NOFOLLOW met a link
            journal_inside(out / JOURNAL)
        raise InputError(f"cannot write: {e.strerror or e}", where=str(out)) from None


def journal_inside(path: Path) -> None:
    """A sweep appends its journal only to a file of its own folder: a symbolic link (to a
    file outside ``--out``, say) or a hard link (the same file under another name) would
    make it write rows into someone else's file."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    except OSError as e:
        raise InputError(f"cannot read: {e.strerror or e}", where=str(path)) from None
    if stat.S_ISLNK(st.st_mode):
        raise InputError(
            "is a symbolic link; a sweep appends its journal only to a regular file inside "
            "its --out folder (remove the link, or give another --out)",
            where=str(path),
        )
    if stat.S_ISREG(st.st_mode) and st.st_nlink > 1:
        raise InputError(
            f"has {counted(st.st_nlink - 1, 'other hard link')}: appending to it would write into "
            "another file too; copy it (cp) to make it a file of its own, or give another --out",
            where=str(path),
        )
