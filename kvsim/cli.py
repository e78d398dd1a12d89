"""The ``kvsim`` command line: argument parsing, progress, printing and writing files.

Exit codes: 0 ok; 2 bad input (one line naming file, line or field); 1 internal error.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, NoReturn

from kvsim import __version__, compiled
from kvsim.errors import InputError, clean


class _HelpFormatter(argparse.HelpFormatter):
    """Every option's help ends with its default, unless it says it already."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        default = action.default
        if (
            "default" in text
            or default in (None, False, argparse.SUPPRESS)
            or default == []
            or (not action.option_strings and action.nargs not in ("?", "*"))
        ):
            return text
        return f"{text} (default: %(default)s)" if text else "(default: %(default)s)"


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage mistake is one line (like every other kvsim error), exit 2,
    naming the command (``kvsim: error: run: ...``) without repeating the prefix."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        kwargs.setdefault("formatter_class", _HelpFormatter)
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]

    def error(self, message: str) -> NoReturn:
        where = self.prog.removeprefix("kvsim").strip()
        head = f"{where}: " if where else ""
        self.exit(2, f"kvsim: error: {head}{clean(message)} (see `{self.prog} --help`)\n")

    def parse_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> argparse.Namespace:
        parsed, extra = self.parse_known_args(args, namespace)
        if extra:  # name the (sub)command whose arguments they were not
            words = [self.prog]
            for attr in ("command", "trace_command"):
                if getattr(parsed, attr, None):
                    words.append(getattr(parsed, attr))
            where = " ".join(words[1:])
            head = f"{where}: " if where else ""
            self.exit(
                2,
                f"kvsim: error: {head}unrecognized arguments: {clean(' '.join(extra))} "
                f"(see `{' '.join(words)} --help`)\n",
            )
        return parsed


def _path(text: str) -> str:
    """A file or folder name from the command line: not empty."""
    if not text.strip():
        raise argparse.ArgumentTypeError("empty path")
    return text


def _word(text: str) -> str:
    """A name from the command line (a profile, a field): not empty."""
    if not text.strip():
        raise argparse.ArgumentTypeError("empty value")
    return text


def _positive_int(text: str) -> int:
    """A count from the command line: a whole number >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="kvsim",
        description="Discrete-event simulator of tiered KV-cache prefill serving.",
    )
    core = "compiled core" if compiled() else "pure-Python core"
    p.add_argument("--version", action="version", version=f"kvsim {__version__} ({core})")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    r = sub.add_parser("run", help="run a scenario and print its summary")
    r.add_argument("scenario", type=_path, help="scenario YAML file")
    _add_overrides(r)
    r.add_argument("--seed", type=int, help="override the scenario's seed")
    r.add_argument(
        "--out",
        type=_path,
        help="write summary.json, requests.<fmt>, timeseries.<fmt> and scenario.yaml here",
    )
    r.add_argument(
        "--format",
        choices=("parquet", "csv"),
        default="parquet",
        help="format of the per-request and time-series tables (default: parquet)",
    )
    r.add_argument("--json", action="store_true", help="print the summary as JSON")
    r.add_argument("--quiet", action="store_true", help="no progress bar")

    v = sub.add_parser(
        "validate", help="load and check a scenario (and print its GPU memory pools); run nothing"
    )
    v.add_argument("scenario", type=_path, help="scenario YAML file")
    _add_overrides(v)

    t = sub.add_parser("trace", help="trace tools")
    tsub = t.add_subparsers(dest="trace_command", required=True, metavar="TOOL")
    ts = tsub.add_parser("stats", help="requests, duration, lengths, prefix reuse")
    ts.add_argument("trace", type=_path, help="Mooncake .jsonl, Azure .csv, or a scenario .yaml")
    ts.add_argument("--json", action="store_true", help="print JSON")
    ts.add_argument(
        "--block-tokens",
        type=int,
        default=None,
        help="tokens per hash block of a trace file (default 512, Mooncake's)",
    )
    _add_no_plugins(ts)

    tm = tsub.add_parser("mrc", help="LRU hit ratio against cache capacity, in one pass")
    tm.add_argument("trace", type=_path, help="Mooncake .jsonl, Azure .csv, or a scenario .yaml")
    tm.add_argument(
        "--block-tokens",
        type=int,
        default=None,
        help="tokens per hash block of a trace file (default 512)",
    )
    tm.add_argument("--points", type=int, default=24, help="capacities to report")
    tm.add_argument(
        "--profile",
        type=_word,
        help="express capacities in bytes of this profile's model "
        "(default: the scenario's, or b300-pcp8-glm5)",
    )
    tm.add_argument("--plot", type=_path, metavar="FILE", help="draw the curve (.png/.svg)")
    tm.add_argument(
        "--json",
        action="store_true",
        help='print [{"capacity_tokens": ..., "hit_ratio": ...}, ...]',
    )
    _add_no_plugins(tm)

    tg = tsub.add_parser("generate", help="write a scenario's workload as a trace file")
    tg.add_argument("scenario", type=_path, help="scenario YAML (its workload is used)")
    tg.add_argument(
        "output", type=_path, help="output file: .jsonl (Mooncake) or .csv (Azure, no prefixes)"
    )
    _add_overrides(tg)
    tg.add_argument("--seed", type=int, help="override the scenario's seed")

    c = sub.add_parser("costmodel", help="restore vs recompute: B*, crossover lengths, a plot")
    c.add_argument(
        "scenario", type=_path, nargs="?", help="scenario YAML (default: --profile alone)"
    )
    c.add_argument(
        "--profile",
        type=_word,
        help="profile name instead of a scenario (default: b300-pcp8-glm5)",
    )
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
    c.add_argument(
        "--plot", type=_path, metavar="FILE", help="draw restore/recompute vs length (.png/.svg)"
    )
    c.add_argument(
        "--json",
        action="store_true",
        help="print JSON (crossover_tokens is null where restoring never wins)",
    )

    sw = sub.add_parser("sweep", help="run a scenario over a grid of values and seeds")
    sw.add_argument("sweep", type=_path, help="sweep YAML (base scenario, grid/zip, seeds)")
    sw.add_argument(
        "--out", type=_path, required=True, help="folder for runs.jsonl and results.parquet/csv"
    )
    sw.add_argument(
        "--workers",
        type=int,
        default=os.cpu_count() or 1,
        help="local worker processes (default: one per core)",
    )
    sw.add_argument(
        "--scheduler",
        help="run on a Dask cluster: tcp://host:port (needs pip install 'kvsim[cluster]')",
    )
    sw.add_argument("--retry-failed", action="store_true", help="re-run runs that failed")
    sw.add_argument("--quiet", action="store_true", help="no progress bar")
    _add_plugins(sw)

    cp = sub.add_parser("capacity", help="highest arrival rate that meets an SLO")
    cp.add_argument("scenario", type=_path, nargs="?", help="scenario YAML (or use --sweep)")
    cp.add_argument(
        "--slo", required=True, help="e.g. 'ttft_p99<=2s' (an outcome metric of the summary)"
    )
    cp.add_argument("--sweep", type=_path, help="a sweep file: one capacity per configuration")
    _add_overrides(cp)
    cp.add_argument("--reps", type=int, default=3, help="replications (seeds) per search")
    cp.add_argument("--tol", type=float, default=0.02, help="relative width to stop at")
    cp.add_argument("--out", type=_path, help="write capacity.csv (and a bar plot with --sweep)")
    cp.add_argument(
        "--workers",
        type=int,
        default=os.cpu_count() or 1,
        help="parallel searches with --sweep (local processes; default: one per core)",
    )
    cp.add_argument("--json", action="store_true", help="print capacity.csv's rows as JSON")
    cp.add_argument(
        "--minimize",
        metavar="FIELD",
        help="instead of a rate: the smallest value of a numeric FIELD (e.g. "
        "tiers.host.capacity, cluster.engines, remote.servers) that meets the SLO at the "
        "scenario's load",
    )
    cp.add_argument(
        "--range",
        dest="span",
        metavar="LO..HI",
        help="with --minimize: where to search, in the field's unit (e.g. '10 GB..2 TB'; "
        "default: its value / 64 .. x 64)",
    )
    cp.add_argument(
        "--cheapest",
        action="store_true",
        help="with --sweep: run each configuration at its own load and pick the cheapest "
        "(usd_per_hour, from a cost: section) that meets the SLO",
    )

    se = sub.add_parser(
        "sensitivity", help="which assumptions an answer rests on: a tornado of one metric"
    )
    se.add_argument("scenario", type=_path, help="scenario YAML")
    se.add_argument("--metric", required=True, help="a numeric summary key, e.g. ttft_p99_s")
    se.add_argument(
        "--vary",
        action="append",
        metavar="FIELD",
        help="a field to move (repeatable; default: every profile value marked L or M)",
    )
    se.add_argument("--by", default="25%", help="how far down and up to move each (default 25%%)")
    se.add_argument("--reps", type=int, default=1, help="seeds per run, averaged (default 1)")
    se.add_argument("--out", type=_path, help="write sensitivity.csv and tornado.png")
    _add_overrides(se)

    bl = sub.add_parser("baseline", help="record a suite's TTFT curves as a baseline")
    bl.add_argument(
        "suite", type=_path, help="suite YAML (entries, load points, seeds, tolerances)"
    )
    bl.add_argument("--out", type=_path, required=True, help="baseline folder (baseline.json)")
    bl.add_argument(
        "--workers",
        type=int,
        default=os.cpu_count() or 1,
        help="local worker processes (default: one per core)",
    )
    _add_overrides(bl)

    ck = sub.add_parser(
        "check", help="re-run a suite and compare with a baseline (exit 1 on a regression)"
    )
    ck.add_argument("suite", type=_path, help="suite YAML (the one the baseline was made from)")
    ck.add_argument("--baseline", type=_path, required=True, help="folder made by `kvsim baseline`")
    _add_overrides(ck)
    ck.add_argument(
        "--report", type=_path, help="write kvsim-check.md and kvsim-check.xml (JUnit) here"
    )
    ck.add_argument(
        "--strict",
        action="store_true",
        help="a scenario that changed since the baseline is an error (exit 2)",
    )
    ck.add_argument(
        "--workers",
        type=int,
        default=os.cpu_count() or 1,
        help="local worker processes (default: one per core)",
    )

    pl = sub.add_parser("plot", help="draw the figures of a run's or a sweep's --out folder")
    pl.add_argument(
        "folder",
        type=_path,
        nargs="+",
        help="a `kvsim run --out` or `kvsim sweep --out` folder; several sweep folders: "
        "their curves overlaid (written into the first)",
    )
    pl.add_argument(
        "--slo",
        help="sweeps: draw an SLO's threshold, e.g. 'ttft_p99<=1s' (p50, p95 or p99 TTFT)",
    )
    pl.add_argument("--format", choices=("png", "svg"), default="png", help="image format")
    pl.add_argument(
        "--x",
        type=_word,
        help="sweep: the swept field to use as load (default: a swept arrivals.rate or time_scale)",
    )

    rp = sub.add_parser("reproduce", help="reproduce a published study's figures")
    rp.add_argument(
        "study",
        help="paper: the remote-KV-tier study (arXiv 2610.21500); vllm-offload: vLLM's KV "
        "offloading connector blog; central-nvme: a shared NVMe KV store's vendor claims "
        "(a scenario study); all: every study and a validation summary",
    )
    rp.add_argument(
        "--scenarios",
        type=_path,
        help="folder of the study's scenarios (default: scenarios/paper or "
        "scenarios/validation/vllm-offload of the checkout; not with all)",
    )
    rp.add_argument(
        "--out",
        type=_path,
        help="write reproduction.csv, reproduction.md (paper: and TTFT CDF plots); "
        "all: validation.csv and validation.md",
    )
    rp.add_argument("--json", action="store_true", help="print the figures as JSON")
    rp.add_argument(
        "--no-ranges",
        action="store_true",
        help="skip the range runs (sensitive_to, range_lo, range_hi left empty; ~3x faster; "
        "central-nvme: no sensitivity runs)",
    )
    rp.add_argument(
        "--quick",
        action="store_true",
        help="central-nvme: shorter runs and a wider capacity bracket (a first look)",
    )
    _add_no_plugins(rp)

    pr = sub.add_parser(
        "profiles",
        help="list the shipped profiles, model cards and GPU cards; `show MODEL GPU` prints "
        "a composition's derived constants",
    )
    pr.add_argument("action", nargs="?", choices=["show"], help="show: a composition's numbers")
    pr.add_argument("model", nargs="?", help="show: a model card name or config.json path")
    pr.add_argument("gpu", nargs="?", help="show: a GPU card name or card YAML path")
    for flag, what in (
        ("--gpus", "GPUs of the engine (default tp x pcp)"),
        ("--tp", "tensor-parallel degree (default 1; gpus / pcp when --gpus is given)"),
        ("--pcp", "prefill context-parallel degree (default 1)"),
        ("--ep", "expert-parallel degree (default 1)"),
    ):
        pr.add_argument(flag, type=_positive_int, help=f"show: {what}")
    pr.add_argument("--json", action="store_true", help="print JSON")
    for parser in (p, *sub.choices.values(), *tsub.choices.values()):
        parser.add_argument(
            "--debug",
            action="store_true",
            default=argparse.SUPPRESS,  # (given before or after the command)
            help="on an error, print its traceback (a plugin's too) before the one-line message",
        )
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
    _add_plugins(p)


def _add_plugins(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--plugin",
        dest="plugins",
        action="append",
        default=[],
        type=_word,
        metavar="MODULE",
        help="a module (or .py file) of policies the scenario may name, added to its "
        "plugins: (repeatable; docs/extending.md)",
    )
    _add_no_plugins(p)


def _add_no_plugins(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--no-plugins",
        action="store_true",
        help="run no plugin code: skip the scenario's plugins: (and installed kvsim.policies "
        "entry points); a policy name that is not a built-in one is refused (validate and "
        "trace list it unchecked). To inspect a scenario you do not trust",
    )


def _plugins_as_overrides(args: argparse.Namespace) -> None:
    """``--plugin`` values: imported now (a broken one is refused before any work), and
    added to the scenario's ``plugins`` so that they travel to every worker."""
    from kvsim.plugins import PluginError, canonical, load_plugins

    specs = [canonical(s) for s in getattr(args, "plugins", None) or []]
    if not specs:
        return
    for given, spec in zip(args.plugins, specs, strict=True):
        try:
            load_plugins([spec])
        except InputError as e:  # named as typed (the message has the path in full)
            raise PluginError(e.reason, where=f"--plugin {given}") from e
    args.plugins = specs
    if hasattr(args, "overrides"):
        args.overrides.append("plugins=" + json.dumps(specs))


def _cmd_run(args: argparse.Namespace) -> int:
    from kvsim.api import expected_requests, load
    from kvsim.report import summary_table
    from kvsim.results.records import collect, json_ready
    from kvsim.results.writers import RUN_FILES, check_out_folder, write_results
    from kvsim.sim.simulation import Simulation

    sc = load(args.scenario, args.overrides, args.seed)
    if args.out is not None:
        check_out_folder(args.out, flag="--out", owned=RUN_FILES)
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
    paths = write_results(results, args.out, args.format) if args.out is not None else []
    if args.json:
        print(json.dumps(json_ready(results.summary), indent=2))
    else:
        print(summary_table(results.summary))
    if paths:
        print(f"wrote {', '.join(str(p) for p in paths)}", file=sys.stderr)
    return 0


def _cmd_validate(args: argparse.Namespace) -> int:
    from kvsim.api import load
    from kvsim.config.pools import pool_lines, too_large
    from kvsim.workload import open_workload
    from kvsim.workload.request import check_request

    sc = load(args.scenario, args.overrides)
    w = sc.workload
    n = 0
    longest = 0  # the largest prompt must fit the node's KV pool
    for req in open_workload(w, sc.seed):  # reads the whole trace: bad lines show up here
        check_request(req, w.block_tokens)
        n += 1
        if req.input_tokens > longest:
            longest = req.input_tokens
            why = too_large(sc, longest)
            if why is not None:
                raise InputError(f"request {req.id}: {why}", where="workload")
    if n == 0:
        raise InputError(
            "workload: no requests (check workload.window and limit)", where=args.scenario
        )
    print(
        f"ok: {args.scenario}: scenario {sc.name!r}, profile {sc.profile}, "
        f"{sc.cluster.engines} engine(s), {sc.cluster.load_policy} loading, {w.kind} workload "
        f"of {n} requests"
    )
    from kvsim.config.schema import lookup_order

    print(f"lookup order: {' -> '.join(lookup_order(sc))}")
    for line in pool_lines(sc):
        print(line)
    from kvsim.plugins import disabled

    if disabled():
        from kvsim.plugins import skipped, unchecked

        if skipped():
            print(f"not imported (--no-plugins): {', '.join(map(clean, skipped()))}")
        if unchecked():  # names only the plugins' code could have checked
            print(f"not checked (their plugin code was not run): {', '.join(unchecked())}")
    return 0


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


def _check_plot_path(path_text: str) -> None:
    from kvsim.results.writers import check_writable

    out = Path(path_text)
    if out.suffix.lower() not in (".png", ".svg", ".pdf"):
        raise InputError("expected a .png, .svg or .pdf file name", where=f"--plot {path_text}")
    if not out.parent.is_dir():
        raise InputError("folder does not exist", where=f"--plot {path_text}")
    check_writable(path_text, folder=False, flag="--plot")


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


def _cmd_costmodel(args: argparse.Namespace) -> int:
    import math

    from kvsim.api import cost_model, load, profile_scenario, tier_bandwidths
    from kvsim.physics.costmodel import GIB
    from kvsim.units import (
        fmt_duration,
        parse_bandwidth,
        parse_duration,
        parse_rate,
        parse_size,
    )

    def parsed(flag: str, parse, value, zero: bool = False):
        """A --flag's quantity: finite and > 0 (>= 0 with ``zero``). A zero or negative
        bandwidth, rate or size has no meaning and would print negative or infinite
        times; T0 = 0 is the pure bandwidth model, a negative T0 is refused."""
        if value is None:
            return None
        try:
            x = parse(value)
        except (ValueError, TypeError, OverflowError) as e:
            raise InputError(str(e), where=flag) from None
        if not (isinstance(x, (int, float)) and math.isfinite(x) and (x > 0 or (zero and x == 0))):
            least = ">= 0" if zero else "> 0"
            raise InputError(f"must be a finite quantity {least}, got {value!r}", where=flag)
        return float(x)

    if args.scenario and args.profile:
        raise InputError("give a scenario or --profile, not both", where="costmodel")
    if not 0 < args.tokens <= 10**9:
        raise InputError("must be between 1 and 1,000,000,000", where="--tokens")
    if args.plot is not None:
        _check_plot_path(args.plot)
    t0_value = parsed("--t0", parse_duration, args.t0, zero=True)
    kv_value = parsed("--kv-bytes", parse_size, args.kv_bytes)
    rate_value = parsed("--rate", parse_rate, args.rate)
    extra = [parsed(f"--bandwidth {bw}", parse_bandwidth, bw) for bw in args.bandwidth]
    if args.scenario:
        sc = load(args.scenario, args.overrides)
    else:
        from kvsim.profiles import DEFAULT_PROFILE

        sc = profile_scenario(args.profile or DEFAULT_PROFILE, args.overrides)
    model = cost_model(sc, args.tokens, t0=t0_value, kv_bytes=kv_value, rate=rate_value)
    paths = tier_bandwidths(sc)
    for value in extra:  # an extra row is named by its bandwidth
        paths.setdefault(f"{value / GIB:.4g} GiB/s", (value, model.t0))
    S = args.tokens
    from kvsim.physics.costmodel import timing_crossover
    from kvsim.physics.step import scenario_lone_seconds

    # with --rate the recompute side is the constant rate given; otherwise the engine's
    # own time for the prompt (super-linear: attention)
    if rate_value is None:
        lone = scenario_lone_seconds(sc)
    else:

        def lone(new: int, cached: int) -> float:
            return new / rate_value

    rows = []
    for name, (bw, t0) in paths.items():
        m = type(model)(model.kv_bytes, model.rate, t0, model.reference_tokens)
        rows.append(
            {
                "path": name,
                "bandwidth": bw,
                "t0_s": t0,
                "crossover_tokens": m.crossover(bw),
                "crossover_tokens_timing": timing_crossover(bw, t0, model.kv_bytes, lone),
                "restore_s": m.restore(S, bw),
                "recompute_s": m.recompute(S),
            }
        )
    numbers = [model.b_star, model.min_tokens, S / model.rate]
    numbers += [
        v for r in rows for k, v in r.items() if k not in ("path",) and "crossover" not in k
    ]
    if not all(math.isfinite(v) and v >= 0 for v in numbers) or not model.b_star > 1e-300:
        raise InputError(
            "the cost model overflows or underflows with these values (check --kv-bytes, "
            "--rate, --t0, --bandwidth and --tokens)",
            where="costmodel",
        )
    if args.plot:
        from kvsim.plots import costmodel_plot

        out = Path(args.plot)
        costmodel_plot(
            model,
            rows,  # the table's rows, and only those: one line per path printed
            out,
            recompute=lambda n: lone(n, 0),
            title=f"{sc.profile}: restore vs recompute at {S:,} tokens' R "
            f"(B* = {model.b_star / GIB:.4g} GiB/s)",
        )
    if args.json:
        print(
            json.dumps(
                {
                    "profile": str(sc.profile),
                    "kv_bytes_per_token": model.kv_bytes,
                    "rate_tokens_per_s": model.rate,
                    "reference_tokens": S,
                    "t0_s": model.t0,
                    "b_star": model.b_star,
                    "b_star_gib_s": model.b_star / GIB,
                    "min_tokens": model.min_tokens,
                    "paths": [  # "never" is null: JSON has no infinity
                        {
                            **r,
                            "crossover_tokens": None if math.isinf(x) else x,
                            "crossover_tokens_timing": None if math.isinf(y) else y,
                        }
                        for r in rows
                        for x, y in [(r["crossover_tokens"], r["crossover_tokens_timing"])]
                    ],
                },
                indent=2,
                allow_nan=False,
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
        f"below it a restore never beats recompute at a constant R (read at {S:,} tokens)"
    )
    print(
        f"  T0*R = {model.min_tokens:,.0f} tokens: with a constant R, shorter prompts never "
        "beat recompute, at any bandwidth"
    )
    print()
    w = max(len(r["path"]) for r in rows)
    print(
        f"  {'restore path':<{w}}  {'bandwidth':>11}  {'T0':>7}  {'crossover':>12}  "
        f"{'(timing)':>12}  {'restore ' + format(S, ','):>15}  {'recompute':>9}"
    )

    def tokens(x: float) -> str:
        return "never" if x == float("inf") else f"{x:,.0f} tok"

    differ = []
    for r in rows:
        x, y = r["crossover_tokens"], r["crossover_tokens_timing"]
        print(
            f"  {r['path']:<{w}}  {r['bandwidth'] / GIB:>7.4g} GiB/s  "
            f"{fmt_duration(r['t0_s']):>7}  {tokens(x):>12}  {tokens(y):>12}  "
            f"{fmt_duration(r['restore_s']):>15}  {fmt_duration(r['recompute_s']):>9}"
        )
        if (math.isinf(x) != math.isinf(y)) or (not math.isinf(x) and abs(y - x) > 0.05 * x):
            differ.append(f"{r['path']}: {tokens(x)} with a constant R, {tokens(y)} timed")
    print(
        "\n  crossover: the two-term formula T0 / (1/R - s/B); (timing): against the "
        "engine's own\n  time for the prompt, t(S, 0) vs T0 + (S-1)*s/B + t(1, S-1), up to "
        "1M tokens"
    )
    if differ:
        print(
            "  they differ because recompute is not linear in S (attention grows faster, each "
            "step has a\n  fixed cost) and a restore still computes the last token:\n    "
            + "\n    ".join(differ)
        )
    if args.plot:
        print(f"\nwrote {args.plot}", file=sys.stderr)
    return 0


def _cmd_sweep(args: argparse.Namespace) -> int:
    from kvsim.experiments.sweep import (
        SWEEP_FILES,
        counted,
        load_sweep,
        parse_scheduler,
        run_sweep,
    )
    from kvsim.results.writers import check_out_folder

    if args.workers < 1:
        raise InputError("must be >= 1", where="--workers")
    if args.scheduler is not None:
        parse_scheduler(args.scheduler)  # a malformed address: refused before any work
    sweep = load_sweep(args.sweep, plugins=args.plugins)
    if sweep.refused:  # a configuration no run of which could start (a policy name)
        raise sweep.refused[0]
    # a folder holding someone else's files (a `kvsim run` folder, their own results.csv)
    check_out_folder(args.out, flag="--out", owned=SWEEP_FILES)
    bar = None
    if not args.quiet:
        from tqdm import tqdm

        bar = tqdm(
            total=len(sweep.runs), unit="run", desc=sweep.name, disable=None, file=sys.stderr
        )

    def progress(done: int, total: int) -> None:
        if bar is not None:
            bar.n = done
            bar.refresh()

    try:
        table = run_sweep(
            sweep,
            args.out,
            workers=args.workers,
            scheduler=args.scheduler,
            retry_failed=args.retry_failed,
            progress=progress,
        )
    except KeyboardInterrupt:
        if bar is not None:
            bar.close()
            bar = None
        print(
            f"kvsim: interrupted: the finished runs are kept in {args.out}/runs.jsonl; run the "
            "same command again to resume (results.parquet and results.csv are written once "
            "every run has a row)",
            file=sys.stderr,
        )
        return 130
    finally:
        if bar is not None:
            bar.close()
    failed = table[table["status"] != "ok"]
    reused = table.attrs.get("reused", 0)
    print(_sweep_points(table, sweep.columns))
    print(
        f"{counted(len(table), 'run')} ({reused} reused from {args.out}/runs.jsonl, "
        f"{len(failed)} failed) in {args.out}/results.parquet and results.csv"
    )
    if len(failed):
        for _, row in failed.iterrows():
            print(f"  run {row['run']} failed: {row['error']}", file=sys.stderr)
        print(
            f"kvsim: error: {len(failed)} of {counted(len(table), 'run')} failed "
            f"({'run' if len(failed) == 1 else 'runs'} "
            f"{', '.join(str(r) for r in failed['run'])}); fix them and run again with "
            "--retry-failed",
            file=sys.stderr,
        )
        return 2
    return 0


SWEEP_METRICS = ("ttft_p50_s", "ttft_p95_s", "ttft_p99_s", "hit_ratio", "requests_per_s")


def _sweep_points(table: Any, columns: list[str]) -> str:
    """One line per grid point: its key metrics, the mean over its seeds (and how many)."""
    import pandas as pd

    ok = table[table["status"] == "ok"]
    if ok.empty:
        return "no run finished"
    keys = [c for c in columns if c in ok.columns]
    metrics = [m for m in SWEEP_METRICS if m in ok.columns]
    if keys:
        grouped = ok.groupby(keys, sort=False, dropna=False)
        points = grouped[metrics].mean().reset_index()
        points["seeds"] = grouped.size().to_numpy()
    else:
        points = pd.DataFrame([ok[metrics].mean()])
        points["seeds"] = len(ok)
    cells = [[*keys, *metrics, "seeds"]]
    for _, row in points.iterrows():
        cells.append(
            [str(row[k]) for k in keys]
            + [f"{row[m]:.4g}" for m in metrics]
            + [str(int(row["seeds"]))]
        )
    widths = [max(len(r[i]) for r in cells) for i in range(len(cells[0]))]
    return "\n".join(
        "  ".join(
            c.rjust(w) if i >= len(keys) else c.ljust(w)
            for i, (c, w) in enumerate(zip(r, widths, strict=True))
        )
        for r in cells
    )


def _cmd_capacity(args: argparse.Namespace) -> int:
    from kvsim.experiments.capacity import capacity_table, parse_slo, search, sweep_capacity

    if (args.scenario is None) == (args.sweep is None):
        raise InputError("give a scenario or --sweep (one of them)", where="capacity")
    if args.reps < 1:
        raise InputError("must be >= 1", where="--reps")
    log = (lambda msg: None) if args.json else (lambda msg: print(msg, file=sys.stderr))
    if args.minimize is not None or args.span is not None:
        return _capacity_minimize(args, log)
    if args.cheapest:
        return _capacity_cheapest(args, log)
    if args.out is not None:
        from kvsim.results.writers import CAPACITY_FILES, check_out_folder

        check_out_folder(args.out, flag="--out", owned=CAPACITY_FILES)
    if args.sweep:
        caps = sweep_capacity(
            args.sweep,
            args.slo,
            reps=args.reps,
            tol=args.tol,
            workers=args.workers,
            sets=args.overrides,
            log=log,
        )
    else:
        from kvsim.api import load

        slo = parse_slo(args.slo)
        sc = load(args.scenario, args.overrides)
        caps = [search(sc, slo, reps=args.reps, tol=args.tol, log=log)]
        caps[0].config = {"scenario": sc.name}
    df = capacity_table(caps)
    if args.out is not None:
        from kvsim.results.writers import CAPACITY_FILES, write_folder

        files = {"capacity.csv": lambda p: df.to_csv(p, index=False)}
        if args.sweep:
            from kvsim.plots import capacity_plot

            files["capacity.png"] = lambda p: capacity_plot(df, p)
        paths = write_folder(args.out, files, flag="--out", owned=CAPACITY_FILES)
        print(f"wrote {', '.join(str(p) for p in paths)}", file=sys.stderr)
    if args.json:
        print(df.to_json(orient="records", indent=2))
        return 0
    print(f"capacity at {caps[0].slo} ({args.reps} replications, 95% interval):")
    for cap, (_, row) in zip(caps, df.iterrows(), strict=True):
        spread = cap.interval.text()
        print(
            f"  {row['configuration']}: {row['capacity_rps']:.4g} requests/s offered {spread} "
            f"({row['factor']:.3g}x the scenario's offered rate)"
        )
        if cap.sessions:  # a session workload: Little's law at that load
            iv = cap.sessions_per_gpu
            print(
                f"    {iv.mean:.4g} concurrent sessions per GPU {iv.text()} (sessions/s x "
                f"mean session lifetime {row['session_lifetime_s']:.4g} s / GPUs)"
            )
    return 0


def _json_number(value: float) -> float | None:
    """A number for JSON: NaN (no interval) as null."""
    return value if math.isfinite(value) else None


def _capacity_minimize(args: argparse.Namespace, log: Callable[[str], None]) -> int:
    """``kvsim capacity SCENARIO --slo ... --minimize FIELD [--range LO..HI]``."""
    from kvsim.api import load
    from kvsim.experiments.capacity import parse_slo
    from kvsim.experiments.planner import minimize

    if args.minimize is None:
        raise InputError("--range needs --minimize FIELD", where="--range")
    if args.sweep is not None or args.cheapest:
        raise InputError("--minimize searches one scenario: no --sweep or --cheapest")
    if args.out is not None:
        raise InputError("--minimize prints its answer; it writes no folder", where="--out")
    slo = parse_slo(args.slo)
    sc = load(args.scenario, args.overrides)
    found = minimize(sc, slo, args.minimize, span=args.span, reps=args.reps, tol=args.tol, log=log)
    if args.json:  # (kvsim.experiments.planner.Minimum: the interval, provision, counts)
        print(json.dumps(found.as_json(), indent=2))
        return 0
    print("\n".join(found.lines()))
    return 0


def _capacity_cheapest(args: argparse.Namespace, log: Callable[[str], None]) -> int:
    """``kvsim capacity --sweep SWEEP --slo ... --cheapest``."""
    from kvsim.experiments.capacity import parse_slo
    from kvsim.experiments.planner import cheapest, layouts

    if args.sweep is None:
        raise InputError("--cheapest compares the configurations of a --sweep", where="--cheapest")
    if args.out is not None:
        raise InputError("--cheapest prints its answer; it writes no folder", where="--out")
    slo = parse_slo(args.slo)
    found = layouts(args.sweep, slo, reps=args.reps, sets=args.overrides, log=log)
    best = cheapest(found)
    if args.json:
        print(
            json.dumps(
                [
                    {
                        **x.config,
                        slo.metric: x.metric,
                        "ci95": _json_number(x.metric_ci95),
                        "meets": x.meets,
                        "usd_per_hour": x.usd_per_hour,
                        "usd_per_million_prompt_tokens": x.usd_per_million_prompt_tokens,
                        "cheapest": x is best,
                    }
                    for x in found
                ],
                indent=2,
            )
        )
        return 0 if best is not None else 1
    print(f"layouts at their own load, {slo} ({args.reps} replications, mean):")
    for x in found:
        label = ", ".join(f"{k}={v}" for k, v in x.config.items())
        mark = "  <- cheapest" if x is best else ""
        near = (
            " (its 95% interval straddles the threshold)"
            if x.interval is not None
            and x.interval.ok
            and x.interval.lo <= slo.threshold <= x.interval.hi
            else ""
        )
        print(
            f"  {label}: {slo.metric} {x.metric:.4g} {x.interval.text() if x.interval else ''} "
            f"{'meets' if x.meets else 'fails'}{near}, "
            f"${x.usd_per_hour:,.2f}/h, ${x.usd_per_million_prompt_tokens:,.4g} per million "
            f"prompt tokens{mark}"
        )
    if best is None:
        print(f"no configuration meets {slo}")
        return 1
    return 0


def _cmd_sensitivity(args: argparse.Namespace) -> int:
    from kvsim.api import load
    from kvsim.experiments.sensitivity import (
        parse_by,
        report_lines,
        sensitivity,
        table,
        tornado_plot,
    )

    by = parse_by(args.by)
    if args.out is not None:
        from kvsim.results.writers import SENSITIVITY_FILES, check_out_folder

        check_out_folder(args.out, flag="--out", owned=SENSITIVITY_FILES)
    sc = load(args.scenario, args.overrides)
    result = sensitivity(
        sc,
        args.metric,
        vary=args.vary,
        by=by,
        reps=args.reps,
        log=lambda msg: print(msg, file=sys.stderr),
    )
    df = table(result)
    if args.out is not None:
        from kvsim.results.writers import SENSITIVITY_FILES, write_folder

        paths = write_folder(
            args.out,
            {
                "sensitivity.csv": lambda p: df.to_csv(p, index=False),
                "tornado.png": lambda p: tornado_plot(result, p),
            },
            flag="--out",
            owned=SENSITIVITY_FILES,
        )
        print(f"wrote {', '.join(str(p) for p in paths)}", file=sys.stderr)
    print("\n".join(report_lines(result)))  # (kvsim.experiments.sensitivity)
    return 0


def _cmd_baseline(args: argparse.Namespace) -> int:
    from kvsim.experiments.regression import load_suite, measure, write_baseline
    from kvsim.experiments.sweep import counted
    from kvsim.results.writers import BASELINE_FILES, check_out_folder

    if args.workers < 1:
        raise InputError("must be >= 1", where="--workers")
    from kvsim.config.loader import parse_override

    check_out_folder(args.out, flag="--out", owned=BASELINE_FILES)
    extra = {}
    for expr in args.overrides:
        parts, value = parse_override(expr)
        extra[".".join(parts)] = value
    suite = load_suite(args.suite, extra)
    doc = measure(
        suite,
        workers=args.workers,
        log=lambda m: print(m, file=sys.stderr),
        require_finite=True,  # a baseline never records NaN
    )
    path = write_baseline(doc, args.out)
    points = sum(len(e["points"]) for e in doc["entries"])
    print(
        f"baseline of {counted(len(doc['entries']), 'entry')}, {counted(points, 'load point')}, "
        f"seeds {doc['seeds']}: {path}"
    )
    return 0


def _cmd_check(args: argparse.Namespace) -> int:
    from kvsim.config.loader import parse_override
    from kvsim.experiments.regression import (
        baseline_path,
        check_baseline,
        compare,
        load_suite,
        measure,
        read_baseline,
        terminal_table,
        write_reports,
    )
    from kvsim.experiments.sweep import counted

    if args.workers < 1:
        raise InputError("must be >= 1", where="--workers")
    baseline = read_baseline(args.baseline)  # every field checked before anything runs
    extra = {}
    for expr in args.overrides:
        parts, value = parse_override(expr)
        extra[".".join(parts)] = value
    suite = load_suite(args.suite, extra)
    # the suite matches the baseline: checked before anything runs
    check_baseline(suite, baseline, strict=args.strict, where=str(baseline_path(args.baseline)))
    if args.report:
        from kvsim.results.writers import REPORT_FILES, check_out_folder

        check_out_folder(args.report, flag="--report", owned=REPORT_FILES)
    new = measure(suite, workers=args.workers, log=lambda m: print(m, file=sys.stderr))
    result = compare(suite, baseline, new, strict=args.strict)
    print(terminal_table(result, list(suite.metrics)))
    for note in result.notes:
        print(f"note: {note}")
    for c in result.failures:
        print(f"REGRESSION {c.line()}")
    print(
        f"{'FAILED' if result.failures else 'passed'}: {len(result.failures)} of "
        f"{counted(len(result.comparisons), 'comparison')} moved beyond tolerance"
    )
    if args.report:
        for p in write_reports(result, suite, args.report):
            print(f"wrote {p}", file=sys.stderr)
    return 1 if result.failures else 0


def _cmd_plot(args: argparse.Namespace) -> int:
    from kvsim.plots import run_plots, sweep_plots
    from kvsim.results.writers import check_writable

    folders = [Path(f) for f in args.folder]
    for f in folders:
        if not f.is_dir():
            raise InputError("not a folder", where=str(f))
    d = folders[0]
    check_writable(d, folder=True, flag="")  # the figures are written into the folder
    slo = None
    if args.slo is not None:
        from kvsim.experiments.capacity import parse_slo

        slo = parse_slo(args.slo)
        if slo.metric not in ("ttft_p50_s", "ttft_p95_s", "ttft_p99_s"):
            raise InputError(
                "plots draw TTFT p50, p95 and p99: give an SLO on one of them", where="--slo"
            )
    if (d / "summary.json").exists() or (d / "summary.json").is_symlink():
        if len(folders) > 1:
            raise InputError(
                "overlays are of sweep folders; a run folder is plotted alone", where=str(d)
            )
        for flag, given in (("--slo", args.slo), ("--x", args.x)):
            if given is not None:  # every option acts on the figures, or is refused
                raise InputError(
                    f"is for sweep folders; {d} is a run folder, whose figures have no "
                    f"{'SLO line' if flag == '--slo' else 'load axis'}",
                    where=flag,
                )
        paths = run_plots(d, args.format)
    elif any((d / n).exists() for n in ("results.parquet", "capacity.csv")):
        paths = sweep_plots(d, args.format, x=args.x, slo=slo, overlay=folders[1:])
        if not paths:
            raise InputError(
                "nothing to plot: nothing swept (no grid) and no capacity.csv",
                where=str(d),
            )
    else:
        raise InputError(
            "expected a run folder (summary.json) or a sweep folder "
            "(results.parquet or capacity.csv)",
            where=str(d),
        )
    for p in paths:
        print(p)
    return 0


def _cmd_reproduce(args: argparse.Namespace) -> int:
    from kvsim.reproduce import study
    from kvsim.results.writers import REPRODUCTION_FILES, check_out_folder

    if args.quick and args.study != "central-nvme":
        raise InputError("only central-nvme has a quick version", where="--quick")
    if args.study == "all":
        return _reproduce_all(args)
    mod = study(args.study)
    if args.out is not None:
        check_out_folder(args.out, flag="--out", owned=REPRODUCTION_FILES)
    quick = {"quick": True} if args.quick else {}
    rep = mod.reproduce(
        args.scenarios,
        log=lambda msg: print(msg, file=sys.stderr),
        range_seeds=0 if args.no_ranges else mod.RANGE_SEEDS,
        **quick,
    )
    if args.out is not None:  # before printing: a refused folder prints no figures
        paths = mod.write(rep, args.out)
    if args.json:
        print(json.dumps(rep.records(), indent=2))
    else:
        print(mod.text_table(rep))
    if args.out is not None:
        print(f"wrote {len(paths)} files to {args.out}", file=sys.stderr)
    return 0


def _reproduce_all(args: argparse.Namespace) -> int:
    """Every study (the paper's without ranges), then the validation summary."""
    import time

    from kvsim.reproduce import validation
    from kvsim.results.writers import check_out_folder

    if args.scenarios is not None:
        raise InputError(
            "reproduce all runs every study from the checkout's scenarios", where="--scenarios"
        )
    if args.out is not None:
        check_out_folder(args.out, flag="--out", owned=validation.FILES)
    start = time.monotonic()
    rows, _reps = validation.run_all(log=lambda msg: print(msg, file=sys.stderr))
    seconds = time.monotonic() - start
    if args.out is not None:  # before printing: a refused folder prints no figures
        paths = validation.write(rows, args.out, seconds)
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        print(validation.text_table(rows))
    print(f"all studies in {seconds:.0f} s", file=sys.stderr)
    if args.out is not None:
        print(f"wrote {len(paths)} files to {args.out}", file=sys.stderr)
    return 0


def _cmd_profiles(args: argparse.Namespace) -> int:
    from kvsim.catalogue.gpus import list_gpus
    from kvsim.catalogue.models import list_models
    from kvsim.profiles import DEFAULT_PROFILE, list_profiles

    if args.action == "show":
        return _show_composition(args)
    if args.model is not None:
        raise InputError(f"unknown action {args.model!r}; did you mean `kvsim profiles show`?")
    flags = [f"--{k}" for k in ("gpus", "tp", "pcp", "ep") if getattr(args, k) is not None]
    if flags:
        raise InputError(f"{flags[0]} goes with `kvsim profiles show MODEL GPU`")
    profiles, models, gpus = list_profiles(), list_models(), list_gpus()
    if args.json:
        rows = [
            {"kind": kind, **row}
            for kind, group in (("profile", profiles), ("model", models), ("gpu", gpus))
            for row in group
        ]
        print(json.dumps(rows, indent=2))
        return 0
    for title, rows in (("profiles", profiles), ("models", models), ("gpus", gpus)):
        print(f"{title}:")
        width = max(len(p["name"]) for p in rows)
        for p in rows:
            mark = " (default)" if p["name"] == DEFAULT_PROFILE else ""
            print(f"  {p['name']:<{width}}  {p['description']}{mark}")
    print(
        "\ncompose one in a scenario: profile: {model: MODEL, gpu: GPU, gpus: N, tp: N, "
        "pcp: N, ep: N}; see its numbers: kvsim profiles show MODEL GPU [--tp N ...]"
    )
    return 0


def _show_composition(args: argparse.Namespace) -> int:
    from kvsim.catalogue.compose import compose, describe, numbers

    if not args.model or not args.gpu:
        raise InputError("usage: kvsim profiles show MODEL GPU [--gpus N --tp N --pcp N --ep N]")
    spec: dict[str, Any] = {"model": args.model, "gpu": args.gpu}
    for key in ("gpus", "tp", "pcp", "ep"):
        if getattr(args, key) is not None:
            spec[key] = getattr(args, key)
    try:
        comp = compose(spec, Path.cwd())
    except InputError as e:  # name the flag or argument the user gave
        field, _, why = e.reason.partition(": ")
        key = field.removeprefix("profile.")
        if not why or (key not in spec and key != "profile"):
            raise
        where = {"model": args.model, "gpu": args.gpu, "profile": "profiles show"}
        raise InputError(why, where=where.get(key, f"--{key}")) from None
    rows = describe(comp)
    if args.json:
        shown = [{"quantity": q, "value": v, "how": h} for q, v, h in rows]
        print(json.dumps({"numbers": numbers(comp), "rows": shown}, indent=2))
        return 0
    width = max(len(q) for q, _, _ in rows)
    vwidth = max(len(v) for _, v, _ in rows)
    for q, v, h in rows:
        print(f"{q:<{width}}  {v:<{vwidth}}  {h}")
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
        "sweep": _cmd_sweep,
        "capacity": _cmd_capacity,
        "sensitivity": _cmd_sensitivity,
        "plot": _cmd_plot,
        "baseline": _cmd_baseline,
        "check": _cmd_check,
    }
    from kvsim import plugins

    debug = getattr(args, "debug", False)
    start = plugins.signals()
    notice = plugins.on_import
    plugins.on_import = _say_import
    try:
        with signals_as_interrupt(), _plugin_mode(args):
            _plugins_as_overrides(args)
            return handlers[args.command](args)
    except InputError as e:
        return _refused(e, debug)
    except KeyboardInterrupt as e:
        # plugin code's own KeyboardInterrupt (no signal came) is a plugin failure
        failure = plugins.from_plugin(e) if plugins.signals() == start else None
        if failure is not None:
            return _refused(failure, debug, e)
        print("kvsim: interrupted", file=sys.stderr)
        return 130
    except MemoryError:  # e.g. a workload too large for this machine: one line, no traceback
        print(
            f"kvsim: error: {args.command}: out of memory (lower workload.requests, a trace's "
            "limit, or the sweep's grid)",
            file=sys.stderr,
        )
        return 2
    except BrokenPipeError:  # e.g. `kvsim run ... | head`
        return 0
    except BaseException as e:  # SystemExit, GeneratorExit...: plugin code's, if no guard saw it
        failure = plugins.from_plugin(e)
        if failure is None:
            raise
        return _refused(failure, debug, e)
    finally:
        plugins.on_import = notice


def _refused(e: InputError, debug: bool, cause: BaseException | None = None) -> int:
    """Exit 2 with the one-line message (``--debug``: the traceback first, a plugin's
    code included)."""
    if debug:
        import traceback

        traceback.print_exception(cause if cause is not None else e, file=sys.stderr)
    print(f"kvsim: error: {clean(str(e))}", file=sys.stderr)
    return 2


def _say_import(what: str) -> None:
    """Before plugin code is imported: say which (a scenario's plugins: run as code)."""
    print(f"kvsim: importing plugin code: {clean(what)}", file=sys.stderr)


# commands that run no policy: with --no-plugins they accept (and list) plugin names
_INSPECTING = ("validate", "trace", "costmodel")


@contextlib.contextmanager
def _plugin_mode(args: argparse.Namespace) -> Iterator[None]:
    """``--no-plugins`` (or KVSIM_NO_PLUGINS=1): no plugin code runs in this command (nor
    in its local workers)."""
    from kvsim.plugins import disabled, no_plugins

    if not getattr(args, "no_plugins", False) and not disabled():
        yield
        return

    if getattr(args, "plugins", None):
        raise InputError("--plugin runs plugin code, --no-plugins runs none: give one")
    if getattr(args, "scheduler", None):
        raise InputError(
            "Dask workers cannot be kept from importing a scenario's plugins: use local "
            "workers (no --scheduler)",
            where="--no-plugins",
        )
    with no_plugins(inspect=args.command in _INSPECTING):
        yield


@contextlib.contextmanager
def signals_as_interrupt() -> Iterator[None]:
    """SIGTERM and SIGHUP handled like Ctrl-C (KeyboardInterrupt) while a command runs, so
    a terminated command stops its workers, keeps what finished and leaves no partial
    output, exactly as on an interrupt (the main thread only: Python's rule). The handler
    (SIGINT's too, unless it is ignored) counts the signals, so that a KeyboardInterrupt
    raised by plugin code is told from a real one (kvsim.plugins.interrupted)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    from kvsim.plugins import on_signal

    signals = [signal.SIGTERM, *([signal.SIGHUP] if hasattr(signal, "SIGHUP") else [])]
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signals.append(signal.SIGINT)
    old = {sig: signal.signal(sig, on_signal) for sig in signals}
    try:
        yield
    finally:
        for sig, previous in old.items():
            signal.signal(sig, previous)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
