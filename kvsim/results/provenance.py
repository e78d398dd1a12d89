"""Provenance: what produced a result, recorded in every ``summary.json`` (key
``provenance``) and in baselines, so that a result can be traced back to its code and
inputs.

It holds the kvsim version, the git commit of the checkout kvsim runs from (null for an
installed copy) and whether that tree had uncommitted changes, which core ran
(``compiled`` by mypyc or the ``pure`` Python source: :func:`kvsim.compiled`), the Python
version and platform, the versions of kvsim's dependencies, and the SHA-256 of every file
the run read: the scenario file, the files it ``extends``, its profile file, a timing
table, the trace and every plugin file.

Nothing here may cost a run much or change its numbers: the environment is found once
per process (:func:`environment`, at most one ``git status``), and a file is hashed once
per process for as long as its size and modification time stay the same. Nothing
downloads anything; no clock time is recorded (two runs of the same scenario in one
process give byte-identical summaries).
"""

from __future__ import annotations

import functools
import os
import platform
import subprocess
import sys
from collections.abc import Iterator, Sequence
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from kvsim.config.dump import scenario_to_dict
from kvsim.errors import InputError, clean
from kvsim.files import is_regular, sha256_file, text_values
from kvsim.plugins.loading import canonical, is_file_spec
from kvsim.plugins.registry import _REGISTRY
from kvsim.plugins.resolve import lookup
from kvsim.profiles import profile_path
from kvsim.version import __version__, compiled
from kvsim.yamlfile import load_yaml

#: the distributions whose versions a result records (kvsim's dependencies that shape it)
PACKAGES = ("simpy", "numpy", "pandas", "pyyaml", "pydantic", "pyarrow", "matplotlib")

#: the fields ``kvsim check`` compares between a baseline's provenance and its own
COMPARED = ("kvsim_version", "git_commit", "git_dirty", "core", "python", "packages")

GIT_TIMEOUT_S = 5.0  # `git status` on a huge or networked tree: give up, dirty unknown

# (path, device, inode, size, mtime) -> the extends parent named in a scenario file
_parents: dict[tuple[Any, ...], str | None] = {}


def provenance(scenario: Any) -> dict[str, Any]:
    """The ``provenance`` of a run of ``scenario`` (a validated
    :class:`~kvsim.config.schema.Scenario`): :func:`environment` plus ``files``, one
    ``{role, path, sha256}`` per file it read (:func:`input_files`; ``sha256`` null for
    a file gone or unreadable since)."""
    files = [
        {"role": role, "path": str(path), "sha256": sha256_file(path)}
        for role, path in input_files(scenario)
    ]
    return {**environment(), "files": files}


@functools.cache
def environment() -> dict[str, Any]:
    """What ran, found once per process: kvsim version, git commit and dirtiness of the
    checkout kvsim was imported from (both null for an installed kvsim), core, Python,
    platform and package versions."""
    root = checkout_root()
    commit = git_commit(root) if root is not None else None
    return {
        "kvsim_version": __version__,
        "git_commit": commit,
        "git_dirty": git_dirty(root) if commit is not None and root is not None else None,
        "core": core(),
        "python": platform.python_version(),
        "platform": f"{platform.system()}-{platform.machine()}",
        "packages": package_versions(),
    }


def core() -> str:
    """``compiled`` when the simulation core imported (or importable) is a C extension
    built by mypyc, ``pure`` when it is the Python source."""
    module = sys.modules.get("kvsim.sim.engine")
    origin = getattr(module, "__file__", None) if module is not None else None
    if isinstance(origin, str):
        return "pure" if origin.endswith(".py") else "compiled"
    return "compiled" if compiled() else "pure"


def package_versions(names: Sequence[str] = PACKAGES) -> dict[str, str | None]:
    """Installed version of each distribution (null: not installed)."""

    out: dict[str, str | None] = {}
    for name in names:
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = None
    return out


# ---- the checkout ------------------------------------------------------------------------


def checkout_root(start: Path | None = None) -> Path | None:
    """The work tree of the git checkout kvsim's package lies in, or None: an installed
    kvsim (site-packages, even a virtual environment inside a checkout) has none."""
    here = (start or Path(__file__)).resolve().parent
    for folder in (here, *here.parents):
        if folder.name in ("site-packages", "dist-packages"):
            return None
        if (folder / ".git").exists():
            return folder
    return None


def _git_dir(root: Path) -> Path | None:
    """The repository folder of a work tree (``.git``, or where a ``.git`` file points:
    a linked work tree or a submodule)."""
    dot = root / ".git"
    if dot.is_dir():
        return dot
    try:
        text = dot.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return None
    if not text.startswith("gitdir:"):
        return None
    p = Path(text.removeprefix("gitdir:").strip())
    return p if p.is_absolute() else (root / p).resolve()


def git_commit(root: Path) -> str | None:
    """The commit checked out at ``root`` (40 hex digits), read from the repository's
    files (no git process): HEAD, the branch it names, loose or packed; None when it
    cannot be told."""
    gd = _git_dir(root)
    if gd is None:
        return None
    common = gd
    try:
        shared = (gd / "commondir").read_text(encoding="utf-8").strip()
        common = (gd / shared).resolve()
    except (OSError, UnicodeDecodeError):
        pass
    try:
        head = (gd / "HEAD").read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return None
    if not head.startswith("ref:"):
        return head if _is_sha(head) else None
    ref = head.removeprefix("ref:").strip()
    for folder in (gd, common):
        try:
            sha = (folder / ref).read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError):
            continue
        if _is_sha(sha):
            return sha
    try:
        packed = (common / "packed-refs").read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    for line in packed.splitlines():
        sha, _, name = line.partition(" ")
        if name.strip() == ref and _is_sha(sha):
            return sha
    return None


def _is_sha(text: str) -> bool:
    return len(text) in (40, 64) and all(c in "0123456789abcdef" for c in text)


def git_dirty(root: Path) -> bool | None:
    """Whether the checkout's tracked files differ from its commit (``git status``,
    untracked files left out); None when git is missing or does not answer."""
    env = {**os.environ, "GIT_OPTIONAL_LOCKS": "0", "LC_ALL": "C"}
    try:
        done = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=root,
            env=env,
            capture_output=True,
            timeout=GIT_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return bool(done.stdout.strip()) if done.returncode == 0 else None


# ---- the files a run read ----------------------------------------------------------------


def input_files(sc: Any) -> list[tuple[str, Path]]:
    """``(role, path)`` of every file a run of ``sc`` read, in a fixed order: the
    scenario file, the files it extends (nearest first), its profile file, its timing
    table, its trace, and its plugin files (listed ``.py`` files, listed modules' files,
    and the files of installed plugins whose policies it names)."""
    out: list[tuple[str, Path]] = []
    root = Path(sc.source).parent if sc.source else Path.cwd()
    if sc.source and is_regular(Path(sc.source)):
        src = _absolute(str(sc.source))
        out.append(("scenario", src))
        out += [("extends", p) for p in _extends_chain(src)]
    if isinstance(sc.profile, str):
        prof = _profile_file(sc.profile, root)
        if prof is not None:
            out.append(("profile", prof))
    table = getattr(sc.timing, "table", None)
    if isinstance(table, str) and table:
        out.append(("timing table", _absolute(table)))
    trace = getattr(sc.workload, "path", None)
    if isinstance(trace, str) and trace:
        out.append(("trace", _absolute(trace)))
    seen = {p for _, p in out}
    for path in plugin_files(sc):
        if path not in seen:
            seen.add(path)
            out.append(("plugin", path))
    return out


def _absolute(name: str, base: Path | None = None) -> Path:
    """``name`` absolute and normalised (``scenarios/../traces/x`` as ``.../traces/x``):
    relative to ``base`` (the file that names it) or, for a path the loader resolved
    already (as the run reads it), to the current folder."""
    p = os.path.expanduser(name)
    if base is not None and not os.path.isabs(p):
        p = os.path.join(base, p)
    return Path(os.path.abspath(p))


def _profile_file(name: str, root: Path) -> Path | None:
    """The YAML file a profile name (or path) means; None when it cannot be told."""
    try:
        return profile_path(name, root).absolute()
    except (InputError, OSError, ValueError):
        return None


def _extends_chain(path: Path) -> list[Path]:
    """The files ``path`` extends, nearest first (each read once per process while it is
    unchanged; a cycle or an unreadable file ends the chain)."""
    chain: list[Path] = []
    seen = {path.resolve()}
    here = path
    while True:
        parent = _extends_of(here)
        if parent is None:
            return chain
        nxt = _absolute(parent, here.parent)
        if nxt.resolve() in seen or not is_regular(nxt):
            return chain
        seen.add(nxt.resolve())
        chain.append(nxt)
        here = nxt


def _extends_of(path: Path) -> str | None:
    """The ``extends:`` a scenario file names (None: none, or not readable)."""
    key = _identity(path)
    if key is None:
        return None
    if key not in _parents:
        try:
            data, _ = load_yaml(path)
        except (InputError, OSError, ValueError, RecursionError):
            data = None
        parent = data.get("extends") if isinstance(data, dict) else None
        _parents[key] = parent if isinstance(parent, str) and parent else None
    return _parents[key]


def plugin_files(sc: Any) -> list[Path]:
    """The code files of the plugins a scenario uses: each ``.py`` file it lists, the file
    of each module it lists (as imported), and the module file of every policy it names
    that an installed plugin (an entry point) or the caller's own code registered."""
    out: list[Path] = []
    specs = [s for s in sc.plugins if isinstance(s, str)]
    for spec in specs:
        if is_file_spec(spec):
            out.append(Path(canonical(spec)))
        else:
            f = _module_file(spec)
            if f is not None:
                out.append(f)
    for cls in _unlisted_policies(sc, specs):
        f = _module_file(getattr(cls, "__module__", ""))
        if f is not None:
            out.append(f)
    return list(dict.fromkeys(out))


def _module_file(name: str) -> Path | None:
    module = sys.modules.get(name) if name else None
    origin = getattr(module, "__file__", None) if module is not None else None
    return Path(origin).absolute() if isinstance(origin, str) and is_regular(Path(origin)) else None


def _unlisted_policies(sc: Any, specs: Sequence[str]) -> Iterator[type]:
    """The classes of the policies ``sc`` names that no plugin it lists registered (entry
    points, the caller's own code). Only looked for when any such policy exists."""
    unlisted = {
        (kind, name)
        for kind, by_name in _REGISTRY.items()
        for name, by_plugin in by_name.items()
        if None in by_plugin
    }
    if not unlisted:
        return
    named = set(text_values(scenario_to_dict(sc)))
    for kind, name in sorted(unlisted):
        if name not in named:
            continue
        try:
            entry = lookup(kind, name, specs)
        except ValueError:
            continue
        if entry is not None and entry.spec is None:
            yield entry.cls


def _identity(path: Path) -> tuple[Any, ...] | None:
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    return (str(path), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


# ---- comparing two -----------------------------------------------------------------------


def differences(then: Any, now: dict[str, Any]) -> list[str]:
    """What differs between a recorded provenance (``then``, possibly hand-edited or
    damaged: only its text is shown) and ``now``, one phrase each, for the fields of
    :data:`COMPARED` and, where both have them, the files' digests by role and name."""
    if not isinstance(then, dict):
        return []

    def shown(v: Any) -> str:
        return "none" if v is None else clean(str(v), 80)

    out = []
    for key in COMPARED:
        a, b = then.get(key), now.get(key)
        if key == "packages":
            pa = a if isinstance(a, dict) else {}
            pb = b if isinstance(b, dict) else {}
            for name in sorted(set(pa) | set(pb), key=str):
                if pa.get(name) != pb.get(name):
                    out.append(
                        f"{clean(str(name), 40)} {shown(pa.get(name))} -> {shown(pb.get(name))}"
                    )
        elif a != b:
            out.append(f"{key} {shown(a)} -> {shown(b)}")
    out += _file_differences(then.get("files"), now.get("files"))
    return out


def _file_differences(then: Any, now: Any) -> list[str]:
    """Files whose digest changed, by role and file name (paths differ between
    machines, names rarely): only files both sides list."""

    def by_name(files: Any) -> dict[tuple[str, str], Any]:
        if not isinstance(files, list):
            return {}
        return {
            (str(f.get("role")), Path(str(f.get("path"))).name): f.get("sha256")
            for f in files
            if isinstance(f, dict)
        }

    a, b = by_name(then), by_name(now)
    out = []
    for role, name in sorted(set(a) & set(b)):
        old, new = a[role, name], b[role, name]
        if old != new:
            shown = f"{clean(role, 40)} {clean(name, 80)}"
            out.append(f"{shown} sha256 {clean(str(old)[:12], 12)} -> {str(new)[:12]}")
    return out
