"""Fuzzing what plugin code can do to kvsim: raise every kind of exception (SystemExit,
KeyboardInterrupt, GeneratorExit, StopIteration, a BaseException of its own...) from every
method, and return every kind of number (huge ints, Fractions, Decimals, NaN, NumPy
scalars, bools, None, strings) from every method that answers, or pass them to what kvsim
gives it (``estimate(k)``, ``SimView.recompute_s(depth)``).

Through the CLI (``kvsim.cli.main`` in this process), on a tiny scenario where every
method of every kind is called: the answer is either accepted (exit 0) or one line naming
the plugin, the method and the place (exit 2); never a traceback, never exit 0 with
nothing done, never an interrupt (exit 130). One run takes about 0.1 s: some 60 runs in all
(KVSIM_FUZZ_SCALE=20 for a thorough run).
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import math
import sys
import types
from collections.abc import Callable
from decimal import Decimal
from fractions import Fraction
from numbers import Integral, Real
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvsim.cli import main
from kvsim.config.loader import deep_merge

from conftest import TOY, examples

CONTROL = "kvsim_fuzz_control"  # the module the plugin asks what to do (this test sets it)

# every kind, each method doing what the test asks once it is its turn (its normal answer
# otherwise); `act` is a helper of the plugin's own, so places point into this file
PLUGIN = """
import sys
from kvsim.plugins import (AdmissionPolicy, EvictionPolicy, LoadPolicy, PrefetchPolicy,
                           RoutingPolicy, SchedulingPolicy, register)


def act(method, normal, *args):
    ctl = sys.modules.get("kvsim_fuzz_control")
    if ctl is None:
        return normal()
    ctl.calls[method] = ctl.calls.get(method, 0) + 1
    if ctl.method != method:
        return normal()
    return ctl.act(*args)


@register("fz_evict")
class Evict(EvictionPolicy):
    def __init__(self):
        act("__init__", lambda: None)
        self.keys = {}

    def setup(self, sim):
        self.sim = sim
        act("setup", lambda: None, sim)

    def inserted(self, block):
        self.keys[block.key] = None
        act("inserted", lambda: None)

    def hit(self, block):
        self.keys.pop(block.key, None)
        self.keys[block.key] = None
        act("hit", lambda: None)

    def removed(self, key):
        self.keys.pop(key, None)
        act("removed", lambda: None)

    def victim(self, tier):
        return act("victim", lambda: next(iter(self.keys)))


@register("fz_admit")
class Admit(AdmissionPolicy):
    def admit(self, block, tier):
        return act("admit", lambda: True)


@register("fz_route")
class Route(RoutingPolicy):
    def setup(self, sim):
        self.sim = sim

    def route(self, request, engines):
        return act("route", lambda: engines[0], self.sim)


@register("fz_sched")
class Sched(SchedulingPolicy):
    def priority(self, request, engine):
        return act("priority", lambda: request.arrival)


@register("fz_load")
class Load(LoadPolicy):
    def restore_blocks(self, request, sources, estimate):
        return act("restore_blocks", lambda: len(sources), estimate)


@register("fz_fetch")
class Fetch(PrefetchPolicy):
    def fetch_blocks(self, request, sources):
        return act("fetch_blocks", lambda: len(sources))
"""

BLOCK = 100_000  # bytes of one 100-token block of the toy scenario
# GPU HBM of 2.5 blocks: the 6-block prompt evicts the first one's blocks to host, where the
# third and fourth find them (restore, prefetch); the host tier admits through the plugin
TRACE = [(0, [1001, 1002]), (10, [1010, 1011, 1012, 1013, 1014, 1015])]
TRACE += [(20, [1001, 1002, 1099]), (30, [1001, 1002, 1099])]
KEYS = {k for _, ids in TRACE for k in ids}
MOST_BLOCKS = max(len(ids) for _, ids in TRACE)
POLICIES = {
    "tiers": {
        "gpu": {"capacity": f"{2.5 * BLOCK:.0f} B", "eviction": "fz_evict"},
        "host": {"enabled": True, "capacity": "10 MB", "t0": "10 ms", "admission": "fz_admit"},
        "nvme": {"enabled": True, "capacity": "10 MB", "t0": "10 ms"},
    },
    "cluster": {"router": "fz_route", "load_policy": "fz_load"},
    "engine": {"scheduler": "fz_sched"},
    "prefetch": {"policy": "fz_fetch"},
}
# every method of the plugin (the class for its constructor), and those that answer
METHODS = ["__init__", "setup", "inserted", "hit", "removed", "victim", "admit", "route"]
METHODS += ["priority", "restore_blocks", "fetch_blocks"]
ANSWERING = ["victim", "admit", "route", "priority", "restore_blocks", "fetch_blocks"]


def write_tiny(folder: Path) -> Path:
    """The plugin, its trace and the scenario naming a plugin policy of every kind."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "fz.py").write_text(PLUGIN)
    with (folder / "trace.jsonl").open("w") as fh:
        for t, ids in TRACE:
            row = {"timestamp": int(t * 1000), "input_length": len(ids) * 100}
            fh.write(json.dumps({**row, "output_length": 1, "hash_ids": ids}) + "\n")
    sc = copy.deepcopy(TOY)
    sc["workload"] = {"kind": "mooncake", "path": "trace.jsonl", "block_tokens": 100}
    sc["plugins"] = ["fz.py"]
    path = folder / "s.yaml"
    path.write_text(yaml.safe_dump(deep_merge(sc, POLICIES)))
    return path


class Control(types.SimpleNamespace):
    method: str | None
    act: Callable[..., Any]
    calls: dict[str, int]


@contextlib.contextmanager
def control(method: str | None = None, act: Callable[..., Any] | None = None):
    ctl = Control(method=method, act=act, calls={})
    sys.modules[CONTROL] = ctl  # type: ignore[assignment]
    try:
        yield ctl
    finally:
        sys.modules.pop(CONTROL, None)


def kvsim(*argv: str) -> tuple[int, str]:
    """(exit code, stderr without the notices of plugin code imported)."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        rc = main(list(argv))
    lines = [x for x in err.getvalue().splitlines() if "importing plugin code" not in x]
    return rc, "\n".join(lines)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    path = write_tiny(tmp_path_factory.mktemp("fuzz_plugins"))
    with control() as ctl:  # every method is called when nothing misbehaves
        rc, err = kvsim("run", str(path), "--quiet")
        assert rc == 0, err
    assert set(ctl.calls) == set(METHODS), ctl.calls
    return path


def plugin_failure(err: str, rc: int, path: Path, method: str, what: str) -> None:
    """Exit 2, one line naming the plugin file, the method, ``what`` happened, and a
    place in the plugin's code."""
    assert rc == 2, err
    assert "\n" not in err and "Traceback" not in err, err
    assert err.startswith("kvsim: error: "), err
    assert f"plugin {path.parent / 'fz.py'} (" in err, err
    named = "Evict()" if method == "__init__" else f"{method}()"
    assert named in err and what in err, err
    assert f"(at {path.parent / 'fz.py'}:" in err, err


# ---- raising -----------------------------------------------------------------------------


class Custom(BaseException):
    """A BaseException of the plugin's own."""


class BadStr(Exception):
    def __str__(self) -> str:
        raise SystemExit(3)  # even its message is plugin code


def _exceptions() -> st.SearchStrategy[BaseException]:
    words = st.text(max_size=20)
    return st.one_of(
        st.builds(ValueError, words),
        st.builds(KeyError, st.one_of(words, st.integers(), st.just(10**5000))),
        st.builds(RuntimeError, st.text(min_size=3000, max_size=3000)),  # a huge message
        st.builds(SystemExit, st.one_of(st.none(), st.integers(), words)),
        st.builds(KeyboardInterrupt),
        st.builds(GeneratorExit),
        st.builds(StopIteration, st.integers()),
        st.builds(StopAsyncIteration),
        st.builds(Custom, words),
        st.builds(MemoryError),
        st.builds(RecursionError),
        st.builds(BadStr),
        st.builds(AssertionError),
    )


@settings(
    max_examples=examples(15),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(method=st.sampled_from(METHODS), exc=_exceptions())
def test_whatever_a_plugin_method_raises_is_one_line_naming_it(tiny, method, exc):
    def act(*_: Any) -> Any:
        raise exc

    with control(method, act):
        rc, err = kvsim("run", str(tiny), "--quiet")
    plugin_failure(err, rc, tiny, method, f"raised {type(exc).__name__}")


# ---- returning ---------------------------------------------------------------------------

ODD_NUMBERS = [
    0,
    1,
    -1,
    10**400,
    -(10**400),
    Fraction(10**400, 3),
    Fraction(1, 3),
    Fraction(1, 10**400),
    Decimal("1.5"),
    Decimal("NaN"),
    Decimal("1e400"),
    math.nan,
    math.inf,
    -math.inf,
    0.0,
    1.0,
    0.5,
    1e308,
    True,
    False,
    np.True_,
    np.False_,
    np.int64(0),
    np.int64(1),
    np.int64(-1),
    np.uint8(1),
    np.int8(2),
    np.float64(0.5),
    np.float32(1.0),
    np.float64("nan"),
    np.float64("inf"),
    np.longdouble("1e4000"),
    None,
    "1",
    "",
    [],
    (0,),
    object(),
    complex(1, 0),
    np.complex128(0),
]

NUMBERS = st.one_of(
    st.sampled_from(ODD_NUMBERS),
    st.integers(),
    st.integers(min_value=-2, max_value=MOST_BLOCKS + 1),
    st.floats(),
    st.fractions(),
    st.decimals(),
    st.booleans(),
    st.none(),
    st.text(max_size=3),
)


def _is_bool(v: Any) -> bool:
    return type(v) is bool or isinstance(v, np.bool_)


def _whole(v: Any) -> int | None:
    return int(v) if isinstance(v, Integral) and not _is_bool(v) else None


def expected(method: str, v: Any) -> str:
    """ok (exit 0), refused (one line, exit 2), or either (it depends on the call: a count
    from 1 up is within one call's hit and beyond another's)."""
    if method == "admit":
        return "ok" if _is_bool(v) else "refused"
    if method == "priority":
        if _is_bool(v) or not isinstance(v, Real):
            return "refused"
        try:
            return "ok" if math.isfinite(float(v)) else "refused"
        except OverflowError:
            return "refused"
    n = _whole(v)
    if n is None:
        return "refused"
    if method == "route":  # one engine, index 0
        return "ok" if n == 0 else "refused"
    if method == "victim":  # the plugin's answer is never its own victim
        return "either" if n in KEYS else "refused"
    if n == 0:  # restore / fetch nothing
        return "ok"
    return "either" if 0 < n <= MOST_BLOCKS else "refused"


@settings(
    max_examples=examples(25),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(method=st.sampled_from(ANSWERING), value=NUMBERS)
def test_every_number_a_plugin_returns_is_accepted_or_refused_in_one_line(tiny, method, value):
    with control(method, lambda *_: value):
        rc, err = kvsim("run", str(tiny), "--quiet")
    want = expected(method, value)
    if want == "ok" or (want == "either" and rc == 0):
        assert rc == 0, err
    else:
        plugin_failure(err, rc, tiny, method, f"{method}() broke a rule: returned ")


@settings(
    max_examples=examples(5),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(method=st.sampled_from(["inserted", "hit", "removed", "setup"]), value=NUMBERS)
def test_what_a_method_without_an_answer_returns_is_ignored(tiny, method, value):
    with control(method, lambda *_: value):
        rc, err = kvsim("run", str(tiny), "--quiet")
    assert rc == 0, err


# ---- what plugins pass to kvsim ----------------------------------------------------------


@settings(
    max_examples=examples(10),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(value=NUMBERS, swallow=st.booleans())
def test_estimate_takes_a_whole_number_of_blocks_of_the_hit(tiny, value, swallow):
    """``estimate(k)``: k from 0 to the blocks hit; anything else stops the run naming the
    plugin, even when the plugin catches what estimate raised."""

    def act(estimate: Callable[[Any], float]) -> int:
        try:
            t = estimate(value)
            assert isinstance(t, float) and math.isfinite(t)
        except Exception:
            if not swallow:
                raise
        return 0

    with control("restore_blocks", act):
        rc, err = kvsim("run", str(tiny), "--quiet")
    want = expected("restore_blocks", value)
    if want == "ok" or (want == "either" and rc == 0):
        assert rc == 0, err
    else:
        assert rc == 2 and "called estimate(" in err and "\n" not in err, err


@settings(
    max_examples=examples(8),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(value=st.one_of(NUMBERS, st.integers(min_value=-1, max_value=1 << 24)))
def test_recompute_s_takes_a_block_depth(tiny, value):
    """SimView.recompute_s(depth): an int from -1 to 2**24 (never a depth so large that
    the answer would take forever); anything else is a ValueError in the plugin's call."""

    def act(sim: Any) -> int:
        s = sim.recompute_s(value)
        assert isinstance(s, float)
        return 0

    with control("route", act):
        rc, err = kvsim("run", str(tiny), "--quiet")
    n = _whole(value)
    if n is not None and -1 <= n <= 1 << 24:
        assert rc == 0, err
    else:
        plugin_failure(err, rc, tiny, "route", "raised ValueError: recompute_s(depth)")


# ---- plugin parameters (issue 29) -------------------------------------------------------

PARAMS_PLUGIN = """
import math
from typing import Literal
from kvsim.plugins import EvictionPolicy, register


@register("fz_params")
class Params(EvictionPolicy):
    def __init__(self, frac: float, n: int = 1, tags: list[int] = [],
                 mode: Literal["a", "b"] = "a", anything=None):
        # what kvsim passes is what the annotations say (coerced), never the raw value
        assert type(frac) is float and math.isfinite(frac), frac
        assert isinstance(n, int), n
        assert type(tags) is list and all(isinstance(t, int) for t in tags), tags
        assert mode in ("a", "b"), mode

    def victim(self, tier):
        return next(iter(tier))
"""
PARAM_KEYS = ["frac", "n", "tags", "mode", "anything", "fraq", "x", "", "with space"]
PARAM_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**30), 10**30),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=4),
    st.sampled_from(["a", "b", "1", "0.5", "nan"]),
    st.lists(st.integers(-5, 5) | st.text(max_size=2), max_size=3),
    st.dictionaries(st.text(max_size=2), st.integers(), max_size=2),
)


@pytest.fixture(scope="module")
def params_scenario(tiny) -> Path:
    (tiny.parent / "fz_params.py").write_text(PARAMS_PLUGIN)
    return tiny.parent


@settings(
    max_examples=examples(25),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    params=st.dictionaries(st.sampled_from(PARAM_KEYS), PARAM_VALUES, max_size=4),
    form=st.sampled_from(["file", "set"]),
)
def test_fuzzed_params_run_or_are_refused_naming_the_parameter(params_scenario, params, form):
    """Any params of a plugin policy: the run works (and the class gets values of its
    annotated types), or exit 2 with one line naming ``tiers.gpu.eviction.params.<one of
    the keys given, or the required frac>``; never a traceback."""
    folder = params_scenario
    child = folder / f"params_{form}.yaml"
    body: dict[str, Any] = {"extends": "s.yaml", "plugins": ["fz.py", "fz_params.py"]}
    argv = ["run", str(child), "--quiet"]
    if form == "file":
        body["tiers"] = {"gpu": {"eviction": {"name": "fz_params", "params": params}}}
    else:  # a bare name, then one --set per parameter (a YAML value each)
        body["tiers"] = {"gpu": {"eviction": "fz_params"}}
        for k, v in params.items():
            argv += ["--set", f"tiers.gpu.eviction.params.{k}={json.dumps(v)}"]
    child.write_text(yaml.safe_dump(body))
    with control():
        rc, err = kvsim(*argv)
    if rc == 0:
        assert "frac" in params
        return
    assert rc == 2, err
    assert "\n" not in err and "Traceback" not in err, err
    if form == "set" and any(not k.strip() or k != k.strip() for k in params):
        return  # an empty or spaced field name in a --set path: refused as such
    named = [f"tiers.gpu.eviction.params.{k}: " for k in [*params, "frac"]]
    assert any(n in err for n in named), err
