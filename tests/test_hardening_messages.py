"""Config messages in the user's words, policy mappings, the scenario hash (issue 39,
classes 5, 6 and 14's first item).

5. Every pydantic error reaches the user as the field's path (as written in YAML: no
   validator, union-member, tag or class names), what was given and what is allowed
   (kvsim.config.loader.messages.validation_error, the one place a ValidationError becomes an
   InputError). A walk gives every field of the schema a wrong-typed value.
6. A policy mapping without a name (``tiers.host.eviction: {params: {}}``) is refused: its
   params are for no policy in particular.
14. ``kvsim check --strict`` does not call a scenario changed when only its description
    changed (kvsim.config.dump.scenario_identity: what the hash covers).
"""

from __future__ import annotations

import copy
import re
import typing
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ValidationError

from kvsim.cli import main
from kvsim.config.dump import scenario_to_dict
from kvsim.config.loader import load_scenario, validate
from kvsim.config.schema import Scenario
from kvsim.errors import InputError

from conftest import examples

ROOT = Path(__file__).resolve().parent.parent
QS = ROOT / "scenarios" / "quickstart.yaml"

# what pydantic's own messages and locs say that a user never wrote
INTERNALS = (
    "function-after",
    "function-before",
    "function-wrap",
    "constrained-",
    "discriminator",
    "union_tag",
    "Unable to extract",
    "instance of",
    "object to extract",
    "lax-or-strict",
    "PolicyRef",
    "ProfileSpec",
    "Input tag",
)


def cli(capsys, argv: list[str]) -> tuple[int, str]:
    rc = main(argv)
    return rc, capsys.readouterr().err.strip()


def refused_cli(capsys, tmp_path: Path, body: str, *extra: str) -> tuple[str, Path]:
    """``body`` added to a child of the quickstart (its line 1 is ``extends:``), run with
    --out: exit 2, one line, nothing written. Returns (the line, the scenario file)."""
    bad = tmp_path / "bad.yaml"
    bad.write_text(f"extends: {QS}\n{body}", encoding="utf-8")
    out = tmp_path / "out"
    rc, err = cli(capsys, ["run", str(bad), "--out", str(out), "--quiet", *extra])
    assert rc == 2, err
    *notices, err = err.splitlines()  # (a scenario's plugins: the import notice first)
    assert all(n.startswith("kvsim: importing plugin code: ") for n in notices), notices
    assert err.startswith("kvsim: error: ") and "\n" not in err and "Traceback" not in err, err
    assert not out.exists()
    for word in INTERNALS:
        assert word not in err, err
    return err.removeprefix("kvsim: error: "), bad


# ---- 5: the walk ----------------------------------------------------------------------


def _members(annotation: typing.Any) -> list[typing.Any]:
    args = typing.get_args(annotation)
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _members(args[0])
    if origin is typing.Union or (origin is not None and "UnionType" in str(origin)):
        return [m for a in args for m in _members(a)]
    return [annotation]


def _paths(model: type[BaseModel], prefix: tuple = (), depth: int = 0) -> list[tuple]:
    """Every field of the schema, three records deep (each member of a union too)."""
    out = []
    for name, field in model.model_fields.items():
        path = (*prefix, name)
        out.append(path)
        if depth < 3:
            for m in _members(field.annotation):
                if isinstance(m, type) and issubclass(m, BaseModel):
                    out += _paths(m, path, depth + 1)
    return list(dict.fromkeys(out))


PATHS = _paths(Scenario)
WRONG = (7, [1], True)  # a number, a list, a boolean: wrong for most fields


@pytest.fixture(scope="module")
def resolved() -> dict:
    return scenario_to_dict(load_scenario(QS))


def _set(data: dict, path: tuple, value: typing.Any) -> None:
    node = data
    for key in path[:-1]:
        if not isinstance(node.get(key), dict):
            node[key] = {}
        node = node[key]
    node[path[-1]] = value


def _field_part(message: str) -> tuple[str, str]:
    """(field path, reason) of ``where: path: reason``."""
    rest = message.removeprefix("walk: ")
    path, _, reason = rest.partition(": ")
    return path, reason


def test_the_walk_covers_the_schema():
    tops = {p[0] for p in PATHS}
    assert {"workload", "tiers", "remote", "profile", "cluster", "faults", "timing"} <= tops
    assert len(PATHS) > 200


@pytest.mark.parametrize("value", WRONG, ids=["int", "list", "bool"])
def test_every_field_given_a_wrong_type_is_named_in_the_users_words(resolved, value):
    seen = 0
    for path in PATHS:
        data = copy.deepcopy(resolved)
        _set(data, path, copy.deepcopy(value))
        try:
            Scenario.model_validate(data)
        except ValidationError:
            pass
        else:
            continue  # a value this field takes (a bool, a count); cross-checks aside
        with pytest.raises(InputError) as e:
            validate(data, {}, "walk")
        message = str(e.value)
        seen += 1
        assert "\n" not in message
        for word in INTERNALS:
            assert word not in message, (path, message)
        if path[0] == "plugins" and "plugin" in message:
            continue  # a plugins: entry is imported before validation, named by its line
        field, reason = _field_part(message)
        # the path as written: dotted names, list items as [N], nothing else in brackets
        assert re.fullmatch(r"[A-Za-z_][\w.]*(\[\d+\])*(\.[\w]+(\[\d+\])*)*", field), message
        # the field given, one above it (a union member's), or beside it (a record's
        # required field it left missing)
        dotted = ".".join(str(p) for p in path)
        parent = ".".join(str(p) for p in path[:-1])
        assert dotted.startswith(field) or field.startswith(parent), (path, message)
        # what was given (or that a field is missing or unknown), in the user's words
        assert re.search(r"\bgiven\b|\bgot\b|missing|unknown field|must |needs ", reason), (
            path,
            message,
        )
        if "Input should" in reason:
            assert "given" in reason or "got" in reason, (path, message)
    assert seen > 150


VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(10**6), 10**6)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=8)
    | st.sampled_from(["lru", "synthetic", "fixed", "1 GB", "5 s", "{name: x}", "kind"]),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(
            st.sampled_from(["kind", "dist", "name", "params", "x"]), inner, max_size=3
        )
    ),
    max_leaves=6,
)


@settings(
    max_examples=examples(300),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(path=st.sampled_from(PATHS), value=VALUES)
def test_fuzzed_values_are_refused_in_the_users_words(resolved, path, value):
    """Any YAML value at any field of the schema: taken, or refused in one line with no
    pydantic internals and a field path as written."""
    data = copy.deepcopy(resolved)
    _set(data, path, value)
    try:
        validate(data, {}, "walk")
    except InputError as e:
        message = str(e)
    else:
        return
    assert "\n" not in message
    for word in INTERNALS:
        assert word not in message, (path, message)
    field, _ = _field_part(message)
    if field != message.removeprefix("walk: "):  # (a plugin entry's message has no path)
        assert re.fullmatch(r"[^\[\]]+(\[\d+\][^\[\]]*)*", field), (path, message)


@pytest.mark.parametrize(
    ("section", "tag", "allowed"),
    [
        (("workload",), "kind", "'mooncake', 'azure' or 'synthetic'"),
        (("workload", "prompt_tokens"), "dist", "'fixed', 'uniform'"),
        (("workload", "arrivals"), "process", "'poisson', 'constant', 'bursty' or 'closed'"),
        (("model", "kv_layout"), "kind", "'mla', 'mha' or 'gqa'"),
    ],
)
def test_a_tagged_union_names_its_tags(resolved, section, tag, allowed):
    dotted = ".".join(section)
    for value, field, expected in (
        (5, dotted, "given 5; allowed a mapping with"),
        ({tag: "nope"}, f"{dotted}.{tag}", "given 'nope'; allowed"),
        ({}, dotted, f"given a mapping without {tag}"),
    ):
        data = copy.deepcopy(resolved)
        _set(data, section, value)
        with pytest.raises(InputError) as e:
            validate(data, {}, "walk")
        message = str(e.value)
        assert message.startswith(f"walk: {field}: "), message
        assert expected in message and allowed in message, message
        for word in INTERNALS:
            assert word not in message, message


def test_a_profile_of_the_wrong_type_given_to_a_loaded_scenario(resolved):
    """Both members of ``profile``'s union tried: one message, both alternatives."""
    data = copy.deepcopy(resolved)
    data["profile"] = 5
    with pytest.raises(InputError) as e:
        validate(data, {}, "walk")
    assert str(e.value) == (
        "walk: profile: given 5; allowed a valid string or a mapping "
        "{model, gpu, gpus, tp, pcp, pp, ep, dtype, ...}"
    )


@pytest.mark.parametrize(
    ("body", "line", "expected"),
    [
        ("workload: 5\n", 2, "workload: given 5; allowed a mapping with kind: 'mooncake'"),
        ("workload:\n  kind: nope\n", 3, "workload.kind: given 'nope'; allowed 'mooncake',"),
        ("tiers:\n  host:\n    codec: 5\n", 4, "tiers.host.codec: given 5; allowed a mapping {"),
        ("run: [1]\n", 2, "run: given a list of 1; allowed a mapping {warmup"),
        ("cluster:\n  engines: [2]\n", 3, "cluster.engines: given a list of 1; allowed a valid"),
        ("node:\n  copy_engine: 3\n", 3, "node.copy_engine: given 3; allowed 'dma' or 'kernel'"),
        ("faults:\n  - 5\n", 3, "faults[0]: given 5; allowed a mapping with kind:"),
        (
            "workload:\n  kind: synthetic\n  prompt_tokens: {dist: fixed, value: x}\n",
            4,
            "workload.prompt_tokens.value: given 'x'; allowed a valid integer",
        ),
        (
            "profile: {model: 5, gpu: B300}\n",
            2,
            "profile.model: given 5; allowed a name from `kvsim profiles`, or a path",
        ),
    ],
)
def test_wrong_types_through_the_cli(capsys, tmp_path, body, line, expected):
    err, bad = refused_cli(capsys, tmp_path, body)
    assert err.startswith(f"{bad}:{line}: {expected}"), err


def test_a_sweep_files_wrong_type_is_named_too(capsys, tmp_path):
    sweep = tmp_path / "s.yaml"
    sweep.write_text(f"base: {QS}\ngrid:\n  cluster.engines: [1, 2]\nreplications: [2]\n")
    out = tmp_path / "out"
    rc, err = cli(capsys, ["sweep", str(sweep), "--out", str(out), "--quiet"])
    assert rc == 2 and "\n" not in err, err
    assert f"{sweep}:4: replications: given a list of 1; allowed" in err, err
    assert not out.exists()


# ---- 6: a policy mapping names its policy ----------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        "tiers:\n  host:\n    eviction: {params: {}}\n",
        "tiers:\n  host:\n    eviction: {}\n",
        "tiers:\n  host:\n    eviction:\n      name: null\n",
    ],
)
def test_a_policy_mapping_without_a_name_is_refused(capsys, tmp_path, body):
    err, bad = refused_cli(capsys, tmp_path, body)
    assert err.startswith(f"{bad}:4: tiers.host.eviction: given "), err
    assert "an eviction policy mapping names the policy" in err, err
    assert "{name: NAME, params: {...}}" in err, err


def test_params_set_where_no_layer_names_the_policy_are_refused(capsys, tmp_path):
    """The quickstart names no host eviction policy: a --set of one parameter is for no
    policy in particular (it used to go silently to the default, lru)."""
    expr = "tiers.host.eviction.params.small_frac=0.2"
    err, _ = refused_cli(capsys, tmp_path, "", "--set", expr)
    assert err.startswith(f"--set {expr}: tiers.host.eviction: given a mapping of params"), err


def test_a_policy_mapping_with_its_name_is_taken():
    sc = load_scenario(QS, ["tiers.host.eviction={name: fifo, params: {}}"])
    assert sc.tiers.host.eviction.name == "fifo"


# ---- 14: the scenario hash leaves out what cannot change a result ---------------------


def _suite(folder: Path, scenario: Path) -> Path:
    suite = folder / "suite.yaml"
    suite.write_text(
        f"name: gate\nseeds: [0]\nentries:\n  - scenario: {scenario.name}\n    loads: [1.0]\n"
    )
    return suite


TINY = """\
name: tiny
description: {description}
cluster: {{engines: 1}}
run: {{warmup: 0 s}}
workload:
  kind: synthetic
  requests: {requests}
  arrivals: {{process: poisson, rate: 4/s}}
  prompt_tokens: {{dist: fixed, value: 4096}}
"""


def test_strict_check_ignores_a_change_of_description_alone(capsys, tmp_path):
    sc = tmp_path / "tiny.yaml"
    sc.write_text(TINY.format(description="first words", requests=30))
    suite = _suite(tmp_path, sc)
    base = tmp_path / "base"
    assert main(["baseline", str(suite), "--out", str(base)]) == 0
    capsys.readouterr()
    sc.write_text(TINY.format(description="other words entirely", requests=30))
    rc, err = cli(capsys, ["check", str(suite), "--baseline", str(base), "--strict"])
    assert rc == 0, err
    # a change that can move a result still fails --strict, naming the baseline
    sc.write_text(TINY.format(description="other words entirely", requests=31))
    rc, err = cli(capsys, ["check", str(suite), "--baseline", str(base), "--strict"])
    assert rc == 2 and "\n" not in err, err
    assert f"{base / 'baseline.json'}: entry 'tiny': scenario 'tiny' differs" in err, err


PLUGIN = """\
from kvsim.plugins import EvictionPolicy, register


@register("needs_frac")
class NeedsFrac(EvictionPolicy):
    def __init__(self, frac: float) -> None:
        self.frac = frac

    def victim(self, *args, **kwargs):
        return None
"""


@pytest.mark.parametrize(
    "eviction", ["needs_frac", "{name: needs_frac}", "{name: needs_frac, params: {}}"]
)
def test_a_missing_parameter_is_named_below_params_in_every_form(capsys, tmp_path, eviction):
    """A field the data leaves out (here a plugin's required parameter) keeps its path,
    whether the policy is a bare name, a mapping without params or with empty params."""
    (tmp_path / "nf.py").write_text(PLUGIN)
    err, bad = refused_cli(
        capsys, tmp_path, f"plugins: [nf.py]\ntiers:\n  gpu:\n    eviction: {eviction}\n"
    )
    assert err.startswith(f"{bad}:5: tiers.gpu.eviction.params.frac: missing required"), err
