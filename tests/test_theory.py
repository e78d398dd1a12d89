"""Theory checks with stated tolerances over seeded replications.

One engine, no cache tier (GPU capacity 0, lower tiers and remote off), every prompt
16,384 tokens, Poisson arrivals: an M/D/1 queue with service D = t(16384, 0) = 0.31 s.
Pollaczek-Khinchine gives the mean wait Wq = rho * D / (2 (1 - rho)).

The engine is serial (``engine.batching: serial``: one whole prompt per step), which is
the M/D/1 server. Tolerance: |simulated - theory| / theory <= 2% for the mean of REPS
replications of CUSTOMERS requests each (seeds 0..REPS-1), the first WARMUP_FRACTION of
each replication left out of the statistics. With these sizes the replication means'
standard error is about 0.35% of Wq at rho = 0.5 and 0.75% at rho = 0.8 (printed on
failure), so 2% is a real check, not noise.
"""

import numpy as np
import pytest

from kvsim import api

from conftest import MD1_SERVICE, md1

D = MD1_SERVICE
REPS = 20
CUSTOMERS = 40_000
WARMUP_FRACTION = 0.05


def md1_runs(rho):
    rate = rho / D
    out = []
    for seed in range(REPS):
        sc = md1(seed, rate, CUSTOMERS, f"{CUSTOMERS * WARMUP_FRACTION / rate} s")
        out.append(api.run(sc))
    return rate, out


@pytest.mark.slow
@pytest.mark.parametrize("rho", [0.5, 0.8])
def test_md1_mean_wait_matches_pollaczek_khinchine(rho):
    rate, runs = md1_runs(rho)
    theory = rho * D / (2 * (1 - rho))
    means = np.array([r.summary["queue_wait_mean_s"] for r in runs])
    sim = means.mean()
    se = means.std(ddof=1) / np.sqrt(len(means))
    assert abs(sim - theory) / theory <= 0.02, (
        f"rho={rho}: simulated Wq {sim:.4f} s (s.e. {se:.4f}) vs theory {theory:.4f} s"
    )
    # every request is served in exactly D: compute time and utilisation
    df = runs[0].requests
    assert np.allclose(df["compute_s"], D)
    busy = np.mean([r.summary["engine_busy_frac"] for r in runs])
    assert abs(busy - rho) <= 0.02, f"utilisation {busy:.3f} vs rho {rho}"

    # Little's law on the same runs: the engine's own time integral of its queue length
    # equals arrival rate x mean wait (all requests, horizon [0, end]) within 1%; and it
    # matches the M/D/1 queue length Lq = lambda * Wq within the 2% above.
    for r in runs:
        df = r.requests
        end = df["finish_s"].max()
        lam = len(df) / end
        lq_engine = r.summary["mean_queue_length"]
        lq_little = lam * df["queue_wait_s"].mean()
        assert abs(lq_engine - lq_little) / lq_little <= 0.01
    lq = np.mean([r.summary["mean_queue_length"] for r in runs])
    assert abs(lq - rate * theory) / (rate * theory) <= 0.05
