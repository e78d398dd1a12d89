"""What a serving engine costs outside the GPU kernels, from ``engine.yaml``.

What this module owns: reading and checking ``engine.yaml`` (:func:`engine_values`): the
frontend (API server, tokenizer, prefix hashing, the first token's way out), the engine
core's CPU work per step and per request, kernel launches in eager mode and with CUDA
graphs, the collectives' latency and reachable bandwidth, and transfer engines' per-read,
per-batch and per-operation costs. Each is a :class:`~kvsim.catalogue.efficiency.Value`
with its documented range, mark and source, by a dotted name (``frontend.per_token``,
``launch.kernel``, ...); fixed facts of the engine's code (one API-server process, the
16-token block, the 512-token graph capture) are :func:`engine_facts`.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import yaml

from kvsim.catalogue.efficiency import Value, parse_value
from kvsim.errors import InputError, shown

ENGINE_FILE = Path(__file__).parent / "engine.yaml"
#: the sections, and the numbers in each that are durations (the rest are counts or
#: fractions)
DURATIONS: dict[str, tuple[str, ...]] = {
    "frontend": (
        "per_request",
        "per_token",
        "tokenize_per_request",
        "tokenize_per_token",
        "hash_per_block",
        "output",
    ),
    "cpu": ("per_step", "per_request"),
    "launch": ("kernel", "eager_kernel", "graph_per_layer"),
    "comm": ("nvlink_latency", "network_latency"),
    "transfer": ("setup", "per_batch", "per_op"),
}
COUNTS: dict[str, tuple[str, ...]] = {
    "launch": (
        "kernels_per_layer",
        "mla_kernels_per_layer",
        "moe_kernels_per_layer",
        "model_kernels",
    ),
    "comm": ("nvlink_frac", "network_frac"),
}
#: fixed facts (no range): the engine's code says them
FACTS: dict[str, tuple[str, ...]] = {
    "frontend": ("servers", "block_tokens"),
    "launch": ("graph_max_tokens",),
    "transfer": ("threads", "op_tokens"),
}


@lru_cache(maxsize=1)
def _read() -> tuple[dict[str, Value], dict[str, int]]:
    where = str(ENGINE_FILE)
    with ENGINE_FILE.open(encoding="utf-8") as fh:
        data = yaml.safe_load(fh)
    values: dict[str, Value] = {}
    facts: dict[str, int] = {}
    for section in {**DURATIONS, **COUNTS, **FACTS}:
        node = data.get(section)
        if not isinstance(node, dict):
            raise InputError(f"expected a mapping, got {shown(node)}", where=f"{where}: {section}")
        known = {*DURATIONS.get(section, ()), *COUNTS.get(section, ()), *FACTS.get(section, ())}
        for key in node:
            if key.endswith("_source"):
                continue
            if key not in known:
                raise InputError("unknown entry", where=f"{where}: {section}.{key}")
        for key in (*DURATIONS.get(section, ()), *COUNTS.get(section, ())):
            at = f"{where}: {section}.{key}"
            if key not in node or f"{key}_source" not in node:
                raise InputError(f"missing {key} or {key}_source", where=f"{where}: {section}")
            frac = key.endswith("_frac")
            values[f"{section}.{key}"] = parse_value(
                node[key],
                at,
                node[f"{key}_source"],
                duration=key in DURATIONS.get(section, ()),
                fraction=frac,
            )
        for key in FACTS.get(section, ()):
            v = node.get(key)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise InputError(
                    f"expected a whole number >= 1, got {shown(v)}",
                    where=f"{where}: {section}.{key}",
                )
            facts[f"{section}.{key}"] = v
    return values, facts


def engine_values() -> dict[str, Value]:
    """Every ranged number of engine.yaml by its dotted name."""
    return dict(_read()[0])


def engine_facts() -> dict[str, int]:
    """The fixed facts of engine.yaml by dotted name (``frontend.servers``, ...)."""
    return dict(_read()[1])
