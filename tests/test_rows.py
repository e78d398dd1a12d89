"""The per-request columns: one declaration (kvsim.sim.rows) gives both the schema and the
values read off each finished request by name; the table keeps them as typed columns."""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvsim.sim.rows import COLUMN_NAMES, DEFAULT, SCHEMA, Column, RowTable, columns

from conftest import examples, record, record_sources

VALUE = {
    "q": st.integers(-(2**62), 2**62),
    "d": st.floats(allow_nan=True, allow_infinity=True),
    "?": st.booleans(),
    "s": st.sampled_from(["", "gpu", "dropped", "engine 3 failed"]),
}


def sources(draw: Any) -> dict[str, Any]:
    """Random values for every source of the default columns (and the restore time)."""
    return record_sources(lambda col: draw(VALUE[col.code]))


def expected(values: dict[str, Any]) -> dict[str, Any]:
    """Each column's value, by hand from the sources: the derived ones by their formulas."""
    out: dict[str, Any] = {}
    for col in DEFAULT:
        src = col.source
        if col.name == "ttft_s":
            continue
        if col.name == "load_s":
            out[col.name] = values["load_s"] + values["prefetch_s"]
        elif isinstance(src, tuple):
            name, t = src
            out[col.name] = values[name][t]
        else:
            out[col.name] = values[src]
    out["ttft_s"] = values["finish"] - values["req.arrival"]
    return out


def same(a: object, b: object) -> bool:
    """Equal, NaN included (-0.0 keeps its sign)."""
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or (
            a == b and math.copysign(1, a) == math.copysign(1, b)
        )
    return a == b


@settings(max_examples=examples(40), deadline=None)
@given(data=st.data(), n=st.integers(0, 12), every=st.integers(1, 7))
def test_each_column_is_its_declared_source(data, n, every):
    """Records in, reads between them (many chunks): every column holds, for every record,
    the value of its declared source (or its formula), in order."""
    table = RowTable()
    want = []
    with np.errstate(invalid="ignore", over="ignore"):
        for i in range(n):
            values = sources(data.draw)
            want.append(expected(values))
            table.add(record(values))
            if i % every == every - 1:
                assert len(table) == i + 1
        assert len(table) == n
        for name in COLUMN_NAMES:
            col = table.column(name)
            got = col if isinstance(col, list) else col.tolist()
            assert all(same(g, w[name]) for g, w in zip(got, want, strict=True)), name


def test_the_schema_is_the_declaration():
    """SCHEMA, COLUMN_NAMES and the table's names all come from the one declaration."""
    assert [c.name for c in DEFAULT] == list(COLUMN_NAMES) == [n for n, _, _ in SCHEMA]
    assert RowTable().names == COLUMN_NAMES
    assert len(set(COLUMN_NAMES)) == len(COLUMN_NAMES)
    # every column says where its value comes from
    assert all(c.source or c.derived for c in DEFAULT)


def test_columns_are_typed_arrays_over_several_batches():
    """2,500 records (more than one batch of 1,024): int64, float64, bool and text columns
    with every record's value."""
    table = RowTable()
    recs = []
    for i in range(2500):
        values = record_sources(
            lambda col, i=i: {"q": i, "d": i / 3, "?": i % 2 == 0, "s": f"r{i % 3}"}[col.code]
        )
        values["tokens"] = list(range(i, i + 6))
        recs.append(values)
        table.add(record(values))
    for name, code, _ in SCHEMA:
        col = table.column(name)
        if code == "s":
            assert isinstance(col, list) and len(col) == 2500
        else:
            assert col.dtype == {"q": np.int64, "d": np.float64, "?": np.bool_}[code]
            assert len(col) == 2500
    assert table.column("tokens_nvme").tolist() == [i + 2 for i in range(2500)]
    assert table.column("tokens_compute").tolist() == [i + 5 for i in range(2500)]
    assert table.column("id").tolist() == list(range(2500))


def test_a_user_tier_kind_has_its_own_columns():
    """A sixth tier named cxl (code 5): its restore time, tokens and bytes columns, each
    read from its entry of the per-tier lists; the computed tokens stay last."""
    cols = columns(("gpu", "host", "nvme", "remote", "peer", "cxl"))
    names = [c.name for c in cols]
    for name in ("load_cxl_s", "tokens_cxl", "bytes_cxl"):
        assert name in names
    assert names.index("load_cxl_s") == names.index("load_peer_s") + 1
    assert names.index("tokens_compute") == names.index("tokens_cxl") + 1
    by = {c.name: c for c in cols}
    assert by["tokens_cxl"].source == ("tokens", 5) and by["load_cxl_s"].source == ("tier_s", 5)
    assert by["tokens_compute"].source == ("tokens", -1)


def test_a_column_whose_source_is_no_field_of_the_record_is_refused_by_name():
    """Each column's source must be a field Job.record() returns (or an attribute of its
    request): one that is not is refused when the table is made, naming column and field."""
    with pytest.raises(ValueError, match="column x: no field 'nosuch'"):
        RowTable([Column("x", "d", "", "nosuch")])
    with pytest.raises(ValueError, match="column y: no field 'nosuch'"):
        RowTable([Column("y", "d", "", ("nosuch", 1))])
    table = RowTable()  # a record without record(): named when the batch is read
    table.add(SimpleNamespace(req=SimpleNamespace(id=1)))
    with pytest.raises(AttributeError, match="record"):
        table.column("id")
