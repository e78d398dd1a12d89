"""Sweeps: many runs of one base scenario over a grid of field values and seeds.

The package owns a sweep from its file to its table: :mod:`.spec` (the file and its runs),
:mod:`.fields` (which keys it may set), :mod:`.files` (what identifies a run),
:mod:`.journal` (the output folder), :mod:`.tables` (the results table),
:mod:`.cluster` (a Dask scheduler) and :mod:`.executor` (running it).

A sweep file::

    name: tiers-vs-policy
    base: ../scenarios/quickstart.yaml        # relative to the sweep file
    grid:                                     # every combination
      cluster.load_policy: [sync, async]
      remote.sharding: [none, per_rank]
    zip:                                      # advanced together (equal lengths)
      remote.servers: [1, 8]
      remote.capacity: ["8 TB", "1 TB"]
    set: {workload.requests: 2000}            # the same for every run
    replications: 2                           # seeds base, base+1 (or seeds: [...])
    reference: {cluster.load_policy: sync}    # optional: compared with (default: the first)

Each run is identified by a hash of the resolved base scenario (its identity,
:func:`kvsim.config.dump.scenario_identity`: a new ``description`` alone resumes), its
overrides, its seed and the content of every file it reads by name (a trace, plugin
files and modules, a file a swept value names: :func:`.files.scenario_files`), so that a changed
file is run again while an unchanged one keeps its runs. Every configuration is resolved
before any run: a swept load (an arrival rate, a time scale, a whole ``arrivals`` or
``workload`` mapping) scales the warm-up and time limit with it, and a policy name no
plugin of the configuration registers is refused then. Finished runs (successful or
not) are appended to ``runs.jsonl`` in the output folder as they complete, so re-running
the same command skips them: an interrupted sweep resumes without duplicates. At the end
``results.parquet`` and ``results.csv`` hold one row per run, in expansion order: the
swept values, the seed, ``status`` and ``error``, every scalar summary metric, the run's
own intervals (:data:`~kvsim.results.metrics.INTERVALS`, as numbers ``<value>_lo`` and
``<value>_hi``), and the
paired differences from the reference configuration (:func:`.tables.add_paired`: every
configuration runs the same seeds, so seed s of each saw the same workload draw). A
failing run is recorded with its error and does not stop the others. Runs execute on
local worker processes, or on a Dask cluster given its scheduler address
(``tcp://HOST:PORT``); each run is deterministic, so the rows do not depend on either.

What is refused before any run (exit 2): a key that is not a scenario field path, ``seed``
as a key (a sweep's seeds are ``seeds:`` or ``replications:``), a value listed twice, more
than :data:`.spec.MAX_RUNS` runs (counted, not expanded), a malformed or unreachable scheduler
address, a damaged journal line (named by file and line). A journal's torn last line (an
interrupted write) is cut off before new rows are appended; every row carries a checksum
of its content, so an edited row is refused too (delete its line to re-run that run).
Nothing is left before the first run finishes; the two tables are written whole, then
renamed, and only once every run has a row (an interrupted sweep keeps only its journal).
File names in ``set``/``grid``/``zip`` values are relative to the sweep file. One sweep
at a time writes a folder (a lock), and only a new, empty or sweep folder; the journal is
appended only to a regular file of that folder (never through a link). SIGTERM stops a
sweep like Ctrl-C, and worker processes exit when the sweep's process is gone, even after
SIGKILL.
"""

from kvsim.experiments.sweep.executor import run_one, run_sweep
from kvsim.experiments.sweep.journal import JOURNAL
from kvsim.experiments.sweep.spec import RunSpec, Sweep, SweepSpec, load_sweep
from kvsim.experiments.sweep.tables import RESULTS

__all__ = [
    "JOURNAL",
    "RESULTS",
    "RunSpec",
    "Sweep",
    "SweepSpec",
    "load_sweep",
    "run_one",
    "run_sweep",
]
