"""Results at the edge: this package owns a run's per-request records and summary
(:mod:`~kvsim.results.records`, :class:`~kvsim.results.records.Results`), its metrics'
definitions, accesses and time series, provenance, uncertainty (intervals), and writing
output folders all or nothing (:mod:`~kvsim.results.writers`). It re-exports nothing, so
that importing a light part (the writers) does not load the simulator."""
