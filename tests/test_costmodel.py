"""The two-term cost model: formulas on hand-computed values, and the simulator agreeing
with it (within 2%) on isolated single requests, where its assumptions hold."""

import math

import pytest

from kvsim import api
from kvsim.cli import main
from kvsim.physics.costmodel import (
    GIB,
    CostModel,
    b_star,
    crossover_tokens,
    effective_bandwidth,
    recompute_seconds,
    restore_seconds,
    timing_crossover,
)

from conftest import SCENARIOS


def test_formulas_on_hand_computed_values():
    # s = 1000 B/token, R = 1000 tokens/s: B* = 1 MB/s
    assert b_star(1000, 1000) == 1e6
    assert restore_seconds(500, 2e6, 0.1, 1000) == pytest.approx(0.1 + 0.25)
    assert recompute_seconds(500, 1000) == pytest.approx(0.5)
    # at 2 MB/s each restored token saves 1 ms - 0.5 ms: T0 = 0.1 s pays off after 200
    assert crossover_tokens(2e6, 0.1, 1000, 1000) == pytest.approx(200)
    # at or below B* a restore never wins
    assert crossover_tokens(1e6, 0.1, 1000, 1000) == math.inf
    assert crossover_tokens(0.5e6, 0.0, 1000, 1000) == math.inf
    # infinite bandwidth: T0*R
    assert crossover_tokens(1e30, 0.1, 1000, 1000) == pytest.approx(100)
    # a 10 B op at 10 B/s with 1 s of overhead moves 5 B/s; two servers in parallel 10 B/s
    assert effective_bandwidth(10, 1.0, 10) == pytest.approx(5)
    assert effective_bandwidth(10, 1.0, 10, servers=2) == pytest.approx(10)


def test_the_studys_figures_from_the_default_profile():
    sc = api.profile_scenario("b300-pcp8-glm5")
    m = api.cost_model(sc)
    assert m.rate == pytest.approx(16384 / 0.31)
    assert m.b_star / GIB == pytest.approx(2.52, abs=0.01)  # study: 2.53 (read as GiB/s)
    assert m.b_star / 1e9 == pytest.approx(2.70, abs=0.01)
    assert m.min_tokens == pytest.approx(17441, abs=2)  # study: ~17k
    bws = api.tier_bandwidths(sc)
    assert bws["remote (one server)"][0] / GIB == pytest.approx(1.71, rel=0.002)
    assert bws["remote (per rank, 8 servers)"][0] / GIB == pytest.approx(10.76, rel=0.002)
    # at the sharded bandwidth the break-even is ~23k tokens, so a 16k hit still loses
    assert m.crossover(10.76 * GIB) == pytest.approx(22774, rel=0.01)
    assert m.restore(16384, 10.76 * GIB) > m.recompute(16384)


@pytest.mark.parametrize("sharding", ["none", "per_rank"])
@pytest.mark.parametrize("tokens", [4096, 16384, 65536])
def test_simulator_agrees_with_the_cost_model_on_isolated_requests(sharding, tokens):
    """One request restored from the remote tier on an idle engine (nothing else on the
    links), sync: the restore phase is T0 + bytes / B_eff within 2%, and a cold prefill is
    t(S, 0), which the cost model's recompute side uses at the reference length."""
    servers = 1 if sharding == "none" else 8
    overrides = [
        "workload.prestored=false",
        f"remote.sharding={sharding}",
        f"remote.servers={servers}",
        "remote.capacity=1 TB",
    ]
    sc = api.load(SCENARIOS / "paper" / "micro.yaml", overrides)
    from kvsim.workload.request import Request

    ids = tuple(range(10**12, 10**12 + tokens // 256))
    res = api.run(sc, requests=[Request(0, 0.0, tokens, 1, ids), Request(1, 60.0, tokens, 1, ids)])
    cold, hit = res.requests.iloc[0], res.requests.iloc[1]
    model = api.cost_model(sc, tokens)
    assert cold["compute_s"] == pytest.approx(model.recompute(tokens), rel=1e-9)
    name = "remote (one server)" if sharding == "none" else "remote (per rank, 8 servers)"
    bw, t0 = api.tier_bandwidths(sc)[name]
    want = CostModel(model.kv_bytes, model.rate, t0).restore(tokens - 1, bw)
    assert hit["load_s"] == pytest.approx(want, rel=0.02)
    assert hit["tokens_remote"] == tokens - 1


def test_costmodel_command(tmp_path, capsys):
    plot = tmp_path / "cm.png"
    assert main(["costmodel", "--bandwidth", "10.76 GiB/s", "--plot", str(plot)]) == 0
    out = capsys.readouterr().out
    assert "B* = s*R = 2.704 GB/s = 2.519 GiB/s" in out
    assert "17,441 tokens" in out
    assert plot.stat().st_size > 10_000
    assert main(["costmodel", "--json", "--t0", "0 s"]) == 0
    import json

    data = json.loads(capsys.readouterr().out)
    assert data["min_tokens"] == 0
    assert main(["costmodel", "--bandwidth", "fast"]) == 2
    assert "--bandwidth fast" in capsys.readouterr().err


def test_the_timing_crossover_equals_the_formula_when_recompute_is_linear():
    """t(new, cached) = new / R: restoring S - 1 tokens and computing one beats
    computing S when T0 + (S-1) s/B + 1/R < S/R, i.e. S - 1 > T0 / (1/R - s/B): the
    formula's crossover X, so S = floor(X) + 2 (one token computed, one for the strict
    inequality)."""
    R, s, t0 = 50_000.0, 50_000.0, 0.3
    for bw in (5e9, 10e9, 1e11):
        formula = crossover_tokens(bw, t0, s, R)
        timed = timing_crossover(bw, t0, s, lambda n, c: n / R)
        assert timed == math.floor(formula + 1e-6) + 2
    assert math.isinf(timing_crossover(2e9, t0, s, lambda n, c: n / R))  # below B*


def test_super_linear_recompute_lets_a_tier_below_b_star_win():
    """Quadratic attention: t(n, c) = n/R + k (n c + n^2 / 2). Below B* = s R the formula
    says never; against the timed prefill, long prompts win. Hand check at the answer."""
    R, s, t0, k = 50_000.0, 50_000.0, 0.3, 1e-10

    def t(n: int, c: int) -> float:
        return n / R + k * (n * c + n * n / 2)

    bw = 2e9  # below B* = 2.5e9
    assert math.isinf(crossover_tokens(bw, t0, s, R))
    x = timing_crossover(bw, t0, s, t)
    assert math.isfinite(x)

    def wins(n: int) -> bool:
        return t0 + (n - 1) * s / bw + t(1, n - 1) < t(n, 0)

    assert wins(int(x)) and not wins(int(x) - 1)


def test_costmodel_prints_the_timed_crossover_for_the_one_server_tier(capsys):
    """The default profile: one Valkey server (1.71 GiB/s) is below B*, so the formula
    says never, but against the step model a remote hit wins from about 58.7k tokens."""
    assert main(["costmodel", "--json"]) == 0
    import json

    paths = {p["path"]: p for p in json.loads(capsys.readouterr().out)["paths"]}
    one = paths["remote (one server)"]
    assert one["crossover_tokens"] is None
    assert one["crossover_tokens_timing"] == pytest.approx(58_657, rel=0.02)


@pytest.mark.parametrize("extra", [[], ["--bandwidth", "50 GiB/s", "--t0", "100 ms"]])
def test_costmodel_plot_draws_exactly_the_tables_paths(tmp_path, capsys, monkeypatch, extra):
    """Issue 24: the plot drew bandwidths the table does not list (B* x 1.25, 100 GiB/s)
    and left out host and NVMe. Now its restore lines are the table's rows, one each, in
    order, each with the row's bandwidth and T0, and the crossover marks are the row's."""
    import json

    import numpy as np

    from kvsim import plots
    from kvsim.plots import style

    drawn: list[list[tuple[str, np.ndarray, np.ndarray]]] = []
    real_save = style.save

    def capture(fig, path, in_folder=False):
        drawn.append(
            [
                (ln.get_label(), np.asarray(ln.get_xdata(), float), np.asarray(ln.get_ydata()))
                for ax in fig.axes
                for ln in ax.get_lines()
            ]
        )
        return real_save(fig, path, in_folder)

    monkeypatch.setattr(style, "save", capture)
    plot = tmp_path / "cm.png"
    assert main(["costmodel", *extra, "--plot", str(plot), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert main(["costmodel", *extra, "--plot", str(plot)]) == 0
    table = capsys.readouterr().out.split("restore path", 1)[1].split("\n\n", 1)[0]
    printed = [line.strip() for line in table.splitlines()[1:] if line.strip()]
    rows = doc["paths"]
    assert len(drawn) == 2  # one figure per run
    lines = drawn[1]
    restore = [ln for ln in lines if ln[0].startswith("restore")]
    assert [ln[0] for ln in restore] == [plots.costmodel_label(r) for r in rows]
    assert len(printed) == len(rows) == len(restore)
    for r, shown, (label, x, y) in zip(rows, printed, restore, strict=True):
        assert shown.startswith(r["path"]) and f"{r['bandwidth'] / GIB:.4g} GiB/s" in shown
        assert r["path"] in label and f"{r['bandwidth'] / GIB:.4g} GiB/s" in label
        want = r["t0_s"] + x * 1000 * doc["kv_bytes_per_token"] / r["bandwidth"]
        assert y == pytest.approx(want, rel=1e-12)
    marks = sorted(float(ln[1][0]) for ln in lines if ln[0].startswith("_") and len(ln[1]) == 1)
    crossings = sorted(
        r["crossover_tokens"] / 1000
        for r in rows
        if r["crossover_tokens"] is not None and r["crossover_tokens"] <= 131072
    )
    assert marks == pytest.approx(crossings, rel=1e-12)
    if extra:
        assert any(r["path"] == "50 GiB/s" for r in rows)
