"""Scenario files in, a validated :class:`Scenario` out; every mistake as one line.

Layers, each a plain dict, are deep-merged in this order (later wins):

    profile (by name)  <-  extends chain (root first)  <-  scenario file  <-  --set overrides

Every leaf remembers where it was written (file and line, or the ``--set`` expression),
so a validation error reads ``scenarios/x.yaml:12: remote.bandwidth: <reason>``. A
mapping whose ``kind``/``dist``/``process`` changes between layers is replaced, not merged,
so a child may swap a Mooncake workload for a synthetic one (likewise a ``timing`` table
given over a roofline, or the other way round). Relative paths (``extends``,
``workload.path``, ``timing.table``) resolve against the file that wrote them; timing CSVs
are read here, so config objects never touch the filesystem afterwards.
"""

from __future__ import annotations

import copy
import csv
import difflib
import io
import math
import os
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, TypeVar, Union, get_args, get_origin

import yaml
from pydantic import BaseModel, ValidationError

from kvsim.config.schema import (
    POLICY_FIELDS,
    REMOTE_KINDS,
    REMOVED_FIELDS,
    Scenario,
    cross_checks,
)
from kvsim.errors import InputError, shown
from kvsim.files import MAX_CONFIG_BYTES, MAX_TABLE_BYTES, check_regular, read_text
from kvsim.plugins import canonical, is_file_spec, load_plugins
from kvsim.plugins import scope as plugin_scope
from kvsim.profiles import DEFAULT_PROFILE, profile_path, remote_kind_path

Path_ = tuple[Any, ...]
RecordT = TypeVar("RecordT", bound=BaseModel)
Origins = dict[Path_, str]  # field path -> "file:line" (or "--set expr")

_TAGS = ("kind", "dist", "process")
_PROFILE_KEYS = {"name", "description", "sources", "node", "model", "timing", "tiers", "remote"}


# ---- YAML with line numbers, bounded ------------------------------------------------

MAX_YAML_DEPTH = 40  # nesting levels (a scenario uses about 5)
MAX_YAML_VALUES = 100_000  # values in a document and its extends chain, aliases expanded
MAX_INT_CHARS = 400  # an integer literal longer than this is a typo, not a setting
MAX_EXTENDS = 32  # files in one extends chain
_MERGE_TAG = "tag:yaml.org,2002:merge"


class Budget:
    """Values a load may still read: one budget is shared by every file of a scenario's
    ``extends`` chain and its profile, so no mix of files and aliases can exhaust memory."""

    def __init__(self, values: int = MAX_YAML_VALUES) -> None:
        self.limit = values
        self.left = values


class _Loader(yaml.SafeLoader):
    """PyYAML's safe loader with bounds on nesting, node count and integer size, so the
    work and memory of a load are bounded by the size of the text."""

    def __init__(self, text: str, where: str, lines: bool, budget: Budget) -> None:
        super().__init__(text)
        self.where = where
        self.lines = lines
        self.budget = budget
        self.depth = 0
        self.nodes = 0

    def at(self, mark: Any) -> str:
        return f"{self.where}:{mark.line + 1}" if self.lines and mark is not None else self.where

    def compose_node(self, parent: Any, index: Any) -> Any:
        self.depth += 1
        self.nodes += 1
        if self.depth > MAX_YAML_DEPTH:
            raise InputError(
                f"YAML nested deeper than {MAX_YAML_DEPTH} levels",
                where=self.at(self.peek_event().start_mark),
            )
        if self.nodes > self.budget.left:
            raise InputError(
                f"YAML too large: more than {self.budget.limit:,} values",
                where=self.at(self.peek_event().start_mark),
            )
        try:
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1

    def construct_object(self, node: Any, deep: bool = False) -> Any:
        try:
            return super().construct_object(node, deep)
        except (ValueError, ArithmeticError, LookupError, TypeError) as e:  # 30 February, !!int ""
            first = (str(e).splitlines() or [type(e).__name__])[0]
            raise InputError(
                f"bad value {shown(node.value)}: {first}", where=self.at(node.start_mark)
            ) from None

    def construct_bounded_int(self, node: Any) -> Any:
        text = str(node.value).replace("_", "")
        if len(text) > MAX_INT_CHARS:
            raise InputError(
                f"integer of {len(text):,} characters is too large "
                f"(kvsim reads at most {MAX_INT_CHARS})",
                where=self.at(node.start_mark),
            )
        if ":" in text:  # `!!int 1:30`: no base 60 (YAML 1.2 has none)
            raise InputError(
                f"bad integer {shown(node.value)} (base-60 numbers are not read)",
                where=self.at(node.start_mark),
            )
        return self.construct_yaml_int(node)

    def flatten_mapping(self, node: Any) -> None:
        """Merge keys by the YAML merge-key rules: a mapping's own keys win, and of several
        merged mappings (``<<: [*a, *b]``) the FIRST that sets a key wins. (PyYAML 6.0.4
        keeps every merged pair, so there the last source would win.) The same choice as
        :func:`_pairs`, which records the line of each key."""
        merged: dict[Any, tuple[Any, Any]] = {}
        own = []
        for key_node, value_node in node.value:
            if key_node.tag != _MERGE_TAG:
                if key_node.tag == "tag:yaml.org,2002:value":
                    key_node.tag = "tag:yaml.org,2002:str"
                own.append((key_node, value_node))
                continue
            if isinstance(value_node, yaml.MappingNode):
                sources = [value_node]
            elif isinstance(value_node, yaml.SequenceNode):
                sources = value_node.value
            else:
                raise yaml.constructor.ConstructorError(
                    "while constructing a mapping",
                    node.start_mark,
                    "expected a mapping or list of mappings for merging, but found "
                    f"{value_node.id}",
                    value_node.start_mark,
                )
            for source in sources:
                if not isinstance(source, yaml.MappingNode):
                    raise yaml.constructor.ConstructorError(
                        "while constructing a mapping",
                        node.start_mark,
                        f"expected a mapping for merging, but found {source.id}",
                        source.start_mark,
                    )
                self.flatten_mapping(source)
                for pair in source.value:
                    k = pair[0]
                    key = (k.tag, k.value) if isinstance(k, yaml.ScalarNode) else id(k)
                    merged.setdefault(key, pair)
        node.value = list(merged.values()) + own  # own keys come last: they win

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        """A mapping whose keys are the text the user wrote: ``1:``, ``true:``, ``null:``,
        ``1.50:`` or a date are keys "1", "true", "null", "1.50", not 1, True (which
        Python takes for 1), None or 1.5, so that a message names the key as written and
        the line recorded for it (:func:`_walk_lines` keys lines by that text) is found.
        A list or mapping as a key is refused there first."""
        if isinstance(node, yaml.MappingNode):
            self.flatten_mapping(node)
            node.value = [
                (
                    yaml.ScalarNode(
                        "tag:yaml.org,2002:str",
                        str(k.value),
                        k.start_mark,
                        k.end_mark,
                        k.style,
                    )
                    if isinstance(k, yaml.ScalarNode) and k.tag != _MERGE_TAG
                    else k,
                    v,
                )
                for k, v in node.value
            ]
        return super().construct_mapping(node, deep)


_Loader.add_constructor("tag:yaml.org,2002:int", _Loader.construct_bounded_int)

# YAML 1.1's base-60 numbers (`1:30` = 90) are gone in YAML 1.2: a colon in a number is a
# typo (`engines: 1:0` would be 60 engines), so such text stays a string and fails type
# checks naming its field. The other int and float forms are PyYAML's.
_NO_BASE60 = {
    "tag:yaml.org,2002:int": re.compile(
        r"""^(?:[-+]?0b[0-1_]+
            |[-+]?0[0-7_]+
            |[-+]?(?:0|[1-9][0-9_]*)
            |[-+]?0x[0-9a-fA-F_]+)$""",
        re.X,
    ),
    "tag:yaml.org,2002:float": re.compile(
        r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+][0-9]+)?
            |\.[0-9][0-9_]*(?:[eE][-+][0-9]+)?
            |[-+]?\.(?:inf|Inf|INF)
            |\.(?:nan|NaN|NAN))$""",
        re.X,
    ),
}
_Loader.yaml_implicit_resolvers = {
    first: [(tag, _NO_BASE60.get(tag, rx)) for tag, rx in resolvers]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def _parse(text: str, where: str, *, lines: bool = True, budget: Budget | None = None) -> Any:
    """Parse YAML text with bounded work; return (node, data, origins) where origins maps
    each path to ``where:line`` (or just ``where`` when ``lines`` is false)."""
    budget = budget if budget is not None else Budget()
    try:
        loader = _Loader(text, where, lines, budget)
    except yaml.reader.ReaderError as e:  # a control character such as NUL
        line = text.count("\n", 0, max(e.position, 0)) + 1
        raise InputError(
            f"YAML cannot contain the control character #x{e.character:04x}",
            where=f"{where}:{line}" if lines else where,
        ) from None
    try:
        node = loader.get_single_node()
        if node is None:
            return None, None, {}
        _measure(node, loader, budget)
        origins: Origins = {}
        _walk_lines(node, (), loader, origins)
        data = _unshared(loader.construct_document(node))
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        problem = (e.problem or e.context or "YAML syntax error").strip()
        raise InputError(f"YAML syntax error: {problem}", where=loader.at(mark)) from None
    except yaml.YAMLError as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise InputError(f"YAML error: {first}", where=where) from None
    except RecursionError:  # pragma: no cover - the depth bound comes first
        raise InputError("YAML nested too deeply", where=where) from None
    finally:
        loader.dispose()
    return node, data, origins


def _unshared(value: Any) -> Any:
    """A copy in which no mapping or list appears twice: an alias becomes a copy of its
    anchor, so that an override of one place (``--set tiers.nvme.capacity=...`` where
    ``nvme: *host``) never changes another. Bounded by :func:`_measure`."""
    if isinstance(value, dict):
        return {k: _unshared(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_unshared(v) for v in value]
    return value


def load_yaml(path: str | os.PathLike[str], budget: Budget | None = None) -> tuple[Any, Origins]:
    """Safely parse a YAML file (a regular file of bounded size, bounded nesting and
    values, aliases included); return the data and the line of every node in it."""
    p = Path(path)
    text = read_text(p, what="YAML file", max_bytes=MAX_CONFIG_BYTES)
    node, data, origins = _parse(text, str(p), budget=budget)
    if node is None:
        raise InputError("empty file, expected a YAML mapping", where=str(p))
    return data, origins


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def _measure(root: yaml.Node, loader: _Loader, budget: Budget) -> None:
    """Count the values of a composed document as if its aliases were expanded (each node
    is visited once: counts are memoised) and refuse recursive aliases, nesting deeper than
    MAX_YAML_DEPTH and more values than the budget has left; then charge the budget."""
    memo: dict[int, tuple[int, int]] = {}  # id(node) -> (values, height)
    active: set[int] = set()

    def visit(node: yaml.Node, depth: int) -> tuple[int, int]:
        if depth > MAX_YAML_DEPTH:
            raise InputError(
                f"YAML nested deeper than {MAX_YAML_DEPTH} levels (aliases included)",
                where=loader.at(node.start_mark),
            )
        key = id(node)
        if key in active:
            raise InputError(
                "recursive alias: a node contains itself", where=loader.at(node.start_mark)
            )
        got = memo.get(key)
        if got is None:
            active.add(key)
            size, height = 1, 1
            for child in _children(node):
                s, h = visit(child, depth + 1)
                size += s
                height = max(height, h + 1)
                if size > budget.left:
                    raise InputError(
                        f"YAML too large: more than {budget.limit:,} values once aliases "
                        "are expanded",
                        where=loader.at(node.start_mark),
                    )
            active.discard(key)
            memo[key] = got = (size, height)
        if depth + got[1] - 1 > MAX_YAML_DEPTH:
            raise InputError(
                f"YAML nested deeper than {MAX_YAML_DEPTH} levels (aliases included)",
                where=loader.at(node.start_mark),
            )
        return got

    budget.left -= visit(root, 1)[0]


def _key(node: yaml.Node, loader: _Loader) -> str:
    if not isinstance(node, yaml.ScalarNode):
        raise InputError(
            "a mapping key must be a plain value, not a list or mapping",
            where=loader.at(node.start_mark),
        )
    return str(node.value)


def _pairs(node: yaml.MappingNode, path: Path_, loader: _Loader) -> list[tuple[Any, Any]]:
    """The (key, value) nodes a mapping ends up with: its own keys (a repeated one is
    refused), then those merged in by ``<<`` that it does not set itself; of several merged
    mappings the first that sets a key wins (the YAML merge-key rules)."""
    own: list[tuple[Any, Any]] = []
    sources: list[Any] = []
    seen: set[str] = set()
    for key_node, value_node in node.value:
        key = "<<" if key_node.tag == _MERGE_TAG else _key(key_node, loader)
        if key in seen:
            raise InputError(
                f"{_dotted((*path, key))}: duplicate key", where=loader.at(key_node.start_mark)
            )
        seen.add(key)
        if key_node.tag == _MERGE_TAG:
            sources = (
                value_node.value if isinstance(value_node, yaml.SequenceNode) else [value_node]
            )
        else:
            own.append((key_node, value_node))
    seen.discard("<<")
    out = own
    for source in sources:
        if isinstance(source, yaml.MappingNode):  # anything else the constructor refuses
            for key_node, value_node in _pairs(source, path, loader):
                key = _key(key_node, loader)
                if key not in seen:
                    seen.add(key)
                    out.append((key_node, value_node))
    return out


def _walk_lines(
    node: yaml.Node, path: Path_, loader: _Loader, out: Origins, mark: Any = None
) -> None:
    """Record where each path is written: the line of its key (of the node for the root
    and list items). Runs on the composed document before construction (which flattens
    merge keys), within the size :func:`_measure` has bounded."""
    out[path] = loader.at(mark if mark is not None else node.start_mark)
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in _pairs(node, path, loader):
            _walk_lines(value_node, (*path, key_node.value), loader, out, key_node.start_mark)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _walk_lines(item, (*path, i), loader, out)


def _dotted(path: Iterable[Any]) -> str:
    parts: list[str] = []
    for p in path:
        if isinstance(p, int) and parts:
            parts[-1] += f"[{p}]"
        else:
            text = str(p)
            parts.append(text if len(text) <= 60 else text[:57] + "...")
    return ".".join(parts) or "(top level)"


# ---- merging layers -------------------------------------------------------------------


def promoted(path: Path_, value: Any, over: Any) -> Any:
    """A policy field's bare name as the mapping ``{name: NAME}``, when what goes over it
    is a mapping (``params`` given in an ``extends:`` layer or an override, for a name
    the layer below gave); anything else as it is."""
    if isinstance(value, str) and isinstance(over, dict) and tuple(path) in POLICY_FIELDS:
        return {"name": value}
    return value


def deep_merge(base: Any, over: Any, _path: Path_ = (), _replaced: list | None = None) -> Any:
    """Merge ``over`` onto ``base``: mappings recursively, anything else replaced.

    A mapping whose tag (``kind``, ``dist`` or ``process``) differs is replaced whole; its
    path is appended to ``_replaced`` when a list is given. A policy field's bare name
    under a mapping is taken as ``{name: NAME}`` (:func:`promoted`).
    """
    base = promoted(_path, base, over)
    if not isinstance(base, dict) or not isinstance(over, dict):
        return over
    changed = any(tag in over and tag in base and over[tag] != base[tag] for tag in _TAGS)
    if _path == ("timing",):  # a table over a roofline (or back) replaces the time model
        a, b = _timing_kind(base), _timing_kind(over)
        changed = changed or (a is not None and b is not None and a != b)
    if changed:
        if _replaced is not None:
            _replaced.append(_path)
        return dict(over)
    merged = dict(base)
    for key, value in over.items():
        if key in base:
            merged[key] = deep_merge(base[key], value, (*_path, key), _replaced)
        else:
            merged[key] = value
    return merged


def _timing_kind(timing: dict[str, Any]) -> str | None:
    """ "roofline" or "table": which time model a timing mapping gives (None: neither)."""
    if "roofline" in timing:
        return "roofline"
    if any(k in timing for k in ("table", "new_tokens", "cached_tokens", "seconds")):
        return "table"
    return None


def merge_layers(
    base: dict[str, Any], base_origins: Origins, over: dict[str, Any], over_origins: Origins
) -> tuple[dict[str, Any], Origins]:
    """Deep-merge two layers and their origins (stale origins of replaced mappings dropped)."""
    replaced: list[Path_] = []
    data = deep_merge(base, over, (), replaced)
    origins = {p: w for p, w in base_origins.items() if not any(p[: len(r)] == r for r in replaced)}
    origins.update(over_origins)
    return data, origins


# ---- one file = one layer -------------------------------------------------------------


def _require_mapping(data: Any, where: str) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise InputError(
            f"expected a YAML mapping at the top level, got {type(data).__name__}", where=where
        )
    return data


def _normalize_layer(data: dict[str, Any], origins: Origins, base_dir: Path) -> None:
    """Resolve the file references a layer makes, relative to its own folder."""
    plugins = data.get("plugins")
    if isinstance(plugins, list):  # .py files relative to the file; modules as they are
        data["plugins"] = [
            canonical(str(_resolve(base_dir, p))) if isinstance(p, str) and is_file_spec(p) else p
            for p in plugins
        ]
    wl = data.get("workload")
    if isinstance(wl, dict) and isinstance(wl.get("path"), str):
        wl["path"] = str(_resolve(base_dir, wl["path"]))
    prof = data.get("profile")
    if isinstance(prof, dict):  # card files relative to the file naming them
        for key in ("model", "gpu", "base"):
            v = prof.get(key)
            if isinstance(v, str) and ("/" in v or v.endswith((".json", ".yaml", ".yml"))):
                prof[key] = str(_resolve(base_dir, v))
    timing = data.get("timing")
    if isinstance(timing, dict):
        if isinstance(timing.get("table"), str):
            csv_path = _resolve(base_dir, timing["table"])
            where = origins.get(("timing", "table"), str(csv_path))
            timing.update(read_timing_csv(csv_path, where))
            timing["table"] = str(csv_path)  # (the file read, as workload.path: provenance)
        elif "seconds" in timing:
            timing["table"] = None


def _resolve(base_dir: Path, p: str) -> Path:
    q = Path(os.path.expanduser(p))
    return q if q.is_absolute() else (base_dir / q)


MAX_TIMING_ROWS = MAX_YAML_VALUES  # rows of a timing table


def read_timing_csv(path: Path, where: str) -> dict[str, Any]:
    """Read a long-format timing table (new_tokens, cached_tokens, seconds) into a grid."""
    try:
        check_regular(path)
    except InputError as e:
        raise InputError(f"timing table {shown(str(path))}: {e.reason}", where=where) from None
    text = read_text(path, what="timing table", max_bytes=MAX_TABLE_BYTES)
    cells: dict[tuple[int, int], float] = {}
    first: dict[tuple[int, int], int] = {}  # the line of each (new, cached) pair
    kept: list[int] = []  # the file's line number of each line the reader sees

    def rows() -> Iterator[str]:
        for n, line in enumerate(io.StringIO(text, newline=""), start=1):
            if not line.lstrip().startswith("#"):  # comments are left out
                kept.append(n)
                yield line

    def line_no() -> int:  # the file's line of the csv reader's last line
        at = reader.reader.line_num  # DictReader's own count lags behind a failed row
        return kept[at - 1] if 0 < at <= len(kept) else 1

    reader = csv.DictReader(rows())
    need = {"new_tokens", "cached_tokens", "seconds"}
    i = 1
    try:
        names = reader.fieldnames
        if names is not None:
            header_at = f"{path}:{line_no()}"
            folded: set[str] = set()
            for n in names:
                f = n.strip().casefold()
                if f in folded:
                    raise InputError(
                        f"timing table header names column {shown(n.strip())} twice: which "
                        "one is meant?",
                        where=header_at,
                    )
                folded.add(f)
        if names is None or not need <= set(names):
            raise InputError(f"timing table needs columns {sorted(need)}", where=str(path))
        for count, row in enumerate(reader, start=2):
            i = line_no()
            if count > MAX_TIMING_ROWS:
                raise InputError(
                    f"timing table has more than {MAX_TIMING_ROWS:,} rows", where=str(path)
                )
            try:
                key = (_table_int(row["new_tokens"]), _table_int(row["cached_tokens"]))
                seconds = float(_cell(row["seconds"]))
            except (TypeError, ValueError):
                raise InputError("bad number in timing row", where=f"{path}:{i}") from None
            if not (math.isfinite(seconds) and seconds > 0):
                raise InputError(
                    f"seconds must be a finite number > 0, got {shown(row['seconds'])}",
                    where=f"{path}:{i}",
                )
            if key in cells:  # two times for one point: which one is meant?
                raise InputError(
                    f"a second row for new_tokens {key[0]}, cached_tokens {key[1]} (the "
                    f"first is line {first[key]}): give each point once",
                    where=f"{path}:{i}",
                )
            cells[key] = seconds
            first[key] = i
    except csv.Error as e:
        raise InputError(f"malformed CSV ({e})", where=f"{path}:{line_no()}") from None
    new = sorted({k[0] for k in cells})
    cached = sorted({k[1] for k in cells})
    if len(new) * len(cached) != len(cells):
        missing = next((n, c) for n in new for c in cached if (n, c) not in cells)
        raise InputError(f"timing grid is incomplete, e.g. no row for {missing}", where=str(path))
    return {
        "new_tokens": new,
        "cached_tokens": cached,
        "seconds": [[cells[(n, c)] for c in cached] for n in new],
    }


def _cell(text: Any) -> str:
    if not isinstance(text, str) or len(text.strip()) > MAX_INT_CHARS:
        raise ValueError("not a number")
    return text


def _table_int(text: Any) -> int:
    return int(_cell(text))


def _load_chain(
    path: Path, stack: tuple[Path, ...] = (), budget: Budget | None = None
) -> tuple[dict[str, Any], Origins]:
    """A scenario file merged over its ``extends`` ancestors."""
    budget = budget if budget is not None else Budget()
    check_regular(path, what="scenario file")
    real = path.resolve()
    if real in stack:
        cycle = " -> ".join(str(p) for p in (*stack, real))
        raise InputError(f"extends cycle: {cycle}", where=str(path))
    if len(stack) >= MAX_EXTENDS:
        raise InputError(
            f"extends chain longer than {MAX_EXTENDS} files (from {stack[0]})", where=str(path)
        )
    data, origins = load_yaml(path, budget)
    data = _require_mapping(data, str(path))
    _normalize_layer(data, origins, path.parent)
    parent = data.pop("extends", None)
    where = origins.pop(("extends",), str(path))
    if parent is None:
        return data, origins
    if not isinstance(parent, str) or not parent:
        raise InputError("extends: expected a file path", where=where)
    parent_path = _resolve(path.parent, parent)
    try:
        check_regular(parent_path)
    except InputError as e:
        raise InputError(
            f"extends: {shown(parent)}: {e.reason} (looked for {parent_path})", where=where
        ) from None
    base, base_origins = _load_chain(parent_path, (*stack, real), budget)
    return merge_layers(base, base_origins, data, origins)


def _load_profile(
    name: Any, where: str, scenario_dir: Path | None, budget: Budget | None = None
) -> tuple[dict, Origins]:
    if isinstance(name, dict):  # composed from the catalogue (kvsim/catalogue/compose.py)
        return _compose_profile(name, where, scenario_dir, budget)
    if not isinstance(name, str) or not name:
        raise InputError(
            "profile: expected a profile name (see `kvsim profiles`) or a mapping "
            "{model, gpu, gpus, tp, pcp, ep}",
            where=where,
        )
    try:
        path = profile_path(name, scenario_dir)
    except InputError as e:
        raise InputError(f"profile: {e.reason}", where=where) from None
    data, origins = load_yaml(path, budget)
    data = _require_mapping(data, str(path))
    unknown = set(data) - _PROFILE_KEYS
    if unknown:
        key = sorted(unknown, key=str)[0]
        raise InputError(
            f"{key}: unknown profile section (valid: {sorted(_PROFILE_KEYS)})",
            where=origins.get((str(key),), str(path)),
        )
    _normalize_layer(data, origins, path.parent)
    layer = {k: v for k, v in data.items() if k not in {"name", "description", "sources"}}
    return layer, {k: v for k, v in origins.items() if k and k[0] in layer}


def remote_kind_layer(
    profile: dict[str, Any], origins: Origins, scenario: Mapping[str, Any]
) -> tuple[dict[str, Any], Origins]:
    """The profile layer, its remote section replaced by the shipped profile of the remote
    kind the scenario (its extends chain and ``--set``) asks for, when that differs from the
    profile's own (kvsim/profiles/remote/KIND.yaml); the scenario's remote fields then
    merge over it as over any profile. An unknown kind is left for validation to name."""
    remote = scenario.get("remote")
    kind = remote.get("kind") if isinstance(remote, dict) else None
    if not isinstance(kind, str) or kind not in REMOTE_KINDS:
        return profile, origins
    own = profile.get("remote")
    current = own.get("kind", "kv_server") if isinstance(own, dict) else "kv_server"
    if kind == current:
        return profile, origins
    path = remote_kind_path(kind)
    data, kind_origins = load_yaml(path)
    section = _require_mapping(data, str(path)).get("remote")
    if not isinstance(section, dict):  # pragma: no cover - shipped files have one
        raise InputError("expected a remote: section", where=str(path))
    layer = {**profile, "remote": section}
    kept = {p: w for p, w in origins.items() if not p or p[0] != "remote"}
    # named as the package file (kvsim/profiles/remote/KIND.yaml:LINE), wherever installed
    shown = f"kvsim/profiles/remote/{kind}.yaml"
    kept.update(
        {
            p: w.replace(str(path), shown, 1)
            for p, w in kind_origins.items()
            if p and p[0] == "remote"
        }
    )
    return layer, kept


_COMPOSE_KEYS = {"model", "gpu", "gpus", "tp", "pcp", "ep", "dtype", "base"}


def _compose_profile(
    spec: dict, where: str, scenario_dir: Path | None, budget: Budget | None
) -> tuple[dict, Origins]:
    """A profile layer composed from a model card and a GPU card; its every value's origin
    is the scenario's ``profile`` mapping."""
    from kvsim.catalogue.compose import profile_layer

    unknown = sorted(set(spec) - _COMPOSE_KEYS, key=str)
    if unknown:
        raise InputError(
            f"profile.{unknown[0]}: unknown field (valid: {', '.join(sorted(_COMPOSE_KEYS))})",
            where=where,
        )
    base = None
    if spec.get("base") is not None:
        try:
            base, _ = _load_profile(spec["base"], where, scenario_dir, budget)
        except InputError as e:
            raise InputError(
                "profile.base: " + e.reason.removeprefix("profile: "), where=where
            ) from None
    try:
        layer = profile_layer(spec, base, scenario_dir)
    except InputError as e:  # a card's own mistake keeps the card's file and line
        raise InputError(e.reason, where=e.where or where) from None

    origins: Origins = {}

    def mark(d: dict, path: tuple) -> None:
        for k, v in d.items():
            origins[(*path, k)] = where
            if isinstance(v, dict):
                mark(v, (*path, k))

    mark(layer, ())
    return layer, origins


# ---- overrides --------------------------------------------------------------------------


def parse_override(expr: str) -> tuple[list[str], Any]:
    """``remote.sharding=per_rank`` -> (["remote", "sharding"], "per_rank"); YAML scalars."""
    if "=" not in expr:
        raise InputError(
            "expected path=value, e.g. remote.sharding=per_rank", where=f"--set {expr}"
        )
    key, _, raw = expr.partition("=")
    parts = [k.strip() for k in key.split(".")]
    if not all(parts):
        raise InputError("empty field name in path", where=f"--set {expr}")
    value: Any = ""
    if raw.strip():
        try:  # the same bounds as a file: nesting, size, aliases, integer length
            _, value, _ = _parse(raw, f"--set {expr}", lines=False)
        except InputError as e:
            if not e.reason.startswith(("YAML syntax error", "YAML error", "YAML cannot")):
                raise
            value = raw  # not YAML: the text itself
    return parts, value


def _parsed_sets(sets: Iterable[str], label: str = "--set ") -> list[tuple[list[str], Any, str]]:
    """Each ``path=value`` expression parsed: (path, value, where), a field given twice
    refused (which value would be meant?); ``plugins`` may be given again: they add up."""
    items: list[tuple[list[str], Any, str]] = []
    given: dict[tuple[str, ...], str] = {}
    for expr in sets:
        parts, value = parse_override(expr)
        earlier = given.get(tuple(parts))
        given[tuple(parts)] = expr
        if earlier is not None and parts != ["plugins"]:
            raise InputError(
                f"{_dotted(parts)} is set twice (also by {label}{earlier}); give it once",
                where=f"{label}{expr}",
            )
        items.append((parts, value, f"{label}{expr}"))
    return items


def with_sets(
    overrides: Mapping[str, Any] | None, sets: Sequence[str] | Mapping[str, Any] | None
) -> dict[str, Any]:
    """A configuration's overrides (a sweep's ``set`` and swept values, a suite entry's
    ``set``) with the command line's ``--set`` on top, as one mapping (field path -> value)
    for :func:`load_scenario`. Every command that runs such configurations takes ``--set``
    this way, so that it reaches the same layer as ``kvsim run --set``: below the profile
    merge, where ``--set profile=...`` chooses the profile (set over an already loaded
    Scenario, it would change nothing but the name). Plugins add up."""
    out = dict(overrides or {})
    if isinstance(sets, Mapping):
        pairs = [(str(k), v) for k, v in sets.items()]
    else:
        pairs = [(".".join(p), v) for p, v, _ in _parsed_sets(sets or [])]
    for key, value in pairs:
        if key == "plugins" and isinstance(value, list) and isinstance(out.get(key), list):
            value = [*out[key], *(v for v in value if v not in out[key])]
        out.pop(key, None)  # (applied after the configuration's own overrides)
        out[key] = value
    return out


def apply_overrides(
    data: dict[str, Any],
    origins: Origins,
    overrides: Sequence[str] | Mapping[str, Any],
    label: str = "--set ",
) -> None:
    """Set each override into ``data`` in place (creating mappings on the way). Errors name
    the override as ``label`` + ``path=value`` (``label`` alone when it ends with "=")."""
    items: list[tuple[list[str], Any, str]] = []
    if isinstance(overrides, Mapping):
        for k, v in overrides.items():
            where = f"{label}{v}" if label.endswith("=") else f"{label}{k}={v}"
            items.append((k.split("."), v, where))
    else:
        items = _parsed_sets(overrides, label)
    for parts, value, where in items:
        if len(parts) > MAX_YAML_DEPTH:  # also keeps the bookkeeping below linear
            raise InputError(f"field path deeper than {MAX_YAML_DEPTH} levels", where=where)
        node = data
        for i, key in enumerate(parts[:-1]):
            child = node.get(key)
            if child is None:
                child = node[key] = {}
            elif isinstance(child, str) and tuple(parts[: i + 1]) in POLICY_FIELDS:
                child = node[key] = {"name": child}  # (its params, or its name, set below)
            if not isinstance(child, dict):
                raise InputError(f"{_dotted(parts[: i + 1])} is not a mapping", where=where)
            node = child
        key = parts[-1]
        path = tuple(parts)
        if key in _TAGS and key in node and node[key] != value:
            # a new kind of record: the old one's fields do not carry over
            node.clear()
            path = path[:-1]
        old = promoted(path, node.get(key), value)
        if isinstance(old, dict) and isinstance(value, dict):
            value = deep_merge(old, value, path)
        elif path == ("plugins",) and isinstance(old, list) and isinstance(value, list):
            value = [*old, *(v for v in value if v not in old)]  # plugins add up
        node[key] = _unshared(value)  # never the caller's object, which later overrides edit
        for p in [p for p in origins if p[: len(path)] == path]:
            del origins[p]
        for n in range(1, len(parts) + 1):  # levels this override created are its own
            prefix = tuple(parts[:n])
            if prefix not in origins:
                origins[prefix] = where


# ---- validation ------------------------------------------------------------------------


def _where(origins: Origins, path: Path_, default: str) -> str:
    for n in range(len(path), -1, -1):
        if path[:n] in origins:
            return origins[path[:n]]
    return default


# pydantic's names for the schema it tried, which a loc may hold between the user's keys
# (a union member: "function-after[_one_line(), constrained-str]", "ProfileSpec", "str")
_PLAIN_TYPES = {"str", "int", "float", "bool", "list", "dict", "none"}
_FIELD_NAME = re.compile(r"[a-z_][a-z0-9_]*\Z")


def _data_path(
    data: Any, loc: Sequence[Any], kind: str = "", root: type[BaseModel] = Scenario
) -> Path_:
    """A pydantic loc as the user's field path: its keys that the data holds, a field of
    the record there that the data leaves out (a required one missing, a parameter), and a
    field below a value a validator rewrites (a policy's bare name); pydantic's own
    segments (union members, validators, tags) are dropped."""
    out: list[Any] = []
    node = data
    for i, key in enumerate(loc):
        last = i == len(loc) - 1
        if (isinstance(node, dict) and key in node) or (
            isinstance(node, list) and isinstance(key, int) and 0 <= key < len(node)
        ):
            out.append(key)
            node = node[key]
        elif isinstance(node, dict):
            there = _annotation_at(root, tuple(out), data)
            fields = (
                there.model_fields
                if isinstance(there, type) and issubclass(there, BaseModel)
                else {key: None}  # a free mapping (a policy's params): any key is the user's
                if there is dict or get_origin(there) is dict
                else {}
            )
            if (last and kind == "missing") or key in fields:
                out.append(key)  # a field of the mapping that the data leaves out
                node = None
            # else: a union member's or a tag's name
        elif (
            isinstance(key, str) and _FIELD_NAME.match(key) and key not in _PLAIN_TYPES
        ) or isinstance(key, int):
            out.append(key)  # below a value the schema rewrites ("lru" -> {name: lru})
            node = None
    return tuple(out)


def _annotation_at(model: Any, path: Path_, data: Any) -> Any:
    """The annotation of the field at ``path`` (the root model for the top level), the
    union members on the way picked by the data; None where the schema has no such field."""
    node = data
    for i, key in enumerate(path):
        if isinstance(key, int):  # an item of a list field
            args = get_args(model)
            if get_origin(model) not in (list, tuple) or not args:
                return None
            node = node[key] if isinstance(node, list) and key < len(node) else None
            given = args[0]
        else:
            if not (isinstance(model, type) and issubclass(model, BaseModel)):
                return None
            field = model.model_fields.get(key)
            if field is None:
                return None
            node = node.get(key) if isinstance(node, dict) else None
            given = field.annotation
        model = _pick(given, node)
        if model is None and i == len(path) - 1:
            return given  # a union the data picks no member of: all of it
    return model


def _model_at(model: Any, path: Path_, data: Any) -> type[BaseModel] | None:
    """The record class that validates the mapping at ``path`` (for 'did you mean')."""
    found = _annotation_at(model, path, data)
    return found if isinstance(found, type) and issubclass(found, BaseModel) else None


def _members(annotation: Any) -> list[Any]:
    """The alternatives of an (Optional, Annotated, discriminated) union annotation."""
    args = get_args(annotation)
    origin = get_origin(annotation)
    if origin is Annotated:
        return _members(args[0])
    if origin is Union or (origin is not None and "UnionType" in str(origin)):
        return [m for a in args if a is not type(None) for m in _members(a)]
    return [annotation]


def _pick(annotation: Any, node: Any) -> Any:
    """The member of an (Optional/discriminated) union annotation that fits ``node``."""
    args = get_args(annotation)
    origin = get_origin(annotation)
    if origin is Annotated:
        return _pick(args[0], node)
    if origin is Union or (origin is not None and "UnionType" in str(origin)):
        members = [_pick(a, node) for a in args if a is not type(None)]
        models = [m for m in members if isinstance(m, type) and issubclass(m, BaseModel)]
        for m in models:
            for tag in _TAGS:
                field = m.model_fields.get(tag)
                if (
                    field is not None
                    and isinstance(node, dict)
                    and node.get(tag) in get_args(field.annotation)
                ):
                    return m
        return models[0] if len(models) == 1 else None
    return annotation


def _tagged(annotation: Any) -> tuple[str, list[str]] | None:
    """(tag field, its values) of a discriminated union of records, e.g. ("kind",
    ["mooncake", "azure", "synthetic"]); None for anything else."""
    models = [m for m in _members(annotation) if isinstance(m, type) and issubclass(m, BaseModel)]
    for tag in _TAGS:
        values = [
            str(v)
            for m in models
            if tag in m.model_fields
            for v in get_args(m.model_fields[tag].annotation)
        ]
        if len(models) > 1 and values:
            return tag, values
    return None


def _either(words: Sequence[str]) -> str:
    """'a', 'a or b', 'a, b or c'."""
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} or {words[-1]}"


def _mapping_text(annotation: Any) -> str:
    """What a record field takes, in the user's words: its fields or its tag's values."""
    tagged = _tagged(annotation)
    if tagged is not None:
        tag, values = tagged
        return f"a mapping with {tag}: {_either([repr(v) for v in values])}"
    models = [m for m in _members(annotation) if isinstance(m, type) and issubclass(m, BaseModel)]
    if len(models) == 1:
        names = list(models[0].model_fields)
        more = ", ..." if len(names) > 8 else ""
        return f"a mapping {{{', '.join(names[:8])}{more}}}"
    return "a mapping"


# error types on a length: (which bound, what is counted)
_LENGTH_ERRORS = {
    "too_short": ("min", "item"),
    "too_long": ("max", "item"),
    "string_too_short": ("min", "character"),
    "string_too_long": ("max", "character"),
}
# error types whose message names a type or a record class: what the field takes instead
_MAPPING_ERRORS = {"model_type", "model_attributes_type", "dict_type", "mapping_type"}


def _allowed(err: Mapping[str, Any], annotation: Any) -> str:
    """What the field of a pydantic error takes, in the user's words (pydantic's message
    without "Input should be", a record class as its fields, a tagged union as its tags)."""
    kind = err["type"]
    if kind in _MAPPING_ERRORS:
        return _mapping_text(annotation) if annotation is not None else "a mapping"
    ctx = err.get("ctx") or {}
    if kind in _LENGTH_ERRORS:  # "List should have at least 1 item after validation, not 0"
        bound, unit = _LENGTH_ERRORS[kind]
        n = ctx.get(f"{bound}_length")
        if isinstance(n, int):
            return f"{'at least' if bound == 'min' else 'at most'} {n} {unit}{'s' * (n != 1)}"
    msg = str(err["msg"])
    msg = msg.removeprefix("Input should be ").removeprefix("Value error, ")
    # "a valid number, unable to parse string as a number": the allowed part only
    msg = re.split(r", (?:unable to|invalid|got|input )", msg, maxsplit=1)[0]
    return msg


def _describe(
    err: Mapping[str, Any],
    data: Any,
    path: Path_,
    root: type[BaseModel] = Scenario,
    others: Sequence[Mapping[str, Any]] = (),
) -> str:
    """One pydantic error (and ``others``: the other members of a union tried at the same
    field) as the user reads it: what was given and what is allowed, in the user's words
    (no validator, union-member or class names)."""
    kind = err["type"]
    msg = str(err["msg"]).removeprefix("Value error, ")
    got = err.get("input")
    if kind == "extra_forbidden":
        gone = REMOVED_FIELDS.get((str(path[-2]), str(path[-1]))) if len(path) > 1 else None
        if gone is not None:
            return gone
        model = _model_at(root, path[:-1], data)
        valid = sorted(model.model_fields) if model else []
        near = difflib.get_close_matches(str(path[-1]), valid, n=1)
        hint = f"; did you mean {near[0]!r}?" if near else ""
        return f"unknown field{hint}" + (
            f" (valid: {', '.join(valid)})" if valid and not near else ""
        )
    if kind == "union_tag_invalid":  # (the path ends with the tag field: kind, dist...)
        tagged = _tagged(_annotation_at(root, path[:-1], data))
        values = tagged[1] if tagged is not None else []
        node: Any = data
        for key in path:  # the tag as written (pydantic's ctx has it as text)
            node = node[key] if isinstance(node, (dict, list)) else None
        given = node if path and not isinstance(node, dict) else err.get("ctx", {}).get("tag")
        return f"given {_given(given)}; allowed {_either([repr(v) for v in values] or ['?'])}"
    annotation = _annotation_at(root, path, data)
    if kind == "missing":
        tagged = _tagged(annotation)
        if tagged is not None:
            return f"missing required field; allowed {_either([repr(v) for v in tagged[1]])}"
        return "missing required field"
    if kind == "union_tag_not_found":
        tagged = _tagged(annotation)
        if tagged is None:  # pragma: no cover - every discriminated union has one
            return "given a mapping without its kind"
        tag, values = tagged
        return f"given a mapping without {tag}; allowed {tag}: {_either([repr(v) for v in values])}"
    if kind in ("value_error", "assertion_error"):  # kvsim's own words: they name the value
        return msg
    allowed = [_allowed(e, annotation) for e in (err, *others)]
    return f"given {_given(got)}; allowed {_either(list(dict.fromkeys(allowed)))}"


def _given(value: Any) -> str:
    """A value a message quotes as given: a mapping or list by its kind, anything else as
    written (repr, cut)."""
    if isinstance(value, dict):
        return "a mapping" if value else "an empty mapping"
    if isinstance(value, list):
        return shown(value)
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return shown(value)


def _path_of(data: Any, err: Mapping[str, Any], root: type[BaseModel] = Scenario) -> Path_:
    """The user's field path of a pydantic error; an unknown tag's, the tag field's own
    (``workload.kind``: its line is the one to fix)."""
    path = _data_path(data, err["loc"], err["type"], root)
    if err["type"] == "union_tag_invalid":
        tag = str(err.get("ctx", {}).get("discriminator", "")).strip("'")
        node: Any = data
        for key in path:
            node = node[key] if isinstance(node, (dict, list)) else None
        if isinstance(node, dict) and tag in node:
            path = (*path, tag)
    return path


def _validation_error(
    e: ValidationError,
    data: Any,
    origins: Origins,
    default_where: str,
    root: type[BaseModel] = Scenario,
) -> InputError:
    """The one place a pydantic ValidationError becomes an InputError: the first error's
    field path (as the user wrote it), file and line, what was given and what is allowed,
    and how many other fields are wrong. The errors of a union's members at one field are
    one error (``profile`` given 5: neither a name nor a composition). An unknown key comes
    first: a misspelt key (``input_tokens``) is the cause of the missing field it meant."""
    errors = sorted(e.errors(), key=lambda x: x["type"] != "extra_forbidden")
    paths = [_path_of(data, x, root) for x in errors]
    path = paths[0]
    same = [x for x, p in zip(errors[1:], paths[1:], strict=True) if p == path]
    if errors[0]["type"] in ("missing", "extra_forbidden"):
        same = []
    others = len(dict.fromkeys(paths)) - 1
    more = f" (and {others} more)" if others else ""
    return InputError(
        f"{_dotted(path)}: {_describe(errors[0], data, path, root, same)}{more}",
        where=_where(origins, path, default_where),
    )


_KIND_HINTS = {
    "sweep": "run it with `kvsim sweep FILE --out DIR` or `kvsim capacity --sweep FILE`",
    "suite": "use it with `kvsim baseline` or `kvsim check`",
    "scenario": "a sweep names it in `base:`, a suite under `entries:`",
}


def file_kind(data: Mapping[str, Any]) -> str | None:
    """Which kind of kvsim file a mapping looks like, by keys only that kind has."""
    if "entries" in data:
        return "suite"
    if "base" in data:
        return "sweep"
    if {"workload", "cluster", "tiers", "remote", "extends", "profile"} & set(data):
        return "scenario"
    return None


def check_file_kind(data: Mapping[str, Any], expected: str, where: str) -> None:
    """Refuse, with a pointer to the right command, a sweep, suite or scenario file given
    where another kind is expected (its own fields would fail with less helpful lines)."""
    kind = file_kind(data)
    if kind is not None and kind != expected:
        raise InputError(
            f"this is a {kind} file, not a {expected}; {_KIND_HINTS[kind]}", where=where
        )


def load_record(
    model: type[RecordT], path: str | os.PathLike[str], kind: str | None = None
) -> RecordT:
    """Load a YAML file into any config record (sweep and suite files), with the same
    one-line errors as scenarios: file, line, field path, reason. ``kind`` ("sweep",
    "suite") refuses another kind of kvsim file with a pointer to its command."""
    p = Path(path)
    data, origins = load_yaml(p)
    data = _require_mapping(data, str(p))
    if kind is not None:
        check_file_kind(data, kind, str(p))
    try:
        return model.model_validate(data)
    except ValidationError as e:
        raise _validation_error(e, data, origins, str(p), model) from None


def validate(data: dict[str, Any], origins: Origins, default_where: str) -> Scenario:
    """Build the Scenario or raise InputError naming file, line and field path. The
    scenario's plugins are imported first: their policy names are then valid."""
    plugins = data.get("plugins")
    if not isinstance(plugins, list):
        plugins = []  # (the schema refuses anything else)
    elif plugins:
        load_plugins(plugins, _where(origins, ("plugins",), default_where))
    try:
        with plugin_scope(plugins):  # its policy names: built-in ones and its plugins'
            scenario = Scenario.model_validate(data)
    except ValidationError as e:
        raise _validation_error(e, data, origins, default_where) from None
    problems = cross_checks(scenario)
    w = scenario.workload
    if getattr(w, "path", None) is not None:
        try:
            check_regular(w.path, what="trace file")
        except InputError as e:  # missing, a folder, a FIFO, a device, a symlink loop...
            reason = " not found" if e.reason.endswith("not found") else f": {e.reason}"
            problems.append((("workload", "path"), f"trace file {shown(w.path)}{reason}"))
    if problems:
        path, msg = problems[0]
        raise InputError(f"{_dotted(path)}: {msg}", where=_where(origins, path, default_where))
    return scenario


def load_scenario(
    path: str | os.PathLike[str],
    overrides: Sequence[str] | Mapping[str, Any] | None = None,
    seed: int | None = None,
) -> Scenario:
    """Load, merge (profile, extends, overrides) and validate a scenario file."""
    p = Path(path)
    if p.suffix.lower() in (".jsonl", ".csv"):
        raise InputError(
            "this is a trace file, not a scenario; a scenario names it in workload.path "
            "(see scenarios/mooncake-sample.yaml)",
            where=str(p),
        )
    budget = Budget()  # one for the whole chain and the profile
    data, origins = _load_chain(p, (), budget)
    check_file_kind(data, "scenario", str(p))
    if overrides:
        apply_overrides(data, origins, overrides)
    if seed is not None:
        apply_overrides(data, origins, {"seed": seed}, label="--seed=")
    data.setdefault("profile", DEFAULT_PROFILE)
    profile_layer, profile_origins = _load_profile(
        data["profile"], _where(origins, ("profile",), str(p)), p.parent, budget
    )
    profile_layer, profile_origins = remote_kind_layer(profile_layer, profile_origins, data)
    merged, merged_origins = merge_layers(profile_layer, profile_origins, data, origins)
    merged.setdefault("source", str(p))
    return validate(merged, merged_origins, str(p))


def scenario_from_dict(
    data: Mapping[str, Any],
    overrides: Sequence[str] | Mapping[str, Any] | None = None,
    base_dir: str | os.PathLike[str] = ".",
    label: str = "<dict>",
) -> Scenario:
    """Validate a scenario given as a dict (same rules as a file, paths relative to
    base_dir); errors name ``label`` as the place."""
    d = copy.deepcopy(dict(data))
    origins: Origins = {}
    _normalize_layer(d, origins, Path(base_dir))
    if overrides:
        apply_overrides(d, origins, overrides)
    d.setdefault("profile", DEFAULT_PROFILE)
    layer, porigins = _load_profile(d["profile"], label, Path(base_dir))
    layer, porigins = remote_kind_layer(layer, porigins, d)
    merged, merged_origins = merge_layers(layer, porigins, d, origins)
    return validate(merged, merged_origins, label)
