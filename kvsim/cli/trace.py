"""``kvsim trace``: the trace tools, and the opening of a trace file or a scenario's workload.

This module owns the ``trace`` command's subcommands ``stats`` and ``generate``, and
:func:`_open_trace` (a Mooncake or Azure trace file, or a scenario's workload) that every
subcommand shares. The curves, ``mrc`` and ``reuse`` (:mod:`kvsim.cli.trace_curves`),
are imported only when one is asked for, as :mod:`kvsim.cli.dispatch` imports a
command's module: they bring the cache analysis, the simulator's stores and the figures
(matplotlib, pandas), which ``trace stats`` does not need.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from pathlib import Path

from kvsim.api import load
from kvsim.errors import InputError
from kvsim.report import stats_table
from kvsim.results.writers import check_writable
from kvsim.workload.azure import read_azure
from kvsim.workload.mooncake import read_mooncake
from kvsim.workload.sources import open_workload
from kvsim.workload.stats import trace_stats
from kvsim.workload.writers import write_azure, write_mooncake

#: trace subcommands whose module is imported when they run (the others are here)
CURVES = {"mrc": "_cmd_trace_mrc", "reuse": "_cmd_trace_reuse"}


def _cmd_trace(args: argparse.Namespace) -> int:
    if args.trace_command == "generate":
        return _cmd_trace_generate(args)
    if args.trace_command in CURVES:
        curves = importlib.import_module("kvsim.cli.trace_curves")
        return int(getattr(curves, CURVES[args.trace_command])(args))
    return _cmd_trace_stats(args)


def _open_trace(path_text: str, block_tokens: int | None) -> tuple:
    """(requests, block size, scenario or None) of a trace file or a scenario's workload."""
    path = Path(path_text)
    if block_tokens is not None and not 0 < block_tokens <= 1 << 24:
        raise InputError("must be between 1 and 16777216 tokens", where="--block-tokens")
    suffix = path.suffix.lower()
    if suffix in (".yaml", ".yml"):
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


def _cmd_trace_generate(args: argparse.Namespace) -> int:
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
    if sc.workload.concurrency is not None:  # a client setting, not the requests'
        print(
            f"note: the trace has the requests' due times only; replay it with "
            f"workload.concurrency: {sc.workload.concurrency} to keep the closed loop",
            file=sys.stderr,
        )
    return 0


def _cmd_trace_stats(args: argparse.Namespace) -> int:
    requests, block, _ = _open_trace(args.trace, args.block_tokens)
    st = trace_stats(requests, block)
    print(json.dumps(st, indent=2) if args.json else stats_table(st))
    return 0
