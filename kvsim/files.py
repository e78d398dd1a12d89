"""Reading the user's files safely: regular files only, with a size bound.

Every file kvsim reads on a user's word (scenarios, ``extends`` parents, profiles, timing
tables, sweep and suite files, baselines, journals, traces) goes through
:func:`check_regular` first, so a device (``/dev/zero``), a FIFO (which would block
forever), a folder or a symlink loop is refused with one line instead of hanging or
filling memory. Small files are then read whole with :func:`read_text` under a size bound;
traces, which may be large, are streamed by their readers after the same check.
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
from collections.abc import Iterator
from typing import Any, BinaryIO

from kvsim.errors import InputError

MiB = 1 << 20
MAX_CONFIG_BYTES = 1 * MiB  # a scenario, sweep, suite or profile YAML (a few kB in practice)
MAX_TABLE_BYTES = 64 * MiB  # a timing table, a baseline, a sweep journal


def check_regular(path: str | os.PathLike[str], *, what: str = "file") -> os.stat_result:
    """Stat ``path`` (following links) and refuse anything but a regular file."""
    p = str(path)
    try:
        st = os.stat(p)
    except FileNotFoundError:
        raise InputError(f"{what} not found", where=p) from None
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise InputError("symlink loop", where=p) from None
        if e.errno == errno.ENAMETOOLONG:
            raise InputError("path too long", where=p[:200] + "...") from None
        raise InputError(e.strerror or str(e), where=p) from None
    except ValueError as e:  # an embedded NUL byte
        raise InputError(f"bad path ({e})", where=repr(p)) from None
    mode = st.st_mode
    if stat.S_ISDIR(mode):
        raise InputError(f"is a folder, expected a {what}", where=p)
    if not stat.S_ISREG(mode):
        kind = (
            "a FIFO"
            if stat.S_ISFIFO(mode)
            else "a device"
            if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
            else "a socket"
            if stat.S_ISSOCK(mode)
            else "not a regular file"
        )
        raise InputError(f"is {kind}, expected a regular {what}", where=p)
    return st


def open_regular(path: str | os.PathLike[str], *, what: str = "file") -> BinaryIO:
    """Open a file for binary reading, refusing anything but a regular file by what was
    opened (not by an earlier look at the name): opening never blocks, so a FIFO put in the
    file's place after :func:`check_regular` is refused instead of waited on."""
    p = str(path)
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(p, flags)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise InputError("symlink loop", where=p) from None
        raise InputError(e.strerror or str(e), where=p) from None
    except ValueError as e:  # an embedded NUL byte
        raise InputError(f"bad path ({e})", where=repr(p)) from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise InputError(f"is not a regular {what}", where=p)
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_bytes(
    path: str | os.PathLike[str], *, what: str = "file", max_bytes: int = MAX_CONFIG_BYTES
) -> bytes:
    """The bytes of a regular file of at most ``max_bytes`` (InputError otherwise)."""
    st = check_regular(path, what=what)
    p = str(path)
    if st.st_size > max_bytes:
        raise InputError(
            f"{what} is {st.st_size:,} bytes; kvsim reads at most {max_bytes:,} here", where=p
        )
    try:
        with open_regular(p, what=what) as fh:
            data = fh.read(max_bytes + 1)  # the file may grow between stat and read
    except OSError as e:
        raise InputError(e.strerror or str(e), where=p) from None
    if len(data) > max_bytes:
        raise InputError(f"{what} is over {max_bytes:,} bytes", where=p)
    return data


def read_text(
    path: str | os.PathLike[str], *, what: str = "file", max_bytes: int = MAX_CONFIG_BYTES
) -> str:
    """The UTF-8 text of a regular file of at most ``max_bytes`` (a BOM is dropped)."""
    data = read_bytes(path, what=what, max_bytes=max_bytes)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise InputError(f"not UTF-8 text ({e.reason})", where=f"{path}:{line}") from None


def is_regular(path: str | os.PathLike[str]) -> bool:
    """True for an existing regular file (links followed); never raises."""
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except (OSError, ValueError):
        return False


__all__ = [
    "MAX_CONFIG_BYTES",
    "MAX_TABLE_BYTES",
    "check_regular",
    "is_regular",
    "open_regular",
    "read_bytes",
    "read_text",
]


def text_values(value: Any) -> Iterator[str]:
    """Every text value inside a value, mappings and lists walked (what may name a file:
    a scenario's plugins, a sweep's grid values)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from text_values(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from text_values(v)


# a file's identity (path, device, inode, size, modification time) -> its SHA-256
_digests: dict[tuple[Any, ...], str] = {}


def sha256_file(path: str | os.PathLike[str]) -> str | None:
    """SHA-256 (hex) of a file's content, read once per process while the file keeps
    its size and modification time (a sweep's runs, a baseline's entries and every
    summary's provenance name the same files); None for a missing or unreadable file."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    key = (str(path), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
    digest = _digests.get(key)
    if digest is not None:
        return digest
    h = hashlib.sha256()
    try:
        with open_regular(path) as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
    except (OSError, InputError):
        return None
    digest = _digests[key] = h.hexdigest()
    return digest
