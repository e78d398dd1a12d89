"""The ``kvsim`` command line: argument parsing, progress, printing and writing files.

Exit codes: 0 ok; 2 bad input (one line naming file, line or field); 1 internal error.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from kvsim import __version__
from kvsim.errors import InputError


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="kvsim",
        description="Discrete-event simulator of tiered KV-cache prefill serving.",
    )
    p.add_argument("--version", action="version", version=f"kvsim {__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    r = sub.add_parser("run", help="run a scenario and print its summary")
    r.add_argument("scenario", help="scenario YAML file")
    _add_overrides(r)
    r.add_argument("--seed", type=int, help="override the scenario's seed")
    r.add_argument("--out", help="write summary.json, requests.<fmt> and scenario.yaml here")
    r.add_argument(
        "--format",
        choices=("parquet", "csv"),
        default="parquet",
        help="per-request table format (default: parquet)",
    )
    r.add_argument("--json", action="store_true", help="print the summary as JSON")
    r.add_argument("--quiet", action="store_true", help="no progress bar")

    v = sub.add_parser("validate", help="load and check a scenario; run nothing")
    v.add_argument("scenario")
    _add_overrides(v)

    t = sub.add_parser("trace", help="trace tools")
    tsub = t.add_subparsers(dest="trace_command", required=True, metavar="TOOL")
    ts = tsub.add_parser("stats", help="requests, duration, lengths, prefix reuse")
    ts.add_argument("trace", help="Mooncake .jsonl, Azure .csv, or a scenario .yaml")
    ts.add_argument("--json", action="store_true", help="print JSON")
    ts.add_argument(
        "--block-tokens",
        type=int,
        default=512,
        help="tokens per hash block (default 512, Mooncake's)",
    )

    tg = tsub.add_parser("generate", help="write a scenario's workload as a trace file")
    tg.add_argument("scenario", help="scenario YAML (its workload is used)")
    tg.add_argument("output", help="output file: .jsonl (Mooncake) or .csv (Azure, no prefixes)")
    _add_overrides(tg)
    tg.add_argument("--seed", type=int, help="override the scenario's seed")

    pr = sub.add_parser("profiles", help="list the shipped hardware/model profiles")
    pr.add_argument("--json", action="store_true")
    return p


def _add_overrides(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="PATH=VALUE",
        help="override a scenario field, e.g. --set remote.sharding=per_rank",
    )


def _cmd_run(args: argparse.Namespace) -> int:
    from kvsim.api import expected_requests, load
    from kvsim.report import summary_table
    from kvsim.results.records import collect, json_ready
    from kvsim.results.writers import write_results
    from kvsim.sim.simulation import Simulation

    sc = load(args.scenario, args.overrides, args.seed)
    if args.out and Path(args.out).exists() and not Path(args.out).is_dir():
        raise InputError("exists and is not a folder", where=f"--out {args.out}")
    bar = None
    if not args.quiet:
        from tqdm import tqdm

        bar = tqdm(
            total=expected_requests(sc),
            unit="req",
            desc=sc.name,
            disable=None,
            file=sys.stderr,
            leave=False,
        )
    try:
        sim = Simulation(sc, progress=bar.update if bar is not None else None)
        results = collect(sim.run(), sc)
    finally:
        if bar is not None:
            bar.close()
    if args.json:
        print(json.dumps(json_ready(results.summary), indent=2))
    else:
        print(summary_table(results.summary))
    if args.out:
        paths = write_results(results, args.out, args.format)
        print(f"wrote {', '.join(str(p) for p in paths)}", file=sys.stderr)
    return 0


def _cmd_validate(args: argparse.Namespace) -> int:
    from kvsim.api import load

    sc = load(args.scenario, args.overrides)
    w = sc.workload
    print(
        f"ok: {args.scenario}: scenario {sc.name!r}, profile {sc.profile}, "
        f"{sc.cluster.engines} engine(s), {sc.cluster.load_policy} loading, {w.kind} workload"
    )
    return 0


def _cmd_trace(args: argparse.Namespace) -> int:
    if args.trace_command == "generate":
        return _cmd_trace_generate(args)
    return _cmd_trace_stats(args)


def _cmd_trace_generate(args: argparse.Namespace) -> int:
    from kvsim.api import load
    from kvsim.workload import open_workload
    from kvsim.workload.writers import write_azure, write_mooncake

    out = Path(args.output)
    writers = {".jsonl": write_mooncake, ".csv": write_azure}
    if out.suffix.lower() not in writers:
        raise InputError("expected a .jsonl (Mooncake) or .csv (Azure) file name", where=str(out))
    if not out.parent.is_dir():
        raise InputError("folder does not exist", where=str(out.parent))
    sc = load(args.scenario, args.overrides, args.seed)
    n = writers[out.suffix.lower()](open_workload(sc.workload, sc.seed), out)
    print(f"wrote {n} requests to {out}", file=sys.stderr)
    return 0


def _cmd_trace_stats(args: argparse.Namespace) -> int:
    from kvsim.report import stats_table
    from kvsim.workload import open_workload
    from kvsim.workload.azure import read_azure
    from kvsim.workload.mooncake import read_mooncake
    from kvsim.workload.stats import trace_stats

    path = Path(args.trace)
    if args.block_tokens <= 0:
        raise InputError("must be > 0", where="--block-tokens")
    suffix = path.suffix.lower()
    block = args.block_tokens
    if suffix in (".yaml", ".yml"):
        from kvsim.api import load

        sc = load(path)
        block = sc.workload.block_tokens
        requests = open_workload(sc.workload, sc.seed)
    elif suffix == ".csv":
        requests = read_azure(path, block)
    elif suffix in (".jsonl", ".json"):
        requests = read_mooncake(path, block)
    else:
        raise InputError(
            "unknown trace format: expected .jsonl (Mooncake), .csv (Azure) or a scenario .yaml",
            where=str(path),
        )
    st = trace_stats(requests, block)
    print(json.dumps(st, indent=2) if args.json else stats_table(st))
    return 0


def _cmd_profiles(args: argparse.Namespace) -> int:
    from kvsim.profiles import DEFAULT_PROFILE, list_profiles

    profiles = list_profiles()
    if args.json:
        print(json.dumps(profiles, indent=2))
        return 0
    width = max(len(p["name"]) for p in profiles)
    for p in profiles:
        mark = " (default)" if p["name"] == DEFAULT_PROFILE else ""
        print(f"{p['name']:<{width}}  {p['description']}{mark}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``kvsim`` console script."""
    args = _parser().parse_args(argv)
    handlers = {
        "run": _cmd_run,
        "validate": _cmd_validate,
        "trace": _cmd_trace,
        "profiles": _cmd_profiles,
    }
    try:
        return handlers[args.command](args)
    except InputError as e:
        print(f"kvsim: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("kvsim: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # e.g. `kvsim run ... | head`
        return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
