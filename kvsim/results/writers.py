"""Writing output folders and files, all or nothing.

Every command that writes a folder (``run --out``, ``capacity --out``, ``reproduce --out``,
``baseline --out``, ``check --report``) goes through :func:`write_folder`: all files are
written into a hidden staging folder beside the target (``.NAME.kvsim-PID.stage``), and
only when every one of them is complete is the staging folder swapped into place in one
step (``renameat2(RENAME_EXCHANGE)`` on Linux; elsewhere rename the old folder away,
rename the new one in). So a folder never holds new files beside old ones, a crash or a
full disk leaves the old folder as it was (or no folder at all), and the folder is created
only when its results are complete. Single files (plots) go through :func:`write_file`:
a hidden temporary file renamed into place.

A kill (SIGKILL, power loss) can leave a staging folder or temporary file behind; every
later write into the same folder removes those of processes that are no longer running.

kvsim never deletes or moves files it did not write: a target folder that holds anything
but the files this command writes (not even the figures ``kvsim plot`` drew there from the
old results: they would be out of date, and deleting them silently would lose work) is
refused up front, as is the current folder or one of its ancestors (``--out .``), with the
names of the foreign files.

kvsim never writes a file whose name it chooses through a symlink. A symlink inside an
output folder is never one of kvsim's files (kvsim writes none), so a folder holding one
is refused like any foreign file (:func:`foreign_files`), and a figure ``kvsim plot``
writes into a folder is refused when its name is a symlink (:func:`refuse_link`):
otherwise a planted ``ttft_cdf.png -> ~/.bashrc`` would be written through to outside the
folder. Only a path the user names on the command line (``--plot FILE``, a trace
generated to ``OUT``, ``--out`` naming a symlink to a folder) is followed, as a shell's
``>`` does.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fnmatch
import os
import re
import shutil
import sys
from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from kvsim.errors import InputError

if TYPE_CHECKING:
    import pandas as pd

Writer = Callable[[Path], object]

#: The files each command writes as a folder (globs): all it may replace there. Figures
#: `kvsim plot` draws into a run folder are not among them: they are refused, not deleted.
RUN_FILES = (
    "summary.json",
    "requests.parquet",
    "requests.csv",
    "timeseries.parquet",
    "timeseries.csv",
    "scenario.yaml",
    "accesses.parquet",
)
CAPACITY_FILES = ("capacity.csv", "capacity.png")
REPRODUCTION_FILES = ("reproduction.csv", "reproduction.md", "ttft_cdf_*.png")
BASELINE_FILES = ("baseline.json",)
SENSITIVITY_FILES = ("sensitivity.csv", "tornado.png")
REPORT_FILES = ("kvsim-check.md", "kvsim-check.xml")

# A leftover of an interrupted write: ours (.NAME.kvsim-PID.stage|old|tmp) or an older
# kvsim's (.NAME.tmp-PID, .STEM.tmp-PID.EXT), NAME (STEM.EXT) the file it was to become.
_LEFTOVER = re.compile(r"^\.(?P<name>.+)\.kvsim-(?P<pid>\d+)\.(?:stage|old|tmp)$")
_OLD_LEFTOVER = re.compile(r"^\.(?P<name>.+)\.tmp-(?P<pid>\d+)(?P<ext>\.[A-Za-z0-9]+)?$")


def _where(flag: str, path: str | os.PathLike[str]) -> str:
    return f"{flag} {path}" if flag else str(path)


def _existing(p: Path) -> Path:
    """``p`` or its nearest ancestor that exists (the root at the latest)."""
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def check_writable(path: str | os.PathLike[str], *, folder: bool, flag: str) -> Path:
    """Refuse, before any work is done, an output path that cannot be written: an empty
    name, a folder that is a file (or under one), a file that is a folder, or no
    permission."""
    if str(path).strip() == "":
        raise InputError(
            "empty path: name a folder" if folder else "empty path: name a file",
            where=f"{flag} ''" if flag else "''",
        )
    p = Path(path)
    if os.path.islink(p) and not os.path.exists(p):
        raise InputError("is a dangling symlink or a symlink loop", where=_where(flag, path))
    if str(path).endswith(os.sep) and not folder:
        raise InputError("expected a file name, got a folder", where=_where(flag, path))
    try:
        if p.exists() and p.is_dir() != folder:
            what = "not a folder" if folder else "a folder"
            raise InputError(f"exists and is {what}", where=_where(flag, path))
        parent = _existing(p if folder else p.parent)
        if not parent.is_dir():
            raise InputError(f"{parent} is a file, not a folder", where=_where(flag, path))
    except OSError as e:  # a symlink loop, a name too long
        raise InputError(e.strerror or str(e), where=_where(flag, path)) from None
    except ValueError as e:  # an embedded NUL byte
        raise InputError(f"bad path ({e})", where=_where(flag, repr(str(path)))) from None
    if not os.access(parent, os.W_OK | os.X_OK):
        raise InputError(f"no permission to write in {parent}", where=_where(flag, path))
    return p


def _target(path: str | os.PathLike[str]) -> Path:
    """The absolute folder a write replaces (a symlink to a folder: the folder)."""
    p = Path(os.path.abspath(path))
    if p.is_symlink():
        p = Path(os.path.realpath(p))
    return p


def _owns(name: str, owned: Collection[str]) -> bool:
    return any(fnmatch.fnmatchcase(name, g) for g in owned)


def _leftover(entry: str, owned: Collection[str] | None) -> re.Match[str] | None:
    """The match of a leftover of an interrupted kvsim write (one of ours anywhere; an
    older kvsim's ``.NAME.tmp-PID`` only of an ``owned`` name)."""
    m = _LEFTOVER.match(entry)
    if m is not None:
        return m
    m = _OLD_LEFTOVER.match(entry)
    if m is None or owned is None:
        return None
    return m if _owns(m.group("name") + (m.group("ext") or ""), owned) else None


def foreign_files(folder: Path, owned: Collection[str]) -> list[str]:
    """Entries of ``folder`` that are neither one of ``owned`` (globs) nor a leftover of
    an interrupted kvsim write of one: files kvsim did not write there."""
    out = []
    for entry in sorted(os.listdir(folder)):
        full = folder / entry
        if full.is_symlink():  # kvsim writes no links: never its own file
            out.append(entry + " (a symlink)")
        elif _leftover(entry, owned) is not None:
            continue
        elif full.is_dir():
            out.append(entry + "/")
        elif not _owns(entry, owned):
            out.append(entry)
    return out


def refuse_link(path: str | os.PathLike[str], *, flag: str = "") -> None:
    """Refuse an output file of kvsim's own naming inside a folder that is a symlink (or
    anything else but a regular file or nothing): kvsim never writes through a link, which
    may point anywhere (outside the folder). The one check every such write goes through."""
    p = Path(path)
    if p.is_symlink():
        raise InputError(
            "is a symlink; kvsim never writes its outputs through a link (it may point "
            "outside the folder): remove it",
            where=_where(flag, path),
        )
    if p.exists() and not p.is_file():
        raise InputError("exists and is not a regular file", where=_where(flag, path))


def check_out_folder(path: str | os.PathLike[str], *, flag: str, owned: Collection[str]) -> Path:
    """Refuse, before any work, a folder kvsim cannot write or replace without losing
    someone's files: what :func:`check_writable` refuses, the current folder (or one
    holding it), and a folder holding anything but ``owned`` files."""
    check_writable(path, folder=True, flag=flag)
    target = _target(path)
    cwd = Path(os.getcwd())
    if target == cwd or target in cwd.parents:
        raise InputError(
            "is the current folder (or holds it); name a new folder for the results",
            where=_where(flag, path),
        )
    anchor = _existing(target.parent)
    if not os.access(anchor, os.W_OK | os.X_OK):  # the staging folder goes there
        raise InputError(
            f"no permission to write in {anchor} (kvsim stages the folder beside it)",
            where=_where(flag, path),
        )
    if target.is_dir():
        try:
            if os.stat(target).st_dev != os.stat(target.parent).st_dev:
                raise InputError(
                    "is a mount point, which kvsim cannot replace; name a folder inside it",
                    where=_where(flag, path),
                )
            foreign = foreign_files(target, owned)
        except OSError as e:
            raise InputError(e.strerror or str(e), where=_where(flag, path)) from None
        if foreign:
            # (up to 8 named: every figure `kvsim plot` draws into a run folder)
            more = f" and {len(foreign) - 8} more" if len(foreign) > 8 else ""
            shown = ", ".join(foreign[:8]) + more
            raise InputError(
                f"holds files this command does not write ({shown}); kvsim replaces the "
                "whole folder and never deletes files it did not write: move them away "
                "or name a new or empty folder",
                where=_where(flag, path),
            )
    return target


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (OverflowError, OSError):  # someone else's process, or no such pid to ask about
        return True
    return True


def clean_leftovers(
    folder: str | os.PathLike[str], owned: Collection[str] | None = None
) -> list[str]:
    """Remove what interrupted kvsim writes of processes no longer running left in
    ``folder`` (staging folders, temporary files; an older kvsim's temporary files only
    of ``owned`` names); return the names removed."""
    removed: list[str] = []
    try:
        entries = os.listdir(folder)
    except OSError:
        return removed
    for entry in entries:
        m = _leftover(entry, owned)
        if m is None or _alive(int(m.group("pid"))):
            continue
        full = os.path.join(folder, entry)
        try:
            if os.path.isdir(full) and not os.path.islink(full):
                shutil.rmtree(full)
            else:
                os.unlink(full)
            removed.append(entry)
        except OSError:
            pass
    return removed


_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths atomically (Linux renameat2); False where that is not available."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        fn = ctypes.CDLL(None, use_errno=True).renameat2
    except (AttributeError, OSError):
        return False
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    fn.restype = ctypes.c_int
    rc = fn(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE)
    if rc == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP):
        return False  # a kernel or file system without it
    raise OSError(err, os.strerror(err), str(b))


def write_folder(
    path: str | os.PathLike[str],
    writers: Mapping[str, Writer],
    *,
    flag: str = "--out",
    owned: Collection[str] = (),
) -> list[Path]:
    """Write ``writers`` (file name -> function writing that file at the path it is
    given, in order) as the folder ``path``, all or nothing; return the final paths.

    An existing folder is replaced as a whole, only if it holds nothing but ``owned``
    files (and ``writers``' names); otherwise, and on any write error, nothing changes
    and :class:`InputError` names ``flag``.
    """
    owned = (*owned, *writers)
    target = check_out_folder(path, flag=flag, owned=owned)
    anchor = _existing(target.parent)
    clean_leftovers(anchor)
    if target.is_dir():
        clean_leftovers(target, owned)
    pid = os.getpid()
    stage = anchor / f".{target.name[:80]}.kvsim-{pid}.stage"  # fits NAME_MAX
    created: list[Path] = []
    retired: Path | None = None  # the old folder, once swapped out
    try:
        stage.mkdir()
        for name, write in writers.items():
            write(stage / name)
        # Only now, with every file complete, make the missing parents and swap it in.
        missing = []
        p = target.parent
        while p != anchor:
            missing.append(p)
            p = p.parent
        for p in reversed(missing):
            p.mkdir()
            created.append(p)
        if target.is_dir():
            if _exchange(stage, target):
                retired = stage  # the old folder is now at the staging path
            else:
                retired = anchor / f".{target.name[:80]}.kvsim-{pid}.old"
                os.rename(target, retired)
                try:
                    os.rename(stage, target)
                except BaseException:
                    os.rename(retired, target)  # put the old folder back
                    raise
        else:
            os.rename(stage, target)
    except OSError as e:
        _undo(stage, created)
        raise InputError(
            f"cannot write results: {e.strerror or e}", where=_where(flag, path)
        ) from None
    except BaseException:
        _undo(stage, created)
        raise
    if retired is not None:  # the new folder is in place: removing the old is best effort
        shutil.rmtree(retired, ignore_errors=True)  # (what stays, a later write removes)
    return [target / name for name in writers]


def write_reproduction(
    table: pd.DataFrame, markdown: str, out: str | os.PathLike[str]
) -> list[Path]:
    """A study's ``reproduction.csv`` (``table``) and ``reproduction.md`` (``markdown``),
    written as the folder ``out`` all or nothing."""
    files: dict[str, Writer] = {
        "reproduction.csv": lambda p: table.to_csv(p, index=False),
        "reproduction.md": lambda p: p.write_text(markdown, encoding="utf-8"),
    }
    return write_folder(out, files, flag="--out", owned=REPRODUCTION_FILES)


def _undo(stage: Path, created: list[Path]) -> None:
    shutil.rmtree(stage, ignore_errors=True)
    for p in reversed(created):
        with contextlib.suppress(OSError):
            p.rmdir()


def write_file(
    path: str | os.PathLike[str], write: Writer, *, flag: str = "", in_folder: bool = False
) -> Path:
    """Write one file all or nothing: into a hidden temporary file beside it, renamed
    into place when complete (leftovers of dead processes are removed first). A path the
    user named that is a symlink is written through: its target gets the new content and
    the link stays (as a shell's ``>`` does), rather than the link being replaced by a
    plain file. ``in_folder``: a file of kvsim's own naming inside a folder (a figure of
    ``kvsim plot``): a symlink there is refused (:func:`refuse_link`), never followed."""
    p = Path(path)
    target = p
    if in_folder:
        refuse_link(p, flag=flag)  # (a link made after this is replaced, not followed)
    elif p.is_symlink():
        try:
            target = p.resolve()  # a dangling link: its target is created
        except (OSError, RuntimeError):  # a symlink loop
            raise InputError("cannot write: symlink loop", where=_where(flag, path)) from None
    folder = target.parent
    clean_leftovers(folder)
    tmp = folder / f".{target.name[:80]}.kvsim-{os.getpid()}.tmp"
    try:
        write(tmp)
        os.replace(tmp, target)
    except OSError as e:
        raise InputError(f"cannot write: {e.strerror or e}", where=_where(flag, path)) from None
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
    return p
