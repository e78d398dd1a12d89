"""The ``kvsim`` argument parser: every command's and option's name, help text and
default (the help formatter, the one-line usage errors and the shared option groups)."""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from typing import NoReturn

from kvsim.errors import clean
from kvsim.version import __version__, compiled


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
    r.add_argument(
        "--record-accesses",
        action="store_true",
        help="also write accesses.parquet (needs --out): every lookup (hit/miss per tier "
        "and block) and every block store event, in simulation order",
    )
    r.add_argument("--json", action="store_true", help="print the summary as JSON")
    r.add_argument(
        "--slo",
        help="judge the run against an SLO, e.g. 'ttft_p99<=2s,tpot_p99<=50ms': pass/fail "
        "per term and goodput_rps (requests/s within every per-request bound)",
    )
    r.add_argument("--quiet", action="store_true", help="no progress bar")
    r.add_argument(
        "--no-ranges",
        action="store_true",
        help="on a composed profile, skip the prediction ranges (the run again with each "
        "catalogue assumption at each end of its range: docs/catalogue.md)",
    )

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

    tm = tsub.add_parser(
        "mrc", help="hit ratio against cache capacity, per eviction policy (LRU in one pass)"
    )
    tm.add_argument(
        "trace",
        type=_path,
        help="Mooncake .jsonl, Azure .csv, a scenario .yaml, or a recorded accesses.parquet "
        "(or the run folder holding it)",
    )
    tm.add_argument(
        "--block-tokens",
        type=int,
        default=None,
        help="tokens per hash block of a trace file (default 512)",
    )
    tm.add_argument(
        "--policy",
        action="append",
        default=[],
        type=_word,
        metavar="NAME",
        help="eviction policy to replay: lru, fifo, opt (Belady's bound) or a plugin's name, "
        "with parameters as NAME(k=v,...); repeatable or a comma list (default: lru, in "
        "one pass)",
    )
    _add_access_selection(tm)
    tm.add_argument("--points", type=int, default=24, help="capacities to report")
    tm.add_argument(
        "--capacities",
        type=_word,
        metavar="LIST",
        help="report these capacities instead: a comma list of tokens (a trace) or of sizes "
        "with a unit such as '4 GB' or '1000 B' (an accesses.parquet)",
    )
    tm.add_argument(
        "--run",
        type=_path,
        metavar="DIR",
        help="a run folder (kvsim run --out) to compare a trace's curve with: the curve at "
        "the run's GPU capacity per engine (in the run's policy, unless --policy), beside "
        "the run's GPU-tier hits (the run's block size and bytes per token)",
    )
    tm.add_argument(
        "--profile",
        type=_word,
        help="express capacities in bytes of this profile's model "
        "(default: the scenario's, or b300-pcp8-glm5)",
    )
    tm.add_argument("--plot", type=_path, metavar="FILE", help="draw the curves (.png/.svg/.pdf)")
    tm.add_argument(
        "--json",
        action="store_true",
        help='print [{"capacity_tokens": ..., "hit_ratio": ...}, ...] (with --policy or an '
        'accesses.parquet, one row per policy and capacity: "policy", "hit_blocks", '
        '"miss_blocks" too)',
    )
    _add_plugins(tm)

    tr = tsub.add_parser("reuse", help="reuse-distance histogram (LRU stack distances)")
    tr.add_argument(
        "trace",
        type=_path,
        help="Mooncake .jsonl, Azure .csv, a scenario .yaml, or a recorded accesses.parquet "
        "(or the run folder holding it)",
    )
    tr.add_argument(
        "--block-tokens",
        type=int,
        default=None,
        help="tokens per hash block of a trace file (default 512)",
    )
    _add_access_selection(tr)
    tr.add_argument("--plot", type=_path, metavar="FILE", help="draw the histogram")
    tr.add_argument(
        "--json",
        action="store_true",
        help='print [{"low": ..., "high": ..., "count": ..., "share": ...}, ...]',
    )
    _add_no_plugins(tr)

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
    sw.add_argument(
        "--slo",
        help="judge every run against an SLO, e.g. 'ttft_p99<=2s,tpot_p99<=50ms' (replaces "
        "the sweep file's slo:): columns slo_met, slo_met_<metric>, goodput_rps",
    )
    sw.add_argument("--quiet", action="store_true", help="no progress bar")
    _add_plugins(sw)

    cp = sub.add_parser("capacity", help="highest arrival rate that meets an SLO")
    cp.add_argument("scenario", type=_path, nargs="?", help="scenario YAML (or use --sweep)")
    cp.add_argument(
        "--slo",
        required=True,
        help="e.g. 'ttft_p99<=2s' (an outcome metric of the summary), or a joint SLO "
        "'ttft_p99<=2s,tpot_p99<=50ms' (every term must hold)",
    )
    cp.add_argument("--sweep", type=_path, help="a sweep file: one capacity per configuration")
    _add_overrides(cp)
    cp.add_argument(
        "--reps",
        type=int,
        default=None,
        help="replications (seeds) per search (default: a --sweep file's replications or "
        "seeds count, else 3)",
    )
    cp.add_argument("--tol", type=float, default=0.02, help="relative width to stop at")
    cp.add_argument(
        "--out",
        type=_path,
        help="write capacity.csv (and a bar plot with --sweep); with --cheapest: "
        "cheapest.csv, cheapest.json and cheapest.png",
    )
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
        "scenario's load; with --sweep, in each of its layouts (priced: the cheapest marked)",
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
    cp.add_argument(
        "--prompt-range",
        metavar="LO..HI",
        help="scope the SLO to prompts of LO..HI tokens (e.g. 0..32k, 32k..; k = 1,000): "
        "sets run.prompt_range, so every run measures only those prompts",
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
    se.add_argument(
        "--reps",
        type=int,
        default=1,
        help="seeds, the same for every run (paired); 3 or more give each swing a 95%% "
        "interval and the noise row (default 1)",
    )
    se.add_argument("--out", type=_path, help="write sensitivity.csv and tornado.png")
    _add_overrides(se)

    ca = sub.add_parser(
        "calibrate",
        help="fit a composed profile's uncertain constants to your own TTFT measurements",
    )
    ca.add_argument(
        "measurements",
        type=_path,
        nargs="+",
        metavar="MEASUREMENTS",
        help="files of measured runs: a CSV (prompt_tokens, cached_tokens, concurrency, "
        "ttft_ms...), vllm bench serve --save-result JSON, SGLang bench_serving JSONL, or a "
        "Prometheus scrape of vLLM's /metrics; FORMAT:FILE names the format (csv, vllm, "
        "sglang, prometheus)",
    )
    ca.add_argument(
        "--scenario", type=_path, required=True, help="scenario YAML (composed profile)"
    )
    ca.add_argument(
        "--fit",
        action="append",
        metavar="FIELD[,FIELD...]",
        help="catalogue assumptions to fit (default: dense.e_max, experts.e_max for MoE, "
        "attention.e_max, cpu.per_step, host_link_frac)",
    )
    ca.add_argument(
        "--holdout",
        type=float,
        default=0.3,
        metavar="SHARE",
        help="share of each tier's rows held out of the fit, to check it on",
    )
    ca.add_argument(
        "--out", type=_path, help="write profile.yaml, fit.md, fit.json, rows.csv and residuals.png"
    )
    ca.add_argument(
        "--cached-tokens",
        type=int,
        metavar="N",
        help="cached prefix tokens of rows whose file does not say (vLLM: --metadata "
        "cached_tokens=N; SGLang: --tag cached_tokens=N)",
    )
    ca.add_argument(
        "--concurrency",
        type=_positive_int,
        metavar="N",
        help="clients in flight for rows whose file does not say (a Prometheus scrape)",
    )
    ca.add_argument(
        "--rate", metavar="RATE", help="requests/s (e.g. 4/s) for rows whose file does not say"
    )
    ca.add_argument(
        "--tier",
        choices=("gpu", "host"),
        help="where the cached prefix is for rows whose file does not say (default gpu)",
    )
    ca.add_argument(
        "--statistic", choices=("mean", "median"), default="mean", help="the TTFT statistic fitted"
    )
    ca.add_argument(
        "--max-requests",
        type=_positive_int,
        default=100,
        metavar="N",
        help="measured requests a row's run simulates at most",
    )
    ca.add_argument(
        "--seed",
        type=int,
        help="seed of the held-out split and of rate rows' arrivals (default: the scenario's)",
    )
    ca.add_argument(
        "--workers",
        type=_positive_int,
        default=os.cpu_count() or 1,
        metavar="N",
        help="local worker processes running rows (default: one per core)",
    )
    ca.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    _add_overrides(ca)

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
        help="paper: the remote-KV-tier study (arXiv 2610.21500); paper-catalogue: its "
        "scenarios on the catalogue-composed profile; vllm-offload: vLLM's KV "
        "offloading connector blog; lmcache-longdoc: LMCache's cookbooks (A40); lmcache-gke: "
        "LMCache on GKE (Llama-3.3-70B, 8 x H100, CPU RAM and local SSD tiers); "
        "central-nvme: a shared NVMe KV store's vendor claims "
        "(a scenario study); all: every study and a validation summary",
    )
    rp.add_argument(
        "--scenarios",
        type=_path,
        help="folder of the study's scenarios (default: scenarios/paper for paper and "
        "paper-catalogue, scenarios/validation/STUDY for the others, of the working "
        "directory or the checkout; not with all)",
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
        help="skip the range runs (sensitive_to, range_lo, range_hi left empty; paper: ~3x "
        "faster, the catalogue studies 6-30x; "
        "central-nvme: no sensitivity runs; all: no catalogue ranges)",
    )
    rp.add_argument(
        "--quick",
        action="store_true",
        help="central-nvme: shorter runs and a wider capacity bracket (a first look)",
    )
    _add_no_plugins(rp)

    pg = sub.add_parser(
        "plugins",
        help="list the policies a scenario (or this environment) may name: built-in ones, "
        "plugin files and modules, entry points; kind, source, parameters, first docstring line",
    )
    pg.add_argument(
        "scenario",
        nargs="?",
        type=_path,
        help="scenario YAML file: its plugins, and which of its fields use each policy",
    )
    _add_plugins(pg)
    pg.add_argument("--json", action="store_true", help="print JSON")

    pr = sub.add_parser(
        "profiles",
        help="list the shipped profiles, model cards and GPU cards; `show MODEL GPU` prints "
        "a composition's derived constants",
    )
    pr.add_argument("action", nargs="?", choices=["show"], help="show: a composition's numbers")
    pr.add_argument("model", nargs="?", help="show: a model card name or config.json path")
    pr.add_argument("gpu", nargs="?", help="show: a GPU card name or card YAML path")
    for flag, what in (
        ("--gpus", "GPUs of the engine (default tp x pcp x pp)"),
        ("--tp", "tensor-parallel degree (default 1; gpus / (pcp x pp) when --gpus is given)"),
        ("--pcp", "prefill context-parallel degree (default 1)"),
        ("--pp", "pipeline-parallel stages (default 1)"),
        ("--ep", "expert-parallel degree (default 1)"),
    ):
        pr.add_argument(flag, type=_positive_int, help=f"show: {what}")
    pr.add_argument(
        "--eager",
        action="store_true",
        help="show: eager mode (no CUDA graphs: every kernel launched from Python; "
        "engine.cuda_graphs: false)",
    )
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


def _add_access_selection(p: argparse.ArgumentParser) -> None:
    """--tier and --engine: which stream of a recorded accesses.parquet."""
    p.add_argument(
        "--tier",
        default=None,
        metavar="TIER",
        help="the tier whose stream an accesses.parquet replays: gpu (default), host, nvme, "
        "remote, or a tier kind's name (docs/extending.md)",
    )
    p.add_argument(
        "--engine",
        type=int,
        default=None,
        metavar="N",
        help="one engine's stream of an accesses.parquet (default: every engine, each in a "
        "store of its own, summed)",
    )


def _add_no_plugins(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--no-plugins",
        action="store_true",
        help="run no plugin code: skip the scenario's plugins: (and installed kvsim.policies "
        "entry points); a policy name that is not a built-in one is refused (validate and "
        "trace list it unchecked). To inspect a scenario you do not trust",
    )
