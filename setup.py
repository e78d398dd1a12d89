"""Build hook: compile kvsim's simulation core to C with mypyc for speed.

Everything else about the package is in pyproject.toml, which also lists the modules to
compile (``[tool.kvsim] compiled``: block stores, bandwidth fabric, engines, routing, the
simulation loop, the row table, workload generation). They are plain typed Python; mypyc
turns them into C extensions that run the same code about 1.6 times as fast
(benchmarks/README.md). The .py files ship too, so kvsim works without them:

- ``pip install .`` compiles them (a C compiler and the Python headers are needed);
- ``pip install -e .`` (editable, for development) does not, so edits take effect at once;
- ``KVSIM_COMPILE=0`` skips compiling, ``KVSIM_COMPILE=1`` insists on it (a failed
  compile is then an error rather than a warning and a pure-Python install).

``kvsim --version`` says which one is installed.
"""

from __future__ import annotations

import os
import sys
import tomllib
from pathlib import Path

from setuptools import setup
from setuptools.command.build_ext import build_ext

HERE = Path(__file__).resolve().parent
# the modules to compile: [tool.kvsim] compiled in pyproject.toml
CORE: list[str] = tomllib.loads((HERE / "pyproject.toml").read_text())["tool"]["kvsim"]["compiled"]


FLAG = os.environ.get("KVSIM_COMPILE", "auto").strip().lower()
if FLAG not in ("0", "1", "auto"):
    sys.exit(f"KVSIM_COMPILE must be 0, 1 or auto, got {FLAG!r}")


def wanted() -> bool:
    editable = "editable_wheel" in sys.argv
    if editable and FLAG == "1":
        sys.exit(
            "KVSIM_COMPILE=1: an editable install stays pure Python (compiled modules beside "
            "the sources would hide your edits); use `pip install .` for the compiled core"
        )
    # compile only when building, not while pip asks for the metadata
    building = {"bdist_wheel", "build", "build_ext", "install"}.intersection(sys.argv)
    return FLAG != "0" and not editable and bool(building)


class OptionalBuildExt(build_ext):
    """Falls back to the pure-Python package when the C build fails (unless
    ``KVSIM_COMPILE=1`` insists), leaving no half-built extension behind."""

    def run(self) -> None:
        try:
            super().run()
        except Exception as e:  # no compiler, no Python headers, ...
            if FLAG == "1":
                raise
            for ext in self.extensions:
                built = self.get_ext_fullpath(ext.name)
                if os.path.exists(built):
                    os.remove(built)
            self.extensions = []
            print(f"warning: kvsim's core was not compiled ({e}); it runs as pure Python")


def ext_modules() -> list:
    if not wanted():
        return []
    from mypyc.build import mypycify

    # the build environment lacks kvsim's dependencies: their types count as Any there
    flags = ["--ignore-missing-imports", "--follow-imports=silent"]
    return mypycify([*flags, *CORE], opt_level="3", debug_level="0", group_name="kvsim_core")


setup(ext_modules=ext_modules(), cmdclass={"build_ext": OptionalBuildExt})
