"""Reproduce the remote-KV-tier study (arXiv 2610.21500) from the scenarios in
``scenarios/paper/``: each figure of the study next to kvsim's own, and their ratio.

Interpretation adopted: the study's bandwidths are GiB/s (B* = s*R with s = 51,168 B and
R = 16,384 / 0.31 s is 2.70 GB/s = 2.52 GiB/s, against the study's "2.53"), so every
bandwidth figure here is in GiB/s. The workload is not published; the scenario files say
what was assumed, and ``docs/paper-reproduction.md`` says what matches and why.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from kvsim import api
from kvsim.errors import InputError
from kvsim.physics.costmodel import GIB
from kvsim.results import Results
from kvsim.results.uncertainty import mean_interval
from kvsim.workload.request import Request

STUDY = "arXiv 2610.21500: remote KV tiers for context-parallel prefill"

# the configurations of the study, each a scenario file in scenarios/paper/
CONFIGS = {
    "no-remote": "production stream, no remote tier",
    "remote-sync": "production stream, remote tier (one server, sync, client bugs)",
    "high-hit-sync": "high-hit stream, one server, sync loading, client bugs",
    "sharded-async": "high-hit stream, per-rank store on 8 servers, async, bugs fixed",
    "throughput-unsharded": "saturated engine, cold prompts, unsharded store path",
    "throughput-sharded": "saturated engine, cold prompts, per-rank store path",
}


@dataclass(frozen=True)
class Figure:
    """One figure of the study: its value there (None when the study gives none), and
    what kind of figure kvsim's is (:data:`KINDS`)."""

    name: str
    paper: float | None
    unit: str
    what: str
    kind: str = "predicted"


KINDS = {
    "calibrated": "an input fitted to the study (matching it shows the fit, not the model)",
    "derived": "arithmetic on inputs (calibrated or sourced); no queueing involved",
    "predicted": "comes out of the simulation of a stream",
}


FIGURES: tuple[Figure, ...] = (
    Figure(
        "recompute_16k_s",
        0.31,
        "s",
        "16k-token prompt computed from scratch, idle engine",
        "calibrated",  # timing.roofline.achievable_flops is solved for it
    ),
    Figure(
        "remote_hit_16k_s",
        0.88,
        "s",
        "the same prompt restored from the unsharded remote tier, synchronously, idle engine",
        "derived",  # T0 + 838 MB at the calibrated GET rate + hand-off + one token
    ),
    Figure("b_star", 2.53, "GiB/s", "break-even tier bandwidth B* = s*R", "derived"),
    Figure(
        "crossover_tokens", 17000, "tokens", "T0*R: shorter prompts never beat recompute", "derived"
    ),
    # the server's bandwidth and per-op time are solved from these two (profiles.derive)
    Figure(
        "get_bw_unsharded",
        1.71,
        "GiB/s",
        "GET bandwidth achieved, one server, under load",
        "calibrated",
    ),
    Figure(
        "get_bw_sharded",
        10.76,
        "GiB/s",
        "GET bandwidth achieved, one server per rank",
        "calibrated",
    ),
    Figure("p99_no_remote_s", 3.96, "s", "p99 TTFT of 16k prompts without a remote tier"),
    Figure("p99_remote_sync_s", 17.3, "s", "p99 TTFT with the remote tier enabled"),
    Figure("p99_ratio_remote", 17.3 / 3.96, "x", "p99 with / without the remote tier"),
    Figure("p50_ratio_remote", 1.0, "x", "median with / without the remote tier ('unchanged')"),
    Figure(
        "p99_high_hit_sync_s",
        83.32,
        "s",
        "p99 TTFT, high-hit stream, sync loading",
    ),
    Figure(
        "p99_growth_2x",
        None,
        "x",
        "that p99 when the stream lasts twice as long / as is (> 1: the queue is unstable)",
    ),
    Figure("gpu_busy_high_hit_sync", 0.07, "fraction", "GPU busy, high-hit stream, sync"),
    Figure(
        "p99_sharded_async_s",
        0.67,
        "s",
        "p99 TTFT after sharding + async + bug fixes",
        "calibrated",  # the stream's arrival cv (1.5) was chosen to land it
    ),
    Figure(
        "remote_token_frac",
        0.985,
        "fraction",
        "prompt tokens served from the remote tier, same run",
    ),
    Figure(
        "throughput_gain_sharded",
        0.14,
        "fraction",
        "prefill throughput gain of the sharded store (saturated engine)",
    ),
)


@dataclass
class Row:
    """kvsim's value of a figure: the mean over seeds and its 95% interval (Student t over
    the seeds; lo = hi for a figure the seed does not change)."""

    figure: Figure
    kvsim: float
    lo: float
    hi: float
    values: list[float] = field(default_factory=list)  # one per seed

    @property
    def ratio(self) -> float | None:
        """kvsim / paper (None when the study gives no value)."""
        p = self.figure.paper
        return self.kvsim / p if p else None


@dataclass
class Reproduction:
    """kvsim's figures for the study, the seeds they were averaged over, and the runs
    (every seed's) they came from."""

    rows: list[Row]
    seeds: list[int] = field(default_factory=list)
    runs: dict[str, list[Results]] = field(default_factory=dict)

    def value(self, name: str) -> float:
        return self.row(name).kvsim

    def row(self, name: str) -> Row:
        return next(r for r in self.rows if r.figure.name == name)

    def records(self) -> list[dict[str, object]]:
        """One dict per figure, the CSV's columns: figure, paper, kvsim (mean over seeds),
        kvsim_lo, kvsim_hi (its 95% interval), unit, ratio, kind."""
        return [
            {
                "figure": r.figure.name,
                "paper": r.figure.paper,
                "kvsim": r.kvsim,
                "kvsim_lo": r.lo,
                "kvsim_hi": r.hi,
                "unit": r.figure.unit,
                "ratio": r.ratio,
                "kind": r.figure.kind,
            }
            for r in self.rows
        ]


COLUMNS = ["figure", "paper", "kvsim", "kvsim_lo", "kvsim_hi", "unit", "ratio", "kind"]


def _fmt(x: float | None) -> str:
    if x is None:
        return "-"
    if math.isinf(x):
        return "inf"
    return f"{x:,.0f}" if abs(x) >= 1000 else f"{x:.3g}"


def _interval(r: Row) -> str:
    return "-" if r.lo == r.hi else f"{_fmt(r.lo)} .. {_fmt(r.hi)}"


def text_table(rep: Reproduction) -> str:
    """The side-by-side table for a terminal."""
    head = ("figure", "paper", "kvsim", "95% interval", "unit", "kvsim/paper", "kind")
    body = [
        (
            r.figure.name,
            _fmt(r.figure.paper),
            _fmt(r.kvsim),
            _interval(r),
            r.figure.unit,
            _fmt(r.ratio),
            r.figure.kind,
        )
        for r in rep.rows
    ]
    widths = [max(len(row[i]) for row in (head, *body)) for i in range(len(head))]
    lines = [f"reproducing {STUDY} (mean of {len(rep.seeds)} seeds, 95% interval over them)"]
    for row in (head, *body):
        lines.append(
            "  ".join(
                c.ljust(w) if i in (0, 4, 6) else c.rjust(w)
                for i, (c, w) in enumerate(zip(row, widths, strict=True))
            ).rstrip()
        )
    return "\n".join(lines)


def markdown(rep: Reproduction, plots: list[str] | None = None) -> str:
    """The same table as Markdown, with what each figure is."""
    lines = [
        f"# Reproduction: {STUDY}",
        "",
        "Bandwidths in GiB/s (the interpretation adopted; see docs/paper-reproduction.md).",
        f"kvsim: the mean over seeds {', '.join(map(str, rep.seeds))}, with the 95% "
        "interval of that mean (Student t over the seeds; none where the seed changes "
        "nothing). Kinds: " + "; ".join(f"**{k}**: {v}" for k, v in KINDS.items()) + ".",
        "",
        "| figure | what | kind | paper | kvsim | 95% interval | unit | kvsim/paper |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rep.rows:
        lines.append(
            f"| `{r.figure.name}` | {r.figure.what} | {r.figure.kind} | {_fmt(r.figure.paper)} "
            f"| {_fmt(r.kvsim)} | {_interval(r)} | {r.figure.unit} | {_fmt(r.ratio)} |"
        )
    if plots:
        lines += ["", "TTFT CDFs (every seed's requests pooled):", ""]
        lines += [f"- [{p}]({p})" for p in plots]
    return "\n".join(lines) + "\n"


def find_scenarios(folder: str | Path | None = None) -> Path:
    """The paper scenarios: the given folder, ./scenarios/paper, or the checkout's."""
    candidates = (
        [Path(folder)]
        if folder
        else [
            Path.cwd() / "scenarios" / "paper",
            Path(__file__).resolve().parents[2] / "scenarios" / "paper",
        ]
    )
    for c in candidates:
        if (c / "base.yaml").is_file():
            return c
    raise InputError(
        "no scenarios/paper/ folder with base.yaml here; run from the kvsim "
        "checkout or pass --scenarios DIR",
        where=str(candidates[0]),
    )


def _single_requests(path: Path, overrides: list[str], tokens: int) -> list[Results]:
    """Two identical requests a minute apart on an idle engine: cold, then cached."""
    sc = api.load(path, overrides)
    blocks = -(-tokens // sc.workload.block_tokens)
    ids = tuple(range(10**12, 10**12 + blocks))  # far from any generated block id
    reqs = [Request(0, 0.0, tokens, 1, ids), Request(1, 60.0, tokens, 1, ids)]
    return [api.run(sc, requests=reqs)]


SEEDS = 10  # every simulated figure is a mean over this many seeds (at least 10)


def reproduce(
    folder: str | Path | None = None,
    log: Callable[[str], None] = lambda _msg: None,
    seeds: int = SEEDS,
) -> Reproduction:
    """Run every configuration with ``seeds`` seeds (the scenarios' own seed and the
    next ones) and compute kvsim's value of every figure: the mean over the seeds and
    its 95% interval. No seed is singled out."""
    if seeds < 2:
        raise InputError(f"must be >= 2 (an interval needs spread), got {seeds}", where="--seeds")
    d = find_scenarios(folder)
    base = api.load(d / "base.yaml")
    seed_list = [base.seed + i for i in range(seeds)]
    runs: dict[str, list[Results]] = {}
    for name, what in CONFIGS.items():
        log(f"running {name}: {what} ({seeds} seeds)")
        runs[name] = [api.run(d / f"{name}.yaml", seed=s) for s in seed_list]
    hh = runs["high-hit-sync"][0].scenario
    log(f"running high-hit-sync twice as long ({seeds} seeds)")
    double = [
        api.run(hh, {"workload.requests": 2 * hh.workload.requests}, s).summary for s in seed_list
    ]

    log(f"running the micro measurements (single requests, one isolated engine; {seeds} seeds)")
    micro = d / "micro.yaml"
    cold = _single_requests(micro, ["remote.enabled=false", "workload.prestored=false"], 16384)
    hit = _single_requests(micro, ["workload.prestored=false"], 16384)
    runs["micro"] = [api.run(micro, seed=s) for s in seed_list]
    sharded = [
        api.run(micro, ["remote.servers=8", "remote.sharding=per_rank", "remote.capacity=1 TB"], s)
        for s in seed_list
    ]
    model = api.cost_model(runs["micro"][0].scenario, 16384)

    per_seed: dict[str, list[float]] = {f.name: [] for f in FIGURES}
    for i in range(seeds):
        s = {k: v[i].summary for k, v in runs.items()}
        values = {
            "recompute_16k_s": float(cold[0].requests["ttft_s"].iloc[0]),
            "remote_hit_16k_s": float(hit[0].requests["ttft_s"].iloc[1]),
            "b_star": model.b_star / GIB,
            "crossover_tokens": model.min_tokens,
            "get_bw_unsharded": s["micro"]["remote_get_bw"] / GIB,
            "get_bw_sharded": sharded[i].summary["remote_get_bw"] / GIB,
            "p99_no_remote_s": s["no-remote"]["ttft_p99_s"],
            "p99_remote_sync_s": s["remote-sync"]["ttft_p99_s"],
            "p99_ratio_remote": s["remote-sync"]["ttft_p99_s"] / s["no-remote"]["ttft_p99_s"],
            "p50_ratio_remote": s["remote-sync"]["ttft_p50_s"] / s["no-remote"]["ttft_p50_s"],
            "p99_high_hit_sync_s": s["high-hit-sync"]["ttft_p99_s"],
            "p99_growth_2x": double[i]["ttft_p99_s"] / s["high-hit-sync"]["ttft_p99_s"],
            "gpu_busy_high_hit_sync": s["high-hit-sync"]["gpu_busy_frac"],
            "p99_sharded_async_s": s["sharded-async"]["ttft_p99_s"],
            "remote_token_frac": s["sharded-async"]["token_source_frac"]["remote"],
            "throughput_gain_sharded": s["throughput-sharded"]["prompt_tokens_per_s"]
            / s["throughput-unsharded"]["prompt_tokens_per_s"]
            - 1.0,
        }
        for name, v in values.items():
            per_seed[name].append(float(v))
    rows = []
    for f in FIGURES:
        vals = per_seed[f.name]
        # the seed changes nothing (an idle engine, arithmetic): lo = hi = the value
        iv = mean_interval(vals, nonnegative="gain" not in f.name)  # a gain may be < 0
        rows.append(Row(f, iv.mean, iv.lo, iv.hi, vals))
    return Reproduction(rows, seed_list, runs)


def write(rep: Reproduction, out: str | Path) -> list[Path]:
    """reproduction.csv, reproduction.md and a TTFT CDF plot per configuration, written
    as the folder ``out`` all or nothing."""
    import pandas as pd

    from kvsim.plots import ttft_cdf_plot
    from kvsim.results.writers import REPRODUCTION_FILES, Writer, write_folder

    def pooled(name: str) -> pd.Series:
        """The measured TTFTs of every seed's run of a configuration."""
        return pd.concat(
            [r.requests.loc[~r.requests["warmup"], "ttft_s"] for r in rep.runs[name]],
            ignore_index=True,
        )

    def cdf(name: str) -> Writer:
        sc = rep.runs[name][0].scenario
        return lambda p: ttft_cdf_plot(
            {name: pooled(name)},
            p,
            f"{sc.name}: TTFT CDF ({CONFIGS.get(name, 'micro stream')}; "
            f"{len(rep.runs[name])} seeds pooled)",
        )

    plots: dict[str, Writer] = {f"ttft_cdf_{n}.png": cdf(n) for n in rep.runs}
    overview = "ttft_cdf_overview.png"
    plots[overview] = lambda p: ttft_cdf_plot(
        {n: pooled(n) for n in ("no-remote", "remote-sync", "high-hit-sync", "sharded-async")},
        p,
        f"remote-KV-tier study: TTFT CDF per configuration ({len(rep.seeds)} seeds pooled)",
    )
    table = pd.DataFrame(rep.records(), columns=COLUMNS)
    figures = [overview, *(n for n in plots if n != overview)]
    files: dict[str, Writer] = {
        "reproduction.csv": lambda p: table.to_csv(p, index=False),
        "reproduction.md": lambda p: p.write_text(markdown(rep, figures), encoding="utf-8"),
        **plots,
    }
    return write_folder(out, files, flag="--out", owned=REPRODUCTION_FILES)
