"""``kvsim trace mrc`` and ``kvsim trace reuse``: a trace's or a recorded run's cache curves.

This module owns the two curve subcommands (imported by :mod:`kvsim.cli.trace` when one
runs): miss-ratio curves of LRU (one pass) or of any eviction policy replayed
(:mod:`kvsim.analysis`), against a run's own figures where one is given; reuse-distance
histograms; their ``--policy``, ``--capacities`` and ``--run`` arguments, and their
tables, JSON and figures.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from kvsim.analysis.mrc import MAX_POINTS, miss_ratio_curve
from kvsim.analysis.replay import PolicySpec, check_policy, replay, replay_streams
from kvsim.analysis.reuse import reuse_histogram
from kvsim.analysis.streams import TraceStreamBuilder, accesses_streams, trace_stream
from kvsim.api import load, profile_scenario
from kvsim.cli.common import _check_plot_path
from kvsim.cli.trace import _open_trace
from kvsim.errors import InputError
from kvsim.physics.step import lone_seconds, make_step_model, per_step_tokens
from kvsim.plots.mrc import mrc_plot, reuse_plot
from kvsim.profiles import DEFAULT_PROFILE
from kvsim.units import fmt_bytes, parse_size


def _cmd_trace_mrc(args: argparse.Namespace) -> int:
    if not 2 <= args.points <= MAX_POINTS:
        raise InputError(f"must be between 2 and {MAX_POINTS:,}", where="--points")
    if args.plot:
        _check_plot_path(args.plot)  # before the pass over the trace, which may be long
    if _is_accesses(args.trace):
        if args.run:
            raise InputError(
                "compares a trace's curve with a run; a recorded stream is the run's own "
                "(its replay at the run's capacity gives the run's counts)",
                where="--run",
            )
        return _mrc_accesses(args, _policies(args.policy, args.plugins) or None)
    _trace_only(args)
    capacities = _capacities(args.capacities, in_bytes=False)
    run = _read_run(args.run) if args.run else None
    block_tokens = args.block_tokens
    if (
        run is not None
        and block_tokens is None
        and Path(args.trace).suffix.lower()
        not in (
            ".yaml",
            ".yml",
        )
    ):
        block_tokens = run.block  # the run's blocks, unless told otherwise
    requests, block, sc = _open_trace(args.trace, block_tokens)
    if run is not None and block != run.block:
        raise InputError(
            f"the run's blocks are {run.block:,} tokens, the trace's {block:,}: the curve "
            "cannot stand beside it (drop --block-tokens, or give the run's)",
            where="--run",
        )
    # a scenario's own plugins (and the run's): may name the policies too
    specs = [
        *args.plugins,
        *(sc.plugins if sc is not None else []),
        *(run.sc.plugins if run is not None else []),
    ]
    policies = _policies(args.policy, specs) or None
    if run is not None and policies is None:  # the run's own policy, to compare like with like
        policies = [_run_policy(run, specs)]
    if args.profile or sc is None or run is not None:
        sc = run.sc if run is not None and not args.profile else None
        sc = sc or profile_scenario(args.profile or DEFAULT_PROFILE)
    kv = sc.model.kv_bytes
    if policies is None:
        return _mrc_lru(args, miss_ratio_curve(requests, block), capacities, block, sc)
    replayed = [p for p in policies if p.name != "lru"]
    if replayed:
        builder = TraceStreamBuilder(block)
        curve = miss_ratio_curve(builder.passing(requests), block)
        stream = builder.stream()
    else:
        curve = miss_ratio_curve(requests, block)
    caps = capacities if capacities is not None else curve.capacities(args.points)
    if run is not None:
        caps = sorted({*caps, *run.points})
    recompute = (
        _recompute(sc, block)
        if any(p.name not in ("lru", "fifo", "opt") for p in replayed)
        else None
    )
    rows: list[dict] = []
    asked = curve.asked_blocks
    for p in policies:
        got: list[tuple[float | None, float, int]]
        if p.name == "lru":
            got = [(c, curve.hit_ratio(c), curve.hit_blocks(c)) for c in caps]
        else:
            got = [
                (c, r["hit_ratio"], r["hit_blocks"])
                for c, r in zip(caps, replay(stream, p, caps, recompute), strict=True)
            ]
        got.append((None, curve.unlimited, curve.hit_blocks(None)))
        rows += [
            {
                "policy": str(p),
                "capacity_tokens": c,
                "hit_ratio": h,
                "hit_blocks": b,
                "miss_blocks": asked - b,
            }
            for c, h, b in got
        ]
    name = Path(args.trace).name
    title = f"{name}: prefix-cache hit ratio by eviction policy"
    head = (
        f"Prefix-cache hit ratio (prompt tokens from the cache) on {args.trace} ({block}-token "
        f"blocks; bytes at {kv:,.0f} B/token, {sc.profile})"
    )
    notes = _run_notes(run, rows, asked) if run is not None else []
    return _mrc_out(args, rows, "capacity_tokens", kv, title, head, notes)


class _Run:
    """What ``trace mrc --run DIR`` compares a trace's curve with: a run's GPU tier."""

    def __init__(self, path: Path, sc: Any, summary: dict) -> None:
        where = str(path / "summary.json")
        try:
            gpu = summary["tiers"]["gpu"]
            engines = int(summary["engines"])
            self.hits = int(gpu["hits"])
            self.misses = int(gpu["misses"])
            per_engine = float(gpu["capacity_bytes"]) / engines
        except (KeyError, TypeError, ValueError, ZeroDivisionError):
            raise InputError(
                "no GPU tier counts (tiers.gpu hits, misses, capacity_bytes; engines): not a "
                "kvsim run's summary",
                where=where,
            ) from None
        if not (math.isfinite(per_engine) and per_engine >= 0) or self.hits + self.misses <= 0:
            raise InputError("the run looked nothing up in its GPU tier", where=where)
        self.path, self.sc, self.engines = path, sc, engines
        self.block = sc.workload.block_tokens
        self.capacity_bytes = per_engine
        self.tokens = int(per_engine // sc.model.kv_bytes)  # whole tokens of KV per engine
        # the capacities to show: one engine's; and all engines' (one cache of their sum)
        self.points = {self.tokens: f"one engine's {fmt_bytes(per_engine)}"}
        if engines > 1:
            total = engines * per_engine
            self.points[int(total // sc.model.kv_bytes)] = (
                f"the {engines} engines' {fmt_bytes(total)} together"
            )
        tiers = summary["tiers"]
        self.lower_hits = sum(
            int(t.get("hits", 0) or 0)
            for name, t in tiers.items()
            if name != "gpu" and isinstance(t, dict)
        )
        self.policy = sc.tiers.gpu.eviction


def _read_run(text: str) -> _Run:
    """A run folder (``kvsim run --out``): its summary.json and scenario.yaml."""
    path = Path(text)
    if not path.is_dir():
        raise InputError("not a run folder (kvsim run --out DIR writes one)", where=str(path))
    for name in ("summary.json", "scenario.yaml"):
        if not (path / name).is_file():
            raise InputError(
                f"no {name} here: not a run folder (kvsim run --out DIR writes one)",
                where=str(path),
            )
    try:
        summary = json.loads((path / "summary.json").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise InputError(
            f"cannot read as JSON ({type(e).__name__})", where=str(path / "summary.json")
        ) from None
    if not isinstance(summary, dict):
        raise InputError("not a run's summary (a JSON object)", where=str(path / "summary.json"))
    return _Run(path, load(path / "scenario.yaml"), summary)


def _run_policy(run: _Run, specs: list[str]) -> Any:
    """The run's GPU eviction policy as a replay takes it."""
    ref = run.policy
    return check_policy(PolicySpec(ref.name, dict(ref.params) or None, tuple(specs)))


def _run_notes(run: _Run, rows: list[dict], asked: int) -> list[str]:
    """The run's GPU-tier figure beside the curve's at the run's capacity (per engine),
    and why they may differ. Both are blocks found / blocks asked, over every lookup."""
    for r in rows:
        if r["capacity_tokens"] in run.points:
            r["run"] = {
                "path": str(run.path),
                "policy": str(run.policy),
                "capacity": run.points[r["capacity_tokens"]],
                "hit_blocks": run.hits,
                "miss_blocks": run.misses,
                "hit_ratio": run.hits / (run.hits + run.misses),
            }
    run_asked = run.hits + run.misses
    lines = [
        f"run {run.path}: GPU tier {run.policy}, {fmt_bytes(run.capacity_bytes)} on each of "
        f"{run.engines} engine(s): found {run.hits:,} of {run_asked:,} blocks asked "
        f"({100 * run.hits / run_asked:.2f}%)"
    ]
    for r in rows:
        if "run" in r:
            c = r["capacity_tokens"]
            lines.append(
                f"this trace's curve, {r['policy']}, at {run.points[c]} ({c:,} tokens): "
                f"found {r['hit_blocks']:,} of {asked:,} blocks asked "
                f"({100 * r['hit_blocks'] / asked if asked else 0:.2f}%)"
            )
    if str(run.policy) not in {r["policy"] for r in rows}:
        lines.append(f"(the run's policy is {run.policy}: --policy {run.policy} replays it)")
    if run_asked != asked:
        lines.append(
            f"(the run asked its GPU tier for {run_asked:,} blocks, the trace {asked:,}: the "
            "run looked some requests up again, or served another workload)"
        )
    why = [
        "its requests overlap in time (a request stores its blocks when its prefill ends, "
        "after later arrivals looked theirs up)"
    ]
    if run.engines > 1:
        why.append("each engine keeps its own cache of the requests routed to it")
    if run.lower_hits:
        why.append("a block a lower tier serves is no hole in the prefix")
    why.append("running requests' KV may take room")
    lines.append(
        f"A run can differ from its trace's curve: {', '.join(why[:-1])} and {why[-1]}; "
        "the curve is one cache serving the requests one after another."
    )
    return lines


def _mrc_lru(
    args: argparse.Namespace, curve: Any, capacities: list[float] | None, block: int, sc: Any
) -> int:
    """The LRU curve alone (no --policy): one pass, ``[{capacity_tokens, hit_ratio}]``."""
    kv = sc.model.kv_bytes
    if capacities is None:
        points = curve.points(args.points)
    else:
        points = [{"capacity_tokens": c, "hit_ratio": curve.hit_ratio(c)} for c in capacities]
        points.append({"capacity_tokens": None, "hit_ratio": curve.unlimited})
    if args.plot:
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


def _mrc_accesses(args: argparse.Namespace, policies: list | None) -> int:
    """Curves of a recorded run's stream (one tier; one engine or each in its own store)."""
    _accesses_only(args)
    if args.profile:
        raise InputError(
            "a recorded stream's capacities are bytes already; --profile is for trace files",
            where="--profile",
        )
    tier = args.tier or "gpu"
    streams = accesses_streams(args.trace, tier, args.engine)
    caps = _capacities(args.capacities, in_bytes=True)
    if caps is None:
        low = max(max((s.largest_block() for s in streams), default=1.0), 1.0)
        top = max(max((s.working_set() for s in streams), default=low), low)
        caps = [float(c) for c in np.unique(np.geomspace(low, top, args.points).round())]
    policies = policies or [PolicySpec("lru")]
    unlimited = replay_streams(streams, "lru", [math.inf])[0]
    rows: list[dict] = []
    for p in policies:
        got = replay_streams(streams, p, caps)
        rows += [
            {
                "policy": str(p),
                "capacity_bytes": c,
                "hit_ratio": r["hit_ratio"],
                "hit_blocks": r["hit_blocks"],
                "miss_blocks": r["miss_blocks"],
            }
            for c, r in zip(caps, got, strict=True)
        ]
        rows.append(
            {
                "policy": str(p),
                "capacity_bytes": None,
                "hit_ratio": unlimited["hit_ratio"],
                "hit_blocks": unlimited["hit_blocks"],
                "miss_blocks": unlimited["miss_blocks"],
            }
        )
    which = f"engine {args.engine}" if args.engine is not None else (
        "the shared store" if tier == "remote" else f"{len(streams)} engine(s), each its own store"
    )  # fmt: skip
    title = f"{Path(args.trace).name}: {tier} tier ({which}), hit ratio by eviction policy"
    head = f"{tier} tier of {args.trace} ({which}): hit ratio = blocks found / blocks asked"
    if tier != "gpu":  # (stderr: --json's stdout stays one document)
        print(
            f"note: a {tier} tier's replay can count a few more hits than the run at its own "
            "capacity: a block whose write into the tier had not landed is held here but was "
            "not used by the run's lookup (the file has no row for the landing)",
            file=sys.stderr,
        )
    return _mrc_out(args, rows, "capacity_bytes", None, title, head)


def _mrc_out(
    args: argparse.Namespace,
    rows: list[dict],
    cap: str,
    kv: float | None,
    title: str,
    head: str,
    notes: list[str] | None = None,
) -> int:
    """Plot, JSON or a table of ``rows`` (one per policy and capacity; one column per
    policy in the table); ``notes`` after the table (with --json: on stderr)."""
    if args.plot:
        mrc_plot(rows, args.plot, title, kv_bytes=kv)
        print(f"wrote {args.plot}", file=sys.stderr)
    if args.json:
        print(json.dumps(rows, indent=2))
        for line in notes or []:
            print(line, file=sys.stderr)
        return 0
    names = list(dict.fromkeys(r["policy"] for r in rows))
    table: dict[Any, dict[str, float]] = {}
    for r in rows:
        table.setdefault(r[cap], {})[r["policy"]] = r["hit_ratio"]
    width = max(9, *(len(n) for n in names))
    print(head)
    cols = "".join(f"  {n:>{width}}" for n in names)
    if cap == "capacity_tokens":
        print(f"  {'capacity (tokens)':>18}  {'capacity (bytes)':>16}{cols}")
    else:
        print(f"  {'capacity (bytes)':>18}{cols}")
    for c, by in table.items():
        ratios = "".join(f"  {100 * by[n]:>{width - 1}.2f}%" for n in names)
        if cap == "capacity_tokens":
            tokens = "unlimited" if c is None else f"{c:,}"
            size = "" if c is None or kv is None else fmt_bytes(c * kv)
            print(f"  {tokens:>18}  {size:>16}{ratios}")
        else:
            size = "unlimited" if c is None else fmt_bytes(c)
            print(f"  {size:>18}{ratios}")
    if "opt" in names:
        print(
            "opt: Belady's bound (the block needed farthest ahead goes first); the optimum "
            "in blocks found when all blocks are the same size"
        )
    for line in notes or []:
        print(line)
    return 0


def _cmd_trace_reuse(args: argparse.Namespace) -> int:
    if args.plot:
        _check_plot_path(args.plot)
    if _is_accesses(args.trace):
        _accesses_only(args)
        tier = args.tier or "gpu"
        streams = accesses_streams(args.trace, tier, args.engine)
        what = f"the {tier} tier of {args.trace}"
    else:
        _trace_only(args)
        requests, block, _ = _open_trace(args.trace, args.block_tokens)
        streams = [trace_stream(requests, block)]
        what = f"{args.trace} ({block}-token blocks)"
    rows = reuse_histogram(streams).rows()
    if args.plot:
        reuse_plot(rows, args.plot, f"{Path(args.trace).name}: reuse distances of blocks asked")
        print(f"wrote {args.plot}", file=sys.stderr)
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(
        f"Reuse distances in {what}: for each block asked, the distinct blocks used since its "
        "last use (itself included); an LRU store of N equal blocks holds those at distance "
        "<= N"
    )
    print(f"  {'distance':>15}  {'references':>12}  {'share':>7}  {'cumulative':>10}")
    total = 0.0
    for r in rows:
        if r["low"] is None:
            label = "cold (first use)"
            cum = ""
        else:
            total += r["share"]
            label = f"{r['low']:,}" if r["low"] == r["high"] else f"{r['low']:,}-{r['high']:,}"
            cum = f"{100 * total:9.2f}%"
        print(f"  {label:>15}  {r['count']:>12,}  {100 * r['share']:6.2f}%  {cum:>10}")
    return 0


def _is_accesses(path_text: str) -> bool:
    """A recorded accesses table (or a run folder, where one would be)."""
    path = Path(path_text)
    return path.suffix.lower() == ".parquet" or path.is_dir()


def _trace_only(args: argparse.Namespace) -> None:
    for flag, value in (("--tier", args.tier), ("--engine", args.engine)):
        if value is not None:
            raise InputError("selects a stream of an accesses.parquet, not of a trace", where=flag)


def _accesses_only(args: argparse.Namespace) -> None:
    if args.block_tokens is not None:
        raise InputError(
            "a recorded stream has its blocks' bytes already; --block-tokens is for trace files",
            where="--block-tokens",
        )


def _policies(values: list[str], specs: list[str]) -> list:
    """--policy values (repeated, comma lists, NAME(k=v, ...)) as checked PolicySpecs, in
    order, without repeats."""
    out: list = []
    for value in values:
        for item in _split_top(value):
            name, params = _policy_params(item)
            spec = check_policy(PolicySpec(name, params or None, tuple(specs)))
            if spec not in out:
                out.append(spec)
    return out


def _split_top(text: str) -> list[str]:
    """``text`` split at the commas outside parentheses, items stripped (none empty)."""
    items: list[str] = []
    cur: list[str] = []
    depth = 0
    for ch in text:
        if ch == "," and depth == 0:
            items.append("".join(cur).strip())
            cur = []
            continue
        depth += (ch == "(") - (ch == ")")
        cur.append(ch)
    items.append("".join(cur).strip())
    if any(not i for i in items) or depth:
        raise InputError(f"expected NAME or NAME(k=v, ...), comma-separated, got {text!r}",
                         where="--policy")  # fmt: skip
    return items


def _policy_params(item: str) -> tuple[str, dict[str, Any]]:
    """``NAME`` or ``NAME(k=v, ...)`` (values read as YAML: 0.2, true, [1, 2], text)."""

    if "(" not in item:
        return item, {}
    name, _, rest = item.partition("(")
    if not rest.endswith(")") or not name.strip():
        raise InputError(f"expected NAME(k=v, ...), got {item!r}", where="--policy")
    params: dict[str, Any] = {}
    for part in _split_top(rest[:-1]) if rest[:-1].strip() else []:
        k, eq, v = part.partition("=")
        if not eq or not k.strip().isidentifier():
            raise InputError(f"expected k=v in {item!r}, got {part!r}", where="--policy")
        try:
            params[k.strip()] = yaml.safe_load(v.strip())
        except yaml.YAMLError:
            params[k.strip()] = v.strip()
    return name.strip(), params


def _capacities(text: str | None, in_bytes: bool) -> list[float] | None:
    """--capacities: tokens (a trace: whole numbers) or sizes (a recorded stream: read by
    :func:`kvsim.units.parse_size`, so a unit is needed, '4 GB' or '1000 B': a plain
    number is refused, as everywhere a size is read), sorted, without repeats."""
    if text is None:
        return None

    out: set[float] = set()
    for item in text.split(","):
        item = item.strip()
        if in_bytes:
            try:
                value = parse_size(item)
            except ValueError as e:
                raise InputError(
                    f"a recorded stream's capacities are sizes: {e}", where="--capacities"
                ) from None
        else:
            try:
                value = float(item)
            except ValueError:
                raise InputError(
                    f"a trace's capacities are tokens (whole numbers), got {item!r}",
                    where="--capacities",
                ) from None
        if not math.isfinite(value) or value < 0 or (not in_bytes and value != int(value)):
            raise InputError(
                f"expected {'a size' if in_bytes else 'a whole number of tokens'} >= 0, "
                f"got {item!r}",
                where="--capacities",
            )
        out.add(value)
    return sorted(int(v) if not in_bytes else v for v in out)


def _recompute(sc: Any, block: int) -> Any:
    """A block depth's recompute seconds (a lone request; the scenario's step model), as
    plugins read ``Block.recompute_s`` in the simulation."""
    steps = make_step_model(sc)
    e = sc.engine
    per = per_step_tokens(e.batching, e.max_batched_tokens, e.long_prefill_token_threshold)
    return lambda depth: lone_seconds(steps, block, depth * block, per)
