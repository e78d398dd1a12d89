"""User-written policies: the six interfaces, the registry of names, and plugin loading.

A plugin is a Python module that defines policy classes and registers them by name::

    from kvsim.plugins import EvictionPolicy, register

    @register("lfu")
    class LFU(EvictionPolicy):
        def victim(self, tier): ...

A scenario that lists the module under ``plugins:`` (or a command given ``--plugin
MODULE``) may then use the name wherever a built-in one goes (``tiers.gpu.eviction: lfu``).
An installed package can also offer policies through the entry-point group
``kvsim.policies``. The classes are plain Python: kvsim's compiled core calls them
through these interfaces (it never subclasses them), so they run on the default
``pip install .`` as on the pure-Python core. docs/extending.md walks through writing one.

Every policy gets read-only views (:class:`RequestView`, :class:`EngineView`,
:class:`TierView`, :class:`Block`, and :class:`SimView` through :meth:`Policy.setup`);
what a policy returns is checked (:mod:`kvsim.sim.hooks`), and a broken rule, anything
plugin code raises (SystemExit, KeyboardInterrupt, GeneratorExit too: only a real signal
interrupts, :mod:`kvsim.interrupts`), an import error or a missing method stops the run
with one line naming the plugin, the method and the place in its code (exit 2).

A plugin is code: importing a scenario's ``plugins:`` runs it. The command line says which
files it imports before importing them (``kvsim.plugins.loading.on_import``), and
:func:`no_plugins` (``--no-plugins``) imports none: a scenario is then checked (or
refused) without them.

This package holds only the interfaces and the registry: it imports nothing of the
simulation, so a plugin can be imported anywhere (a sweep worker, a Dask worker). Its
modules: :mod:`~kvsim.plugins.api` (the interfaces and views), :mod:`~.registry`
(registering, ``--no-plugins``), :mod:`~.loading` (importing plugin code),
:mod:`~.resolve` (what a scenario's name means, its params, an instance),
:mod:`~.params` (a class's parameters) and :mod:`~.failures` (plugin errors as one
line). This file re-exports the public names for plugin authors; kvsim's own modules
import from the submodules.
"""

from kvsim.plugins.api import (
    INTERFACES,
    AdmissionPolicy,
    Block,
    EngineView,
    EvictionPolicy,
    LoadPolicy,
    Policy,
    PrefetchPolicy,
    RequestView,
    RoutingPolicy,
    SchedulingPolicy,
    SimView,
    TierView,
)
from kvsim.plugins.failures import PluginError, RegistrationError, describe, from_plugin, show
from kvsim.plugins.loading import (
    ENTRY_POINT_GROUP,
    canonical,
    is_file_spec,
    load_entry_points,
    load_plugins,
    scope,
)
from kvsim.plugins.params import Param, ParamError, parameters, plain_params, type_text
from kvsim.plugins.registry import _REGISTRY as _REGISTRY  # (tests and provenance read it)
from kvsim.plugins.registry import (
    BUILTIN,
    LABELS,
    Entry,
    add,
    disabled,
    no_plugins,
    register,
    registered,
    skipped,
    unchecked,
)
from kvsim.plugins.resolve import (
    BUILTIN_DOCS,
    check_name,
    check_params,
    lookup,
    make,
    names,
    visible,
)

__all__ = [
    "BUILTIN",
    "BUILTIN_DOCS",
    "ENTRY_POINT_GROUP",
    "INTERFACES",
    "LABELS",
    "AdmissionPolicy",
    "Block",
    "EngineView",
    "Entry",
    "EvictionPolicy",
    "LoadPolicy",
    "Param",
    "ParamError",
    "PluginError",
    "Policy",
    "PrefetchPolicy",
    "RegistrationError",
    "RequestView",
    "RoutingPolicy",
    "SchedulingPolicy",
    "SimView",
    "TierView",
    "add",
    "canonical",
    "check_name",
    "check_params",
    "describe",
    "disabled",
    "from_plugin",
    "is_file_spec",
    "load_entry_points",
    "load_plugins",
    "lookup",
    "make",
    "names",
    "no_plugins",
    "parameters",
    "plain_params",
    "register",
    "registered",
    "scope",
    "show",
    "skipped",
    "type_text",
    "unchecked",
    "visible",
]
