"""kvsim: a discrete-event simulator of tiered KV-cache prefill serving.

``kvsim.run(scenario_or_path, overrides=None, seed=None) -> Results`` runs one scenario;
``Results.requests`` is a DataFrame (one row per request) and ``Results.summary`` a dict.
Importing kvsim is cheap: the simulator loads on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kvsim.version import __version__, compiled

if TYPE_CHECKING:
    from kvsim.results.records import Results

__all__ = ["__version__", "compiled", "load", "run"]


def run(scenario: Any, overrides: Any = None, seed: int | None = None, **kw: Any) -> Results:
    """Run a scenario (a path or a Scenario); see :func:`kvsim.api.run`."""
    from kvsim.api import run as _run

    return _run(scenario, overrides, seed, **kw)


def load(scenario: Any, overrides: Any = None, seed: int | None = None) -> Any:
    """Load and validate a scenario without running it; see :func:`kvsim.api.load`."""
    from kvsim.api import load as _load

    return _load(scenario, overrides, seed)
