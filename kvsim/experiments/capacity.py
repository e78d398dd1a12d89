"""SLO capacity search: the highest arrival rate whose runs still meet an SLO.

The load is scaled by a factor m on the scenario's own arrivals: a synthetic workload's
``arrivals.rate`` is multiplied by m, a trace's ``time_scale`` divided by it (and the
warm-up and time limit divided by it too). For each
replication (seed) the largest m that meets the SLO is bracketed (doubling or halving from
m = 1) and then bisected (geometric midpoints) until the bracket is narrower than
``tol``; the SLO is assumed to get harder as load grows. The capacity is reported as the
offered request rate at that m (requests / arrival span of the workload itself), with
the mean over replications and a 95% Student-t interval.

Session workloads also get ``sessions_per_gpu``: the concurrent sessions the cluster
serves per GPU at the SLO, by Little's law, L = lambda x W, divided by the GPUs
(``cluster.engines x node.gpus``). For a synthetic workload with ``sessions:``, lambda is
the session arrival rate at the found factor (``arrivals.rate x m``) and W the mean
session lifetime, from the first turn's arrival to the last turn's first token:
``(E[turns] - 1) x think_time`` (turn k + 1 arrives an exponential think time after
turn k arrives: the generator's open loop) plus the mean TTFT of a session's last
measured turn in the run at that factor (:func:`session_lifetime`). E[turns] comes from
the ``turns`` distribution (clipped at ``requests``, as the generator clips it), not from
the run's sessions, which the request count cuts at the end of the run (that would bias
W low). For a trace whose requests carry session ids, both come from the run at the found
factor: lambda = sessions / the arrival span, W = the mean over sessions of (last first
token - first arrival). Without sessions there is no ``sessions_per_gpu``.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from kvsim import api
from kvsim.config.loader import with_sets
from kvsim.config.schema import (
    ChoiceDist,
    ClosedArrivals,
    FixedDist,
    GeometricDist,
    Scenario,
    SyntheticWorkload,
    UniformDist,
)
from kvsim.errors import InputError
from kvsim.experiments.explain import Explanation, explain
from kvsim.experiments.replicate import (
    load_overrides,
    replication_overrides,
    stop_pool,
    worker_pool,
)
from kvsim.experiments.slo import SLO, check_slo, parse_slo, with_slo
from kvsim.experiments.sweep.spec import load_sweep, relabel
from kvsim.results.uncertainty import Interval, bound_keys, mean_interval, paired_interval
from kvsim.workload import open_workload
from kvsim.workload.synthetic import sample


class Infeasible(InputError):
    """No point a search tried meets the SLO; ``explanation`` says why
    (:class:`kvsim.experiments.explain.Explanation`), for the command to print before
    its one-line refusal."""

    def __init__(self, message: str, explanation: Explanation) -> None:
        super().__init__(message)
        self.explanation = explanation

    def __reduce__(self) -> tuple[Any, ...]:  # (raised in --sweep's worker processes)
        return (Infeasible, (self.reason, self.explanation))


def offered_rate(sc: Scenario) -> float:
    """Requests per second the scenario's workload offers (count / arrival span)."""
    first = last = None
    n = 0
    for r in open_workload(sc.workload, sc.seed):
        first = r.arrival if first is None else first
        last = r.arrival
        n += 1
    if n < 2 or last == first:
        raise InputError("workload: a capacity search needs at least two arrivals over time")
    return (n - 1) / (last - first)


def mean_turns(sc: Scenario) -> float | None:
    """E[turns per session] of a synthetic workload with ``sessions:`` (each draw clipped
    at ``requests``, as the generator clips it); None without sessions."""

    w = sc.workload
    if not isinstance(w, SyntheticWorkload) or w.sessions is None:
        return None
    d, n = w.sessions.turns, w.requests
    if isinstance(d, FixedDist):
        return float(min(d.value, n))
    if isinstance(d, UniformDist):  # integers low..high, each equally likely
        return float(np.minimum(np.arange(d.low, d.high + 1), n).mean())
    if isinstance(d, GeometricDist):  # E[min(G, n)] = sum_{k<n} P(G > k) = sum (1 - p)^k
        q = 1.0 - 1.0 / d.mean
        return float(n) if q == 0.0 else (1.0 - q**n) / (1.0 - q)
    if isinstance(d, ChoiceDist):
        wts = np.ones(len(d.values)) if d.weights is None else np.asarray(d.weights, float)
        return float(np.dot(np.minimum(d.values, n), wts / wts.sum()))
    # lognormal, rounded and clipped: no closed form; a fixed-seed sample of 200,000 draws
    # (standard error < 0.3% of the mean for sigma <= 1)
    draws = sample(d, np.random.default_rng(0), 200_000)
    return float(np.minimum(draws, n).mean())


@dataclass(frozen=True)
class SessionStats:
    """Little's law at one load: sessions arriving per second, their mean lifetime (s) and
    the concurrent sessions per GPU, L / GPUs = rate x lifetime / GPUs."""

    rate: float
    lifetime: float
    per_gpu: float
    span: float = math.nan  # seconds of arrivals the run covered


def gpus(sc: Scenario) -> int:
    """GPUs of the cluster: engines x GPUs per node."""
    return sc.cluster.engines * sc.node.gpus


def session_lifetime(sc: Scenario, requests: Any) -> SessionStats | None:
    """:class:`SessionStats` of a run of ``sc`` (its requests table), or None when its
    workload has no sessions (see the module docstring for the two estimates)."""

    df = requests
    turns = mean_turns(sc)
    w = sc.workload
    span = float(df["arrival_s"].max() - df["arrival_s"].min()) if len(df) else 0.0
    if turns is not None:
        assert isinstance(w, SyntheticWorkload) and w.sessions is not None
        m = df[~df["warmup"] & (df["session"] >= 0)]
        # each session's latest measured turn (its last, unless the request count cut it)
        last = m.loc[m.groupby("session")["arrival_s"].idxmax()] if len(m) else m
        ttft = float(np.nanmean(last["ttft_s"])) if len(last) else math.nan
        # (closed-loop arrivals have no session rate: kvsim.config.checks refuses them)
        rate = math.nan if isinstance(w.arrivals, ClosedArrivals) else w.arrivals.rate
        lifetime = (turns - 1.0) * w.sessions.think_time + ttft
    else:
        s = df[df["session"] >= 0]
        if isinstance(w, SyntheticWorkload) or not len(s):
            return None
        g = s.groupby("session")
        first = g["arrival_s"].min()
        end = g["finish_s"].max().fillna(g["arrival_s"].max())  # a dropped turn: its arrival
        if span <= 0:
            return None
        rate = len(first) / span
        lifetime = float((end - first).mean())
    return SessionStats(rate, lifetime, rate * lifetime / gpus(sc), span)


@dataclass
class Capacity:
    """The result of a search: per-replication capacities and their summary."""

    slo: SLO
    rates: list[float]  # requests/s per replication (offered, as measured)
    factors: list[float]  # arrival-rate factors (not the request-rate ratio: sessions)
    evaluations: int
    config: dict[str, Any] = field(default_factory=dict)
    base_rate: float = math.nan  # requests/s the scenario itself offers
    # session workloads: Little's law at the found load, per replication (else empty)
    sessions: list[SessionStats] = field(default_factory=list)
    # the summary of the run at the found load, per replication
    summaries: list[dict[str, Any]] = field(default_factory=list)
    # the configuration of a --sweep the others are compared with (paired, per seed)
    reference: bool = False

    @property
    def sessions_per_gpu(self) -> Interval:
        """Concurrent sessions per GPU at the SLO: the mean over replications and its 95%
        interval (no value without sessions)."""
        return mean_interval([s.per_gpu for s in self.sessions])

    @property
    def mean(self) -> float:
        return sum(self.rates) / len(self.rates)

    @property
    def interval(self) -> Interval:
        """The mean and its 95% interval (none from one replication)."""
        return mean_interval(self.rates)

    @property
    def ci95(self) -> float:
        """Half-width of the 95% interval of the mean (NaN with one replication, 0 with
        identical ones)."""
        return self.interval.half


def search(
    sc: Scenario,
    slo: SLO,
    *,
    reps: int = 3,
    tol: float = 0.02,
    log: Callable[[str], None] = lambda _m: None,
) -> Capacity:
    """Bracket and bisect the load factor per replication (see the module docstring)."""
    if not 0 < tol < 1:
        raise InputError(f"must be in (0, 1), got {tol}", where="--tol")
    closed_loop(sc)
    evaluations = 0
    slo = slo.scoped(sc)
    check_slo(slo, sc)  # a term its runs cannot have: refused before any run

    extra = replication_overrides(sc, reps)  # a trace: each replication resamples it
    if extra:
        log(
            f"replications resample the trace (workload.resample: "
            f"{extra['workload.resample']}, one draw per seed); --set workload.resample=none "
            "replays the trace as it is (replications identical: no interval)"
        )

    # session workloads: Little's law from each run (kept per load and seed: the answer's
    # load is one the search ran)
    found: dict[tuple[float, int], SessionStats | None] = {}
    ran: dict[tuple[float, int], dict[str, Any]] = {}  # summaries by load and seed
    floors: dict[int, Any] = {}  # the runs at vanishing load (Results), by seed

    def run(factor: float, seed: int) -> dict[str, Any]:
        nonlocal evaluations
        evaluations += 1
        try:
            res = api.run(sc, {**load_overrides(sc, factor), **extra}, seed)
            # a joint SLO: each run's goodput (a single term's runs keep their summary)
            res = with_slo(res, slo if slo.also else None)
        except InputError as e:
            raise InputError(f"at {factor:g}x the scenario's load (seed {seed}): {e}") from None
        if sessions:
            found[factor, seed] = session_lifetime(res.scenario, res.requests)
        ran[factor, seed] = res.summary
        if factor == FLOOR:
            floors[seed] = res
        return res.summary

    def meets(factor: float, seed: int) -> bool:
        return slo.met(run(factor, seed))

    base_rate = offered_rate(api.load(sc, extra or None))
    sessions = mean_turns(sc) is not None or _has_sessions(api.load(sc, extra or None))

    rates, factors = [], []
    stats: list[SessionStats] = []
    summaries: list[dict[str, Any]] = []
    for rep in range(reps):
        seed = sc.seed + rep
        lo, hi = 1.0, 1.0
        if meets(1.0, seed):
            hi = 2.0
            while meets(hi, seed):
                lo, hi = hi, hi * 2
                if hi > 2.0**20:
                    raise InputError(
                        f"the SLO ({slo}) still holds at {lo:g}x the load; is it "
                        "one that load can break?"
                    )
        else:
            floor = run(FLOOR, seed)  # no queueing left: what the requests cost alone
            if not slo.met(floor):
                where = f"at 1/{1 / FLOOR:g} of the scenario's load"
                why = explain(slo.missed(floor), where, [floors[seed]])
                raise Infeasible(
                    f"the SLO ({slo}) fails even at vanishing load (1/{1 / FLOOR:g} of the "
                    f"scenario's, seed {seed}): {floor_report(why)}",
                    why,
                )
            lo = 0.5
            while not meets(lo, seed):
                hi, lo = lo, lo / 2
        while hi / lo - 1 > tol:
            mid = math.sqrt(lo * hi)
            if meets(mid, seed):
                lo = mid
            else:
                hi = mid
        scaled = api.load(sc, {**load_overrides(sc, lo), **extra}, seed)
        rate = offered_rate(scaled)
        # the offered rate as measured: with multi-turn sessions it grows more slowly than
        # the session arrival rate (think times do not shrink)
        log(
            f"replication {rep + 1}/{reps} (seed {seed}): {rate:.4g} requests/s offered "
            f"({rate / base_rate:.4g}x the scenario's {base_rate:.4g} requests/s; arrival "
            f"rate x{lo:.4g})"
        )
        rates.append(rate)
        factors.append(lo)
        if (lo, seed) not in ran:  # (the search always ran its answer; to be sure)
            run(lo, seed)
        summaries.append(ran[lo, seed])
        # the answer's run still filling up: its SLO figure is of a transient
        steady = ran[lo, seed].get("steady_state")
        for line in steady.get("warnings", []) if isinstance(steady, dict) else []:
            log(f"  warning: at that load, {line}")
        if sessions:
            st = found[lo, seed]
            if st is not None:
                stats.append(st)
                log(
                    f"  {st.per_gpu:.4g} concurrent sessions per GPU ({st.rate:.4g} sessions/s "
                    f"x {st.lifetime:.4g} s mean lifetime / {gpus(sc)} GPUs)"
                )
                if st.span < SPAN_LIFETIMES * st.lifetime:
                    log(
                        f"  warning: the run at that load covers {st.span:.3g} s of arrivals, "
                        f"under {SPAN_LIFETIMES} mean session lifetimes: most of its sessions "
                        "are cut short (mostly first turns, little reuse), so the capacity "
                        "and sessions per GPU run high; raise workload.requests"
                    )
    return Capacity(
        slo, rates, factors, evaluations, base_rate=base_rate, sessions=stats, summaries=summaries
    )


def closed_loop(sc: Scenario) -> None:
    """Refuse a capacity search of closed-loop clients (``workload.concurrency``): raising
    the arrival rate only lengthens the clients' own queue, which TTFT (counted from the
    send) leaves out, so no rate breaks the SLO. Their load is the concurrency, which a
    sweep varies (the throughput at each value is its ``requests_per_s``)."""
    if sc.workload.concurrency is not None:
        raise InputError(
            "a capacity search raises the arrival rate, and closed-loop clients send no "
            "faster than their requests finish (TTFT counts from the send): no rate breaks "
            "the SLO; set it to null for the open-loop capacity, or sweep it (kvsim sweep) "
            "for the most requests in flight that meet the SLO",
            where="workload.concurrency",
        )


SPAN_LIFETIMES = 3  # a run should cover this many session lifetimes (else: a warning)


def _has_sessions(sc: Scenario) -> bool:
    """Whether a trace's requests carry session ids (its first 10,000 looked at)."""

    if isinstance(sc.workload, SyntheticWorkload):
        return False
    head = itertools.islice(open_workload(sc.workload, sc.seed), 10_000)
    return any(r.session >= 0 for r in head)


FLOOR = 2.0**-10  # "vanishing" load: the scenario's arrivals spread 1,024 times wider


def floor_report(why: Explanation) -> str:
    """The explanation in one line (the refusal's): the value reached, what dominates the
    slowest requests, and the compute floor."""
    slo, m = why.slo, why.slo.metric
    text = f"{m} = {why.value:.4g} there"
    tail = why.tail
    if tail is not None and tail.requests:
        top = tail.dominant
        text += (
            f"; of the slowest {100 - tail.q:g}%'s TTFT ({tail.ttft_mean:.3g} s) "
            f"{top} dominates ({tail.share(top):.0%})"
        )
    if math.isfinite(why.floor):
        text += f"; compute floor {why.floor:.4g}"
        if why.floor_fails:
            text += f" (alone on an idle engine the requests break {slo}: no load helps)"
    return text


def capacity_table(caps: list[Capacity]) -> Any:
    """One row per configuration: capacity (mean, and its 95% interval as the numbers
    ``capacity_rps_lo`` and ``capacity_rps_hi``: :func:`~kvsim.results.uncertainty.
    bound_keys`), factor, per-rep rates; with several configurations, each one's paired
    difference from the reference (the one marked :attr:`Capacity.reference`, else the
    first): ``delta_capacity_rps`` (mean of the per-seed differences: every configuration
    searched on the same seeds, hence the same workload draws) and its 95% interval over
    seeds ``delta_capacity_rps_lo``, ``delta_capacity_rps_hi`` (empty for the reference
    and with one replication), and the same for ``sessions_per_gpu`` where the table has
    it."""

    ref = next((c for c in caps if c.reference), caps[0]) if len(caps) > 1 else None
    rows = []
    for c in caps:
        label = ", ".join(f"{k}={v}" for k, v in c.config.items()) or "scenario"
        rows.append(
            {
                "configuration": label,
                "slo": str(c.slo),
                "capacity_rps": c.mean,
                **bound_keys("capacity_rps", c.interval),
                "factor": c.mean / c.base_rate,  # over the scenario's offered rate
                "replications": len(c.rates),
                "evaluations": c.evaluations,
                "rates_rps": " ".join(f"{r:.6g}" for r in c.rates),
                **_session_columns(c, any(x.sessions for x in caps)),
                **_goodput_column(c, any(x.slo.also for x in caps)),
                **(_paired_columns(c, ref, any(x.sessions for x in caps)) if ref else {}),
                **c.config,
            }
        )
    return pd.DataFrame(rows)


def _goodput_column(c: Capacity, wanted: bool) -> dict[str, Any]:
    """A joint SLO's ``goodput_rps`` at the capacity: the mean over the replications of
    the answer's runs (requests/s within every per-request bound)."""
    if not wanted:
        return {}
    got = [float(s["goodput_rps"]) for s in c.summaries if "goodput_rps" in s]
    return {"goodput_rps": sum(got) / len(got) if got else math.nan}


def _paired_columns(c: Capacity, ref: Capacity, sessions: bool) -> dict[str, Any]:
    """``delta_capacity_rps`` and its ``_lo``/``_hi`` against ``ref`` (and
    ``delta_sessions_per_gpu`` with its own when ``sessions``), from per-seed values;
    empty for ``ref`` itself."""
    pairs = {"capacity_rps": (c.rates, ref.rates)}
    if sessions:
        pairs["sessions_per_gpu"] = (
            [s.per_gpu for s in c.sessions],
            [s.per_gpu for s in ref.sessions],
        )
    out: dict[str, Any] = {}
    for name, (new, base) in pairs.items():
        out[f"delta_{name}"] = math.nan
        out.update(bound_keys(f"delta_{name}", None))
        if c is ref or not new or len(new) != len(base):
            continue
        iv = paired_interval(new, base)
        out[f"delta_{name}"] = iv.mean
        out.update(bound_keys(f"delta_{name}", iv))
    return out


def _session_columns(c: Capacity, wanted: bool) -> dict[str, Any]:
    """sessions_per_gpu (mean), its 95% interval (``sessions_per_gpu_lo``, ``_hi``), the
    session rate and lifetime (means) and the per-replication values, when a
    configuration of the table has sessions."""
    if not wanted:
        return {}
    iv = c.sessions_per_gpu
    n = len(c.sessions)
    return {
        "sessions_per_gpu": iv.mean,
        **bound_keys("sessions_per_gpu", iv),
        "session_rate_per_s": sum(s.rate for s in c.sessions) / n if n else math.nan,
        "session_lifetime_s": sum(s.lifetime for s in c.sessions) / n if n else math.nan,
        "sessions_per_gpu_reps": " ".join(f"{s.per_gpu:.6g}" for s in c.sessions),
    }


def _search_config(args: tuple[str, dict[str, Any], list[str], str, int, float]) -> Capacity:
    base, overrides, extra, slo_text, reps, tol = args
    sc = api.load(base, with_sets(overrides, extra))  # --set as `kvsim run` takes it
    cap = search(sc, parse_slo(slo_text), reps=reps, tol=tol)
    cap.config = overrides
    return cap


def sweep_with_sets(sweep: Any, sets: list[str]) -> list[tuple[dict[str, Any], Scenario]]:
    """Each configuration of a sweep (its ``set`` and swept values) with the command
    line's ``--set`` overrides on top, loaded (so a bad --set is refused before any run).
    A --set of a swept field is refused: it would make the configurations one."""
    swept = set(sweep.columns)
    for o in sets:
        key = str(o).split("=", 1)[0].strip()
        if key in swept:
            raise InputError(
                f"{key} is swept by the sweep file; --set cannot fix it", where=f"--set {o}"
            )
    # plugins a --set (or --plugin) adds: loaded with the swept values, which may name them
    given = with_sets({}, sets)  # (each --set parsed; one given twice refused)
    extra = given.get("plugins")
    base = sweep.runs[0].base
    labels = dict(sweep.runs[0].labels)
    out = []
    for cfg in sweep.configurations():
        overrides = {**sweep.set, **cfg}
        first = overrides
        if isinstance(extra, list) and extra:
            first = {**overrides, "plugins": [*overrides.get("plugins", []), *extra]}
        # the --set go in where `kvsim run --set` puts them: below the profile merge, so
        # that --set profile=... (or a composed profile mapping) chooses the profile
        try:
            sc = api.load(base, with_sets(first, sets))
        except InputError as e:  # a sweep's own value named by its line, as `kvsim sweep` does
            own = {k: v for k, v in first.items() if k not in given}
            raise relabel(e, own, labels) from None
        out.append((first, sc))  # (the plugins travel with the configuration's overrides)
    return out


def sweep_capacity(
    sweep_path: str,
    slo_text: str,
    *,
    reps: int,
    tol: float,
    workers: int,
    sets: list[str] | None = None,
    log: Callable[[str], None] = lambda _m: None,
) -> list[Capacity]:
    """One capacity per configuration of a sweep file (its seeds are ignored: ``reps``
    replications each; ``sets``: --set overrides on top), searched in parallel on local
    processes."""
    sets = list(sets or [])

    slo = parse_slo(slo_text)  # refuse a bad SLO before starting anything
    if workers < 1:
        raise InputError("must be >= 1", where="--workers")
    if not 0 < tol < 1:
        raise InputError(f"must be in (0, 1), got {tol}", where="--tol")
    sweep = load_sweep(sweep_path)
    configs = sweep_with_sets(sweep, sets)
    for _, sc in configs:
        check_slo(slo, sc)
    jobs = [(sweep.runs[0].base, overrides, sets, slo_text, reps, tol) for overrides, _ in configs]
    log(f"{len(jobs)} configurations, {reps} replications each")
    if workers <= 1 or len(jobs) == 1:
        caps = [_search_config(j) for j in jobs]
    else:
        pool = worker_pool(min(workers, len(jobs)))
        try:
            caps = list(pool.map(_search_config, jobs))
        except BrokenProcessPool:
            stop_pool(pool)
            raise InputError(
                "a worker process was killed (out of memory? a signal?)",
                where=f"--workers {workers}",
            ) from None
        except BaseException:
            stop_pool(pool)  # an interrupt (or a refused configuration) ends the others
            raise
        pool.shutdown(wait=True)
    for cap, cfg in zip(caps, sweep.configurations(), strict=True):
        cap.config = cfg
    caps[sweep.reference_index()].reference = True
    return caps
