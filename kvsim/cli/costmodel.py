"""``kvsim costmodel``: restore vs recompute (B*, crossover lengths, a plot) for a
scenario or a profile."""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

from kvsim.api import cost_model, load, profile_scenario, tier_bandwidths
from kvsim.cli.common import _check_plot_path
from kvsim.errors import InputError
from kvsim.physics.costmodel import GIB, timing_crossover
from kvsim.physics.step import scenario_lone_seconds
from kvsim.plots import costmodel_plot
from kvsim.profiles import DEFAULT_PROFILE
from kvsim.units import fmt_duration, parse_bandwidth, parse_duration, parse_rate, parse_size


def _cmd_costmodel(args: argparse.Namespace) -> int:

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
        sc = profile_scenario(args.profile or DEFAULT_PROFILE, args.overrides)
    model = cost_model(sc, args.tokens, t0=t0_value, kv_bytes=kv_value, rate=rate_value)
    paths = tier_bandwidths(sc)
    for value in extra:  # an extra row is named by its bandwidth
        paths.setdefault(f"{value / GIB:.4g} GiB/s", (value, model.t0))
    S = args.tokens
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
