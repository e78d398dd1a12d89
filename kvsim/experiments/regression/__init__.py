"""A CI gate for TTFT curves: record a baseline, re-run, fail when a curve moves.

The package owns the gate: :mod:`.suite` (the suite file), :mod:`.runs` (running it),
:mod:`.baseline` (the baseline file), :mod:`.power` (what its seeds can detect),
:mod:`.comparison` (new runs against the baseline) and :mod:`.reports`.

A suite file lists entries - a scenario, or every configuration of a sweep file - each
run at some load points (multiples of the scenario's own load) with a fixed set of seeds::

    name: kvsim-ci
    seeds: [0, 1, 2]
    metrics:                               # optional: these are the defaults
      ttft_p99_s: {rel: 0.10, abs: 0.02}   # direction: lower (by name; see below)
    entries:
      - scenario: ../scenarios/quickstart.yaml
        set: {workload.requests: 1500}
        loads: [0.5, 1.0, 2.0]
        prompt_range: 0..32k               # optional: only these prompts are measured
      - sweep: ../scenarios/sweeps/load-policy.yaml
        loads: [1.0]

``kvsim baseline`` stores, per entry and load point, each metric's value on every seed
(``values``), their mean and 95% Student-t interval, plus the kvsim version, a hash of
each resolved scenario and a digest of the content of each file it reads by name (a
trace, plugin files: :func:`kvsim.experiments.sweep.files.scenario_files`), and the
``provenance`` of the code that measured (:func:`kvsim.results.provenance.environment`:
commit, core, Python and package versions), which ``kvsim check`` notes when it differs
from its own (never a failure).

``kvsim check`` re-runs the suite on the same seeds, hence the same workload draws
(common random numbers), and compares **paired** runs: per seed, d_i = new_i - base_i,
their mean ``delta`` and its 95% Student-t interval over the seeds
(:func:`kvsim.results.uncertainty.paired_interval`). A metric's tolerance is
max(rel x |baseline mean|, abs); its ``direction`` says which way is better
(:func:`.suite.default_direction`). A change is *significant* when |delta| exceeds the
tolerance and the interval excludes 0 (differences identical on every seed are exact:
beyond the tolerance suffices). A significant change is a REGRESSION (fails) in the
worse direction, IMPROVED (passes, said) in the better one, CHANGED (fails) for a
metric with no better direction. A move beyond the tolerance whose interval includes 0
passes as noise, said in a note with its minimum detectable change
(:func:`kvsim.results.uncertainty.detectable_change`: the true change the rule flags
with 80% power). Same seeds give identical numbers, so an unchanged model passes
exactly. A baseline whose entries, load points or seeds differ from the suite's is bad
input; a changed scenario hash or file is reported (and is bad input with ``strict``).

With fewer than :data:`.suite.MIN_SEEDS` seeds there is no usable interval (a two-seed baseline
once passed a +146% change in p99): both commands say so, and the gate compares the means
against the tolerance alone (direction-aware). A baseline without per-seed values (made
by an older kvsim) cannot be paired: the gap between the two intervals is compared, and
a note says so. ``kvsim baseline`` warns when a gated metric's minimum detectable change
is above :data:`.power.POWER_LIMIT` of its mean (:func:`.power.power_warnings`).

A metric with no value (NaN: no measured request, e.g. every request dropped) fails the
gate whatever its tolerance, and ``kvsim baseline`` refuses to record one: a baseline
holds finite numbers only. ``kvsim check`` reads and checks the whole baseline (every
field, and that it matches the suite) before it runs anything.
"""

from kvsim.experiments.regression.baseline import (
    baseline_path,
    check_baseline,
    check_baseline_doc,
    read_baseline,
    write_baseline,
)
from kvsim.experiments.regression.comparison import CheckResult, Comparison, compare
from kvsim.experiments.regression.power import power_warnings
from kvsim.experiments.regression.reports import report_lines, terminal_table, write_reports
from kvsim.experiments.regression.runs import measure
from kvsim.experiments.regression.suite import Suite, SuiteSpec, load_suite

__all__ = [
    "CheckResult",
    "Comparison",
    "Suite",
    "SuiteSpec",
    "baseline_path",
    "check_baseline",
    "check_baseline_doc",
    "compare",
    "load_suite",
    "measure",
    "power_warnings",
    "read_baseline",
    "report_lines",
    "terminal_table",
    "write_baseline",
    "write_reports",
]
