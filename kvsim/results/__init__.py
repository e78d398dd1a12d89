"""Results at the edge: per-request records to a DataFrame, the summary, writers."""

from kvsim.results.records import COLUMNS, Results, collect

__all__ = ["COLUMNS", "Results", "collect"]
