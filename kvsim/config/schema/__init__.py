"""The scenario as typed, immutable records (pydantic models), with units and help text.

A scenario is a profile (node, model, timing, tier defaults) with the user's scenario file
merged over it. Every field carries its unit in its type, a default where one is sensible,
and a one-line description; unknown keys are refused. The records live in this package's
modules by part (:mod:`~.fields`, :mod:`~.hardware`, :mod:`~.policies`, :mod:`~.tiers`,
:mod:`~.cluster`, :mod:`~.workload`, :mod:`~.faults`, :mod:`~.run`, :mod:`~.scenario`);
this file re-exports the names other modules use. Rules that tie fields together are
:func:`kvsim.config.checks.cross_checks`.
"""

from kvsim.config.schema.faults import EngineDown, Fault, ServerDown, SlowLink, StallBurst, Tenancy
from kvsim.config.schema.fields import MAX_TENANTS, PosInt, Record, field_unit
from kvsim.config.schema.hardware import KvLayout
from kvsim.config.schema.policies import POLICY_FIELDS, PolicyRef, policy_text
from kvsim.config.schema.run import MAX_USD_PER_HOUR, Run, prompt_bounds
from kvsim.config.schema.scenario import Scenario, lookup_order
from kvsim.config.schema.tiers import (
    REMOTE_KINDS,
    REMOVED_FIELDS,
    Codec,
    LocalTier,
    Remote,
    RemoteSsd,
)
from kvsim.config.schema.workload import (
    AzureWorkload,
    BurstyArrivals,
    ChoiceDist,
    ClosedArrivals,
    ConstantArrivals,
    FixedDist,
    GeometricDist,
    IntDist,
    LogNormalDist,
    MooncakeWorkload,
    PoissonArrivals,
    SyntheticWorkload,
    UniformDist,
    Workload,
)

__all__ = [
    "MAX_TENANTS",
    "MAX_USD_PER_HOUR",
    "POLICY_FIELDS",
    "REMOTE_KINDS",
    "REMOVED_FIELDS",
    "AzureWorkload",
    "BurstyArrivals",
    "ChoiceDist",
    "ClosedArrivals",
    "Codec",
    "ConstantArrivals",
    "EngineDown",
    "Fault",
    "FixedDist",
    "GeometricDist",
    "IntDist",
    "KvLayout",
    "LocalTier",
    "LogNormalDist",
    "MooncakeWorkload",
    "PoissonArrivals",
    "PolicyRef",
    "PosInt",
    "Record",
    "Remote",
    "RemoteSsd",
    "Run",
    "Scenario",
    "ServerDown",
    "SlowLink",
    "StallBurst",
    "SyntheticWorkload",
    "Tenancy",
    "UniformDist",
    "Workload",
    "field_unit",
    "lookup_order",
    "policy_text",
    "prompt_bounds",
]
