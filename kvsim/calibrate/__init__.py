"""Calibration from a user's own measurements (``kvsim calibrate``): fit the few uncertain
constants of a composed profile to measured TTFTs and say how well the fit predicts runs
it did not see.

The package's rooms: :mod:`~.rows` (a measurement row), :mod:`~.readers` (one reader per
format: CSV, vllm bench serve JSON, SGLang bench_serving JSONL, a Prometheus scrape of
vLLM), :mod:`~.fields` (what may be fitted, within which range), :mod:`~.runs` (a row as
a kvsim run), :mod:`~.predict` (every row's prediction at given constants), :mod:`~.fit`
(least squares, intervals, errors, warnings), :mod:`~.report` (the tables), :mod:`~.profile`
(the calibrated profile file) and :mod:`~.synthetic` (measurements made by kvsim from
known constants: the shipped samples and the recovery test). docs/calibration.md has the
method and a worked example.
"""
