"""The row table: rows go in as tuples, come back the same, and make typed columns."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvsim.sim.rows import COLUMN_NAMES, SCHEMA, RowTable

from conftest import examples

VALUE = {
    "q": st.integers(-(2**62), 2**62),
    "d": st.floats(allow_nan=True, allow_infinity=True),
    "?": st.booleans(),
    "s": st.sampled_from(["", "gpu", "dropped", "engine 3 failed"]),
}
ROW = st.tuples(*(VALUE[code] for _, code, _ in SCHEMA))


def same(a: object, b: object) -> bool:
    """Equal, NaN included, and of the same type (-0.0 keeps its sign)."""
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or (
            a == b and math.copysign(1, a) == math.copysign(1, b)
        )
    return type(a) is type(b) and a == b


@settings(max_examples=examples(60), deadline=None)
@given(rows=st.lists(ROW, max_size=40), every=st.integers(1, 7))
def test_rows_come_back_as_appended(rows, every):
    table = RowTable()
    for i, row in enumerate(rows):
        table.append(row)
        if i % every == every - 1:  # a read moves the batch into the columns: many chunks
            assert len(table) == i + 1
            assert all(map(same, table[i], row))
    assert len(table) == len(rows)
    for got, want in zip(table, rows, strict=True):
        assert all(map(same, got, want))


def test_columns_are_typed_arrays_with_every_row():
    table = RowTable()
    rows = [
        tuple(
            {"q": i, "d": i / 3, "?": i % 2 == 0, "s": f"r{i % 3}"}[code] for _, code, _ in SCHEMA
        )
        for i in range(2500)  # more than one batch
    ]
    for row in rows:
        table.append(row)
    for c, (name, code, _) in enumerate(SCHEMA):
        col = table.column(name)
        want = [row[c] for row in rows]
        if code == "s":
            assert col == want
        else:
            assert col.dtype == {"q": np.int64, "d": np.float64, "?": np.bool_}[code]
            assert col.tolist() == want


def test_a_row_of_the_wrong_length_is_refused():
    table = RowTable()
    table.append((0,) * (len(COLUMN_NAMES) - 1))
    with pytest.raises(ValueError, match="fields"):
        len(table.column("id"))
