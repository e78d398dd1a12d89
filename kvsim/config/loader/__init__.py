"""Loading scenario files (and sweep and suite files) into validated records.

Its modules, in the order a load runs them: :mod:`~.layers` (a file, its ``extends`` chain,
the profile: each a dict with every value's file and line), :mod:`~.tables` (timing CSVs),
:mod:`~.merge` (layers merged), :mod:`~.overrides` (``--set``), :mod:`~.messages` (a
validation error as one line) and :mod:`~.load` (the entry points). YAML itself is read by
:mod:`kvsim.yamlfile`. This file re-exports the names other modules use.
"""

from kvsim.config.loader.layers import remote_kind_layer
from kvsim.config.loader.load import load_record, load_scenario, scenario_from_dict, validate
from kvsim.config.loader.merge import deep_merge
from kvsim.config.loader.overrides import apply_overrides, with_sets

__all__ = [
    "apply_overrides",
    "deep_merge",
    "load_record",
    "load_scenario",
    "remote_kind_layer",
    "scenario_from_dict",
    "validate",
    "with_sets",
]
