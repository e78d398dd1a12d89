"""Regenerate the documentation's figures and the numbers behind them, from the code.

    python docs/make_figures.py            # all three images and docs/img/figures.json
    python docs/make_figures.py costmodel  # or only some: costmodel, sweep, paper, readme

Each image in docs/img/ is drawn by the same kvsim command a user would run, and
docs/img/figures.json records, beside each image's SHA-256, the numbers it shows: the
cost model's B* and crossovers, every run of the load-policy sweep (TTFT p50/p99), and
the study's TTFT percentiles per configuration; README's quoted quickstart summary is
rewritten from a fresh run. ``tests/test_hardening_outputs.py``
recomputes a few of those numbers cheaply (the cost model; one run of the sweep, one
configuration of the study) and checks every image against its recorded hash, so a
change to the simulator that moves a figure, or an image edited by hand, fails a test
until this script is run again (about a minute on two cores).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
IMG = ROOT / "docs" / "img"
FIGURES = IMG / "figures.json"
SWEEP = ROOT / "scenarios" / "sweeps" / "load-policy.yaml"
PAPER_OVERVIEW = ("no-remote", "remote-sync", "high-hit-sync", "sharded-async")


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def costmodel_numbers() -> dict[str, Any]:
    """What `kvsim costmodel` (default profile) prints and docs/img/costmodel.png draws."""
    from kvsim.api import cost_model, profile_scenario, tier_bandwidths
    from kvsim.profiles import DEFAULT_PROFILE

    sc = profile_scenario(DEFAULT_PROFILE)
    model = cost_model(sc, 16384)
    paths = {
        name: {"bandwidth": bw, "t0_s": t0, "crossover_tokens": model.crossover(bw)}
        for name, (bw, t0) in tier_bandwidths(sc).items()
    }
    for p in paths.values():
        if p["crossover_tokens"] == float("inf"):
            p["crossover_tokens"] = None
    return {
        "profile": sc.profile,
        "b_star": model.b_star,
        "min_tokens": model.min_tokens,
        "rate_tokens_per_s": model.rate,
        "paths": paths,
    }


def sweep_run_numbers(row: dict[str, Any], columns: list[str]) -> dict[str, Any]:
    keep = [*columns, "seed", "ttft_p50_s", "ttft_p99_s"]
    return {k: row[k] for k in keep}


def make_costmodel() -> dict[str, Any]:
    from kvsim.cli import main

    out = IMG / "costmodel.png"
    if main(["costmodel", "--plot", str(out)]) != 0:
        raise SystemExit("kvsim costmodel failed")
    return {"image": out.name, "sha256": sha256(out), "made_by": "kvsim costmodel --plot",
            "numbers": costmodel_numbers()}  # fmt: skip


def make_sweep() -> dict[str, Any]:
    import pandas as pd

    from kvsim.cli import main
    from kvsim.experiments.sweep import load_sweep

    sweep = load_sweep(SWEEP)
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "sweep"
        if main(["sweep", str(SWEEP), "--out", str(out), "--quiet"]) != 0:
            raise SystemExit("kvsim sweep failed")
        if main(["plot", str(out)]) != 0:
            raise SystemExit("kvsim plot failed")
        target = IMG / "sweep-ttft-vs-load.png"
        shutil.copyfile(out / "ttft_vs_load.png", target)
        df = pd.read_parquet(out / "results.parquet")
    runs = [sweep_run_numbers(r, sweep.columns) for r in df.to_dict("records")]
    return {
        "image": target.name,
        "sha256": sha256(target),
        "made_by": f"kvsim sweep {SWEEP.relative_to(ROOT)} && kvsim plot",
        "numbers": {"columns": sweep.columns, "runs": runs},
    }


def make_paper() -> dict[str, Any]:
    import numpy as np

    from kvsim.reproduce.studies import study

    mod = study("paper")
    rep = mod.reproduce(range_seeds=0)  # the CDF image needs no range runs
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "paper"
        mod.write(rep, out)
        target = IMG / "paper-ttft-cdf.png"
        shutil.copyfile(out / "ttft_cdf_overview.png", target)
    numbers = {}
    for name in PAPER_OVERVIEW:  # every seed's measured requests, pooled (as the plot)
        v = np.concatenate(
            [
                r.requests.loc[~r.requests["warmup"], "ttft_s"].to_numpy(float)
                for r in rep.runs[name]
            ]
        )
        numbers[name] = {
            "ttft_p50_s": float(np.quantile(v, 0.5)),
            "ttft_p99_s": float(np.quantile(v, 0.99)),
        }
    return {
        "image": target.name,
        "sha256": sha256(target),
        "made_by": "kvsim reproduce paper --out (ttft_cdf_overview.png)",
        "numbers": numbers,
    }


README = ROOT / "README.md"
QUICKSTART = ROOT / "scenarios" / "quickstart.yaml"
_README_BLOCK = "(the fully resolved scenario, for the record):\n\n```\n"


def readme_quickstart_block(text: str) -> tuple[int, int]:
    """Where README's quoted quickstart summary starts and ends."""
    start = text.index(_README_BLOCK) + len(_README_BLOCK)
    return start, text.index("```", start)


def quickstart_summary() -> str:
    import kvsim
    from kvsim.report import summary_table

    return summary_table(kvsim.run(QUICKSTART).summary) + "\n"


def make_readme() -> dict[str, Any]:
    """README's quoted `kvsim run scenarios/quickstart.yaml` summary, rewritten."""
    text = README.read_text(encoding="utf-8")
    start, end = readme_quickstart_block(text)
    block = quickstart_summary()
    README.write_text(text[:start] + block + text[end:], encoding="utf-8")
    return {"made_by": "kvsim run scenarios/quickstart.yaml", "numbers": {"summary": block}}


MAKERS = {
    "costmodel": make_costmodel,
    "sweep": make_sweep,
    "paper": make_paper,
    "readme": make_readme,
}


def main(which: list[str]) -> int:
    unknown = [name for name in which if name not in MAKERS]
    if unknown:  # before any figure is remade, so figures.json never lags an image
        print(f"unknown figure {unknown[0]!r}; known: {', '.join(MAKERS)}", file=sys.stderr)
        return 2
    doc = json.loads(FIGURES.read_text()) if FIGURES.exists() else {}
    for name in which or list(MAKERS):
        print(f"making {name} ...", file=sys.stderr)
        doc[name] = MAKERS[name]()
    text = json.dumps(doc, indent=2, sort_keys=True, default=lambda o: o.item())
    FIGURES.write_text(text + "\n", encoding="utf-8")
    print(f"wrote {FIGURES.relative_to(ROOT)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
