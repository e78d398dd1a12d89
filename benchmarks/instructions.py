"""Benchmark: instructions inside ``Simulation.run`` (callgrind), and where they go.

    python benchmarks/instructions.py replay [--trace PATH]
    python benchmarks/instructions.py scale [--requests 20000]

Runs the conversation replay or the first N requests of ``benchmarks/scale.yaml`` once
under valgrind's callgrind, counting only what runs inside ``Simulation.run`` (start-up,
trace parsing and results are left out), and prints the total, the count per request,
a split of it by what the simulation was doing, and the share of the functions whose
work grows with a prompt's block count. An instruction count does not depend on how
busy the machine is, so two commits compare in one run each (wall time on a shared VM
drifts by 10-30%). It needs the compiled core (``pip install .``: the split reads the
compiled functions' names) and valgrind. Under callgrind, start-up alone takes about
40 s and the simulation runs about 60 times slower than usual: about two minutes for
either workload. Compare counts per request only between runs of the same workload and
N (a longer run's stores are fuller: 182,000 a request over the first 2,000 scale
requests, 231,000 over 20,000).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from workloads import arguments, simulation

RUN = "CPyPy_simulation___Simulation___run"  # the compiled entry point callgrind toggles on

# What the simulation spends its instructions on, as disjoint parts of ``Simulation.run``:
# (label, the compiled function whose inclusive count it is, one it excludes)
SPLIT = [
    ("arrivals: workload, routing, submit", "simulation____arrivals_Simulation_gen___send", ""),
    (
        "engine steps: batch forming, lookups, step times",
        "engine____loop_Engine_gen___send",
        "engine___Engine____finish",
    ),
    ("finished requests: stores, puts, rows", "engine___Engine____finish", ""),
    ("fabric timers: flows ending, writes landing", "fabric___Fabric____on_timer_event", ""),
]
# functions whose work is a loop over a prompt's blocks (none calls another of them): the
# most that handling runs of blocks instead of single blocks could save
PER_BLOCK = [
    "eviction___BlockStore___insert_many",
    "eviction___BlockStore___touch",
    "remote___RemoteStore___missing",
    "remote___RemoteStore___reserve",
    "local___LocalCache___prefix_blocks",
    "local___LocalCache____landing",
    "lookup___Lookup___locate",
]


def child(args: argparse.Namespace) -> None:
    """The run callgrind measures."""
    out = simulation(args.workload, args.trace, args.requests).run()
    print(f"requests {len(out.rows)}")


def inclusive(profile: Path) -> dict[str, int]:
    """Compiled function name (without CPyDef_) -> inclusive instructions."""
    text = subprocess.run(
        ["callgrind_annotate", "--inclusive=yes", "--threshold=100", str(profile)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    out: dict[str, int] = {}
    for m in re.finditer(r"^\s*([\d,]+) \([^)]*\)\s+\?\?\?:CPyDef_(\S+)", text, re.M):
        name = m.group(2)
        if not name.endswith("'2"):  # recursion: callgrind lists the inner calls apart
            out[name] = max(out.get(name, 0), int(m.group(1).replace(",", "")))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    arguments(ap)
    ap.add_argument(
        "--keep", type=Path, help="also save callgrind's profile here (for callgrind_annotate)"
    )
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args)
        return
    from kvsim import compiled

    if not compiled():
        sys.exit("instructions.py needs the compiled core (pip install .)")
    if shutil.which("valgrind") is None or shutil.which("callgrind_annotate") is None:
        sys.exit("instructions.py needs valgrind (callgrind and callgrind_annotate)")
    if args.keep is not None and not args.keep.parent.is_dir():
        print(f"--keep: no folder {args.keep.parent}", file=sys.stderr)
        sys.exit(2)
    simulation(args.workload, args.trace, args.requests)  # bad input: one line, not callgrind's
    with tempfile.TemporaryDirectory() as tmp:
        profile = Path(tmp) / "callgrind.out"
        cmd = [
            "valgrind", "--tool=callgrind", f"--callgrind-out-file={profile}",
            "--collect-atstart=no", f"--toggle-collect={RUN}",
            sys.executable, __file__, args.workload, "--child",
            "--requests", str(args.requests), "--trace", str(args.trace),
        ]  # fmt: skip
        run = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ))
        if run.returncode != 0:
            sys.exit(f"the measured run failed:\n{run.stderr[-2000:]}")
        requests = int(re.search(r"requests (\d+)", run.stdout).group(1))  # type: ignore[union-attr]
        counts = inclusive(profile)
        if args.keep is not None:
            shutil.copyfile(profile, args.keep)
    total = counts["simulation___Simulation___run"]
    name = (
        "conversation replay" if args.workload == "replay" else f"scale.yaml, {requests:,} requests"
    )
    print(
        f"{name}: {total / 1e9:.3f} G instructions inside Simulation.run, "
        f"{total / requests:,.0f} per request"
    )
    rest = total
    for label, fn, minus in SPLIT:
        n = counts.get(fn, 0) - (counts.get(minus, 0) if minus else 0)
        rest -= n
        print(f"  {label:<52} {100 * n / total:5.1f}%")
    print(f"  {'SimPy loop and the rest':<52} {100 * rest / total:5.1f}%")
    blocks = sum(counts.get(fn, 0) for fn in PER_BLOCK)
    print(
        f"work per block (stores, remote index, lookups): {100 * blocks / total:.1f}% "
        f"(at most {total / (total - blocks):.2f}x faster were it free)"
    )
    for fn in PER_BLOCK:
        print(f"  {fn.replace('___', '.'):<44} {100 * counts.get(fn, 0) / total:5.1f}%")


if __name__ == "__main__":
    main()
