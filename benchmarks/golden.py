"""Golden comparison: every shipped, paper and validation scenario, before and after a change.

    python benchmarks/golden.py write FILE      # on the tree (or install) before the change
    python benchmarks/golden.py check FILE      # after it: lists every run that differs

For each scenario under ``scenarios/`` (top level, ``paper/`` and ``validation/*/``; a
scenario whose trace is not beside the checkout is skipped and named) it runs
``kvsim.run(path, seed=0)`` from the checkout root and keeps the summary (provenance and
wall times left out: they name the tree and the clock) and a SHA-256 of each column of the
per-request frame (its name and every value). A refactoring that claims "results bit for
bit unchanged" must show ``check`` printing no difference, on the pure core (an editable
install) and on the compiled core (``pip install .``) alike; a summary key or request
column that only the newer tree has is listed as added, not as a difference. Exit status:
0 when nothing differs, 1 when something does, 2 for bad usage.
"""

from __future__ import annotations

import hashlib
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
# summary keys that name the tree or the clock, not the simulated results
_VOLATILE = {"provenance", "wall_s", "wall_time_s", "simulate_s", "results_s"}


def scenarios() -> list[Path]:
    """The scenario files compared, in a fixed order."""
    top = ROOT / "scenarios"
    files = sorted(top.glob("*.yaml")) + sorted((top / "paper").glob("*.yaml"))
    return files + sorted((top / "validation").glob("*/*.yaml"))


def _clean(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items() if k not in _VOLATILE}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    if isinstance(value, float) and math.isnan(value):
        return "nan"
    if hasattr(value, "item"):  # a NumPy scalar
        return _clean(value.item())
    return value


def frame_digest(frame: Any) -> dict[str, str]:
    """SHA-256 of each of a DataFrame's columns (its name and every value), by name."""
    out = {}
    for name in frame.columns:
        h = hashlib.sha256()
        h.update(str(name).encode())
        col = frame[name]
        values = col.to_numpy()
        if values.dtype.kind in "biuf":  # numbers and flags: their bytes
            h.update(values.tobytes())
        else:  # text, categories: their values (an object array's bytes are pointers)
            h.update("\0".join(map(str, col.tolist())).encode())
        out[str(name)] = h.hexdigest()
    return out


def _changes(before: Any, now: Any, path: str = "") -> tuple[list[str], list[str]]:
    """(paths whose value changed or went away, paths added) between two cleaned records:
    a new summary key or request column is an addition, not a change of results."""
    if isinstance(before, dict) and isinstance(now, dict):
        changed: list[str] = []
        added: list[str] = []
        for k in before:
            if k not in now:
                changed.append(f"{path}.{k} (gone)")
            else:
                c, a = _changes(before[k], now[k], f"{path}.{k}")
                changed += c
                added += a
        added += [f"{path}.{k}" for k in now if k not in before]
        return changed, added
    if json.dumps(before, sort_keys=True) != json.dumps(now, sort_keys=True):
        return [path or "."], []
    return [], []


def record() -> dict[str, Any]:
    import kvsim

    out: dict[str, Any] = {}
    for path in scenarios():
        name = str(path.relative_to(ROOT))
        t = time.perf_counter()
        try:
            res = kvsim.run(path, seed=0)
        except Exception as e:  # a trace outside the checkout, say: named, not compared
            print(f"  skipped {name}: {e}".splitlines()[0], file=sys.stderr)
            continue
        out[name] = {"summary": _clean(res.summary), "requests": frame_digest(res.requests)}
        print(f"  {name}: {time.perf_counter() - t:.1f} s", file=sys.stderr)
    return out


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in ("write", "check"):
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    import os

    os.chdir(ROOT)  # scenarios name their traces relative to the checkout root
    now = record()
    target = Path(argv[1])
    if argv[0] == "write":
        target.write_text(json.dumps(now, indent=1, sort_keys=True))
        print(f"{len(now)} runs written to {target}")
        return 0
    before = json.loads(target.read_text())
    differ = []
    additions: set[str] = set()
    for name in sorted(set(before) | set(now)):
        if name not in before or name not in now:
            differ.append(name)
            print(f"DIFFERS: {name} ({'new run' if name not in before else 'not run now'})")
            continue
        changed, added = _changes(before[name], now[name])
        additions.update(a.split(".", 2)[-1] if a.startswith(".requests") else a for a in added)
        if changed:
            differ.append(name)
            print(
                f"DIFFERS: {name}: {', '.join(changed[:6])}" + (" ..." if len(changed) > 6 else "")
            )
    if additions:
        print(f"added (not compared): {', '.join(sorted(additions))}")
    print(f"{len(differ)} of {len(set(before) | set(now))} runs differ")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
