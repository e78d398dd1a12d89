"""kvsim: a discrete-event simulator of tiered KV-cache prefill serving.

``kvsim.run(scenario_or_path, overrides=None, seed=None) -> Results`` runs one scenario;
``Results.requests`` is a DataFrame (one row per request) and ``Results.summary`` a dict.
Importing kvsim is cheap: the simulator loads on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from kvsim.results import Results

__all__ = ["__version__", "compiled", "load", "run"]


def compiled() -> bool:
    """True when the simulation core runs compiled to C (``pip install .``, see setup.py),
    False when it runs as the pure-Python source (an editable install, KVSIM_COMPILE=0, or
    no C compiler at install time). Results are the same either way."""
    from importlib.util import find_spec

    spec = find_spec("kvsim.sim.engine")
    return spec is not None and spec.origin is not None and not spec.origin.endswith(".py")


def run(scenario: Any, overrides: Any = None, seed: int | None = None, **kw: Any) -> Results:
    """Run a scenario (a path or a Scenario); see :func:`kvsim.api.run`."""
    from kvsim.api import run as _run

    return _run(scenario, overrides, seed, **kw)


def load(scenario: Any, overrides: Any = None, seed: int | None = None) -> Any:
    """Load and validate a scenario without running it; see :func:`kvsim.api.load`."""
    from kvsim.api import load as _load

    return _load(scenario, overrides, seed)
