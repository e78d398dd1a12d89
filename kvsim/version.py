"""kvsim's version and which core runs: what this module owns (``__version__`` and
:func:`compiled`), kept apart from the package ``__init__`` so that modules inside kvsim
can name them without importing the top package."""

from __future__ import annotations

from importlib.util import find_spec

__version__ = "0.1.0"


def compiled() -> bool:
    """True when the simulation core runs compiled to C (``pip install .``, see setup.py),
    False when it runs as the pure-Python source (an editable install, KVSIM_COMPILE=0, or
    no C compiler at install time). Results are the same either way."""
    spec = find_spec("kvsim.sim.engine")
    return spec is not None and spec.origin is not None and not spec.origin.endswith(".py")
