"""Workload sources (trace readers, the generator) and the shaping every source shares.

``open_workload`` (:mod:`kvsim.workload.sources`) maps a scenario's ``workload.kind`` to
its source and applies, in this order: the time window (on source times, rebased to its
start), ``time_scale``, ``limit``; then, for a trace that asks for it, a resample
(:mod:`kvsim.workload.resample`: whole sessions or prefix chains, or windows), which
keeps exactly the ``limit`` requests kept (or the fewer the trace has). Sources are
iterators, so a trace is read as the simulation consumes it. The readers
(:mod:`~kvsim.workload.mooncake`, :mod:`~kvsim.workload.azure`), the generator
(:mod:`~kvsim.workload.synthetic`), writers and statistics are submodules; this file
re-exports the names most callers want.
"""

from kvsim.workload.request import Request
from kvsim.workload.sources import SOURCES, open_workload, shape

__all__ = ["SOURCES", "Request", "open_workload", "shape"]
