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
        default=None,
        help="tokens per hash block of a trace file (default 512, Mooncake's)",
    )

    tg = tsub.add_parser("generate", help="write a scenario's workload as a trace file")
    tg.add_argument("scenario", help="scenario YAML (its workload is used)")
    tg.add_argument("output", help="output file: .jsonl (Mooncake) or .csv (Azure, no prefixes)")
    _add_overrides(tg)
    tg.add_argument("--seed", type=int, help="override the scenario's seed")

    c = sub.add_parser("costmodel", help="restore vs recompute: B*, crossover lengths, a plot")
    c.add_argument("scenario", nargs="?", help="scenario YAML (default: --profile alone)")
    c.add_argument("--profile", help="profile name instead of a scenario (default: b300-pcp8-glm5)")
    _add_overrides(c)
    c.add_argument(
        "--tokens",
        type=int,
        default=16384,
        help="prompt length for restore/recompute times and for R (default 16384)",
    )
    c.add_argument(
        "--bandwidth",
        action="append",
        default=[],
        metavar="BW",
        help='extra tier bandwidth to evaluate, e.g. "10.76 GiB/s" (repeatable)',
    )
    c.add_argument("--t0", help='override T0, e.g. "330 ms"')
    c.add_argument("--kv-bytes", help='override s, e.g. "51168 B"')
    c.add_argument("--rate", help='override R, e.g. "52850/s" (tokens per second)')
    c.add_argument("--plot", metavar="FILE", help="draw restore/recompute vs length (.png/.svg)")
    c.add_argument("--json", action="store_true", help="print JSON")

    rp = sub.add_parser("reproduce", help="reproduce a published study's figures")
    rp.add_argument("study", help="paper: the remote-KV-tier study (arXiv 2610.21500)")
    rp.add_argument(
        "--scenarios",
        help="folder of the study's scenarios (default: scenarios/paper of the checkout)",
    )
    rp.add_argument("--out", help="write reproduction.csv, reproduction.md and TTFT CDF plots")
    rp.add_argument("--json", action="store_true", help="print the figures as JSON")

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
    from kvsim.results.writers import check_writable, write_results
    from kvsim.sim.simulation import Simulation

    sc = load(args.scenario, args.overrides, args.seed)
    if args.out:
        check_writable(args.out, folder=True, flag="--out")
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
    from kvsim.workload import open_workload
    from kvsim.workload.request import check_request

    sc = load(args.scenario, args.overrides)
    w = sc.workload
    n = 0
    for req in open_workload(w, sc.seed):  # reads the whole trace: bad lines show up here
        check_request(req, w.block_tokens)
        n += 1
    if n == 0:
        raise InputError(
            "workload: no requests (check workload.window and limit)", where=args.scenario
        )
    print(
        f"ok: {args.scenario}: scenario {sc.name!r}, profile {sc.profile}, "
        f"{sc.cluster.engines} engine(s), {sc.cluster.load_policy} loading, {w.kind} workload "
        f"of {n} requests"
    )
    return 0


def _cmd_trace(args: argparse.Namespace) -> int:
    if args.trace_command == "generate":
        return _cmd_trace_generate(args)
    return _cmd_trace_stats(args)


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
    from kvsim.workload import open_workload
    from kvsim.workload.azure import read_azure
    from kvsim.workload.mooncake import read_mooncake
    from kvsim.workload.stats import trace_stats

    path = Path(args.trace)
    if args.block_tokens is not None and args.block_tokens <= 0:
        raise InputError("must be > 0", where="--block-tokens")
    suffix = path.suffix.lower()
    block = args.block_tokens or 512
    if suffix in (".yaml", ".yml"):
        from kvsim.api import load

        if args.block_tokens is not None:
            raise InputError(
                "a scenario sets its own block size (workload.block_tokens); use "
                "--block-tokens with trace files",
                where="--block-tokens",
            )
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


def _cmd_costmodel(args: argparse.Namespace) -> int:
    from kvsim.api import cost_model, load, profile_scenario, tier_bandwidths
    from kvsim.physics.costmodel import GIB
    from kvsim.units import (
        fmt_duration,
        parse_bandwidth,
        parse_duration,
        parse_rate,
        parse_size,
    )

    def parsed(flag: str, parse, value):
        if value is None:
            return None
        try:
            return parse(value)
        except ValueError as e:
            raise InputError(str(e), where=flag) from None

    if args.scenario and args.profile:
        raise InputError("give a scenario or --profile, not both", where="costmodel")
    if args.tokens <= 0:
        raise InputError("must be > 0", where="--tokens")
    if args.scenario:
        sc = load(args.scenario, args.overrides)
    else:
        from kvsim.profiles import DEFAULT_PROFILE

        sc = profile_scenario(args.profile or DEFAULT_PROFILE, args.overrides)
    model = cost_model(
        sc,
        args.tokens,
        t0=parsed("--t0", parse_duration, args.t0),
        kv_bytes=parsed("--kv-bytes", parse_size, args.kv_bytes),
        rate=parsed("--rate", parse_rate, args.rate),
    )
    paths = tier_bandwidths(sc)
    for i, bw in enumerate(args.bandwidth):
        value = parsed(f"--bandwidth {bw}", parse_bandwidth, bw)
        paths[f"--bandwidth {i + 1}"] = (value, model.t0)
    S = args.tokens
    rows = []
    for name, (bw, t0) in paths.items():
        m = type(model)(model.kv_bytes, model.rate, t0, model.reference_tokens)
        rows.append(
            {
                "path": name,
                "bandwidth": bw,
                "t0_s": t0,
                "crossover_tokens": m.crossover(bw),
                "restore_s": m.restore(S, bw),
                "recompute_s": m.recompute(S),
            }
        )
    if args.plot:
        import math

        from kvsim.plots import costmodel_plot

        t = sc.timing
        from kvsim.physics.timing import TimingTable

        table = TimingTable(t.new_tokens, t.cached_tokens, t.seconds, t.scale)
        remote = [bw for name, (bw, _) in paths.items() if not name.startswith(("host", "nvme"))]
        bws = sorted({*remote, model.b_star * 1.25, 100 * GIB})
        out = Path(args.plot)
        if out.suffix.lower() not in (".png", ".svg", ".pdf"):
            raise InputError("expected a .png, .svg or .pdf file name", where="--plot")
        if not out.parent.is_dir():
            raise InputError("folder does not exist", where=f"--plot {out}")
        costmodel_plot(
            model,
            [b for b in bws if math.isfinite(b)],
            out,
            recompute=lambda n: table(n, 0),
            title=f"{sc.profile}: restore vs recompute (T0 = "
            f"{fmt_duration(model.t0)}, B* = {model.b_star / GIB:.3g} GiB/s)",
        )
    if args.json:
        print(
            json.dumps(
                {
                    "profile": sc.profile,
                    "kv_bytes_per_token": model.kv_bytes,
                    "rate_tokens_per_s": model.rate,
                    "reference_tokens": S,
                    "t0_s": model.t0,
                    "b_star": model.b_star,
                    "b_star_gib_s": model.b_star / GIB,
                    "min_tokens": model.min_tokens,
                    "paths": rows,
                },
                indent=2,
                default=str,
            )
        )
        return 0
    print(f"cost model of {sc.name} (profile {sc.profile})")
    print(
        f"  s = {model.kv_bytes:,.0f} B/token   R = {model.rate:,.0f} tokens/s "
        f"(t({S}, 0) = {fmt_duration(S / model.rate)})   T0 = {fmt_duration(model.t0)}"
    )
    print(
        f"  B* = s*R = {model.b_star / 1e9:.4g} GB/s = {model.b_star / GIB:.4g} GiB/s: "
        "a tier slower than this never beats recompute"
    )
    print(
        f"  T0*R = {model.min_tokens:,.0f} tokens: shorter prompts never beat recompute, "
        "at any bandwidth"
    )
    print()
    w = max(len(r["path"]) for r in rows)
    print(
        f"  {'restore path':<{w}}  {'bandwidth':>11}  {'T0':>7}  {'crossover':>12}  "
        f"{'restore ' + format(S, ','):>15}  {'recompute':>9}"
    )
    for r in rows:
        x = r["crossover_tokens"]
        cross = "never" if x == float("inf") else f"{x:,.0f} tok"
        print(
            f"  {r['path']:<{w}}  {r['bandwidth'] / GIB:>7.4g} GiB/s  "
            f"{fmt_duration(r['t0_s']):>7}  {cross:>12}  {fmt_duration(r['restore_s']):>15}  "
            f"{fmt_duration(r['recompute_s']):>9}"
        )
    if args.plot:
        print(f"\nwrote {args.plot}", file=sys.stderr)
    return 0


def _cmd_reproduce(args: argparse.Namespace) -> int:
    from kvsim.reproduce import study
    from kvsim.results.writers import check_writable

    mod = study(args.study)
    if args.out:
        check_writable(args.out, folder=True, flag="--out")
    rep = mod.reproduce(args.scenarios, log=lambda msg: print(msg, file=sys.stderr))
    if args.json:
        print(json.dumps(rep.records(), indent=2))
    else:
        print(mod.text_table(rep))
    if args.out:
        paths = mod.write(rep, args.out)
        print(f"wrote {len(paths)} files to {args.out}", file=sys.stderr)
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
        "costmodel": _cmd_costmodel,
        "reproduce": _cmd_reproduce,
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
