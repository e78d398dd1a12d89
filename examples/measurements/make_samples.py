"""Write the sample measurements in this folder: kvsim's own predictions for
scenario.yaml with hidden constants, each row's TTFT times exp(0.05 z) (5% noise), in
each format `kvsim calibrate` reads. None of it is a measurement of real hardware.

    python examples/measurements/make_samples.py

docs/calibration.md fits them back and compares the fit with HIDDEN.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np

from kvsim.calibrate.rows import Row
from kvsim.calibrate.synthetic import (
    csv_text,
    prometheus_text,
    sglang_line,
    synthesize,
    template,
    ttfts,
    vllm_result,
)

HERE = Path(__file__).resolve().parent
SCENARIO = str(HERE / "scenario.yaml")
MODEL = "meta-llama/Llama-3.1-8B-Instruct"
#: the constants the samples were made with (the catalogue's: 0.71, 0.656, 0.6 ms, 0.8)
HIDDEN = {
    "dense.e_max": 0.64,
    "attention.e_max": 0.62,
    "cpu.per_step": 0.0009,
    "host_link_frac": 0.65,
}
NOISE = 0.05
SEED = 43


def rows() -> dict[str, list]:
    """The runs each sample file describes (their TTFTs to be simulated)."""
    lone = [template(p) for p in (128, 512, 2048, 8192, 16384, 32768, 65536)]
    lone += [
        template(p, c) for p, c in ((4096, 3072), (16384, 12288), (32768, 24576), (65536, 49152))
    ]
    lone += [
        template(p, c, tier="host")
        for p, c in ((8192, 6144), (16384, 14336), (32768, 28672), (65536, 61440))
    ]
    return {
        "lone-requests.csv": lone,
        "vllm-c8-cold.json": [template(2048, concurrency=8, requests=200)],
        "vllm-c4-prefix.json": [template(4096, 3072, concurrency=4, requests=100)],
        "vllm-c2-host.json": [template(8192, 6144, concurrency=2, requests=50, tier="host")],
        "sglang.jsonl": [
            template(1024, concurrency=None, rate=8.0, requests=100),
            template(3072, 2048, concurrency=16, rate=4.0, requests=100),
        ],
        "vllm-metrics.prom": [template(6144, 4096, concurrency=2, requests=64)],
    }


def main(out: Path = HERE) -> None:
    """Write the samples into ``out`` (this folder by default)."""
    files = rows()
    flat = [r for rs in files.values() for r in rs]
    made = iter(synthesize(SCENARIO, flat, HIDDEN, noise=NOISE, seed=SEED))
    for name, rs in files.items():
        got = [next(made) for _ in rs]
        path = out / name
        if name.endswith(".csv"):
            path.write_text(csv_text(got))
        elif name.endswith(".json"):
            path.write_text(json.dumps(vllm_result(got[0], MODEL, each(got[0])), indent=2) + "\n")
        elif name.endswith(".jsonl"):
            datasets = ["random", "generated-shared-prefix"]
            path.write_text(
                "".join(
                    json.dumps(sglang_line(r, d, each(r))) + "\n"
                    for r, d in zip(got, datasets, strict=True)
                )
            )
        else:
            path.write_text(prometheus_text(got[0], each(got[0]), MODEL))
        print(f"wrote {path}")


def each(row: Row) -> np.ndarray:
    """The row's per-request TTFTs at the hidden constants, scaled to its noisy mean (the
    statistic the row was made with)."""
    t = ttfts(SCENARIO, replace(row, ttft_s=1.0), HIDDEN)
    return t * row.ttft_s / np.mean(t)


if __name__ == "__main__":
    main()
