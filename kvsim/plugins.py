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
interrupts), an import error or a missing method stops the run with one line naming the
plugin, the method and the place in its code (exit 2).

A plugin is code: importing a scenario's ``plugins:`` runs it. The command line says which
files it imports before importing them (:data:`on_import`), and :func:`no_plugins`
(``--no-plugins``) imports none: a scenario is then checked (or refused) without them.

This module holds only the interfaces and the registry: it imports nothing of the
simulation, so a plugin can be imported anywhere (a sweep worker, a Dask worker).
"""

from __future__ import annotations

import contextlib
import contextvars
import difflib
import hashlib
import importlib
import importlib.metadata
import importlib.util
import inspect
import os
import signal
import sys
import threading
import types
import typing
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar, NamedTuple

from kvsim.errors import InputError, shown
from kvsim.files import check_regular, read_bytes

ENTRY_POINT_GROUP = "kvsim.policies"

# ---- what policies see -------------------------------------------------------------------


class Block(NamedTuple):
    """One block as an eviction or admission policy sees it."""

    key: Any  # the store's key (an int)
    nbytes: float  # bytes it holds in this store (after the tier's codec)
    depth: int  # its place in its prompt's block chain (0: the first block; -1: unknown)
    # prefill seconds one full block at this depth costs a lone request (NaN: unknown)
    recompute_s: float
    parent: Any  # the store's key of the block before it in its chain (None at depth 0)
    tenant: int  # its tenant (-1: none, or a public prefix)
    now: float  # simulated time of the call (s)


class RequestView:
    """A request, read-only: what routers, schedulers, load and prefetch policies see."""

    __slots__ = ("_job",)

    def __init__(self, job: Any) -> None:
        self._job = job

    @property
    def id(self) -> int:
        return int(self._job.req.id)

    @property
    def arrival(self) -> float:
        """Arrival time (s)."""
        return float(self._job.req.arrival)

    @property
    def prompt_tokens(self) -> int:
        return int(self._job.req.input_tokens)

    @property
    def output_tokens(self) -> int:
        return int(self._job.req.output_tokens)

    @property
    def tenant(self) -> int:
        return int(self._job.req.tenant)

    @property
    def session(self) -> int:
        """Session id (-1: none)."""
        s = getattr(self._job.req, "session", None)
        return -1 if s is None else int(s)

    @property
    def blocks(self) -> tuple[Any, ...]:
        """The cache keys of its prompt's blocks, in prefix order."""
        return tuple(self._job.keys)

    @property
    def cached_tokens(self) -> int:
        """Prompt tokens its engine's lookup found cached. Schedulers see it after a
        lookup (a side-effect-free one while a request waits for its first); routers see
        0 for a new request (it has not reached an engine)."""
        return int(self._job.cached)

    @property
    def remaining_tokens(self) -> int:
        """Prompt tokens still to compute."""
        j = self._job
        return int(j.req.input_tokens - j.cached - j.done)

    def __repr__(self) -> str:
        return f"RequestView(id={self.id}, prompt_tokens={self.prompt_tokens})"


class TierView:
    """One block store (a tier of one engine, or one remote server), read-only."""

    __slots__ = ("_store", "name")

    def __init__(self, store: Any, name: str) -> None:
        self._store = store
        self.name = name  # gpu | host | nvme | remote

    @property
    def capacity(self) -> float:
        """Bytes it may hold."""
        return float(self._store.capacity)

    @property
    def used(self) -> float:
        """Bytes held now."""
        return float(self._store.used)

    @property
    def reserved(self) -> float:
        """Bytes held back from the tier: for the GPU tier, what the working KV (running
        requests and restores in flight) takes of the prefix cache's room."""
        return float(self._store.reserved)

    def __len__(self) -> int:
        return len(self._store.blocks)

    def __contains__(self, key: Any) -> bool:
        return key in self._store.blocks

    def __iter__(self) -> Iterator[Any]:
        """Resident keys, in the order they were stored."""
        return iter(self._store.blocks)

    def nbytes(self, key: Any) -> float:
        """Bytes a resident block holds (KeyError if it is not resident)."""
        return float(self._store.blocks[key].size)

    def __repr__(self) -> str:
        return f"TierView({self.name}, {len(self)} blocks, {self.used:.4g}/{self.capacity:.4g} B)"


class EngineView:
    """One prefill engine, read-only and live: its load and its local tiers."""

    __slots__ = ("_engine", "_tiers")

    def __init__(self, engine: Any) -> None:
        self._engine = engine
        names = ("gpu", "host", "nvme")
        self._tiers = {
            n: TierView(s, n)
            for n, s in zip(names, engine.local.tiers, strict=True)
            if s is not None  # (an empty store is falsy)
        }

    @property
    def index(self) -> int:
        return int(self._engine.index)

    @property
    def up(self) -> bool:
        return bool(self._engine.up)

    @property
    def outstanding(self) -> int:
        """Requests routed here and not finished (queued, loading or computing)."""
        return int(self._engine.outstanding)

    @property
    def queued(self) -> int:
        """Requests waiting for a step."""
        return int(self._engine.queued)

    @property
    def queued_tokens(self) -> int:
        """Prompt tokens still to compute of the waiting requests."""
        e = self._engine
        return sum(j.req.input_tokens - j.cached - j.done for j in e.waiting.jobs())

    @property
    def running(self) -> int:
        """Requests computing (picked for a step, chunks left)."""
        return len(self._engine.running)

    @property
    def tiers(self) -> dict[str, TierView]:
        """Its local tiers by name (gpu, host, nvme; those enabled)."""
        return self._tiers

    def prefix_blocks(self, request: RequestView | Sequence[Any]) -> int:
        """Blocks of the longest prefix of a request (or a key chain) held in its tiers."""
        keys = request.blocks if isinstance(request, RequestView) else request
        return int(self._engine.local.prefix_blocks(keys))

    def __repr__(self) -> str:
        return f"EngineView({self.index}, outstanding={self.outstanding})"


class SimView:
    """The simulation as every policy may see it (given once, to :meth:`Policy.setup`)."""

    def __init__(
        self,
        clock: Callable[[], float],
        engines: list[EngineView],
        remote: Any,
        block_tokens: int,
        block_bytes: float,
        recompute: Callable[[int], float],
    ) -> None:
        self._clock = clock
        self.engines = engines  # every engine, up or not
        self._remote = remote
        self.block_tokens = block_tokens
        self.block_bytes = block_bytes  # bytes of a full block's KV (raw)
        self._recompute = recompute

    @property
    def now(self) -> float:
        """Simulated time (s)."""
        return self._clock()

    def remote_holds(self, key: Any) -> bool:
        """Is the block (a request cache key) usable from the remote store now?"""
        return self._remote is not None and bool(self._remote.has(key))

    def remote_prefix_blocks(self, request: RequestView | Sequence[Any]) -> int:
        """Blocks of the longest prefix of a request (or a key chain) in the remote store."""
        if self._remote is None:
            return 0
        keys = request.blocks if isinstance(request, RequestView) else request
        n = 0
        for k in keys:
            if not self._remote.has(k):
                break
            n += 1
        return n

    def recompute_s(self, depth: int) -> float:
        """Seconds of prefill one full block at ``depth`` costs a lone request."""
        return self._recompute(depth)


# ---- the interfaces ----------------------------------------------------------------------


class Policy:
    """Base of every plugin policy. One instance is made per use (per store for eviction
    and admission, per engine for scheduling, one per simulation otherwise), with the
    scenario's ``params`` as keyword arguments (``{name: NAME, params: {...}}``; none for
    a bare name), checked against ``__init__``'s annotations; ``setup`` is then called
    once with the :class:`SimView`."""

    kind: ClassVar[str] = ""
    required: ClassVar[tuple[str, ...]] = ()

    def setup(self, sim: SimView) -> None:
        """Called once before the run (keep ``sim`` to look at the clock or the engines)."""


class EvictionPolicy(Policy):
    """Which resident block of a store goes first when room is needed (per tier:
    ``tiers.<tier>.eviction``, ``remote.eviction``). The store tells it what comes and
    goes (:meth:`inserted`, :meth:`hit`, :meth:`refreshed`, :meth:`removed`); it answers
    :meth:`victim`.

    Events reach the policy in the order they happened, each before the next
    :meth:`victim` call; those of one store operation (a lookup's hits, a request's
    blocks stored) are told at its end, a run of one kind at a time. A policy may also
    define the batch methods ``inserted_many(blocks)``, ``hit_many(blocks)``,
    ``refreshed_many(blocks)`` (a list of :class:`Block`) and ``removed_many(keys,
    reason)``: kvsim then calls one per run instead of the one-block method per block
    (the same events, fewer interpreted calls). docs/extending.md gives the order of
    events along a request's chain of blocks."""

    kind = "eviction"
    required = ("victim|evict",)

    def inserted(self, block: Block) -> None:
        """A block was stored (it was not held)."""

    def hit(self, block: Block) -> None:
        """A resident block was found by a lookup (a hit in this store)."""

    def refreshed(self, block: Block) -> None:
        """A resident block was stored again: its prompt's blocks admitted after a
        prefill, a demotion or write-through into a tier that still holds it."""

    def removed(self, key: Any, reason: str) -> None:
        """A block left the store: ``reason`` is ``evicted`` (this policy's victim, to
        make room), ``deleted`` (its tenant or session deleted, or the store emptied by a
        failure) or ``expired`` (the tenant's TTL). A ``removed(self, key)`` written
        before reasons existed is still called, without the reason."""

    def victim(self, tier: TierView) -> Any:
        """The key of a resident block to evict now (the policy then hears it
        ``removed``). A policy may define ``evict(tier)`` instead: the key of the block
        to evict, which it forgets itself, so kvsim does not tell it the removal (one
        interpreted call less per eviction)."""
        raise NotImplementedError


class AdmissionPolicy(Policy):
    """Whether a block offered to a tier is stored there (``tiers.<tier>.admission``,
    ``remote.admission``); a refused block goes on down as an evicted one would."""

    kind = "admission"
    required = ("admit",)

    def admit(self, block: Block, tier: TierView) -> bool:
        raise NotImplementedError


class RoutingPolicy(Policy):
    """Which engine a new request joins (``cluster.router``)."""

    kind = "router"
    required = ("route",)

    def route(self, request: RequestView, engines: list[EngineView]) -> EngineView | int:
        """One of ``engines`` (those up), or its index."""
        raise NotImplementedError


class SchedulingPolicy(Policy):
    """The order of an engine's waiting queue (``engine.scheduler``): a request's
    priority is computed when it joins the queue, after a lookup under every load
    policy (a request not looked up yet is looked up without side effects first, so
    ``request.cached_tokens`` is what its engine's tiers hold of its prefix now);
    smaller goes first, ties in arrival order. Requests already computing keep their
    place, as under fcfs. ``dynamic``: every waiting request's priority is computed
    again at each pick (after a fresh lookup for those not looked up yet; a request back
    from an asynchronous restore keeps the tokens it restored), at one call per waiting
    request per pick."""

    kind = "scheduler"
    required = ("priority",)
    dynamic: ClassVar[bool] = False

    def priority(self, request: RequestView, engine: EngineView) -> float:
        raise NotImplementedError


class LoadPolicy(Policy):
    """How much of an available hit to restore (``cluster.load_policy``). ``sources``
    names the tier of each block of the usable prefix (gpu, host, nvme, remote);
    ``estimate(k)`` is the live estimate (s) of restoring the first ``k`` and computing
    the rest. ``blocking``: the engine waits for the restore (as sync) or serves others
    (as async); ``lower_tiers``: look below GPU at all."""

    kind = "load_policy"
    required = ("restore_blocks",)
    blocking: ClassVar[bool] = True
    lower_tiers: ClassVar[bool] = True

    def restore_blocks(
        self, request: RequestView, sources: list[str], estimate: Callable[[int], float]
    ) -> int:
        raise NotImplementedError


class PrefetchPolicy(Policy):
    """Which of a request's NVMe and remote blocks are fetched into host memory when it
    reaches its engine (``prefetch.policy``). ``wait``: the request stays out of the queue
    until its prefetch is in (as wait_complete); otherwise it stops when the request is
    picked (as best_effort)."""

    kind = "prefetch"
    required = ("fetch_blocks",)
    wait: ClassVar[bool] = False

    def fetch_blocks(self, request: RequestView, sources: list[str]) -> int:
        """How many of the first blocks of the usable prefix to fetch (those in NVMe or
        remote are moved; ``sources`` names each block's tier)."""
        raise NotImplementedError


INTERFACES: dict[str, type[Policy]] = {
    c.kind: c
    for c in (
        EvictionPolicy,
        AdmissionPolicy,
        RoutingPolicy,
        SchedulingPolicy,
        LoadPolicy,
        PrefetchPolicy,
    )
}

# ---- the registry ------------------------------------------------------------------------

# built-in names of each kind (a plugin may not take one)
BUILTIN: dict[str, tuple[str, ...]] = {
    "eviction": ("lru", "fifo"),
    "admission": ("all", "second_hit"),
    "router": ("round_robin", "least_loaded", "cache_affinity"),
    "scheduler": ("fcfs", "lpm", "sjf"),
    "load_policy": ("sync", "async", "recompute", "auto"),
    "prefetch": ("none", "best_effort", "wait_complete", "timeout"),
}


# how messages name each kind
LABELS: dict[str, str] = {
    "eviction": "eviction policy",
    "admission": "admission policy",
    "router": "router",
    "scheduler": "scheduler",
    "load_policy": "load policy",
    "prefetch": "prefetch policy",
}


class Entry(NamedTuple):
    cls: type
    plugin: str  # the module (or entry point) it came from, for messages
    spec: str | None  # the plugins: entry that loaded it (None: registered otherwise)
    place: str  # where it was registered (file:line), for messages


class _Import:
    """A plugin being imported now: its name in messages, its ``plugins:`` entry (None: an
    entry point, or the caller's own code), and the names it registered so far (a name
    registered twice by one plugin is an error naming both places)."""

    __slots__ = ("classes", "names", "plugin", "spec")

    def __init__(self, plugin: str, spec: str | None) -> None:
        self.plugin = plugin
        self.spec = spec
        self.names: dict[tuple[str, str], str] = {}
        # the classes it registered, with their places: their parameters' annotations are
        # resolved once the import is complete (:func:`_resolve_pending`; a forward
        # reference to a class defined further down the file is fine)
        self.classes: list[tuple[type, str, str]] = []


# kind -> name -> the plugin (its plugins: spec; None: registered by other code) -> entry
_REGISTRY: dict[str, dict[str, dict[str | None, Entry]]] = {kind: {} for kind in INTERFACES}
_loading: list[_Import] = []  # the plugins being imported now
# the plugins the scenario being validated lists (None: not validating one)
_scope: contextvars.ContextVar[frozenset[str] | None] = contextvars.ContextVar(
    "kvsim_plugin_scope", default=None
)
_entry_points_loaded = False
# entry points that could not be loaded: (entry point name, how messages name it, why)
_entry_point_failures: list[tuple[str, str, str]] = []
# the code files of the plugins imported in this process -> the plugin (for messages)
_files: dict[str, str] = {}

# the command line prints a line before it imports plugin code (None: say nothing)
on_import: Callable[[str], None] | None = None


class PluginError(InputError):
    """A plugin that cannot be loaded or broke a rule (exit 2, one line)."""


class RegistrationError(ValueError):
    """A policy that cannot be registered (its message names the places)."""


# ---- code that must not run: --no-plugins ------------------------------------------------

# set (to 1) by --no-plugins; worker processes started meanwhile inherit it
NO_PLUGINS_ENV = "KVSIM_NO_PLUGINS"
_inspect = False  # with no plugins: accept (and list) names that need plugin code
_unchecked: list[str] = []  # those names (inspection only)
_skipped: list[str] = []  # plugins not imported


def disabled() -> bool:
    """Is plugin code refused in this process (``--no-plugins``, or ``KVSIM_NO_PLUGINS``)?"""
    return os.environ.get(NO_PLUGINS_ENV, "") not in ("", "0")


@contextlib.contextmanager
def no_plugins(inspect: bool = False) -> Iterator[None]:
    """Import no plugin and load no entry point for a ``with`` block (and in the worker
    processes started meanwhile). A scenario's ``plugins:`` are then skipped, and a policy
    name that is not a built-in one is refused (it would need plugin code), or, with
    ``inspect`` (a command that runs no policy), accepted unchecked and listed by
    :func:`unchecked`."""
    global _inspect
    old_env, old_inspect = os.environ.get(NO_PLUGINS_ENV), _inspect
    os.environ[NO_PLUGINS_ENV] = "1"
    _inspect = inspect
    _unchecked.clear()
    _skipped.clear()
    try:
        yield
    finally:
        _inspect = old_inspect
        if old_env is None:
            os.environ.pop(NO_PLUGINS_ENV, None)
        else:
            os.environ[NO_PLUGINS_ENV] = old_env


def unchecked() -> list[str]:
    """Policy names that plugin code would have had to check (``no_plugins(inspect=True)``)."""
    return list(_unchecked)


def skipped() -> list[str]:
    """Plugins a scenario listed that were not imported (``no_plugins``)."""
    return list(_skipped)


# ---- what may come out of plugin code ------------------------------------------------------

_signals = 0  # interrupts (SIGINT, SIGTERM, SIGHUP) that on_signal has seen
_KVSIM_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


_held = False  # inside held_interrupts(): a signal is counted, and raised at its end
_pending = False  # a signal arrived while held


def on_signal(signum: int, frame: object) -> None:
    """A signal handler that counts the signal, then raises KeyboardInterrupt (the command
    line's, for SIGINT, SIGTERM and SIGHUP). Plugin code may raise KeyboardInterrupt too:
    one is an interrupt only if a signal arrived meanwhile (:func:`interrupted`). Inside
    :func:`held_interrupts` the KeyboardInterrupt waits for the block's end."""
    global _signals, _pending
    _signals += 1
    if _held:
        _pending = True
        return
    raise KeyboardInterrupt


@contextlib.contextmanager
def held_interrupts() -> Iterator[None]:
    """Hold a signal's KeyboardInterrupt until the block ends, then raise it there. For
    code where Python cannot let an exception through: forking worker processes runs the
    at-fork hooks (logging's lock release), where a KeyboardInterrupt is only printed
    ("Exception ignored ...", with a traceback) and dropped, so that Ctrl-C or SIGTERM at
    that moment neither stopped the command nor left it quiet."""
    global _held, _pending
    outer = _held
    _held = True
    try:
        yield
    finally:
        _held = outer
        if not outer and _pending:
            _pending = False
            raise KeyboardInterrupt


def signals() -> int:
    """The interrupts seen so far (take it before calling plugin code)."""
    return _signals


def interrupted(e: BaseException, before: int) -> bool:
    """Is ``e``, out of plugin code called when :func:`signals` was ``before``, an interrupt
    to let through rather than a plugin failure? Yes if a signal arrived meanwhile. A
    KeyboardInterrupt otherwise is the plugin's own where no signal can have raised it: in
    a thread other than the main one, where SIGINT is ignored (a sweep worker), or where
    :func:`on_signal` handles SIGINT (and did not count one). Elsewhere (another handler,
    Python's default) a real Ctrl-C cannot be told from it: it is let through."""
    if _signals != before:
        return True
    if not isinstance(e, KeyboardInterrupt):
        return False
    if threading.current_thread() is not threading.main_thread():
        return False
    try:
        handler = signal.getsignal(signal.SIGINT)
    except (ValueError, OSError):  # pragma: no cover - no SIGINT here
        return True
    return not (handler is on_signal or handler == signal.SIG_IGN)


def describe(e: BaseException, limit: int = 300) -> str:
    """``Type: message`` of an exception out of plugin code, safely: its ``str`` is plugin
    code too (it may raise, or be huge)."""
    name = type(e).__name__
    try:
        text = str(e)
    except BaseException:  # whatever it raises, the line is still given
        text = "(its message cannot be shown)"
    text = " ".join(text.split())  # one line
    if len(text) > limit:
        text = text[: limit - 3] + "..."
    return f"{name}: {text}" if text else name


def show(value: Any) -> str:
    """A value a plugin gave, as a message quotes it (its ``repr`` is plugin code, and a
    huge int has none)."""
    try:
        return shown(value)
    except BaseException:
        if isinstance(value, int):
            return f"an int of about {int(value.bit_length() * 0.30103):,} digits"
        return f"a {type(value).__name__} that cannot be shown"


def place_of(e: BaseException, files: Sequence[str] = ()) -> str | None:
    """``file:line`` in plugin code where ``e`` was raised: the innermost frame of its
    traceback in one of ``files`` (the plugin's own), else the innermost one outside kvsim
    (a module the plugin calls); a syntax error's own place. None: none of these."""
    if isinstance(e, SyntaxError) and e.filename and e.lineno:
        return f"{e.filename}:{e.lineno}"
    mine = other = None
    tb = e.__traceback__
    while tb is not None:
        name = tb.tb_frame.f_code.co_filename
        if name in files or name in _files:
            mine = f"{name}:{tb.tb_lineno}"
        elif not name.startswith((_KVSIM_DIR, "<")):
            other = f"{name}:{tb.tb_lineno}"
        tb = tb.tb_next
    return mine or other


def code_place(obj: Any, method: str) -> str | None:
    """``file:line`` where a policy's method is defined (None: not Python code)."""
    try:
        code = getattr(inspect.getattr_static(type(obj), method), "__code__", None)
        return f"{code.co_filename}:{code.co_firstlineno}" if code is not None else None
    except BaseException:
        return None


def at(place: str | None) -> str:
    return f" (at {place})" if place else ""


def from_plugin(e: BaseException) -> PluginError | None:
    """An exception that escaped every guard, as a plugin failure if plugin code raised it
    (a frame of its traceback is in a plugin's file); None otherwise."""
    tb = e.__traceback__
    found = None
    while tb is not None:
        name = tb.tb_frame.f_code.co_filename
        if name in _files:
            found = (name, tb.tb_lineno)
        tb = tb.tb_next
    if found is None:
        return None
    return PluginError(f"raised {describe(e)} (at {found[0]}:{found[1]})", where=_files[found[0]])


def _caller_place() -> str:
    """``file:line`` of the code that called into this module (a ``@register`` line)."""
    frame = sys._getframe(1)
    here = __file__
    while frame is not None and frame.f_code.co_filename == here:
        frame = frame.f_back  # type: ignore[assignment]
    return f"{frame.f_code.co_filename}:{frame.f_lineno}" if frame is not None else "?"


# ---- registering ------------------------------------------------------------------------


def _kind_of(cls: type) -> str:
    for base in cls.__mro__:
        kind = getattr(base, "kind", "")
        if isinstance(kind, str) and kind in INTERFACES:
            return kind
    raise RegistrationError(
        f"{cls.__name__} is not a kvsim policy: subclass one of "
        + ", ".join(c.__name__ for c in INTERFACES.values())
        + " from kvsim.plugins (or give it a kind attribute)"
    )


def register(name: str, kind: str | None = None) -> Callable[[type], type]:
    """Class decorator: register a policy class under ``name`` (its kind from its base
    class, or ``kind``). A name may not be a built-in one, nor taken by another class."""

    def deco(cls: type) -> type:
        add(name, cls, kind)
        return cls

    return deco


def add(name: str, cls: type, kind: str | None = None) -> None:
    """Register ``cls`` under ``name`` (what :func:`register` does). Two plugins may use
    one name (a scenario sees only its own plugins'); one plugin may not use it twice."""
    place = _caller_place()
    if not isinstance(name, str) or not name.strip() or not name.isprintable():
        raise RegistrationError(
            f"a policy name must be a non-empty printable string, got {show(name)}"
        )
    if not isinstance(cls, type):
        raise RegistrationError(f"a policy is a class, got {show(cls)}")
    if kind is not None and not isinstance(kind, str):
        raise RegistrationError(f"a policy kind is a string, got {show(kind)}")
    k = kind if kind is not None else _kind_of(cls)
    if k not in INTERFACES:
        raise RegistrationError(f"unknown policy kind {k!r}; choose one of {sorted(INTERFACES)}")
    if name in BUILTIN[k]:
        raise RegistrationError(f"{k} {name!r} is a built-in name; choose another (at {place})")
    base = INTERFACES[k]
    missing = [
        m
        for m in base.required  # "a|b": either will do
        if not any(
            callable(getattr(cls, alt, None)) and getattr(cls, alt) is not getattr(base, alt, None)
            for alt in m.split("|")
        )
    ]
    if missing:
        either = " or ".join(f"{alt}()" for alt in missing[0].split("|"))
        raise RegistrationError(
            f"{k} {name!r} ({cls.__name__}) does not define {either} (at {place})"
        )
    if _loading:
        imp = _loading[-1]
        plugin, spec = imp.plugin, imp.spec
        first = imp.names.get((k, name))
        if first is not None:
            raise RegistrationError(
                f"{k} {name!r} is registered twice by this plugin: at {first} and at {place}"
            )
        imp.names[(k, name)] = place
        imp.classes.append((cls, f"{k} {name!r}", place))
    else:
        plugin, spec = getattr(cls, "__module__", "?"), None
        hints(cls, f"{k} {name!r}", place)  # (a class complete as it is given)
    by_plugin = _REGISTRY[k].setdefault(name, {})
    old = by_plugin.get(spec)
    if old is not None and spec is None and not _same_class(old.cls, cls):
        raise RegistrationError(
            f"{k} {name!r} is already registered by {old.plugin} (at {old.place})"
        )
    # (a plugin imported again, after its first import failed, replaces itself)
    by_plugin[spec] = Entry(cls, plugin, spec, place)


def _same_class(a: type, b: type) -> bool:
    """The same class, or the same class from a module imported again."""
    return a is b or (a.__module__, a.__qualname__) == (b.__module__, b.__qualname__)


def _visible(entry: Entry, scope: frozenset[str] | None) -> bool:
    """May a scenario listing the plugins ``scope`` use this policy? Only if it lists
    the plugin that registered it (every worker imports just the scenario's plugins, so
    it knows the name too); entry points and policies registered by the caller's own
    code are visible to every scenario (None: no scenario in view, all are)."""
    return scope is None or entry.spec is None or entry.spec in scope


def lookup(kind: str, name: str, specs: Sequence[str] | None = None) -> Entry | None:
    """The plugin policy a scenario listing ``specs`` (default: the one being validated)
    means by ``name``; None: not a plugin name it can use. ValueError when two of its
    plugins register the name."""
    if name in BUILTIN[kind] or disabled():
        return None
    if name not in _REGISTRY[kind] and not _entry_points_loaded:
        load_entry_points()
    scope = frozenset(canonical(s) for s in specs) if specs is not None else _scope.get()
    seen = [e for e in _REGISTRY[kind].get(name, {}).values() if _visible(e, scope)]
    own = [e for e in seen if e.spec is not None]
    if len(own) > 1:
        raise ValueError(
            f"{LABELS[kind]} {name!r} is registered by two plugins of this scenario: "
            f"{own[0].plugin} (at {own[0].place}) and {own[1].plugin} (at {own[1].place})"
        )
    found = own or seen
    return found[-1] if found else None


def names(kind: str) -> list[str]:
    """Every name of a kind: built-in, then plugins' (entry points included; while a
    scenario is validated, those of its own plugins)."""
    if disabled():
        return list(BUILTIN[kind])
    load_entry_points()
    scope = _scope.get()
    mine = [n for n, by in _REGISTRY[kind].items() if any(_visible(e, scope) for e in by.values())]
    return [*BUILTIN[kind], *sorted(mine)]


def check_name(kind: str, name: str) -> str:
    """A scenario's policy name, if known (ValueError listing the choices otherwise)."""
    if name in BUILTIN[kind]:
        return name
    if disabled():
        label = f"{LABELS[kind]} {name!r}"
        if _inspect:
            if label not in _unchecked:
                _unchecked.append(label)
            return name
        raise ValueError(
            f"{label} is not a built-in one: it needs plugin code, which --no-plugins does not run"
        )
    if lookup(kind, name) is not None:
        return name
    others = _REGISTRY[kind].get(name)
    if others:
        plugin = next(iter(others.values())).plugin
        raise ValueError(
            f"{LABELS[kind]} {name!r} comes from plugin {plugin}, which this scenario "
            "does not list: add it to plugins: (or give --plugin)"
        )
    for ep_name, where, why in _entry_point_failures:
        if ep_name == name:  # the installed package that offers it is broken
            raise ValueError(f"{LABELS[kind]} {name!r} comes from {where}, which {why}")
    known = names(kind)
    hint = (
        ""
        if len(known) > len(BUILTIN[kind])
        else "; a plugin's name needs its module in plugins: or --plugin"
    )
    broken = (
        f" (note: {len(_entry_point_failures)} installed {ENTRY_POINT_GROUP} entry point(s) "
        f"could not be loaded: {_entry_point_failures[0][1]}...)"
        if _entry_point_failures
        else ""
    )
    raise ValueError(f"unknown {LABELS[kind]} {name!r}; choose one of {known}{hint}{broken}")


# ---- loading -----------------------------------------------------------------------------


def _notice(what: str) -> None:
    if on_import is not None:
        on_import(what)


def load_entry_points() -> None:
    """Import what installed packages offer under ``kvsim.policies`` (once per process).
    An entry point names a policy class (registered under the entry point's name) or a
    module (which registers its own). One that cannot be loaded is kept aside: it is
    reported only when a scenario names a policy that no plugin offers."""
    global _entry_points_loaded
    if _entry_points_loaded or disabled():
        return
    _entry_points_loaded = True
    try:
        eps = list(importlib.metadata.entry_points(group=ENTRY_POINT_GROUP))
    except Exception:  # some package's metadata is broken: no entry points
        return
    for ep in eps:
        where = f"entry point {ep.name} = {ep.value}"
        _notice(where)
        _loading.append(_Import(where, None))
        before = signals()
        try:
            obj = ep.load()
            if isinstance(obj, type):
                add(ep.name, obj)
            _resolve_pending()
            module = sys.modules.get(obj.__module__) if isinstance(obj, type) else obj
            file = getattr(module, "__file__", None)
            if isinstance(file, str):
                _files.setdefault(file, where)
        except BaseException as e:  # SystemExit, KeyboardInterrupt too
            if interrupted(e, before):
                raise
            place = None if isinstance(e, RegistrationError) else place_of(e)
            _entry_point_failures.append((ep.name, where, _failure(e) + at(place)))
        finally:
            _loading.pop()


def _failure(e: BaseException) -> str:
    if isinstance(e, RegistrationError):  # (it names the places)
        return describe(e, 1000).removeprefix("RegistrationError: ")
    if isinstance(e, ImportError | SyntaxError | FileNotFoundError):
        return f"cannot import it ({describe(e)})"
    return f"failed while loading ({describe(e)})"


def is_file_spec(spec: str) -> bool:
    return spec.endswith(".py") or "/" in spec or os.sep in spec


def canonical(spec: str) -> str:
    """A plugins: entry as kvsim keeps it: a .py file by its absolute path (symlinks
    resolved where they can be: a loop or a bad name is left as it is, and refused when
    the file is imported)."""
    if not is_file_spec(spec):
        return spec
    try:
        return os.path.realpath(os.path.expanduser(spec))
    except (OSError, ValueError, RuntimeError):
        return os.path.abspath(spec)


@contextlib.contextmanager
def scope(specs: Sequence[Any]) -> Iterator[None]:
    """Validate a scenario that lists these plugins (see :func:`_visible`)."""
    token = _scope.set(frozenset(canonical(s) for s in specs if isinstance(s, str)))
    try:
        yield
    finally:
        _scope.reset(token)


def load_plugins(specs: Sequence[str], where: str | None = None) -> None:
    """Import each plugin (a module name importable from the current folder or
    ``sys.path``, or a ``.py`` file path) so that its policies are registered; an import
    that fails (whatever it raises, SystemExit and KeyboardInterrupt included) is a
    :class:`PluginError` naming the plugin (after ``where``) and the place. Under
    :func:`no_plugins`, nothing is imported."""
    for spec in specs:
        if not isinstance(spec, str) or not spec.strip():
            raise PluginError(
                f"a plugin is a module name or a .py path, got {show(spec)}", where=where
            )
        here = f"plugin {spec}" if where is None else f"{where}: plugin {spec}"
        if disabled():
            if spec not in _skipped:
                _skipped.append(spec)
            continue
        key = canonical(spec)
        _loading.append(_Import(spec, key))
        before = signals()
        try:
            if is_file_spec(spec):
                _import_file(key)
            else:
                _import_module(spec)
        except _Unreadable as e:  # missing, a folder, a FIFO, a symlink loop, no permission
            raise PluginError(f"cannot import it ({e}: {key})", where=here) from None
        except BaseException as e:  # SystemExit, KeyboardInterrupt too
            if type(e) is PluginError or interrupted(e, before):
                raise  # (a plugin it imports, itself a failure)
            place = None if isinstance(e, RegistrationError) else place_of(e, [key])
            raise PluginError(_failure(e) + at(place), where=here) from e
        finally:
            _loading.pop()


def _import_module(name: str) -> None:
    if name in sys.modules:
        return
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.append(cwd)  # `kvsim` (a console script) has no cwd on its path
    origin = None
    if "." not in name:  # (finding a submodule would import its package first)
        spec = importlib.util.find_spec(name)
        if spec is None:
            raise ModuleNotFoundError(f"No module named {name!r}")
        origin = spec.origin
    _notice(f"{name} ({origin})" if origin else name)
    module = importlib.import_module(name)
    try:
        _resolve_pending()
    except RegistrationError:
        sys.modules.pop(name, None)  # imported again (and refused again) next time
        raise
    file = getattr(module, "__file__", None)
    if isinstance(file, str):
        _files.setdefault(file, name)


PLUGIN_MAX_BYTES = 1 << 24  # a plugin file kvsim reads (16 MiB)


class _Unreadable(Exception):
    """A plugin file that cannot be read (the reason)."""


def _import_file(path: str) -> None:
    """Import a plugin file (its absolute path) under a name of its own, once."""
    digest = hashlib.sha1(path.encode("utf-8", "surrogateescape")).hexdigest()[:10]
    name = f"kvsim_plugin_{Path(path).stem}_{digest}"
    if name in sys.modules:
        return
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"not a Python module: {path}")
    try:
        check_regular(path, what="plugin file")  # before the notice: nothing runs yet
        _notice(path)
        # read as kvsim reads any input (a FIFO put in its place is refused, not waited on)
        source = read_bytes(path, what="plugin file", max_bytes=PLUGIN_MAX_BYTES)
    except InputError as e:
        reason = "no such file" if e.reason.endswith("not found") else e.reason
        raise _Unreadable(reason) from None
    code = compile(source, path, "exec", dont_inherit=True)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    _files[path] = path
    try:
        exec(code, module.__dict__)  # a plugin is code the user chose to run
        _resolve_pending()
    except BaseException:
        sys.modules.pop(name, None)
        raise


@contextlib.contextmanager
def registered(name: str, cls: type, kind: str | None = None) -> Iterator[None]:
    """Register a policy for the duration of a ``with`` block (tests, notebooks)."""
    k = kind if kind is not None else _kind_of(cls)
    by_plugin = _REGISTRY[k].setdefault(name, {})
    old = by_plugin.pop(None, None)
    _loading.append(_Import(getattr(cls, "__module__", "?"), None))
    try:
        add(name, cls, k)
        _resolve_pending()
    finally:
        _loading.pop()
    try:
        yield
    finally:
        by_plugin.pop(None, None)
        if old is not None:
            by_plugin[None] = old
        if not by_plugin:
            _REGISTRY[k].pop(name, None)


def make(
    kind: str, name: str, specs: Sequence[str], params: Mapping[str, Any] | None = None
) -> tuple[Any, str]:
    """A new instance of the plugin policy ``name`` of a scenario listing the plugins
    ``specs``, made with ``params`` as keyword arguments (checked and coerced by
    :func:`check_params`), and the plugin it came from (whatever its constructor raises
    is a :class:`PluginError` naming it)."""
    if disabled():
        raise PluginError(
            f"{LABELS[kind]} {name!r} needs plugin code, which --no-plugins does not run"
        )
    entry = lookup(kind, name, specs)
    if entry is None:  # validated names only reach here
        raise KeyError(name)
    where = f"plugin {entry.plugin} ({kind} {name!r})"
    try:
        kwargs = check_params(kind, name, params, specs) if params else {}
    except ParamError as e:  # (a scenario's params are checked when it is validated)
        raise PluginError(f"params.{e.param}: {e}" if e.param else str(e), where=where) from None
    before = signals()
    try:
        return entry.cls(**kwargs), entry.plugin
    except BaseException as e:  # SystemExit, KeyboardInterrupt too
        if interrupted(e, before):
            raise
        file = getattr(sys.modules.get(entry.cls.__module__), "__file__", None)
        raise PluginError(
            f"{entry.cls.__name__}() raised {describe(e)}{at(place_of(e, [file] if file else []))}",
            where=where,
        ) from e


# ---- parameters --------------------------------------------------------------------------

REQUIRED: Any = inspect.Parameter.empty  # a Param's default when it has none


class Param(NamedTuple):
    """One keyword parameter of a policy class's ``__init__``."""

    name: str
    annotation: Any  # its resolved annotation (Any: none, or one that cannot be resolved)
    default: Any  # REQUIRED: none

    @property
    def required(self) -> bool:
        return self.default is REQUIRED

    def type_text(self) -> str:
        return type_text(self.annotation)


class ParamError(ValueError):
    """Params that do not fit a policy; ``param`` names the parameter at fault (None: the
    params as a whole)."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


def type_text(annotation: Any) -> str:
    """An annotation as messages and ``kvsim plugins`` write it (``float``, ``list[int]``)."""
    if annotation is Any:
        return "any"
    if typing.get_origin(annotation) is typing.Annotated:  # its type and its bounds
        base, *extras = typing.get_args(annotation)
        bounds = [
            f"{op} {getattr(m, attr)}"
            for extra in extras
            for m in getattr(extra, "metadata", [extra])
            for attr, op in (("gt", ">"), ("ge", ">="), ("lt", "<"), ("le", "<="))
            if getattr(m, attr, None) is not None
        ]
        return type_text(base) + (f" ({', '.join(bounds)})" if bounds else "")
    if isinstance(annotation, type) and not getattr(annotation, "__args__", None):
        return annotation.__name__
    return str(annotation).replace("typing.", "")


def _resolve_pending() -> None:
    """Resolve the parameter annotations of every class the plugin being imported
    registered (:func:`hints`): called when its import is complete."""
    imp = _loading[-1]
    pending, imp.classes = imp.classes, []
    for cls, what, place in pending:
        hints(cls, what, place)


def hints(cls: type, what: str = "", place: str = "") -> dict[str, Any]:
    """The resolved annotations of a policy class's ``__init__``
    (:func:`typing.get_type_hints`): what its params are checked against. One that cannot
    be resolved (``x: "NoSuchType"``, a name its module lacks) is a RegistrationError
    naming the parameter and the line of ``__init__``: never a parameter left unchecked.
    ``add`` calls it for every class registered (once a plugin's import is complete)."""
    init = cls.__init__  # type: ignore[misc]
    try:
        return typing.get_type_hints(init, include_extras=True)
    except Exception as whole:
        own = getattr(init, "__annotations__", None)
        bad, why = "", describe(whole)
        if isinstance(own, dict):  # which parameter: each resolved on its own
            for pname, ann in own.items():
                one = types.SimpleNamespace(
                    __annotations__={pname: ann}, __globals__=getattr(init, "__globals__", {})
                )
                try:
                    typing.get_type_hints(one, include_extras=True)
                except Exception as e:
                    bad, why = pname, describe(e)
                    break
        name = f"{what} ({cls.__name__})" if what else cls.__name__
        param = f"parameter {bad!r}" if bad and bad != "return" else "an annotation"
        code = getattr(init, "__code__", None)
        line = f"{code.co_filename}:{code.co_firstlineno}" if code is not None else place
        raise RegistrationError(
            f"{name}: the annotation of its {param} cannot be resolved ({why}); kvsim checks "
            f"a scenario's params against them: import or define the type{at(line)}"
        ) from None


def parameters(cls: type) -> tuple[list[Param], bool]:
    """The parameters a policy class takes by keyword (from its ``__init__``'s signature,
    annotations resolved by :func:`hints`), and whether it takes any keyword
    (``**kwargs``). ParamError if its signature or an annotation cannot be read (plugin
    code may refuse; an annotation that does not resolve is refused when the class is
    registered)."""
    before = signals()
    try:
        sig = inspect.signature(cls)
        try:
            resolved = hints(cls)
        except RegistrationError as e:
            raise ParamError(str(e)) from None
    except ParamError:
        raise
    except BaseException as e:
        if interrupted(e, before):
            raise
        raise ParamError(f"cannot read the parameters of {cls.__name__} ({describe(e)})") from e
    out: list[Param] = []
    any_keyword = False
    for p in sig.parameters.values():
        if p.kind is inspect.Parameter.VAR_KEYWORD:
            any_keyword = True
        elif p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY):
            out.append(Param(p.name, resolved.get(p.name, Any), p.default))
    return out, any_keyword


def _is_plain(value: Any) -> bool:
    """A value YAML and JSON write as they read it (what a scenario may keep)."""
    if value is None or isinstance(value, bool | int | float | str):
        return True
    if type(value) is list:
        return all(_is_plain(v) for v in value)
    if type(value) is dict:
        return all(isinstance(k, str) and _is_plain(v) for k, v in value.items())
    return False


def plain_params(checked: Mapping[str, Any], given: Mapping[str, Any]) -> dict[str, Any]:
    """What a scenario keeps of params: each coerced value where YAML writes it as it
    reads it (``1`` given for a float is kept as ``1.0``), else the value as given (a
    list for a tuple), so that the scenario written back loads to the same one."""
    return {k: v if _is_plain(v) else given[k] for k, v in checked.items()}


def _coerce(kind: str, name: str, param: Param, value: Any) -> Any:
    """One parameter's value, validated and coerced to its annotation by pydantic."""
    from pydantic import ConfigDict, TypeAdapter, ValidationError
    from pydantic.errors import PydanticUserError

    if param.annotation is Any:
        return value
    try:
        try:
            adapter: Any = TypeAdapter(
                param.annotation,
                config=ConfigDict(arbitrary_types_allowed=True, allow_inf_nan=False),
            )
        except PydanticUserError:  # (a model with its own config)
            adapter = TypeAdapter(param.annotation)
    except Exception:  # an annotation pydantic cannot check: the value goes as given
        return value
    try:
        # True or False is taken only where the annotation takes a bool itself (pydantic's
        # lax mode would make it 1 or 1.0 for an int or a float)
        return adapter.validate_python(value, strict=True if type(value) is bool else None)
    except ValidationError as e:
        err = e.errors()[0]
        at_ = "".join(f"[{x}]" if isinstance(x, int) else f".{x}" for x in err["loc"])
        raise ParamError(
            f"{err['msg']}, got {show(err.get('input', value))}"
            + (f" at {at_.lstrip('.')}" if at_ else "")
            + f" ({LABELS[kind]} {name!r} takes {param.name}: {param.type_text()})",
            param.name,
        ) from None


def check_params(
    kind: str, name: str, params: Mapping[str, Any] | None, specs: Sequence[str] | None = None
) -> dict[str, Any]:
    """``params`` checked against the ``__init__`` of the policy ``name`` and coerced to
    its annotations (ParamError, a ValueError, naming the parameter at fault: an unknown
    one, a value of the wrong type, a required one missing; the built-in policies take
    none). Under ``no_plugins(inspect=True)`` a plugin's params are returned unchecked."""
    given = dict(params or {})
    if name in BUILTIN[kind]:
        if given:
            raise ParamError(
                f"the built-in {LABELS[kind]} {name!r} takes no parameters", next(iter(given))
            )
        return {}
    if disabled():
        return given
    entry = lookup(kind, name, specs)
    if entry is None:
        raise ParamError(f"unknown {LABELS[kind]} {name!r}")
    accepted, any_keyword = parameters(entry.cls)
    by_name = {p.name: p for p in accepted}
    out: dict[str, Any] = {}
    for key, value in given.items():
        param = by_name.get(key)
        if param is None:
            if any_keyword and isinstance(key, str) and key.isidentifier():
                out[key] = value
                continue
            choices = ", ".join(by_name) or "none"
            near = difflib.get_close_matches(str(key), list(by_name), n=1)
            hint = f"; did you mean {near[0]!r}?" if near else f" (it takes: {choices})"
            raise ParamError(f"unknown parameter of {LABELS[kind]} {name!r}{hint}", str(key))
        out[key] = _coerce(kind, name, param, value)
    for p in accepted:
        if p.required and p.name not in given:
            raise ParamError(
                f"missing required parameter of {LABELS[kind]} {name!r} ({p.type_text()})",
                p.name,
            )
    return out


# one line on each built-in policy (kvsim plugins lists them)
BUILTIN_DOCS: dict[tuple[str, str], str] = {
    ("eviction", "lru"): "evicts the least recently used block (hits and refreshes count)",
    ("eviction", "fifo"): "evicts the block stored first; hits do not reorder",
    ("admission", "all"): "stores every block offered",
    ("admission", "second_hit"): "stores a block offered once before (a ghost list remembers "
    "first sightings, as long as the tier holds blocks)",
    ("router", "round_robin"): "engines in turn",
    ("router", "least_loaded"): "the engine with the fewest outstanding requests",
    ("router", "cache_affinity"): "the engine holding the longest prefix, unless it has more "
    "than cluster.affinity_slack requests more than the least loaded one",
    ("scheduler", "fcfs"): "arrival order",
    ("scheduler", "lpm"): "longest cached prefix first",
    ("scheduler", "sjf"): "shortest remaining prompt first, with aging (engine.sjf_aging)",
    ("load_policy", "sync"): "restores the whole hit; the engine waits for it",
    ("load_policy", "async"): "restores the whole hit while the engine serves others",
    ("load_policy", "recompute"): "looks only at the GPU prefix cache; lower tiers are ignored",
    ("load_policy", "auto"): "as sync, but restores only the prefix whose live estimate "
    "beats the others (recompute included)",
    ("prefetch", "none"): "no prefetch: restores read NVMe and remote directly",
    ("prefetch", "best_effort"): "fetches NVMe and remote blocks into host; uses what arrived "
    "when the request is scheduled",
    ("prefetch", "wait_complete"): "fetches into host; the request waits for its prefetch",
    ("prefetch", "timeout"): "fetches into host; the request waits at most prefetch.timeout",
}


def visible(kind: str) -> list[tuple[str, Entry]]:
    """The plugin policies of a kind that the scenario in scope (else: every one) may
    name, with the entry each name means (a name two of its plugins register is left
    out: naming it is refused)."""
    out = []
    for n in names(kind)[len(BUILTIN[kind]) :]:
        try:
            entry = lookup(kind, n)
        except ValueError:
            continue
        if entry is not None:
            out.append((n, entry))
    return out
