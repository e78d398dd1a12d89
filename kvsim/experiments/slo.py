"""Service-level objectives: what this module owns is :class:`SLO` (``metric op
threshold`` on a run's summary), :func:`parse_slo` (the ``--slo`` text) and
:data:`OUTCOMES`, the summary metrics an SLO or a regression gate can be on."""

from __future__ import annotations

import dataclasses
import math
import operator
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kvsim.config.schema import Scenario
from kvsim.errors import InputError
from kvsim.results.metrics import NUMERIC
from kvsim.units import parse_duration

_OPS: dict[str, Callable[[float, float], bool]] = {
    "<=": operator.le,
    "<": operator.lt,
    ">=": operator.ge,
    ">": operator.gt,
}
# the metrics an SLO or a regression gate can be on: outcomes of a run, not its settings
OUTCOMES = tuple(m for m in NUMERIC if m not in {"seed", "engines"})
_SLO = re.compile(r"^\s*([A-Za-z0-9_.]+)\s*(<=|>=|<|>)\s*(.+?)\s*$")


@dataclass(frozen=True)
class SLO:
    """``metric op threshold`` on a summary value, e.g. ttft_p99_s <= 2.0."""

    metric: str
    op: str
    threshold: float
    scope: str | None = None  # run.prompt_range the runs measure (None: every prompt)

    def met(self, summary: Mapping[str, Any]) -> bool:
        value = summary[self.metric]
        return value is not None and not math.isnan(value) and _OPS[self.op](value, self.threshold)

    def scoped(self, sc: Scenario) -> SLO:
        """This SLO as the runs of ``sc`` measure it: over its ``run.prompt_range``."""
        return dataclasses.replace(self, scope=sc.run.prompt_range)

    def __str__(self) -> str:
        text = f"{self.metric} {self.op} {self.threshold:g}"
        return f"{text} for prompts {self.scope} tokens" if self.scope else text


def parse_slo(text: str) -> SLO:
    """Parse 'ttft_p99<=2s': a numeric summary metric (the ``_s`` of times may be left
    out), an operator, a value (durations take units)."""
    m = _SLO.match(text)
    if not m:
        raise InputError("expected METRIC<=VALUE, e.g. 'ttft_p99<=2s'", where=f"--slo {text}")
    name, op, raw = m.groups()
    metric = name if name in OUTCOMES else f"{name}_s" if f"{name}_s" in OUTCOMES else None
    if metric is None:
        raise InputError(
            f"unknown metric {name!r}; choose one of {', '.join(OUTCOMES)}",
            where=f"--slo {text}",
        )
    try:
        value = parse_duration(raw) if metric.endswith("_s") else float(raw)
    except (ValueError, OverflowError) as e:
        raise InputError(str(e), where=f"--slo {text}") from None
    if not math.isfinite(value):
        raise InputError(f"the threshold must be a finite number, got {raw}", where=f"--slo {text}")
    return SLO(metric, op, value)
