"""Unknowns as ranges (issue 25, point 3): the screening logic of kvsim.reproduce.ranges on
fake figure functions computed by hand, the verdicts, and the paper's declared table of
assumed inputs against its scenario files. The full study's screening runs in
tests/test_paper.py (slow)."""

import math

import pytest

from kvsim import api
from kvsim.reproduce import ranges
from kvsim.reproduce import remote_kv_tiers as paper
from kvsim.reproduce.ranges import Input, screen, verdict

from conftest import SCENARIOS


def _inp(name, lo="lo", hi="hi", configs=("c",)):
    return Input(name, f"x.{name}", configs, "shipped", lo, hi, "test")


class Fake:
    """A figure function of named input values: the mean a setting gives, and every
    setting it was asked for (to count runs)."""

    def __init__(self, shipped, ends, fn):
        self.shipped, self.ends, self.fn, self.calls = shipped, ends, fn, []

    def __call__(self, setting, figures):
        self.calls.append(setting)
        x = dict(self.shipped)
        for name, end in setting:
            x[name] = self.ends[name][end]
        return {f: self.fn[f](x) for f in figures}


def test_an_input_moving_a_figure_by_9_percent_is_not_listed_by_11_percent_is():
    # f = 100 * a * b; shipped a = b = 1 -> f = 100.
    # a: 0.91 .. 1.09 -> f = 91 .. 109: moves -9% / +9%, not more than 10%: not listed.
    # b: 1.00 .. 1.11 -> f = 100 .. 111: +11% at the high end: listed.
    fake = Fake(
        {"a": 1.0, "b": 1.0},
        {"a": {"lo": 0.91, "hi": 1.09}, "b": {"lo": 1.0, "hi": 1.11}},
        {"f": lambda x: 100 * x["a"] * x["b"]},
    )
    out = screen({"f": 100.0}, [_inp("a"), _inp("b")], lambda f, i: True, fake)
    rg = out["f"]
    assert rg.sensitive_to == ("b",)
    assert rg.moves["a"] == pytest.approx((-0.09, 0.09))
    assert rg.moves["b"] == pytest.approx((0.0, 0.11))
    # the range: the mean as shipped (100) and b's ends (100, 111); a's 91 is left out
    assert (rg.lo, rg.hi) == pytest.approx((100.0, 111.0))
    # one sensitive input: no corners; runs = as shipped + 2 ends x 2 inputs = 5
    assert len(fake.calls) == 5


def test_the_threshold_is_strict_and_nothing_sensitive_gives_a_point_range():
    # exactly +10% (110 against 100) is not "more than 10%"
    fake = Fake({"a": 100.0}, {"a": {"lo": 95.0, "hi": 110.0}}, {"f": lambda x: x["a"]})
    rg = screen({"f": 100.4}, [_inp("a")], lambda f, i: True, fake)["f"]
    assert rg.sensitive_to == ()
    # nothing listed: range_lo = range_hi = the mean as shipped over every seed
    assert rg.lo == rg.hi == 100.4


def test_corners_of_two_sensitive_inputs_set_the_range():
    # g = 10 * x * y, shipped x = y = 1 -> 10; x: 0.5 .. 2, y: 0.8 .. 1.5, z moves nothing.
    # one at a time: x -> 5, 20; y -> 8, 15. Corners: (lo, lo) 10*0.5*0.8 = 4,
    # (lo, hi) 7.5, (hi, lo) 16, (hi, hi) 30. Range: [4, 30] (the mean as shipped, 10.2
    # over every seed, is inside).
    fake = Fake(
        {"x": 1.0, "y": 1.0, "z": 1.0},
        {"x": {"lo": 0.5, "hi": 2.0}, "y": {"lo": 0.8, "hi": 1.5}, "z": {"lo": 1, "hi": 1}},
        {"g": lambda v: 10 * v["x"] * v["y"]},
    )
    out = screen({"g": 10.2}, [_inp("x"), _inp("y"), _inp("z")], lambda f, i: True, fake)
    rg = out["g"]
    assert rg.sensitive_to == ("x", "y")
    assert (rg.lo, rg.hi) == pytest.approx((4.0, 30.0))
    corners = {s: v for s, v in rg.points.items() if len(s) == 2}
    assert corners == pytest.approx(
        {
            (("x", "lo"), ("y", "lo")): 4.0,
            (("x", "lo"), ("y", "hi")): 7.5,
            (("x", "hi"), ("y", "lo")): 16.0,
            (("x", "hi"), ("y", "hi")): 30.0,
        }
    )
    assert len(fake.calls) == 1 + 3 * 2 + 4


def test_corners_take_the_inputs_that_moved_the_figure_most():
    # h = a + b + c around 100: a moves +-50, b +-30, c +-20 (all sensitive). With
    # corners=2 only a and b are cornered: corners 100-50-30 = 20 .. 180; c's ends 80, 120
    # lie inside. Range [20, 180].
    fake = Fake(
        {"a": 0.0, "b": 0.0, "c": 0.0},
        {
            "a": {"lo": -50, "hi": 50},
            "b": {"lo": -30, "hi": 30},
            "c": {"lo": -20, "hi": 20},
        },
        {"h": lambda v: 100 + v["a"] + v["b"] + v["c"]},
    )
    inputs = [_inp("c"), _inp("a"), _inp("b")]
    rg = screen({"h": 100.0}, inputs, lambda f, i: True, fake, corners=2)["h"]
    assert rg.sensitive_to == ("c", "a", "b")  # declaration order
    assert {n for s in rg.points if len(s) == 2 for n, _ in s} == {"a", "b"}
    assert (rg.lo, rg.hi) == (20.0, 180.0)


def test_an_input_that_does_not_apply_is_neither_run_nor_listed():
    fake = Fake(
        {"a": 1.0, "b": 1.0},
        {"a": {"lo": 0.5, "hi": 2.0}, "b": {"lo": 0.5, "hi": 2.0}},
        {"f": lambda x: x["a"], "g": lambda x: x["b"]},
    )
    out = screen(
        {"f": 1.0, "g": 1.0},
        [_inp("a"), _inp("b")],
        lambda fig, i: (fig, i.name) in {("f", "a"), ("g", "b")},
        fake,
    )
    assert out["f"].sensitive_to == ("a",) and "b" not in out["f"].moves
    assert out["g"].sensitive_to == ("b",) and "a" not in out["g"].moves
    assert (out["f"].lo, out["f"].hi) == (0.5, 2.0)


def test_relative_move():
    assert ranges.relative_move(111.0, 100.0) == pytest.approx(0.11)
    assert ranges.relative_move(-1.0, -2.0) == pytest.approx(0.5)  # |base|
    assert ranges.relative_move(0.0, 0.0) == 0.0
    assert math.isinf(ranges.relative_move(0.1, 0.0))


@pytest.mark.parametrize(
    ("paper", "lo", "hi", "rlo", "rhi", "want"),
    [
        (17.3, 7.5, 10.7, 4.7, 35.0, "inside range"),  # outside 7.5..10.7, inside 4.7..35
        (9.0, 7.5, 10.7, 4.7, 35.0, "inside interval"),
        (3.96, 1.16, 1.30, 1.0, 1.5, "outside both"),
        (3.96, 1.16, 1.30, None, None, "outside interval"),  # --no-ranges
        (None, 1.0, 2.0, 1.0, 2.0, None),
    ],
)
def test_verdicts(paper, lo, hi, rlo, rhi, want):
    assert verdict(paper, lo, hi, rlo, rhi) == want


def _field(sc, dotted):
    x = sc
    for part in dotted.split("."):
        x = getattr(x, part)
    return x


def _file(config):
    return SCENARIOS / "paper" / f"{config.removesuffix('-2x')}.yaml"


@pytest.mark.parametrize("inp", paper.INPUTS, ids=lambda i: i.name)
def test_each_declared_input_is_its_scenarios_shipped_value_with_a_range_around_it(inp):
    assert inp.mark == "L" and len(inp.source) > 40
    assert set(inp.configs) <= {c for cs, _fn in paper.STREAM_FIGURES.values() for c in cs}
    for config in inp.configs:
        shipped = api.load(_file(config))
        # the declared shipped value is what the scenario file says
        assert api.load(_file(config), [f"{inp.field}={inp.shipped}"]) == shipped, config
        lo = _field(api.load(_file(config), [inp.override("lo")]), inp.field)
        hi = _field(api.load(_file(config), [inp.override("hi")]), inp.field)
        # the shipped value lies inside its range (at an end only where it is a bound
        # of the quantity itself: the copy kernel holds at most every SM)
        assert lo < _field(shipped, inp.field) <= hi, (config, lo, hi)
        assert lo < hi


def test_the_declared_table_names_each_input_once_and_covers_the_stall_model_and_rates():
    names = [i.name for i in paper.INPUTS]
    assert len(set(names)) == len(names)
    assert {
        "remote.stall.probability",
        "remote.stall.duration",
        "workload.arrivals.rate@production",
        "workload.arrivals.rate@high-hit",
    } <= set(names)
    # only predicted figures are screened, and each of them comes out of a stream
    predicted = {f.name for f in paper.FIGURES if f.kind == "predicted"}
    assert predicted <= set(paper.STREAM_FIGURES)


def _fake_rep(with_ranges=True):
    figs = {f.name: f for f in paper.FIGURES}
    rows = [
        paper.Row(figs["p99_remote_sync_s"], 9.09, 7.46, 10.7, [9.0, 9.18]),
        paper.Row(figs["p99_no_remote_s"], 1.23, 1.16, 1.30, [1.2, 1.26]),
        paper.Row(figs["b_star"], 2.52, 2.52, 2.52, [2.52, 2.52]),
        paper.Row(figs["recompute_16k_s"], 0.31, 0.31, 0.31, [0.31, 0.31]),
    ]
    rep = paper.Reproduction(rows, [0, 1])
    if with_ranges:
        rep.range_seeds = [0]
        rep.ranges = {
            "p99_remote_sync_s": ranges.Range(
                "p99_remote_sync_s",
                ("remote.stall.probability",),
                4.7,
                35.0,
                9.0,
                {"remote.stall.probability": (-0.4, 2.9)},
            ),
            "p99_no_remote_s": ranges.Range(
                "p99_no_remote_s", (), 1.23, 1.23, 1.2, {"node.d2h_per_gpu": (0.0, 0.0)}
            ),
        }
    return rep


def test_records_carry_the_new_columns_and_verdicts():
    rep = _fake_rep()
    recs = {r["figure"]: r for r in rep.records()}
    assert all(list(r) == paper.COLUMNS for r in recs.values())
    assert paper.COLUMNS[-4:] == ["sensitive_to", "range_lo", "range_hi", "verdict"]
    sync = recs["p99_remote_sync_s"]
    assert sync["sensitive_to"] == "remote.stall.probability"
    assert (sync["range_lo"], sync["range_hi"], sync["verdict"]) == (4.7, 35.0, "inside range")
    # nothing sensitive: the point range; the study's 3.96 s is outside both
    base = recs["p99_no_remote_s"]
    assert (base["sensitive_to"], base["range_lo"], base["range_hi"]) == ("", 1.23, 1.23)
    assert base["verdict"] == "outside both"
    # calibrated and derived figures are not screened and get no verdict
    for name in ("b_star", "recompute_16k_s"):
        assert recs[name]["sensitive_to"] == "" and recs[name]["range_lo"] is None
        assert recs[name]["verdict"] is None
    md = paper.markdown(rep)
    assert "| sensitive to | range | verdict |" in md and "inside range" in md
    assert "## Unknowns as ranges" in md and "`remote.stall.duration`" in md
    text = paper.text_table(rep)
    assert "inside range" in text and "p99_remote_sync_s: remote.stall.probability" in text


def test_without_ranges_the_columns_are_empty_and_the_verdict_says_so():
    rep = _fake_rep(with_ranges=False)
    recs = {r["figure"]: r for r in rep.records()}
    assert recs["p99_remote_sync_s"]["range_lo"] is None
    assert recs["p99_remote_sync_s"]["verdict"] == "outside interval"
    assert recs["p99_no_remote_s"]["verdict"] == "outside interval"
    assert "--no-ranges" in paper.markdown(rep) and "--no-ranges" in paper.text_table(rep)


def test_range_runs_are_normal_scenario_runs_with_overrides(monkeypatch):
    """The evaluator runs a configuration's own file with the setting's --set overrides,
    only for configurations the setting moves, each (configuration, overrides, seed) once."""
    calls = []

    def fake_run(d, config, overrides, seed):
        calls.append((config, tuple(overrides), seed))
        return {"ttft_p99_s": 2.0 * seed + 1, "ttft_p50_s": 1.0}

    monkeypatch.setattr(paper, "_run_config", fake_run)
    shipped = {c: [{"ttft_p99_s": 1.0, "ttft_p50_s": 1.0}] * 3 for c in paper.PRODUCTION}
    ev = paper._evaluator(SCENARIOS / "paper", shipped, [0, 1], lambda _m: None)
    # as shipped: the reproduction's own runs, nothing run
    assert ev((), ["p99_remote_sync_s"]) == {"p99_remote_sync_s": 1.0}
    assert calls == []
    setting = (("remote.stall.probability", "hi"),)
    # seeds 0 and 1: p99 = 1 and 3, mean 2; the ratio to no-remote (1.0) likewise
    got = ev(setting, ["p99_remote_sync_s", "p99_ratio_remote"])
    assert got == {"p99_remote_sync_s": 2.0, "p99_ratio_remote": 2.0}
    assert calls == [
        ("remote-sync", ("remote.stall.probability=0.10",), 0),
        ("remote-sync", ("remote.stall.probability=0.10",), 1),
    ]
    ev(setting, ["p99_remote_sync_s"])  # cached
    assert len(calls) == 2
