"""Offline cache analysis: what a cache would have done with a recorded or trace stream.

No simulation runs here: a trace (:mod:`kvsim.workload`) or a run's recorded
``accesses.parquet`` is turned into the block-access streams its stores saw
(:mod:`~kvsim.analysis.streams`), replayed through any eviction policy at any capacity
(:mod:`~kvsim.analysis.replay`), summarised as miss-ratio curves
(:mod:`~kvsim.analysis.mrc`, the LRU curve of a trace in one pass) and reuse distances
(:mod:`~kvsim.analysis.reuse`). ``kvsim trace mrc`` and ``kvsim trace reuse`` print them.
"""
