"""Closed-loop clients (``workload.concurrency``): at most N requests in flight, a request
due while N are held until one finishes or is dropped and then sent (its arrival_s, and
so its TTFT, from the send), in order; ``arrivals: {process: closed}`` makes every request
due at t = 0 (bench_serving's ``--request-rate inf --max-concurrency N``).

The toy engine (tests/conftest.py) is serial: a 100-token prompt takes
t(100, 0) = 0.1 s + 99 ms = 0.199 s, one prompt at a time, and the GPU tier holds nothing,
so no request hits a cache and every time below is a sum of 0.199 s steps.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import yaml

from kvsim import api
from kvsim.cli import main
from kvsim.config.loader import with_sets
from kvsim.errors import InputError
from kvsim.experiments.capacity import search
from kvsim.experiments.replicate import load_overrides
from kvsim.experiments.slo import parse_slo
from kvsim.workload import open_workload

from conftest import SCENARIOS, TOY, req, toy

S = 0.199  # the toy engine's time for one 100-token prompt


def three_at_zero() -> list:
    """Three 100-token requests, all due at t = 0, no prefix in common."""
    return [req(i, 0.0, 100, [10 * i + 1]) for i in range(3)]


def times(res, col: str) -> list[float]:
    """A column of the per-request table in request order."""
    return [float(v) for v in res.requests.sort_values("id")[col]]


def hand(*values: float):
    """Hand-computed times, equal to the simulated ones up to float rounding of sums."""
    return pytest.approx(list(values), abs=1e-12)


def in_flight(df: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """The number of requests in flight (sent, not finished) from each time a request is
    sent or finishes until the next such time: (times, counts), a count taken after every
    event at its time (a slot freed at t and taken at t leaves the count as it was)."""
    at = np.concatenate([df["arrival_s"].to_numpy(), df["finish_s"].to_numpy()])
    step = np.concatenate([np.ones(len(df), int), -np.ones(len(df), int)])
    order = np.argsort(at, kind="stable")
    at, n = at[order], np.cumsum(step[order])
    last = np.append(at[1:] != at[:-1], True)  # the last event at each time
    return at[last], n[last]


# ---- hand-computed cases ----------------------------------------------------------------


def test_open_loop_is_the_default_and_queues_at_the_engine():
    res = api.run(toy(), requests=three_at_zero())
    assert times(res, "arrival_s") == hand(0.0, 0.0, 0.0)
    assert times(res, "ttft_s") == hand(S, 2 * S, 3 * S)
    assert "requests_held" not in res.summary


def test_one_in_flight_sends_each_request_when_the_previous_one_finishes():
    res = api.run(toy(workload={"concurrency": 1}), requests=three_at_zero())
    assert times(res, "arrival_s") == hand(0.0, S, 2 * S)  # each sent at the previous finish
    assert times(res, "finish_s") == hand(S, 2 * S, 3 * S)
    assert times(res, "ttft_s") == hand(S, S, S)  # TTFT from the send, as bench_serving's
    assert times(res, "queue_wait_s") == hand(0.0, 0.0, 0.0)
    assert res.summary["requests_held"] == 0


def test_two_in_flight_the_third_waits_for_the_first():
    res = api.run(toy(workload={"concurrency": 2}), requests=three_at_zero())
    assert times(res, "arrival_s") == hand(0.0, 0.0, S)
    assert times(res, "finish_s") == hand(S, 2 * S, 3 * S)
    # the second queues at the engine behind the first; the third, sent at 0.199, waits
    # there for the second (0.199 .. 0.398)
    assert times(res, "ttft_s") == hand(S, 2 * S, 2 * S)


def test_a_request_due_after_a_slot_frees_is_sent_when_due():
    """A 0 -> 0.199; B (due 0.1) held until 0.199 -> 0.398; C due at 1.0, after the slot
    freed (0.398): sent at 1.0, not earlier."""
    reqs = [req(0, 0.0, 100, [1]), req(1, 0.1, 100, [11]), req(2, 1.0, 100, [21])]
    res = api.run(toy(workload={"concurrency": 1}), requests=reqs)
    assert times(res, "arrival_s") == hand(0.0, S, 1.0)
    assert times(res, "ttft_s") == hand(S, S, S)


def test_a_cap_above_the_requests_in_flight_changes_nothing_bit_for_bit():
    """A cap never reached sends every request when due: the open loop's rows exactly."""
    wl = {
        "requests": 300,
        "arrivals": {"process": "poisson", "rate": "4/s"},
        "prompt_tokens": {"dist": "uniform", "low": 100, "high": 900},
    }
    open_loop = api.run(toy(workload=wl))
    capped = api.run(toy(workload={**wl, "concurrency": 300}))
    pd.testing.assert_frame_equal(open_loop.requests, capped.requests, check_exact=True)
    # and the open loop does queue requests at the engine, so the equality says something
    assert open_loop.requests["queue_wait_s"].max() > 0


def test_closed_arrivals_send_as_fast_as_the_cap_allows():
    """process: closed, three requests, one in flight: the same as three due at t = 0."""
    sc = toy(
        workload={"requests": 3, "arrivals": {"process": "closed"}, "concurrency": 1},
    )
    res = api.run(sc)
    assert times(res, "arrival_s") == hand(0.0, S, 2 * S)
    assert times(res, "ttft_s") == hand(S, S, S)
    assert [r.arrival for r in open_workload(sc.workload, sc.seed)] == [0.0, 0.0, 0.0]


# ---- interactions -----------------------------------------------------------------------


def test_the_warm_up_is_by_send_time():
    """Sent at 0, 0.199 and 0.398: a 0.3 s warm-up holds the first two (in the open loop
    all three arrive at 0, inside it, and nothing would be left to measure)."""
    res = api.run(
        toy(workload={"concurrency": 1}, run={"warmup": "0.3 s"}), requests=three_at_zero()
    )
    assert res.summary["requests"] == 1 and res.summary["requests_warmup"] == 2
    with pytest.raises(InputError, match=r"run\.warmup"):
        api.run(toy(run={"warmup": "0.3 s"}), requests=three_at_zero())


def test_max_time_reports_the_requests_still_held():
    """Stopped at 0.3 s: A finished, B (sent 0.199) in flight, C due but never sent;
    D, due at 5 s, after the end, is neither."""
    reqs = [*three_at_zero(), req(3, 5.0, 100, [41])]
    sc = toy(workload={"concurrency": 1}, run={"max_time": "0.3 s"})
    s = api.run(sc, requests=reqs).summary
    assert (s["requests"], s["requests_unfinished"], s["requests_held"]) == (1, 1, 1)


def test_a_dropped_request_frees_its_slot():
    """The engine fails at 0.1 s with its requests dropped: A is dropped then; B and C are
    sent at 0.1 (each slot freed by the drop before it) and dropped at once (no engine is
    up); D, due at 2 s once the engine is back (1 s), is served."""
    reqs = [*three_at_zero(), req(3, 2.0, 100, [41])]
    sc = toy(
        workload={"concurrency": 1},
        faults=[
            {"kind": "engine_down", "engine": 0, "at": "0.1 s", "until": "1 s", "requests": "drop"}
        ],
    )
    res = api.run(sc, requests=reqs)
    df = res.requests.sort_values("id")
    assert times(res, "arrival_s") == hand(0.0, 0.1, 0.1, 2.0)
    assert df["drop_reason"].tolist() == [
        "engine 0 failed",
        "no engine is up",
        "no engine is up",
        "",
    ]
    assert times(res, "finish_s")[3] == pytest.approx(2.0 + S, abs=1e-12)
    assert res.summary["requests_dropped"] == 3


def test_a_rerouted_request_keeps_its_slot():
    """Two engines in turn; engine 0 fails at 0.1 s with A on it: A moves to engine 1 and
    starts again there (0.1 .. 0.299), still in flight, so B waits for it and C for B."""
    sc = toy(
        cluster={"engines": 2, "router": "round_robin"},
        workload={"concurrency": 1},
        faults=[
            {
                "kind": "engine_down",
                "engine": 0,
                "at": "0.1 s",
                "until": "10 s",
                "requests": "reroute",
            }
        ],
    )
    res = api.run(sc, requests=three_at_zero())
    assert times(res, "arrival_s") == hand(0.0, 0.1 + S, 0.1 + 2 * S)
    assert times(res, "finish_s") == hand(0.1 + S, 0.1 + 2 * S, 0.1 + 3 * S)
    assert times(res, "lost_s") == hand(0.1, 0.0, 0.0)
    assert res.summary["requests_rerouted"] == 1


def test_tenancy_ttl_and_deletions_leave_the_closed_loop_as_it_is():
    """A TTL sweeper (the run steps until every request is out) and a tenant deleted
    mid-run change no time here (nothing is cached to delete)."""
    sc = toy(
        workload={"concurrency": 1},
        tenancy={"ttl": "10 s", "deletions": [{"tenant": 0, "at": "0.25 s"}]},
    )
    res = api.run(sc, requests=three_at_zero())
    assert times(res, "arrival_s") == hand(0.0, S, 2 * S)
    assert times(res, "ttft_s") == hand(S, S, S)
    assert res.summary["requests_unfinished"] == 0


WORKLOADS = {
    # synthetic multi-turn sessions (Poisson session arrivals, think times), 1,500 turns
    "synthetic sessions": (
        "quickstart.yaml",
        {"workload.requests": 1500, "run.warmup": "0 s", "cluster.engines": 1},
    ),
    "mooncake trace": ("mooncake-sample.yaml", {"run.warmup": "0 s"}),
    "azure trace": ("azure-sample.yaml", {"run.warmup": "0 s"}),
}


@pytest.mark.parametrize("name", list(WORKLOADS))
def test_every_workload_kind_keeps_the_cap_and_the_order(name):
    """On every workload kind (sessions too): never more than N in flight, every request
    sent no earlier than it was due, in the workload's order, and every one recorded."""
    path, sets = WORKLOADS[name]
    n = 3
    sc = api.load(SCENARIOS / path, {**sets, "workload.concurrency": n})
    res = api.run(sc)
    due = {r.id: r.arrival for r in open_workload(sc.workload, sc.seed)}
    df = res.requests.set_index("id").loc[list(due)]  # in the workload's order
    assert len(res.requests) == len(due) and res.summary["requests_held"] == 0
    sent = df["arrival_s"].to_numpy()
    assert (sent >= np.array(list(due.values()))).all()
    assert (np.diff(sent) >= 0).all()  # requests keep their order
    _, flying = in_flight(df)
    assert flying.max() == n  # the cap is reached (the workloads are heavier than 3) ...
    assert (sent > np.array(list(due.values()))).any()  # ... so some requests waited


# ---- Little's law -----------------------------------------------------------------------


def test_littles_law_on_a_saturated_closed_loop():
    """2,000 requests of 100-1,000 tokens sent as fast as 4 in flight allow, to one serial
    engine. Until the last send, exactly N = 4 are in flight at every moment (a finish
    frees a slot that the next request takes at once). Little's law, L = X W, over the
    whole run: X = requests / span, W = mean TTFT (the time in the system: sent to first
    token). L falls short of N only in the drain after the last send, where fewer than
    N remain and at least one is in flight: L >= (N t_s + d) / (t_s + d), with t_s the last
    send and d the drain, which is at most 4 services (~4/2000 of the run); the bound and
    a 1% tolerance are checked."""
    n = 4
    sc = toy(
        workload={
            "requests": 2000,
            "arrivals": {"process": "closed"},
            "prompt_tokens": {"dist": "uniform", "low": 100, "high": 1000},
            "concurrency": n,
        },
    )
    res = api.run(sc)
    df = res.requests
    s = res.summary
    at, flying = in_flight(df)
    last_send = float(df["arrival_s"].max())
    assert flying.max() == n
    assert (flying[(at > 0) & (at < last_send)] == n).all()  # saturated until the last send
    end = float(df["finish_s"].max())
    drain = end - last_send
    # Little's law over the run: the time-average in flight, from the events ...
    widths = np.diff(np.append(at, end))
    mean_in_flight = float((flying * widths).sum()) / end
    x, w = s["requests_per_s"], s["ttft_mean_s"]  # ... and throughput x time in system
    assert mean_in_flight == pytest.approx(x * w, rel=1e-9)
    assert (n * last_send + drain) / end <= mean_in_flight <= n
    assert x * w == pytest.approx(n, rel=0.01)
    assert drain < 4 * 1.1  # four of the longest prompts (1.099 s each) at most


# ---- sweeps and capacity ----------------------------------------------------------------


def test_a_sweep_over_the_concurrency(tmp_path):
    """One serial engine, 20 fixed prompts due at t = 0: with N in flight every request
    after the first N waits for the N - 1 ahead of it, so its TTFT is N x 0.199 s (the
    median), while the throughput is one prompt per 0.199 s at every N."""
    base = tmp_path / "toy.yaml"
    base.write_text(yaml.safe_dump({**TOY, "workload": {**TOY["workload"], "requests": 20}}))
    spec = tmp_path / "sweep.yaml"
    spec.write_text(
        yaml.safe_dump(
            {
                "name": "closed",
                "base": "toy.yaml",
                "grid": {"workload.concurrency": [1, 2, 4]},
                "set": {"workload.arrivals": {"process": "closed"}},
                "seeds": [0],
            }
        )
    )
    out = tmp_path / "out"
    assert main(["sweep", str(spec), "--out", str(out), "--workers", "1", "--quiet"]) == 0
    df = pd.read_parquet(out / "results.parquet")
    assert (df["status"] == "ok").all()
    assert df["workload.concurrency"].tolist() == [1, 2, 4]
    assert df["ttft_p50_s"].round(9).tolist() == [S, 2 * S, 4 * S]
    assert df["requests_per_s"].tolist() == pytest.approx([1 / S] * 3)


def test_capacity_refuses_a_closed_loop_naming_the_concurrency():
    sc = toy(workload={"concurrency": 4, "requests": 40})
    with pytest.raises(InputError) as e:
        search(sc, parse_slo("ttft_p99<=1s"), reps=1)
    assert e.value.where == "workload.concurrency" and "\n" not in str(e.value)


def test_closed_arrivals_have_no_rate_to_scale():
    sc = toy(workload={"arrivals": {"process": "closed"}, "concurrency": 2})
    assert load_overrides(sc, 1.0) == {}
    with pytest.raises(InputError, match=r"workload\.arrivals: process closed"):
        load_overrides(sc, 2.0)


# ---- bad input --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "allowed"),
    [
        ("0", "greater than 0"),
        ("-2", "greater than 0"),
        ("2.5", "a valid integer"),
        (".nan", "a valid integer"),
        ("eight", "a valid integer"),
        ("true", "a valid integer"),
    ],
)
def test_a_bad_concurrency_is_one_line_naming_the_field(value, allowed):
    with pytest.raises(InputError) as e:
        api.load(SCENARIOS / "quickstart.yaml", with_sets({}, [f"workload.concurrency={value}"]))
    text = str(e.value)
    assert "workload.concurrency" in text and allowed in text and "\n" not in text


CLOSED = "workload.arrivals={process: closed}"


@pytest.mark.parametrize(
    ("sets", "field", "fragment"),
    [
        (
            ["workload.arrivals={process: closed}", "workload.sessions=null"],
            "workload.concurrency",
            "set it",
        ),
        (
            ["workload.arrivals={process: closed}", "workload.concurrency=4"],
            "workload.sessions",
            "t = 0",
        ),
        (["workload.arrivals.rate=inf"], "workload.arrivals.rate", "process: closed"),
    ],
)
def test_closed_arrivals_refused_where_they_mean_nothing(sets, field, fragment):
    with pytest.raises(InputError) as e:
        api.load(SCENARIOS / "quickstart.yaml", with_sets({}, sets))
    text = str(e.value)
    assert field in text and fragment in text and "\n" not in text
