"""Plugin parameters (issue 29): ``{name: NAME, params: {...}}`` in every policy field,
checked against the class's ``__init__``, set with ``--set``, swept as a grid key, written
back in ``scenario.yaml``, listed by ``kvsim plugins``; and each bad input refused with
exit 2 and one line naming the parameter.

The sweep's outcomes are worked out by hand on a hand-made trace (the toy scenario of
tests/conftest.py: 100-token blocks of 100 kB, a serial engine, so a request's blocks
enter GPU HBM when it finishes, and one prompt token is always computed)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import yaml

from kvsim import api
from kvsim.cli import main
from kvsim.config.dump import scenario_to_dict
from kvsim.config.loader import deep_merge, scenario_from_dict
from kvsim.config.schema import POLICY_FIELDS, PolicyRef
from kvsim.plugins import ParamError, check_params, registered

from conftest import TOY

BLOCK = 100_000  # bytes of one 100-token block in the toy scenario

# An eviction policy with one numeric parameter: the victim is the resident block with
# ``skip`` blocks stored before it (the oldest when skip=0, as FIFO). It uses only what
# the store says is stored and removed, so its victims follow from the trace alone.
PLUGIN = '''
from collections import OrderedDict
from typing import Annotated, Any

from pydantic import Field

from kvsim.plugins import EvictionPolicy, LoadPolicy, register


@register("nth_oldest")
class NthOldest(EvictionPolicy):
    """Evicts the resident block with `skip` blocks stored before it."""

    def __init__(self, skip: int = 0, label: str = "x") -> None:
        self.skip = skip
        self.order: OrderedDict[Any, None] = OrderedDict()

    def inserted(self, block):
        self.order[block.key] = None

    def removed(self, key, *reason):
        self.order.pop(key, None)

    def victim(self, tier):
        keys = list(self.order)
        return keys[min(self.skip, len(keys) - 1)]


@register("needs_frac")
class NeedsFrac(EvictionPolicy):
    def __init__(self, frac: Annotated[float, Field(gt=0, lt=1)], *, tags: list[int] = []):
        self.frac = frac

    def victim(self, tier):
        return next(iter(tier))


@register("min_blocks")
class MinBlocks(LoadPolicy):
    """Restores a hit of at least `least` blocks (as sync), else none."""

    def __init__(self, least: int = 4, **extra: Any) -> None:
        self.least = least

    def restore_blocks(self, request, sources, estimate):
        return len(sources) if len(sources) >= self.least else 0
'''


def write_trace(path: Path, rows: list[tuple[float, list[int]]]) -> None:
    with path.open("w") as fh:
        for t, ids in rows:
            fh.write(
                json.dumps(
                    {
                        "timestamp": int(t * 1000),
                        "input_length": len(ids) * 100,
                        "output_length": 1,
                        "hash_ids": ids,
                    }
                )
                + "\n"
            )


@pytest.fixture
def toy(tmp_path: Path) -> Path:
    """The toy scenario replaying: a 3-block prompt [1, 2, 3], a 1-block prompt [9] that
    needs room in HBM (3.5 blocks), then the first prompt again. The plugin evicts the
    block with ``skip`` blocks stored before it: block 1 (skip 0: the probe hits
    nothing), block 2 (skip 1: it hits block 1, 100 tokens) or block 3 (skip 2: blocks 1
    and 2, 200 tokens). The eviction policy is given as a bare name."""
    (tmp_path / "params_plugin.py").write_text(PLUGIN)
    sc = copy.deepcopy(TOY)
    sc["workload"] = {"kind": "mooncake", "path": "trace.jsonl", "block_tokens": 100}
    sc["plugins"] = ["params_plugin.py"]
    sc = deep_merge(
        sc, {"tiers": {"gpu": {"capacity": f"{3.5 * BLOCK:.0f} B", "eviction": "nth_oldest"}}}
    )
    write_trace(tmp_path / "trace.jsonl", [(0, [1, 2, 3]), (10, [9]), (20, [1, 2, 3])])
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(sc))
    return path


def run_cli(path: Path, out: Path, *args: str) -> pd.DataFrame:
    assert main(["run", str(path), "--out", str(out), "--format", "csv", "--quiet", *args]) == 0
    return pd.read_csv(out / "requests.csv").sort_values("id").reset_index(drop=True)


def refused(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    """The one error line of a command that exits 2 (no traceback)."""
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    return err.strip().splitlines()[-1]


# ---- the parameter changes what the run does --------------------------------------------


def test_a_swept_parameter_gives_three_hand_computed_outcomes(toy, tmp_path):
    """``kvsim sweep`` over tiers.gpu.eviction.params.skip (the scenario gives the bare
    name): the probe request hits 0, 100 and 200 tokens (module docstring of ``toy``),
    so the hit ratio over the 700 prompt tokens is 0, 1/7 and 2/7."""
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(
        yaml.safe_dump(
            {
                "name": "skip",
                "base": str(toy),
                "grid": {"tiers.gpu.eviction.params.skip": [0, 1, 2]},
                "seeds": [0],
            }
        )
    )
    out = tmp_path / "out"
    assert main(["sweep", str(sweep), "--out", str(out), "--workers", "1", "--quiet"]) == 0
    table = pd.read_parquet(out / "results.parquet")
    assert (table["status"] == "ok").all(), table["error"].tolist()
    got = table.set_index("tiers.gpu.eviction.params.skip")["hit_ratio"].sort_index()
    assert got.tolist() == pytest.approx([0.0, 100 / 700, 200 / 700], abs=1e-12)


def test_a_sweep_sets_the_name_and_sweeps_its_parameter(toy, tmp_path):
    """The sweep's ``set:`` names the policy (a bare name, over a base that uses
    ``lru``) and its grid sweeps a parameter: one field in two parts, as two ``--set``
    (not "set twice"): the same hand-computed outcomes as above."""
    base = yaml.safe_load(toy.read_text())
    base["tiers"]["gpu"]["eviction"] = "lru"
    (tmp_path / "lru.yaml").write_text(yaml.safe_dump(base))
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(
        yaml.safe_dump(
            {
                "name": "skip",
                "base": "lru.yaml",
                "set": {"tiers.gpu.eviction": "nth_oldest"},
                "grid": {"tiers.gpu.eviction.params.skip": [0, 2]},
                "seeds": [0],
            }
        )
    )
    out = tmp_path / "out"
    assert main(["sweep", str(sweep), "--out", str(out), "--workers", "1", "--quiet"]) == 0
    table = pd.read_parquet(out / "results.parquet")
    assert (table["status"] == "ok").all(), table["error"].tolist()
    got = table.set_index("tiers.gpu.eviction.params.skip")["hit_ratio"].sort_index()
    assert got.tolist() == pytest.approx([0.0, 200 / 700], abs=1e-12)


def test_set_a_parameter_of_a_bare_name(toy, tmp_path):
    """--set of one parameter, with the YAML giving the bare name: the probe (the third
    request) hits as the value says; without params the class default (skip 0) applies."""
    plain = run_cli(toy, tmp_path / "a")
    assert plain["tokens_gpu"].tolist() == [0, 0, 0]
    two = run_cli(toy, tmp_path / "b", "--set", "tiers.gpu.eviction.params.skip=2")
    assert two["tokens_gpu"].tolist() == [0, 0, 200]
    # the scenario written back holds {name, params} and loads to the same scenario
    written = yaml.safe_load((tmp_path / "b" / "scenario.yaml").read_text())
    assert written["tiers"]["gpu"]["eviction"] == {"name": "nth_oldest", "params": {"skip": 2}}
    assert written["tiers"]["host"]["eviction"] == "lru"  # no params: the bare name
    again = run_cli(tmp_path / "b" / "scenario.yaml", tmp_path / "c")
    assert again["tokens_gpu"].tolist() == [0, 0, 200]


def test_scenario_yaml_round_trip(toy, tmp_path):
    """Dump writes the bare name for empty params and {name, params} otherwise; the
    dumped file loads back to the same Scenario (coerced values: 1 for a float is 1.0)."""
    sc = api.load(
        toy,
        [
            "tiers.gpu.eviction.params.skip=1",
            "cluster.load_policy={name: min_blocks, params: {least: 2, extra_knob: [1, 2]}}",
        ],
    )
    assert sc.tiers.gpu.eviction == PolicyRef(name="nth_oldest", params={"skip": 1})
    assert str(sc.tiers.gpu.eviction) == "nth_oldest(skip=1)"
    assert str(sc.tiers.host.eviction) == "lru"
    d = scenario_to_dict(sc)
    assert d["tiers"]["gpu"]["eviction"] == {"name": "nth_oldest", "params": {"skip": 1}}
    assert d["cluster"]["load_policy"]["params"] == {"least": 2, "extra_knob": [1, 2]}
    for path in POLICY_FIELDS:  # the others: bare names, as before policies took params
        if path not in (("tiers", "gpu", "eviction"), ("cluster", "load_policy")):
            node: Any = d
            for part in path:
                node = node[part]
            assert isinstance(node, str), path
    back = scenario_from_dict(yaml.safe_load(yaml.safe_dump(d)), base_dir=toy.parent)
    assert scenario_to_dict(back) == d
    assert back.tiers.gpu.eviction == sc.tiers.gpu.eviction
    assert back.cluster.load_policy == sc.cluster.load_policy


def test_a_bare_name_in_an_extends_parent_takes_params_from_the_child(toy, tmp_path):
    child = tmp_path / "child.yaml"
    child.write_text(f"extends: {toy}\ntiers:\n  gpu:\n    eviction:\n      params: {{skip: 2}}\n")
    sc = api.load(child)
    assert sc.tiers.gpu.eviction == PolicyRef(name="nth_oldest", params={"skip": 2})


def test_params_are_coerced_to_the_annotation():
    from kvsim.plugins import make

    with registered("coerce_me", _Coerce):
        assert check_params("eviction", "coerce_me", {"frac": 1, "n": "3"}) == {
            "frac": 1.0,
            "n": 3,
        }
        policy, _ = make("eviction", "coerce_me", [], {"frac": 1})
        assert policy.frac == 1.0 and isinstance(policy.frac, float)
        with pytest.raises(ParamError) as e:
            check_params("eviction", "coerce_me", {"frac": [1]})
        assert e.value.param == "frac"
        # True or False is not a number here (pydantic's lax mode would make it 1 / 1.0)
        for key in ("frac", "n"):
            with pytest.raises(ParamError) as e:
                check_params("eviction", "coerce_me", {key: True})
            assert e.value.param == key


class _Coerce:
    kind = "eviction"

    def __init__(self, frac: float = 0.5, n: int = 1) -> None:
        self.frac = frac

    def victim(self, tier: Any) -> Any:
        return next(iter(tier))


# ---- bad input: exit 2, naming the parameter ------------------------------------------------


@pytest.mark.parametrize(
    ("override", "field", "reason"),
    [
        ("tiers.gpu.eviction.params.skp=1", "tiers.gpu.eviction.params.skp", "did you mean 'skip'"),
        ("tiers.gpu.eviction.params.skip=abc", "tiers.gpu.eviction.params.skip", "valid integer"),
        ("tiers.gpu.eviction.params.skip=1.5", "tiers.gpu.eviction.params.skip", "integer"),
        (
            "tiers.host.eviction={name: lru, params: {small_frac: 0.2}}",
            "tiers.host.eviction.params.small_frac",
            "the built-in eviction policy 'lru' takes no parameters",
        ),
        (
            "cluster.router={name: round_robin, params: {k: 1}}",
            "cluster.router.params.k",
            "built-in router",
        ),
        (
            "tiers.gpu.eviction=needs_frac",
            "tiers.gpu.eviction.params.frac",
            "missing required parameter",
        ),
        (
            "tiers.gpu.eviction={name: needs_frac, params: {frac: 1.5}}",
            "tiers.gpu.eviction.params.frac",
            "less than 1",
        ),
        (
            "tiers.gpu.eviction={name: needs_frac, params: {frac: 0.5, tags: [a]}}",
            "tiers.gpu.eviction.params.tags",
            "at [0]",
        ),
        (
            "tiers.gpu.eviction={name: nth_oldest, parms: {skip: 1}}",
            "tiers.gpu.eviction.parms",
            "did you mean 'params'",
        ),
        ("tiers.gpu.eviction=[nth_oldest]", "tiers.gpu.eviction", "mapping {name: NAME"),
        ("tiers.gpu.eviction={name: 5}", "tiers.gpu.eviction.name", "valid string"),
    ],
)
def test_bad_params_exit_2_naming_the_parameter(toy, capsys, override, field, reason):
    line = refused(capsys, ["validate", str(toy), "--set", override])
    assert f"{field}: " in line, line
    assert reason in line, line


def test_no_plugins_leaves_a_plugins_params_unchecked(toy, capsys):
    """--no-plugins (inspect): a plugin's params are not checked (its class is not
    imported), a built-in's still are."""
    assert (
        main(["validate", str(toy), "--no-plugins", "--set", "tiers.gpu.eviction.params.bogus=1"])
        == 0
    )
    assert "not checked" in capsys.readouterr().out
    line = refused(
        capsys,
        [
            "validate",
            str(toy),
            "--no-plugins",
            "--set",
            "tiers.host.eviction={name: lru, params: {x: 1}}",
        ],
    )
    assert "tiers.host.eviction.params.x: the built-in eviction policy 'lru'" in line


def test_a_swept_bad_value_fails_its_run_naming_the_parameter(toy, tmp_path, capsys):
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(
        yaml.safe_dump({"base": str(toy), "grid": {"tiers.gpu.eviction.params.skip": [0, "two"]}})
    )
    line = refused(capsys, ["sweep", str(sweep), "--out", str(tmp_path / "o"), "--quiet"])
    assert "1 of 2 runs failed" in line, line
    table = pd.read_parquet(tmp_path / "o" / "results.parquet")
    error = table.loc[table["status"] != "ok", "error"].iloc[0]
    assert "tiers.gpu.eviction.params.skip: Input should be a valid integer" in error, error


# ---- kvsim plugins ---------------------------------------------------------------------


def test_kvsim_plugins_lists_builtins_and_a_scenarios_plugins(toy, capsys):
    assert main(["plugins", str(toy), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["policies"]
    by = {(r["kind"], r["name"]): r for r in rows}
    from kvsim.plugins import BUILTIN

    for kind, names in BUILTIN.items():  # every built-in, each with a description
        for name in names:
            assert by[(kind, name)]["source"] == "built-in"
            assert by[(kind, name)]["doc"]
            assert by[(kind, name)]["params"] == []
    nth = by[("eviction", "nth_oldest")]
    assert nth["source"].endswith("params_plugin.py")
    assert nth["doc"] == "Evicts the resident block with `skip` blocks stored before it."
    assert nth["params"] == [
        {"name": "skip", "type": "int", "required": False, "default": 0},
        {"name": "label", "type": "str", "required": False, "default": "x"},
    ]
    assert nth["used_by"] == ["tiers.gpu.eviction"]
    assert by[("eviction", "needs_frac")]["params"][0]["required"] is True
    assert by[("load_policy", "min_blocks")]["any_keyword"] is True
    assert by[("eviction", "lru")]["used_by"] == []  # (the toy's host tier is disabled)
    assert by[("load_policy", "sync")]["used_by"] == ["cluster.load_policy"]

    assert main(["plugins", str(toy)]) == 0
    text = capsys.readouterr().out
    assert "params: skip: int = 0, label: str = 'x'" in text
    assert "used by: tiers.gpu.eviction" in text


def test_kvsim_plugins_with_no_plugins_imports_nothing(toy, capsys):
    assert main(["plugins", str(toy), "--no-plugins"]) == 0
    captured = capsys.readouterr()
    assert "importing plugin code" not in captured.err
    assert "nth_oldest" not in captured.out
    assert "not imported (--no-plugins): " in captured.out
    assert captured.out.rstrip().endswith("params_plugin.py")
    assert "lru" in captured.out


def test_kvsim_plugins_without_a_scenario_takes_plugin(tmp_path, capsys):
    (tmp_path / "p.py").write_text(PLUGIN.replace('"nth_oldest"', '"nth_oldest_b"'))
    assert main(["plugins", "--plugin", str(tmp_path / "p.py")]) == 0
    out = capsys.readouterr().out
    assert "nth_oldest_b" in out and "sync" in out


def test_a_policy_with_params_reads_as_its_summary_names_it():
    """Sweep tables keep a swept ``{name, params}`` as JSON text; tables and plots show it
    as ``name(k=v)``, as ``str(PolicyRef)`` does."""
    from kvsim.config.schema import policy_text
    from kvsim.plots.labels import value_text

    text = '{"name": "s3fifo", "params": {"small_frac": 0.1}}'
    assert policy_text(text) == "s3fifo(small_frac=0.1)"
    assert value_text("tiers.host.eviction", text) == "s3fifo(small_frac=0.1)"
    assert str(PolicyRef(name="s3fifo", params={"small_frac": 0.1})) == "s3fifo(small_frac=0.1)"
    assert str(PolicyRef(name="lru")) == "lru"
    assert policy_text("lru") is None and policy_text('{"a": 1}') is None
