"""The run's own settings: warm-up and time limit (:class:`Run`, with the prompt-range
syntax of per-length metrics), prices (:class:`Cost`) and a composed profile's spec
(:class:`ProfileSpec`)."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BeforeValidator, Field

from kvsim.config.schema.fields import Bounded, Label, PositiveDuration, Record
from kvsim.errors import shown
from kvsim.units import parse_duration


def _warmup(value: object) -> float | str:
    """``auto`` or a duration of at least 0."""
    if value == "auto":
        return "auto"
    try:
        seconds = parse_duration(value)
    except ValueError as e:
        msg = str(e)
        shown = (
            msg.replace(", got", ' (or "auto"), got', 1) if ", got" in msg else f"{msg} (or auto)"
        )
        raise ValueError(shown) from None
    if seconds < 0:
        raise ValueError(f'must be >= 0 s or "auto", got {value!r}')
    return seconds


_warmup.unit = "duration"  # type: ignore[attr-defined]
Warmup = Annotated[Literal["auto"] | float, BeforeValidator(_warmup)]


_PROMPT_BOUND = r"([-+]?[0-9][0-9_]*(?:\.[0-9]+)?)([kKM]?)"  # matched with spaces removed
_PROMPT_RANGE = re.compile(rf"^(?:{_PROMPT_BOUND})?\.\.(?:{_PROMPT_BOUND})?$")
PROMPT_RANGE_EXAMPLE = '"0..32k", "32k.." or "8k..64k" (tokens; k = 1,000, M = 1,000,000)'


def prompt_bounds(text: str) -> tuple[int, int | None]:
    """``run.prompt_range`` as token bounds: "0..32k" -> (0, 32000), "32k.." -> (32000,
    None) (no upper bound), "..8k" -> (0, 8000). Both bounds are inclusive; k is 1,000 and
    M 1,000,000 (as kvsim's kB). ValueError, saying what a valid range looks like, for
    anything else: a negative or fractional token count, LO above HI, no bound at all."""
    m = _PROMPT_RANGE.match("".join(text.split())) if isinstance(text, str) else None
    if m is None:
        raise ValueError(f"expected a token range LO..HI such as {PROMPT_RANGE_EXAMPLE}")
    bounds: list[int | None] = []
    for number, suffix in (m.group(1, 2), m.group(3, 4)):
        if number is None:
            bounds.append(None)
            continue
        value = float(number.replace("_", "")) * {"": 1, "k": 1e3, "K": 1e3, "M": 1e6}[suffix]
        if value < 0:
            raise ValueError(f"a prompt has at least 0 tokens, not {number}{suffix}")
        if value > 2**53:
            raise ValueError(f"{number}{suffix} tokens is past any prompt (at most 2**53)")
        if value != int(value):
            raise ValueError(f"{number}{suffix} is not a whole number of tokens")
        bounds.append(int(value))
    lo, hi = bounds
    if lo is None and hi is None:
        raise ValueError(f"give at least one bound, e.g. {PROMPT_RANGE_EXAMPLE}")
    if lo is not None and hi is not None and lo > hi:
        raise ValueError(f"empty range: {lo} tokens is above {hi}")
    return lo or 0, hi


def _prompt_range(value: object) -> object:
    """The range as the user wrote it (spaces dropped), after checking it parses."""
    if not isinstance(value, str):
        raise ValueError(
            f"expected a token range LO..HI in quotes such as {PROMPT_RANGE_EXAMPLE}, "
            f"got {shown(value)}"
        )
    prompt_bounds(value)
    return "".join(value.split())


class Run(Record):
    warmup: Warmup = Field(
        "auto",
        description="arrivals before this are left out of stats; auto: the transient "
        "detected in the run (MSER-5 on the requests' TTFT and hit ratio), reported "
        "as summary warmup_s",
    )
    max_time: PositiveDuration | None = Field(
        None, description="stop the clock here; unfinished requests are reported"
    )
    timeseries_window: PositiveDuration = Field(
        "10 s",
        description="width of the windows of timeseries.parquet (kvsim run --out): one row "
        "per window of measured requests' arrival times",
    )
    prompt_range: Annotated[str, BeforeValidator(_prompt_range), Field(max_length=200)] | None = (
        Field(
            None,
            description="measure only prompts of this many tokens, LO..HI inclusive (e.g. "
            "0..32k, 32k..; k = 1,000): the summary's request outcomes (TTFT, queueing, "
            "hit ratio, counts) cover only measured requests in range; throughput and "
            "prices still count every request the cluster served. null: every prompt",
        )
    )


MAX_PRICE = 1e9  # US dollars per unit: past any real price (a typo, or an overflow)
MAX_USD_PER_HOUR = 1e15  # a layout's price past this is a typo, and its costs could overflow


def _price(value: object) -> object:
    """A price is a number: YAML's true/false is not read as 1/0 dollars."""
    if isinstance(value, bool):
        raise ValueError(f"must be a price in US dollars (a number), not {str(value).lower()}")
    return value


def _price_bound(value: float) -> float:
    if value > MAX_PRICE:
        raise ValueError(
            f"{value:g} is past any real price (at most {MAX_PRICE:g} US dollars a unit)"
        )
    return value


Price = Annotated[
    float,
    BeforeValidator(_price),
    Field(ge=0.0, allow_inf_nan=False),
    AfterValidator(_price_bound),
]


class Cost(Record):
    """Prices in US dollars, for the summary's usd_per_hour and
    usd_per_million_prompt_tokens and ``kvsim capacity --cheapest``. A month is 730 hours;
    a GB is 10^9 bytes. Memory is priced as provisioned (the tiers' capacities), not as
    used."""

    gpu_node_hour: Price = Field(0.0, description="per engine (one GPU node) per hour")
    dram_gb_month: Price = Field(
        0.0, description="per GB-month of host DRAM for the host tier (its capacity per engine)"
    )
    nvme_gb_month: Price = Field(
        0.0, description="per GB-month of NVMe for the NVMe tier (its capacity per engine)"
    )
    remote_memory_gb_month: Price = Field(
        0.0,
        description="per GB-month of remote store capacity (remote.capacity per server): "
        "memory of a kv_server, drives of a shared_nvme store, the bytes kept in an "
        "object_store (S3 Standard: $0.023)",
    )
    object_store_get_per_1k: Price = Field(
        0.0,
        description="object_store: per 1,000 GET requests (one per chunk operation; S3 "
        "Standard: $0.0004), at the run's measured rate",
    )
    object_store_put_per_1k: Price = Field(
        0.0,
        description="object_store: per 1,000 PUT requests (one per chunk operation; S3 "
        "Standard: $0.005), at the run's measured rate",
    )
    remote_server_hour: Price = Field(0.0, description="per remote store server per hour")


class ProfileSpec(Record):
    """A profile composed from the catalogue (kvsim/catalogue/compose.py): a model card and
    a GPU card on ``gpus`` GPUs split ``tp`` x ``pcp`` x ``pp``, experts over ``ep`` of a
    stage's."""

    model: Label(4096) = Field(description="model card name (`kvsim profiles`) or config.json path")
    gpu: Label(4096) = Field(description="GPU card name (`kvsim profiles`) or card YAML path")
    gpus: Bounded(4096) | None = Field(None, description="GPUs of the engine (null: tp x pcp x pp)")
    tp: Bounded(4096) = Field(1, description="tensor-parallel degree")
    pcp: Bounded(4096) = Field(1, description="prefill context-parallel degree")
    pp: Bounded(4096) = Field(
        1, description="pipeline-parallel stages (each of tp x pcp GPUs, 1/pp of the layers)"
    )
    ep: Bounded(4096) = Field(1, description="expert-parallel degree (GPUs the experts span)")
    dtype: Literal["auto", "bf16", "fp8", "fp4"] = Field(
        "auto",
        description="compute dtype of the matmuls (auto: the weights' dtype where the GPU "
        "has it, else bf16)",
    )
    base: Label(4096) | None = Field(
        None,
        description="named profile or profile YAML whose other sections (tiers, remote, "
        "host and storage) the composition keeps (null: kvsim/catalogue/stack.yaml)",
    )
    assume: dict[str, Any] | None = Field(
        None,
        description="the scenario's own values of catalogue assumptions, by name "
        "(`kvsim profiles show MODEL GPU --json` lists them: dense.e_max, cpu.per_step, ...)",
    )

    def __str__(self) -> str:
        gpus = self.gpus if self.gpus is not None else self.tp * self.pcp * self.pp
        named = (("tp", self.tp), ("pcp", self.pcp), ("pp", self.pp), ("ep", self.ep))
        par = "".join(f" {k}{v}" for k, v in named if v > 1)
        return f"{self.model} on {gpus}x{self.gpu}{par}"
