"""Hardening of everything kvsim reads as configuration (issue 11, classes 3, 7, 10, 11).

YAML (scenarios, extends chains, profiles, sweeps, suites, ``--set`` values) is parsed with
bounded work and memory: alias bombs, recursive aliases and deep nesting are refused with
one line; merge keys work; integers and floats that cannot be represented are refused;
only regular files of bounded size are read; every echoed user text is one safe line.
"""

from __future__ import annotations

import os
import textwrap
import tracemalloc
import unicodedata
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvsim.cli import main
from kvsim.config.loader import load_record, load_scenario
from kvsim.config.loader.layers import MAX_EXTENDS, load_chain
from kvsim.config.loader.overrides import parse_override
from kvsim.config.loader.tables import read_timing_csv
from kvsim.errors import InputError, clean
from kvsim.units import parse_bandwidth, parse_duration, parse_rate, parse_size
from kvsim.yamlfile import MAX_INT_CHARS, MAX_YAML_DEPTH, MAX_YAML_VALUES, Budget, load_yaml

from conftest import examples

ROOT = Path(__file__).resolve().parent.parent
QS = ROOT / "scenarios" / "quickstart.yaml"
UNSAFE = {"Cc", "Cf", "Cs", "Co", "Zl", "Zp"}


def bomb(levels: int = 9, width: int = 10) -> str:
    """A "billion laughs" document: width**levels values from a few hundred bytes."""
    lines = ["a0: &a0 [" + ", ".join(["lol"] * width) + "]"]
    for i in range(1, levels):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * width) + "]")
    return "\n".join(lines) + "\n"


def merge_bomb(levels: int = 9, width: int = 10) -> str:
    lines = ["m0: &m0 {" + ", ".join(f"k{i}: {i}" for i in range(width)) + "}"]
    for i in range(1, levels):
        lines.append(f"m{i}: &m{i} {{<<: [" + ", ".join([f"*m{i - 1}"] * width) + "]}")
    return "\n".join(lines) + "\n"


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def refused(fn, *args, **kwargs) -> str:
    with pytest.raises(InputError) as e:
        fn(*args, **kwargs)
    msg = str(e.value)
    assert "\n" not in msg
    return msg


def cli(argv: list[str], capsys) -> tuple[int, str]:
    rc = main(argv)
    err = capsys.readouterr().err.strip()
    return rc, err


# ---- class 3: alias bombs, bounded work and memory -----------------------------------


@pytest.mark.parametrize("text", [bomb(), merge_bomb()], ids=["list-bomb", "merge-bomb"])
def test_alias_bomb_is_refused_within_a_memory_bound(tmp_path, text):
    # 10**9 values once expanded; the refusal must come before any expansion: under 20 MB
    # of Python allocations (the document itself is a few hundred bytes)
    f = write(tmp_path / "bomb.yaml", text)
    tracemalloc.start()
    try:
        msg = refused(load_yaml, f)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert "aliases are expanded" in msg and "bomb.yaml:" in msg
    assert peak < 20 * 2**20, f"peak {peak:,} bytes"


def test_every_yaml_kvsim_reads_is_bounded(tmp_path, capsys):
    from kvsim.experiments.regression import SuiteSpec
    from kvsim.experiments.sweep import SweepSpec

    b = bomb()
    # an extends parent, a profile file, a sweep file, a suite file and a --set value
    write(tmp_path / "parent.yaml", f"extends: {QS}\n{b}")
    write(tmp_path / "child.yaml", "extends: parent.yaml\n")
    assert "parent.yaml:" in refused(load_scenario, tmp_path / "child.yaml")
    write(tmp_path / "p.yaml", b)
    write(tmp_path / "s.yaml", f"extends: {QS}\nprofile: p.yaml\n")
    assert "p.yaml:" in refused(load_scenario, tmp_path / "s.yaml")
    write(tmp_path / "sweep.yaml", f"base: {QS}\n{b}grid:\n  seed: [1]\n")
    assert "aliases" in refused(load_record, SweepSpec, tmp_path / "sweep.yaml")
    write(tmp_path / "suite.yaml", b)
    assert "aliases" in refused(load_record, SuiteSpec, tmp_path / "suite.yaml")
    flow = ["&a0 [" + ", ".join(["x"] * 10) + "]"]
    flow += [f"&a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 9)]
    msg = refused(parse_override, "seed=[" + ", ".join(flow) + "]")
    assert msg.startswith("--set seed=") and msg.endswith("aliases are expanded")
    for argv in (["sweep", str(tmp_path / "sweep.yaml"), "--out", str(tmp_path / "o")],):
        rc, err = cli(argv, capsys)
        assert rc == 2 and err.startswith("kvsim: error: ") and "\n" not in err
        assert not (tmp_path / "o").exists()


def test_the_budget_is_shared_by_an_extends_chain(tmp_path):
    # each file alone is small; the chain together is over the budget
    body = "x: [" + ", ".join(["1"] * 300) + "]\n"
    write(tmp_path / "c.yaml", body)
    write(tmp_path / "b.yaml", "extends: c.yaml\n" + body)
    write(tmp_path / "a.yaml", "extends: b.yaml\n" + body)
    load_chain(tmp_path / "a.yaml", (), Budget(1000))
    assert "too large" in refused(load_chain, tmp_path / "a.yaml", (), Budget(700))


def test_value_count_is_bounded_without_aliases_too(tmp_path):
    f = write(tmp_path / "wide.yaml", "x: [" + ",".join(["1"] * 1001) + "]\n")
    load_yaml(f, Budget(1004))  # the mapping, its key, the list and its 1,001 items
    assert "more than 1,000 values" in refused(load_yaml, f, Budget(1000))
    assert MAX_YAML_VALUES == 100_000  # the catalogue's messages quote it


@pytest.mark.parametrize(
    "text",
    [
        "a: &a [*a]\n",
        "a: &a {b: *a}\n",
        "a: &a {<<: *a}\n",
        "a: &a [1, [2, {c: *a}]]\n",
        "a: &a\n  b: &b\n    c: *a\n",
    ],
)
def test_recursive_aliases_are_refused(tmp_path, text):
    assert "recursive alias" in refused(load_yaml, write(tmp_path / "r.yaml", text))


# ---- class 11: structure ---------------------------------------------------------------


def nested(depth: int, style: str) -> str:
    if style == "flow-list":
        return "x: " + "[" * (depth - 1) + "]" * (depth - 1) + "\n"
    if style == "flow-map":
        return "x: " + "{a: " * (depth - 2) + "1" + "}" * (depth - 2) + "\n"
    # block mappings, one level per indent
    return "".join("  " * i + "a:\n" for i in range(depth - 2)) + "  " * (depth - 2) + "a: 1\n"


@pytest.mark.parametrize("style", ["flow-list", "flow-map", "block"])
def test_nesting_depth_is_bounded_exactly(tmp_path, style):
    ok = write(tmp_path / "ok.yaml", nested(MAX_YAML_DEPTH, style))
    load_yaml(ok)
    deep = write(tmp_path / "deep.yaml", nested(MAX_YAML_DEPTH + 1, style))
    assert "nested deeper than" in refused(load_yaml, deep)
    huge = write(tmp_path / "huge.yaml", nested(900 if style == "block" else 20_000, style))
    assert "nested deeper than" in refused(load_yaml, huge)  # no RecursionError


def test_nesting_through_aliases_is_bounded(tmp_path):
    text = "a0: &a0 [1]\n" + "".join(f"a{i}: &a{i} [*a{i - 1}]\n" for i in range(1, 3000))
    assert "aliases included" in refused(load_yaml, write(tmp_path / "c.yaml", text))
    merges = "m0: &m0 {k: 1}\n" + "".join(
        f"m{i}: &m{i} {{<<: *m{i - 1}}}\n" for i in range(1, 3000)
    )
    assert "aliases included" in refused(load_yaml, write(tmp_path / "m.yaml", merges))


def test_a_valid_merge_key_override_is_not_a_duplicate(tmp_path):
    f = write(
        tmp_path / "s.yaml",
        textwrap.dedent(
            f"""\
            extends: {QS}
            tiers:
              host: &h {{capacity: 100 GB, eviction: lru}}
              nvme:
                <<: *h
                capacity: 300 GB
            remote: &r
              servers: 4
              timeout: 1 s
            """
        ),
    )
    sc = load_scenario(f)
    assert sc.tiers.nvme.capacity == 300e9 and sc.tiers.nvme.eviction.name == "lru"
    data, origins = load_yaml(f)
    assert data["tiers"]["nvme"] == {"capacity": "300 GB", "eviction": "lru"}
    # an overriding key is placed on its own line; a merged one where it was written
    assert origins[("tiers", "nvme", "capacity")].endswith(":6")
    assert origins[("tiers", "nvme", "eviction")].endswith(":3")


def test_merge_keys_follow_yaml_rules(tmp_path):
    text = textwrap.dedent(
        """\
        a: &a {x: 1, y: 1}
        b: &b {x: 2, z: 2}
        c:
          <<: [*a, *b]
          y: 3
        d: {<<: *b, <<x: 4}
        """
    )
    f = write(tmp_path / "m.yaml", text)
    data, origins = load_yaml(f)
    assert data == yaml.safe_load(text)  # first merged mapping wins, own keys win over all
    assert data["c"] == {"x": 1, "y": 3, "z": 2}
    assert origins[("c", "z")].endswith(":2") and origins[("c", "y")].endswith(":5")
    # a real duplicate is still one
    dup = write(tmp_path / "d.yaml", "c:\n  <<: {x: 1}\n  y: 1\n  y: 2\n")
    assert "c.y: duplicate key" in refused(load_yaml, dup)


keys = st.sampled_from(["x", "y", "z", "w"])
flat_maps = st.dictionaries(keys, st.integers(0, 9), max_size=4)


@settings(max_examples=examples(60), deadline=None)
@given(
    anchors=st.lists(flat_maps, min_size=1, max_size=3),
    uses=st.lists(
        st.tuples(st.lists(st.integers(0, 2), min_size=1, max_size=3), flat_maps),
        min_size=1,
        max_size=3,
    ),
)
def test_merge_keys_match_pyyaml_property(tmp_path_factory, anchors, uses):
    # any document of anchored mappings merged (in any order) and overridden: kvsim's
    # loader gives exactly PyYAML's data and never calls a merge a duplicate
    lines = []
    for i, m in enumerate(anchors):
        body = ", ".join(f"{k}: {v}" for k, v in m.items())
        lines.append(f"a{i}: &a{i} {{{body}}}")
    for j, (sources, own) in enumerate(uses):
        refs = ", ".join(f"*a{s % len(anchors)}" for s in sources)
        lines.append(f"u{j}:")
        lines.append(f"  <<: [{refs}]")
        lines += [f"  {k}: {v}" for k, v in own.items()]
    text = "\n".join(lines) + "\n"
    f = write(tmp_path_factory.mktemp("m") / "m.yaml", text)
    data, origins = load_yaml(f)
    assert data == yaml.safe_load(text)
    for j, _ in enumerate(uses):
        for k in data[f"u{j}"]:
            assert (f"u{j}", k) in origins


def test_scenario_path_that_is_a_symlink_loop(tmp_path, capsys):
    os.symlink(tmp_path / "b.yaml", tmp_path / "a.yaml")
    os.symlink(tmp_path / "a.yaml", tmp_path / "b.yaml")
    rc, err = cli(["validate", str(tmp_path / "a.yaml")], capsys)
    assert rc == 2 and "symlink loop" in err and "\n" not in err
    write(tmp_path / "c.yaml", "extends: a.yaml\n")
    assert "symlink loop" in refused(load_scenario, tmp_path / "c.yaml")
    write(tmp_path / "d.yaml", f"extends: {QS}\nprofile: a.yaml\n")
    assert "symlink loop" in refused(load_scenario, tmp_path / "d.yaml")


def test_extends_chain_length_is_bounded(tmp_path):
    def chain(n: int) -> Path:
        for i in range(n - 1):
            write(tmp_path / f"s{i}.yaml", f"extends: s{i + 1}.yaml\n")
        write(tmp_path / f"s{n - 1}.yaml", f"extends: {QS}\n")
        return tmp_path / "s0.yaml"

    # quickstart.yaml is the last file of the chain
    assert load_scenario(chain(MAX_EXTENDS - 1)).name == "quickstart"
    msg = refused(load_scenario, chain(MAX_EXTENDS))
    assert f"longer than {MAX_EXTENDS}" in msg
    assert "longer than" in refused(load_scenario, chain(2000))  # no RecursionError


def test_a_non_scalar_key_is_refused_with_its_line(tmp_path):
    f = write(tmp_path / "k.yaml", "a: 1\n? {b: 1}\n: 2\n")
    assert "k.yaml:2" in refused(load_yaml, f)


# ---- class 7: only regular files, of bounded size ------------------------------------


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_fifos_and_devices_are_refused_not_read(tmp_path):
    from kvsim.experiments.sweep import SweepSpec

    fifo = tmp_path / "f.yaml"
    os.mkfifo(fifo)  # reading it would block forever
    write(tmp_path / "e.yaml", "extends: f.yaml\n")
    assert "is a FIFO" in refused(load_scenario, tmp_path / "e.yaml")
    write(tmp_path / "p.yaml", f"extends: {QS}\nprofile: f.yaml\n")
    assert "is a FIFO" in refused(load_scenario, tmp_path / "p.yaml")
    assert "is a FIFO" in refused(load_scenario, fifo)
    assert "is a FIFO" in refused(load_record, SweepSpec, fifo)
    assert "is a device" in refused(load_yaml, "/dev/zero")
    write(tmp_path / "t.yaml", f"extends: {QS}\ntiming:\n  table: /dev/zero\n")
    assert "is a device" in refused(load_scenario, tmp_path / "t.yaml")
    fifo_csv = tmp_path / "t.csv"
    os.mkfifo(fifo_csv)
    assert "is a FIFO" in refused(read_timing_csv, fifo_csv, "here")
    assert "is a folder" in refused(load_yaml, tmp_path)


def test_config_files_have_a_size_bound(tmp_path):
    big = write(tmp_path / "big.yaml", "# " + "x" * (4 << 20) + "\nname: x\n")
    assert "kvsim reads at most" in refused(load_yaml, big)


# ---- class 10: numbers that cannot be represented ------------------------------------


@pytest.mark.parametrize(
    "literal",
    [
        "9" * 5000,
        "-" + "9" * 5000,
        "1_" * 3000 + "1",
        "0x" + "f" * 1000,
        "0" + "7" * 1000,
        "0b" + "1" * 1000,
        "!!int " + ":".join(["59"] * 1000),  # YAML 1.1 base 60 (plain, it is a string)
        "!!int '" + "7" * 5000 + "'",
    ],
    ids=["decimal", "negative", "underscores", "hex", "octal", "binary", "base60", "tagged"],
)
def test_huge_integers_are_refused_with_their_line(tmp_path, literal):
    f = write(tmp_path / "n.yaml", f"name: x\nseed: {literal}\n")
    msg = refused(load_yaml, f)
    assert "n.yaml:2" in msg and "too large" in msg


def test_integers_up_to_the_bound_are_read(tmp_path):
    f = write(tmp_path / "n.yaml", f"seed: {'9' * MAX_INT_CHARS}\n")
    assert load_yaml(f)[0]["seed"] == int("9" * MAX_INT_CHARS)


def test_huge_integers_in_set_and_in_sweeps(tmp_path, capsys):
    rc, err = cli(["validate", str(QS), "--set", "seed=" + "9" * 5000], capsys)
    assert rc == 2 and "--set seed=999" in err and "too large" in err and len(err) < 1000
    rc, err = cli(["validate", str(QS), "--set", "remote.servers=0x" + "f" * 5000], capsys)
    assert rc == 2 and "too large" in err
    sweep = write(tmp_path / "sw.yaml", f"base: {QS}\ngrid:\n  seed: [1, {'9' * 5000}]\n")
    rc, err = cli(["sweep", str(sweep), "--out", str(tmp_path / "o"), "--quiet"], capsys)
    assert rc == 2 and "sw.yaml:3" in err and not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    "body,field",
    [
        ("model:\n  kv_layout:\n    extra_bytes_per_layer: 1e999\n", "extra_bytes_per_layer"),
        ("model:\n  kv_layout:\n    latent_dtype_bytes: 1e999\n", "latent_dtype_bytes"),
        ("remote:\n  capacity: 1e300 EB\n", "remote.capacity"),
        ("remote:\n  bandwidth: 1e308 TB/s\n", "remote.bandwidth"),
        ("remote:\n  timeout: 1e307 h\n", "remote.timeout"),
        ("workload:\n  arrivals: {process: poisson, rate: 1e308/ns}\n", "rate"),
        ("remote:\n  capacity: " + "9" * 400 + " EB\n", "remote.capacity"),
        ("timing:\n  scale: -.inf\n", "timing.scale"),
    ],
)
def test_floats_that_overflow_are_refused(tmp_path, body, field):
    f = write(tmp_path / "s.yaml", f"extends: {QS}\n{body}")
    assert field in refused(load_scenario, f)


def test_unit_parsers_refuse_overflow_and_do_not_backtrack():
    for parse, text in (
        (parse_size, "1e300 EB"),
        (parse_bandwidth, "1e300 PB/s"),
        (parse_duration, "1e306 h"),
        (parse_rate, "1e300/ns"),
        (parse_size, "1" * 400 + " B"),
    ):
        with pytest.raises(ValueError, match=r"too large|finite"):
            parse(text)
    # a lazy group before a trailing \s* made this quadratic (minutes); and the echo is short
    with pytest.raises(ValueError) as e:
        parse_size("1 a" + " " * 200_000 + "b")
    assert len(str(e.value)) < 300
    assert parse_size("  2 TiB \n") == 2.0**41


def test_timing_table_numbers(tmp_path):
    t = tmp_path / "t.csv"
    write(t, "new_tokens,cached_tokens,seconds\n1,0,1e999\n")
    assert "t.csv:2" in refused(read_timing_csv, t, "here")
    write(t, "new_tokens,cached_tokens,seconds\n1,0,-1\n")
    assert "t.csv:2" in refused(read_timing_csv, t, "here")
    write(t, "new_tokens,cached_tokens,seconds\n" + "9" * 5000 + ",0,1\n")
    assert "bad number" in refused(read_timing_csv, t, "here")
    # a long diagonal: the completeness check must not walk the 30,000 x 30,000 grid
    write(
        t,
        "new_tokens,cached_tokens,seconds\n" + "".join(f"{i + 1},{i},1\n" for i in range(30_000)),
    )
    assert "incomplete" in refused(read_timing_csv, t, "here")


@pytest.mark.parametrize("text", ["name: 2024-02-30\n", "name: 2024-01-01 25:00:00\n"])
def test_impossible_timestamps_are_refused_with_their_line(tmp_path, text):
    assert "t.yaml:1" in refused(load_yaml, write(tmp_path / "t.yaml", text))


# ---- echoed user text: one safe line ---------------------------------------------------


def assert_safe(msg: str) -> None:
    assert "\n" not in msg and "\r" not in msg
    assert not any(unicodedata.category(c) in UNSAFE for c in msg), ascii(msg)


def test_escape_sequences_in_keys_and_values_are_escaped(tmp_path, capsys):
    cases = {
        "key": '"\\e[2J\\e[31mred": 1\n',
        "newline key": '"a\\nb\\rc": 1\n',
        "bidi value": 'cluster: {router: "\\u202eevil\\x07"}\n',
        "profile": 'profile: "\\e]0;title\\a"\n',
        "nested key": 'remote:\n  "\\e[5m": 1\n',
    }
    for label, body in cases.items():
        f = write(tmp_path / "s.yaml", f"extends: {QS}\n{body}")
        rc, err = cli(["validate", str(f)], capsys)
        assert rc == 2, label
        assert_safe(err)
    rc, err = cli(["validate", str(QS), "--set", "\x1b[31m.x=1"], capsys)
    assert rc == 2 and "\\x1b[31m" in err
    assert_safe(err)
    name = tmp_path / "\x1b[31mevil.yaml"
    rc, err = cli(["validate", str(name)], capsys)
    assert rc == 2 and "\\x1b[31mevil.yaml" in err
    assert_safe(err)


def test_echoed_text_is_bounded(tmp_path, capsys):
    for body in (
        "k" * 100_000 + ": 1\n",
        "cluster: {router: " + "r" * 100_000 + "}\n",
        "remote: {bandwidth: " + "1" * 399 + " " + "x" * 100_000 + "}\n",
        "profile: " + "p" * 100_000 + "\n",
    ):
        f = write(tmp_path / "s.yaml", f"extends: {QS}\n{body}")
        rc, err = cli(["validate", str(f)], capsys)
        assert rc == 2 and len(err) < 3000, err[:200]


@settings(max_examples=examples(80), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(min_size=1, max_size=30))
def test_any_unknown_key_is_echoed_as_one_safe_line(tmp_path_factory, key):
    # any key text, written with YAML's own escaping, is reported on one safe line
    f = tmp_path_factory.mktemp("k") / "s.yaml"
    f.write_text(f"extends: {QS}\n" + yaml.safe_dump({"zz" + key: 1}), encoding="utf-8")
    try:
        load_scenario(f)
    except InputError as e:
        assert_safe(str(e))
    else:  # pragma: no cover - no such key is valid
        pytest.fail("an unknown key was accepted")


def test_clean_is_idempotent_and_keeps_printable_text():
    text = "caf\u00e9 80 \u00b5s \u2192 ok"
    assert clean(text) == text
    dirty = "\x1b[31m\u202e\ud800\n\t"
    once = clean(dirty)
    assert clean(once) == once
    assert_safe(once)
    assert clean("x" * 5000, 100).startswith("x" * 100) and len(clean("x" * 5000, 100)) < 200


# ---- fuzz: random YAML-ish documents never crash the loader ----------------------------

atoms = st.sampled_from(
    [
        "a",
        "1",
        "*a",
        "&a",
        "[",
        "]",
        "{",
        "}",
        ", ",
        ": ",
        "\n",
        "  ",
        "- ",
        "<<: ",
        "*b",
        "&b ",
        "!!int ",
        "0x1f",
        "1e999",
        "'x'",
        '"\\e"',
        "? ",
        "~",
        "2024-02-30",
        "9" * 50,
        "#",
    ]
)


@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(atoms, max_size=40))
def test_fuzz_yaml_loader(tmp_path_factory, parts):
    f = tmp_path_factory.mktemp("f") / "f.yaml"
    f.write_text("".join(parts), encoding="utf-8")
    try:
        load_yaml(f)
    except InputError as e:
        assert_safe(str(e))
    try:
        parse_override("x=" + "".join(parts))
    except InputError as e:
        assert_safe(str(e))


def test_an_override_of_an_aliased_mapping_changes_only_that_place(tmp_path):
    # found by the second attack round: `nvme: *h` shared host's dict, so
    # `--set tiers.nvme.capacity=...` silently changed the host tier as well
    text = QS.read_text(encoding="utf-8")
    text = text.replace("  host: {capacity: 120 GB}", "  host: &h {capacity: 120 GB}")
    text = text.replace("  nvme: {capacity: 400 GB}", "  nvme: *h")
    assert "*h" in text
    f = write(tmp_path / "s.yaml", text)
    sc = load_scenario(f, ["tiers.nvme.capacity=300 GB"])
    assert (sc.tiers.host.capacity, sc.tiers.nvme.capacity) == (120e9, 300e9)
    data, _ = load_yaml(f)
    assert data["tiers"]["host"] is not data["tiers"]["nvme"]


fragments = st.sampled_from(
    [
        "[" * 60 + "]" * 60,
        "{a: " * 45 + "1" + "}" * 45,
        "9" * 4301,
        "0x" + "f" * 401,
        "1e999",
        "-.inf",
        "1e300 EB",
        "2024-02-30",
        '"\\e[31m\\u202e\\n"',
        "!!int ''",
        "&x [*x]",
        "{<<: {engines: 2}, engines: 3}",
        "[&y [1, 1, 1, 1, 1, 1, 1, 1, 1, 1], [*y, *y, *y, *y, *y, *y, *y, *y, *y, *y]]",
    ]
)
paths = st.sampled_from(
    [
        "seed",
        "cluster.engines",
        "cluster",
        "remote.capacity",
        "timing.scale",
        "name",
        "workload.arrivals.rate",
        "tiers.host",
        "\\e[2Jkey",
        "model.kv_layout.layers",
    ]
)


@settings(max_examples=examples(50), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(paths, fragments), min_size=1, max_size=3))
def test_fuzz_scenario_with_hostile_yaml_values(tmp_path_factory, edits):
    # hostile values at random places of a scenario, as a file and as --set: a clean
    # one-line refusal (or a valid scenario), never a traceback, hang or blow-up
    body = ""
    for path, value in edits:
        *parents, leaf = path.split(".")
        for depth, key in enumerate(parents):
            body += "  " * depth + f'"{key}":\n'
        body += "  " * len(parents) + f'"{leaf}": {value}\n'
    f = tmp_path_factory.mktemp("h") / "s.yaml"
    f.write_text(f"extends: {QS}\n{body}", encoding="utf-8")
    for attempt in (
        lambda: load_scenario(f),
        lambda: load_scenario(QS, [f"{p}={v}" for p, v in edits]),
    ):
        try:
            attempt()
        except InputError as e:
            assert_safe(str(e))
            assert len(str(e)) < 3000


def test_override_paths_are_bounded(tmp_path, capsys):
    # 20,000 levels took 20 s (quadratic bookkeeping) before the bound
    rc, err = cli(["validate", str(QS), "--set", "a." * 20_000 + "a=1"], capsys)
    assert rc == 2 and "deeper than" in err and len(err) < 1000
    sweep = write(tmp_path / "sw.yaml", f"base: {QS}\nset:\n  {'a.' * 100}a: 1\n")
    rc, err = cli(["sweep", str(sweep), "--out", str(tmp_path / "o"), "--quiet"], capsys)
    assert rc == 2 and err.startswith("kvsim: error: ") and not (tmp_path / "o").exists()


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_a_fifo_swapped_in_after_the_check_is_refused_not_waited_on(tmp_path, monkeypatch):
    # the race between check_regular's look at the name and the open: the open itself
    # must refuse (it never blocks) what is not a regular file
    import kvsim.files as files

    fifo = tmp_path / "swapped.yaml"
    os.mkfifo(fifo)
    monkeypatch.setattr(files, "check_regular", lambda *a, **k: os.stat(QS))
    with pytest.raises(InputError, match="not a regular"):
        files.read_text(fifo)
    with files.open_regular(QS) as fh:
        assert fh.read(5) == b"# Qui"


@pytest.mark.parametrize(
    "body",
    [
        'name: "\\e[2J\\e[31mX"\n',
        'name: "two\\nlines"\n',
        'description: "\\e]0;title\\a"\n',
        'node: {gpu: "\\u202eB300"}\n',
        'model: {name: "\\x9b31m"}\n',
        "name: " + "n" * 300 + "\n",
    ],
)
def test_text_that_reports_print_is_one_printable_line(tmp_path, body):
    # found by the second attack round: `kvsim run` printed a scenario name's escape
    # sequences raw in its summary header
    f = write(tmp_path / "s.yaml", f"extends: {QS}\n{body}")
    msg = refused(load_scenario, f)
    assert "s.yaml:2" in msg
    assert_safe(msg)


def test_block_scalar_description_keeps_working(tmp_path):
    f = write(tmp_path / "s.yaml", f"extends: {QS}\ndescription: >\n  one line, folded\n")
    assert load_scenario(f).description == "one line, folded"


# ---- round 2 (helper F): merge lists, base 60 -------------------------------------------

long_keys = st.sampled_from(["capacity", "eviction", "servers", "timeout"])
long_maps = st.dictionaries(long_keys, st.integers(0, 99), max_size=4)


@settings(max_examples=examples(60), deadline=None)
@given(
    anchors=st.lists(long_maps, min_size=2, max_size=4),
    uses=st.lists(
        st.tuples(st.lists(st.integers(0, 3), min_size=1, max_size=4), long_maps),
        min_size=1,
        max_size=3,
    ),
)
def test_merge_lists_first_source_wins_property(tmp_path_factory, anchors, uses):
    # multi-character keys: PyYAML 6.0.4 dedups merged keys by id() of the key string, so
    # only interned one-letter keys came out right and `<<: [*b, *a]` gave *a's value.
    # Expected by the merge-key spec: own keys, then the first source that sets a key.
    lines = []
    for i, m in enumerate(anchors):
        body = ", ".join(f"{k}: {v}" for k, v in m.items())
        lines.append(f"a{i}: &a{i} {{{body}}}")
    expected = {f"a{i}": m for i, m in enumerate(anchors)}
    line_of: dict[tuple, int] = {}
    for j, (sources, own) in enumerate(uses):
        idx = [s % len(anchors) for s in sources]
        refs = ", ".join(f"*a{s}" for s in idx)
        lines.append(f"u{j}:")
        lines.append(f"  <<: [{refs}]")
        want: dict = {}
        for s in idx:
            for k, v in anchors[s].items():
                if k not in want:
                    want[k] = v
                    line_of[(f"u{j}", k)] = s + 1
        for k, v in own.items():
            lines.append(f"  {k}: {v}")
            want[k] = v
            line_of[(f"u{j}", k)] = len(lines)
        expected[f"u{j}"] = want
    text = "\n".join(lines) + "\n"
    f = write(tmp_path_factory.mktemp("m") / "m.yaml", text)
    data, origins = load_yaml(f)
    assert data == expected
    for path, line in line_of.items():  # the line recorded is the value's that won
        assert origins[path].endswith(f":{line}")


def test_merge_list_in_a_scenario_takes_the_first_source(tmp_path):
    f = write(
        tmp_path / "s.yaml",
        f"extends: {QS}\ntiers:\n  gpu: &b {{capacity: 40 GB}}\n"
        "  host: &a {capacity: 120 GB, eviction: lru}\n  nvme: {<<: [*b, *a]}\n",
    )
    sc = load_scenario(f)
    assert sc.tiers.nvme.capacity == 40e9 and sc.tiers.nvme.eviction.name == "lru"


@pytest.mark.parametrize("text", ["1:0", "1:30", "-2:00", "1:30.5", "190:20:30"])
def test_base_60_numbers_are_strings(tmp_path, text, capsys):
    data, _ = load_yaml(write(tmp_path / "n.yaml", f"a: {text}\n"))
    assert data == {"a": text}
    assert parse_override(f"x={text}") == (["x"], text)
    f = write(tmp_path / "s.yaml", f"extends: {QS}\ncluster: {{engines: {text}}}\n")
    rc, err = cli(["validate", str(f)], capsys)
    assert rc == 2 and "s.yaml:2: cluster.engines" in err and "integer" in err
    assert "!!int" not in refused(load_yaml, write(tmp_path / "t.yaml", "a: !!int 1:0\n"))


def test_other_yaml_numbers_still_resolve(tmp_path):
    text = "a: 1_000\nb: 0x1f\nc: 1.5e+3\nd: -3\ne: .inf\nf: 0b11\ng: 2.5\n"
    data, _ = load_yaml(write(tmp_path / "n.yaml", text))
    assert data == {"a": 1000, "b": 31, "c": 1500.0, "d": -3, "e": float("inf"), "f": 3, "g": 2.5}
