"""Links shared by flows: exact hand-computed event times (SimPy clock, no tolerance
beyond float round-off)."""

import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

from kvsim.kernel.fabric import Fabric, Link

from conftest import examples


def run_flows(specs, links_bw, latency=0.0):
    """specs: (start_time, size, [link names], costs or None) -> list of finish times."""
    env = simpy.Environment()
    fab = Fabric(env)
    links = {name: fab.link(name, bw, latency) for name, bw in links_bw.items()}
    ends = [None] * len(specs)

    def starter(i, at, size, names, costs):
        yield env.timeout(at)
        f = fab.transfer([links[n] for n in names], size, costs=costs)
        yield f.done
        ends[i] = env.now

    for i, (at, size, names, costs) in enumerate(specs):
        env.process(starter(i, at, size, names, costs))
    env.run()
    return ends, links


def test_lone_transfer_gets_the_whole_link():
    ends, _ = run_flows([(0, 100, ["a"], None)], {"a": 100.0})
    assert ends == [pytest.approx(1.0)]


def test_two_equal_transfers_each_take_twice_as_long():
    ends, links = run_flows([(0, 100, ["a"], None), (0, 100, ["a"], None)], {"a": 100.0})
    assert ends == [pytest.approx(2.0), pytest.approx(2.0)]
    assert links["a"].bytes == pytest.approx(200)
    assert links["a"].busy_time == pytest.approx(2.0)


def test_late_joiner_shares_from_when_it_arrives():
    # A alone for 1 s (100 of 200 B), then 50 B/s each: both done at t = 3
    ends, _ = run_flows([(0, 200, ["a"], None), (1, 100, ["a"], None)], {"a": 100.0})
    assert ends == [pytest.approx(3.0), pytest.approx(3.0)]


def test_short_flow_leaves_and_the_other_speeds_up():
    # 50 B/s each until B (50 B) ends at t = 1; A then has 250 B left at 100 B/s: t = 3.5
    ends, _ = run_flows([(0, 300, ["a"], None), (0, 50, ["a"], None)], {"a": 100.0})
    assert ends == [pytest.approx(3.5), pytest.approx(1.0)]


def test_max_min_fairness_over_paths():
    # f1 crosses a (10 B/s) and b (100 B/s); f2 crosses only b. Progressive filling: f1 is
    # held at 10 by a; f2 takes the rest of b, 90 B/s.
    ends, _ = run_flows([(0, 10, ["a", "b"], None), (0, 90, ["b"], None)], {"a": 10.0, "b": 100.0})
    assert ends == [pytest.approx(1.0), pytest.approx(1.0)]


def test_cost_weighs_a_flow_on_one_link():
    # cost 2 on the server: alone it runs at 50 B/s; the invariant sum(rate*cost) <= bw holds
    ends, _ = run_flows([(0, 100, ["srv", "nic"], (2.0, 1.0))], {"srv": 100.0, "nic": 1000.0})
    assert ends == [pytest.approx(2.0)]


def test_latency_delays_the_start_only():
    ends, _ = run_flows([(0, 100, ["a", "b"], None)], {"a": 100.0, "b": 1000.0}, latency=0.25)
    assert ends == [pytest.approx(1.5)]  # 2 x 0.25 s latency + 1 s transfer


def test_cancel_frees_bandwidth_for_the_others():
    env = simpy.Environment()
    fab = Fabric(env)
    link = fab.link("a", 100.0)
    f1 = fab.transfer([link], 200)
    f2 = fab.transfer([link], 200)
    log = []

    def canceller():
        yield env.timeout(1.0)  # each moved 50 B
        fab.cancel(f1)

    def watch():
        yield f2.done
        log.append(env.now)

    env.process(canceller())
    env.process(watch())
    env.run()
    assert log == [pytest.approx(2.5)]  # 150 B left at 100 B/s after t = 1
    assert f1.state == "cancelled" and not f1.done.triggered
    assert link.bytes == pytest.approx(250)


def test_refuses_impossible_links_and_flows():
    with pytest.raises(ValueError):
        Link("x", 0.0)
    with pytest.raises(ValueError):
        Link("x", -5.0)
    fab = Fabric(simpy.Environment())
    a = fab.link("a", 1.0)
    with pytest.raises(ValueError):
        fab.link("a", 1.0)
    with pytest.raises(ValueError):
        fab.transfer([a], -1)
    with pytest.raises(ValueError):
        fab.transfer([], 1)


def test_estimate_rate_is_the_share_a_newcomer_gets():
    fab = Fabric(simpy.Environment())
    a = fab.link("a", 100.0)
    fab.transfer([a], 1000)
    assert fab.estimate_rate([a]) == pytest.approx(50.0)


def test_a_transfer_shorter_than_the_clock_resolution_still_finishes():
    # regression: at t = 1e9 s one byte at 400 GB/s lasts 2.5e-12 s, below the float
    # clock's resolution; the flow must finish (at once) instead of re-arming forever
    env = simpy.Environment(initial_time=1e9)
    fab = Fabric(env)
    f = fab.transfer([fab.link("a", 4e11)], 1.0)
    env.run(until=1e9 + 1)
    assert f.state == "finished" and f.end == pytest.approx(1e9)


def test_a_link_that_stops_binding_frees_its_flows_to_their_caps():
    # Regression (crashed with KeyError in the one-link fill): W leaving `a` makes `a` stop
    # binding while Y, also on `a`, is held by the binding `b`; X (on `a` and `c`) is then on
    # no binding link and runs at its cap. a = 100, b = 10, c = 50 B/s. Until W ends: b gives
    # Y and Z 5 each; a's other 95 go to X and W, 47.5 each; W (47.5 B) ends at t = 1. Then
    # X runs at its cap 50: 52.5 B left, t = 2.05. Y and Z (20 B at 5 B/s) end at t = 4.
    ends, _ = run_flows(
        [
            (0, 47.5, ["a"], None),
            (0, 100, ["a", "c"], None),
            (0, 20, ["a", "b"], None),
            (0, 20, ["b"], None),
        ],
        {"a": 100.0, "b": 10.0, "c": 50.0},
    )
    assert ends == [pytest.approx(1.0), pytest.approx(2.05), pytest.approx(4.0), pytest.approx(4.0)]


def _max_min_rates(paths, costs, bandwidth):
    """Textbook progressive filling over every link (an independent restatement of the
    fabric's rule): all unfrozen flows rise together; a link that fills freezes its flows."""
    rates = {f: 0.0 for f in paths}
    left = dict(bandwidth)
    unfrozen = set(paths)
    while unfrozen:
        step = min(
            left[ln] / sum(costs[f][i] for f in unfrozen for i, m in enumerate(paths[f]) if m == ln)
            for ln in left
            if any(ln in paths[f] for f in unfrozen)
        )
        for f in unfrozen:
            rates[f] += step
        for f in unfrozen:
            for i, ln in enumerate(paths[f]):
                left[ln] -= step * costs[f][i]
        full = {ln for ln, v in left.items() if v <= 1e-9 * bandwidth[ln]}
        unfrozen = {f for f in unfrozen if not full & set(paths[f])}
    return rates


def _fluid_finish_times(specs, bandwidth):
    """Finish times of flows (start, size, links, costs) under max-min fair sharing."""
    t, left, ends = 0.0, {}, {}
    pending = sorted(range(len(specs)), key=lambda i: specs[i][0])
    while pending or left:
        paths = {i: specs[i][2] for i in left}
        costs = {i: specs[i][3] for i in left}
        rates = _max_min_rates(paths, costs, bandwidth) if left else {}
        nxt_start = specs[pending[0]][0] if pending else float("inf")
        nxt_end = min((left[i] / rates[i] for i in left), default=float("inf"))
        dt = min(nxt_start - t, nxt_end)
        for i in list(left):
            left[i] -= rates[i] * dt
            if left[i] <= 1e-9 * specs[i][1]:
                ends[i] = t + dt
                del left[i]
        t += dt
        while pending and specs[pending[0]][0] <= t:
            i = pending.pop(0)
            left[i] = specs[i][1]
    return [ends[i] for i in range(len(specs))]


@settings(max_examples=examples(300), deadline=None)
@given(st.data())
def test_finish_times_match_an_independent_max_min_fair_fluid_model(data):
    names = ["a", "b", "c", "d"][: data.draw(st.integers(2, 4))]
    bandwidth = {n: float(data.draw(st.sampled_from([10, 25, 50, 100]))) for n in names}
    specs = []
    for _ in range(data.draw(st.integers(1, 6))):
        links = data.draw(st.lists(st.sampled_from(names), min_size=1, max_size=3, unique=True))
        costs = [float(data.draw(st.sampled_from([1, 1, 2]))) for _ in links]
        start = float(data.draw(st.sampled_from([0, 0, 0.5, 1, 3])))
        size = float(data.draw(st.sampled_from([5, 20, 47.5, 100])))
        specs.append((start, size, links, costs))
    ends, _ = run_flows(specs, bandwidth)
    assert ends == pytest.approx(_fluid_finish_times(specs, bandwidth), rel=1e-6)
