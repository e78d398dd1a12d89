"""The results frame is built without the copies a plain build makes, and gives the same
frame: each column copied once into id order (``frame``), filters that keep every row, or
one run of rows, not copied (``rows_where``). The plain construction is the reference."""

from __future__ import annotations

import numpy as np
import pandas as pd
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

from kvsim.results.records import frame, rows_where
from kvsim.sim.rows import COLUMN_NAMES, RowTable

from conftest import examples, record, record_sources

VALUE = {
    "q": st.integers(-(2**62), 2**62),
    "d": st.floats(allow_nan=True, allow_infinity=True),
    "?": st.booleans(),
    "s": st.sampled_from(["", "gpu", "restore", "dropped", "engine 3 failed"]),
}


def reference(rows: RowTable) -> pd.DataFrame:
    """The frame as built before issue 30: every column, then consolidated, then sorted."""
    df = pd.DataFrame({name: rows.column(name) for name in COLUMN_NAMES})
    df["decision"] = df["decision"].astype("category")
    df["drop_reason"] = df["drop_reason"].astype(str)
    return df.sort_values("id", kind="stable").reset_index(drop=True)


def table(records: list[dict], every: int) -> RowTable:
    out = RowTable()
    for i, values in enumerate(records):
        out.add(record(values))
        if i % every == every - 1:
            len(out.column("id"))  # a read moves the batch into the columns: many chunks
    return out


@settings(max_examples=examples(60), deadline=None)
@given(data=st.data(), n=st.integers(1, 30), every=st.integers(1, 7))
def test_the_frame_equals_the_plain_construction(data, n, every):
    records = [record_sources(lambda col: data.draw(VALUE[col.code])) for _ in range(n)]
    # ids shuffled, repeats allowed (a stable sort keeps repeated ids in append order)
    for values in records:
        values["req.id"] = data.draw(st.integers(0, 12))
    with np.errstate(invalid="ignore", over="ignore"):
        want = reference(table(records, every))
        got = frame(table(records, every))
    pd.testing.assert_frame_equal(got, want, check_exact=True)
    assert list(got.dtypes) == list(want.dtypes)
    assert got.index.equals(want.index) and type(got.index) is type(want.index)


def test_a_filter_keeping_every_row_or_one_run_copies_nothing():
    records = [record_sources(lambda col: 0 if col.code != "s" else "gpu") for _ in range(10)]
    for i, values in enumerate(records):
        values["req.id"] = i
    df = frame(table(records, 3))
    ids = df["id"]
    assert rows_where(df, ids >= 0) is df
    for mask in (ids >= 4, (ids >= 2) & (ids < 7), ids < 3, ids % 3 == 0, ids > 99):
        got = rows_where(df, mask)
        pd.testing.assert_frame_equal(got, df[mask], check_exact=True, check_index_type=False)
    run = rows_where(df, ids >= 4)  # one run of rows: a slice of the same columns
    assert np.shares_memory(run["arrival_s"].to_numpy(), df["arrival_s"].to_numpy())


def test_simpys_clock_is_its_now_attribute():
    """The compiled core reads SimPy's clock as ``env._now`` (the property behind
    ``env.now`` is a Python call from compiled code); this fails if SimPy moves it."""
    env = simpy.Environment(initial_time=2.5)
    assert env._now == env.now == 2.5
    env.timeout(1.25)
    env.step()
    assert env._now == env.now == 3.75
