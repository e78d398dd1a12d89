"""``kvsim trace``: the trace tools (``stats``, ``mrc``, ``generate``) and the opening of
a trace file or a scenario's workload they share."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from kvsim.cli.common import _check_plot_path
from kvsim.errors import InputError


def _cmd_trace(args: argparse.Namespace) -> int:
    if args.trace_command == "generate":
        return _cmd_trace_generate(args)
    if args.trace_command == "mrc":
        return _cmd_trace_mrc(args)
    return _cmd_trace_stats(args)


def _open_trace(path_text: str, block_tokens: int | None) -> tuple:
    """(requests, block size, scenario or None) of a trace file or a scenario's workload."""
    from kvsim.workload import open_workload
    from kvsim.workload.azure import read_azure
    from kvsim.workload.mooncake import read_mooncake

    path = Path(path_text)
    if block_tokens is not None and not 0 < block_tokens <= 1 << 24:
        raise InputError("must be between 1 and 16777216 tokens", where="--block-tokens")
    suffix = path.suffix.lower()
    if suffix in (".yaml", ".yml"):
        from kvsim.api import load

        if block_tokens is not None:
            raise InputError(
                "a scenario sets its own block size (workload.block_tokens); use "
                "--block-tokens with trace files",
                where="--block-tokens",
            )
        sc = load(path)
        return open_workload(sc.workload, sc.seed), sc.workload.block_tokens, sc
    block = block_tokens or 512
    if suffix == ".csv":
        return read_azure(path, block), block, None
    if suffix in (".jsonl", ".json"):
        return read_mooncake(path, block), block, None
    raise InputError(
        "unknown trace format: expected .jsonl (Mooncake), .csv (Azure) or a scenario .yaml",
        where=str(path),
    )


def _cmd_trace_mrc(args: argparse.Namespace) -> int:
    from kvsim.api import profile_scenario
    from kvsim.units import fmt_bytes
    from kvsim.workload.mrc import MAX_POINTS, miss_ratio_curve

    if not 2 <= args.points <= MAX_POINTS:
        raise InputError(f"must be between 2 and {MAX_POINTS:,}", where="--points")
    if args.plot:
        _check_plot_path(args.plot)  # before the pass over the trace, which may be long
    requests, block, sc = _open_trace(args.trace, args.block_tokens)
    if args.profile or sc is None:
        from kvsim.profiles import DEFAULT_PROFILE

        sc = profile_scenario(args.profile or DEFAULT_PROFILE)
    kv = sc.model.kv_bytes
    curve = miss_ratio_curve(requests, block)
    points = curve.points(args.points)
    if args.plot:
        from kvsim.plots import mrc_plot

        mrc_plot(
            points, args.plot, f"{Path(args.trace).name}: LRU prefix-cache hit ratio", kv_bytes=kv
        )
        print(f"wrote {args.plot}", file=sys.stderr)
    if args.json:
        print(json.dumps(points, indent=2))
        return 0
    print(
        f"LRU prefix cache on {args.trace} ({block}-token blocks; bytes at {kv:,.0f} B/token, "
        f"{sc.profile})"
    )
    print(f"  {'capacity (tokens)':>18}  {'capacity (bytes)':>16}  hit ratio")
    for p in points:
        c = p["capacity_tokens"]
        tokens = "unlimited" if c is None else f"{c:,}"
        size = "" if c is None else fmt_bytes(c * kv)
        print(f"  {tokens:>18}  {size:>16}  {100 * p['hit_ratio']:8.2f}%")
    return 0


def _cmd_trace_generate(args: argparse.Namespace) -> int:
    from kvsim.api import load
    from kvsim.results.writers import check_writable
    from kvsim.workload import open_workload
    from kvsim.workload.writers import write_azure, write_mooncake

    out = Path(args.output)
    writers = {".jsonl": write_mooncake, ".csv": write_azure}
    if out.suffix.lower() not in writers:
        raise InputError("expected a .jsonl (Mooncake) or .csv (Azure) file name", where=str(out))
    check_writable(args.output, folder=False, flag="output")
    if not out.parent.is_dir():
        raise InputError("folder does not exist", where=str(out.parent))
    sc = load(args.scenario, args.overrides, args.seed)
    try:
        n = writers[out.suffix.lower()](open_workload(sc.workload, sc.seed), out)
    except OSError as e:
        raise InputError(f"cannot write: {e.strerror or e}", where=str(out)) from None
    print(f"wrote {n} requests to {out}", file=sys.stderr)
    return 0


def _cmd_trace_stats(args: argparse.Namespace) -> int:
    from kvsim.report import stats_table
    from kvsim.workload.stats import trace_stats

    requests, block, _ = _open_trace(args.trace, args.block_tokens)
    st = trace_stats(requests, block)
    print(json.dumps(st, indent=2) if args.json else stats_table(st))
    return 0
