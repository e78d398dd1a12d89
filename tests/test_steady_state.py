"""Issue 39, point 13: answers from runs not in steady state.

One detector (:func:`kvsim.results.timeseries.trend`), pure, tested on synthetic series:
a stationary noisy series (independent or autocorrelated windows) is flagged at most at
its stated 1% false-alarm rate, a ramp is flagged. Then where it speaks: the summary's
``steady_state`` (summary.json), ``kvsim run``'s stderr, a sweep's runs and a sweep that
varies the rate with a fixed request count, ``kvsim plot``.
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from kvsim import api
from kvsim.cli import main
from kvsim.config.loader import deep_merge
from kvsim.experiments.sweep.spec import fixed_count_note, load_sweep
from kvsim.results.timeseries import (
    TREND_MIN_WINDOWS,
    Trend,
    steady_state,
    trend,
    unsteady_runs_note,
)

from conftest import TOY

FALSE_ALARM = 0.01  # the rate TREND_T is chosen for (two-sided 1% on 8 block means)


def _ar1(rng: np.random.Generator, n: int, phi: float) -> np.ndarray:
    e = rng.standard_normal(n)
    x = np.empty(n)
    x[0] = e[0] / np.sqrt(1 - phi**2)
    for i in range(1, n):
        x[i] = phi * x[i - 1] + e[i]
    return x


@pytest.mark.parametrize("phi", [0.0, 0.6])
def test_a_stationary_noisy_series_is_flagged_at_most_at_the_stated_rate(phi):
    """2,000 stationary series of 50 windows (GPU busy 30% +- 5 points; windows
    independent, or each correlated 0.6 with the last): at most 1% flagged."""
    rng = np.random.default_rng(1)
    n = 2000
    flagged = sum(isinstance(trend(0.3 + 0.05 * _ar1(rng, 50, phi)), Trend) for _ in range(n))
    assert flagged / n <= FALSE_ALARM, flagged


def test_a_ramp_is_flagged():
    """GPU busy climbing from 15% to 50% over the span (the issue's planning run), with
    noise: flagged every time, the fitted line near the ramp's ends."""
    rng = np.random.default_rng(2)
    for _ in range(200):
        got = trend(np.linspace(0.15, 0.5, 50) + 0.05 * rng.standard_normal(50))
        assert isinstance(got, Trend)
        assert 0.1 < got.first < 0.25 and 0.4 < got.last < 0.6 and got.rise > 1


def test_a_falling_or_short_series_is_not_a_rise():
    assert trend(np.linspace(0.5, 0.15, 50)) is False  # falling: not filling up
    assert trend(np.full(50, 0.3)) is False  # constant: no noise, no slope
    assert trend(np.linspace(0.1, 0.5, TREND_MIN_WINDOWS - 1)) is None  # too short to tell
    # NaN windows (no arrival) are left out, not read as zeros
    x = np.linspace(0.15, 0.5, 60)
    x[::3] = np.nan
    assert isinstance(trend(x), Trend)


def test_a_small_significant_drift_is_not_flagged():
    """A rise that is significant but small (5% across the run) is not a transient that
    changes the answer: the rise must be at least TREND_MIN_RISE of the mean."""
    x = np.linspace(0.30, 0.315, 200)
    assert trend(x) is False


def _measured(arrivals: np.ndarray, waits: np.ndarray) -> pd.DataFrame:
    return pd.DataFrame({"arrival_s": arrivals, "queue_wait_s": waits})


def test_steady_state_reads_gpu_busy_and_queue_wait_per_window():
    t = np.arange(0.0, 400.0, 0.5)
    flat = _measured(t, np.full(len(t), 0.01))
    # the engine busy 15% of each 10 s window at first, 50% at the end
    spans = []
    for k in range(40):
        share = 0.15 + 0.35 * k / 39
        spans += [10.0 * k, 10.0 * k + 10.0 * share]
    ramp = [{"gpu": spans}]
    even = [{"gpu": [x for k in range(40) for x in (10.0 * k, 10.0 * k + 3.0)]}]
    got = steady_state(flat, ramp, 10.0, 1, 400.0)
    assert got["steady"] is False and len(got["warnings"]) == 1
    # (the fitted line at the first and last block's middle)
    assert "GPU busy still rises" in got["warnings"][0] and "from 17% to 48%" in got["warnings"][0]
    assert steady_state(flat, even, 10.0, 1, 400.0) == {"steady": True, "warnings": []}
    growing = _measured(t, t / 100)  # a queue that never drains
    got = steady_state(growing, even, 10.0, 1, 400.0)
    assert got["steady"] is False and "queue wait still rises" in got["warnings"][0]
    # too few windows: no verdict, no warning
    assert steady_state(flat.iloc[:20], ramp, 10.0, 1, 400.0)["steady"] is None


def _toy_scenario(tmp_path: Path, rate: float, name: str = "s.yaml") -> Path:
    sc = deep_merge(
        copy.deepcopy(TOY),
        {
            "workload": {
                "requests": 400,
                "arrivals": {"process": "poisson", "rate": f"{rate}/s"},
            },
            "run": {"timeseries_window": "2 s"},
        },
    )
    path = tmp_path / name
    path.write_text(yaml.safe_dump(sc))
    return path


def _cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(list(argv))
    return rc, out.getvalue(), err.getvalue()


def test_run_warns_of_a_queue_still_growing_and_summary_json_says_so(tmp_path):
    """The toy engine serves 5 requests/s: at 8/s its queue grows for the whole run (a
    warning on stderr, steady false in summary.json); at 2/s it is steady (none)."""
    over = _toy_scenario(tmp_path, 8.0)
    rc, _, err = _cli("run", str(over), "--quiet", "--out", str(tmp_path / "over"))
    assert rc == 0, err
    warns = [x for x in err.splitlines() if x.startswith("warning: not in steady state")]
    assert len(warns) == 1 and "queue wait still rises" in warns[0], err
    summary = json.loads((tmp_path / "over" / "summary.json").read_text())
    assert summary["steady_state"]["steady"] is False
    assert summary["steady_state"]["warnings"] == [warns[0].removeprefix("warning: ")]
    # kvsim plot of that folder says it too
    rc, _, err = _cli("plot", str(tmp_path / "over"))
    assert rc == 0 and "warning: not in steady state" in err, err
    calm = _toy_scenario(tmp_path, 2.0, "calm.yaml")
    rc, _, err = _cli("run", str(calm), "--quiet", "--out", str(tmp_path / "calm"))
    assert rc == 0 and "steady state" not in err, err
    assert json.loads((tmp_path / "calm" / "summary.json").read_text())["steady_state"] == {
        "steady": True,
        "warnings": [],
    }


def test_the_python_api_has_it_in_the_summary(tmp_path):
    res = api.run(_toy_scenario(tmp_path, 8.0))
    assert res.summary["steady_state"]["steady"] is False


def test_a_rate_sweep_with_a_fixed_request_count_warns(tmp_path):
    """The issue's sweep: the rate swept, the request count fixed (p95 fell as the rate
    rose): a warning before any run, and the runs still filling are named after."""
    base = _toy_scenario(tmp_path, 2.0)
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(f"base: {base}\ngrid:\n  workload.arrivals.rate: [2/s, 8/s]\n")
    assert "leaves workload.requests fixed at 400" in (fixed_count_note(load_sweep(sweep)) or "")
    rc, _, err = _cli("sweep", str(sweep), "--out", str(tmp_path / "out"), "--quiet")
    assert rc == 0, err
    assert "warning: the sweep varies workload.arrivals.rate" in err
    assert "warning: not in steady state: 1 of 2 runs (run 1)" in err, err
    rc, _, err = _cli("plot", str(tmp_path / "out"))  # and its plots say it too
    assert rc == 0 and "not in steady state: 1 of 2 runs (run 1)" in err, err
    # sweeping the count with it: no such warning
    both = tmp_path / "both.yaml"
    both.write_text(
        f"base: {base}\nzip:\n  workload.arrivals.rate: [2/s, 8/s]\n"
        "  workload.requests: [400, 1600]\n"
    )
    try:
        swept = load_sweep(both)
    except Exception:  # (no zip: a grid over both, which sweeps the count too)
        both.write_text(
            f"base: {base}\ngrid:\n  workload.arrivals.rate: [2/s, 8/s]\n"
            "  workload.requests: [400, 1600]\n"
        )
        swept = load_sweep(both)
    assert fixed_count_note(swept) is None


def test_unsteady_runs_note_reads_the_results_table():
    table = pd.DataFrame({"run": [0, 1, 2], "steady_state.steady": [True, False, None]})
    note = unsteady_runs_note(table)
    assert note is not None and "1 of 3 runs (run 1)" in note
    assert unsteady_runs_note(table.drop(columns="steady_state.steady")) is None
    assert unsteady_runs_note(table.assign(**{"steady_state.steady": True})) is None


def test_capacity_warns_when_the_run_at_its_answer_was_still_filling(tmp_path, monkeypatch):
    """The search's answer is a run's figure: when that run was not steady, its log says
    so (the verdict itself is the detector's, tested above; forced here)."""
    from kvsim.experiments.capacity import search
    from kvsim.experiments.slo import parse_slo
    from kvsim.results import records

    def unsteady(*_args, **_kw):
        return {"steady": False, "warnings": ["not in steady state: GPU busy still rises"]}

    monkeypatch.setattr(records, "steady_state", unsteady)  # as the summary calls it
    sc = api.load(_toy_scenario(tmp_path, 2.0), {"workload.requests": 100})
    logged: list[str] = []
    search(sc, parse_slo("ttft_p99<=1s"), reps=1, tol=0.2, log=logged.append)
    warns = [x for x in logged if "warning: at that load, not in steady state" in x]
    assert len(warns) == 1, logged


def test_a_short_overloaded_run_is_judged_on_finer_windows():
    # 300 requests in 60 s (six 10 s windows: too few for the 16 the test needs) whose
    # queue never drains, on an engine busy all the time: judged on 16 windows of 3.7 s
    t = np.linspace(0.0, 60.0, 300)
    busy = [{"gpu": [0.0, 400.0]}]
    got = steady_state(_measured(t, t / 2), busy, 10.0, 1, 400.0)
    assert got["steady"] is False
    (line,) = got["warnings"]
    assert "queue wait still rises" in line and "3.75 s windows" in line
    # the advice names both causes, with the busy fraction at the end
    assert "GPU busy 100% at the end" in line and "add engines" in line
    # the same with a flat queue: steady; with too few requests: no verdict
    assert steady_state(_measured(t, np.full(300, 0.01)), busy, 10.0, 1, 400.0)["steady"]
    few = _measured(t[::6], t[::6] / 2)
    assert steady_state(few, busy, 10.0, 1, 400.0)["steady"] is None


def test_every_field_that_sets_the_rate_gets_the_fixed_count_warning(tmp_path):
    # the rate reached through the arrivals mapping, or a trace's time scale, leaves run
    # lengths unequal just as workload.arrivals.rate does (one set of rate fields)
    base = _toy_scenario(tmp_path, 2.0)
    mapping = tmp_path / "arrivals.yaml"
    mapping.write_text(
        f"base: {base}\ngrid:\n  workload.arrivals:\n"
        "    - {process: poisson, rate: 2/s}\n    - {process: poisson, rate: 8/s}\n"
    )
    assert "varies workload.arrivals but leaves" in (fixed_count_note(load_sweep(mapping)) or "")
    # a field that does not set the rate: no warning
    other = tmp_path / "other.yaml"
    other.write_text(f"base: {base}\ngrid:\n  cluster.engines: [1, 2]\n")
    assert fixed_count_note(load_sweep(other)) is None


def test_minimize_warns_when_its_answer_rests_on_a_run_still_filling(tmp_path):
    # a session workload that builds up over the whole run: the answer's runs are flagged
    sc = tmp_path / "climb.yaml"
    sc.write_text(
        "name: climb\nprofile: {model: llama-3.1-8b, gpu: H100, gpus: 1, tp: 1}\nseed: 1\n"
        "run: {warmup: 0 s}\ncluster: {engines: 1}\n"
        "workload:\n  kind: synthetic\n  requests: 800\n"
        "  arrivals: {process: poisson, rate: 0.5/s}\n"
        "  sessions: {turns: {dist: geometric, mean: 40}, think_time: 30 s}\n"
        "  prompt_tokens: {dist: lognormal, median: 3000, sigma: 0.5, max: 16384}\n"
        "  output_tokens: {dist: lognormal, median: 200, sigma: 0.7, max: 2048}\n"
        "tiers:\n  host: {capacity: 40 GB}\n"
    )
    args = ["capacity", str(sc), "--slo", "ttft_p99<=300s", "--minimize"]
    args += ["tiers.host.capacity", "--range", "10 GB..100 GB", "--reps", "2", "--json"]
    rc, out, err = _cli(*args)
    assert rc == 0, err
    got = json.loads(out)["steady_state_warnings"]
    assert len(got) == 2 and all("GPU busy still rises" in w for w in got)
    assert err.count("warning: at the answer, tiers.host.capacity = 10 GB") == 2
