"""YAML files read safely, every value's line remembered: what the scenario loader and the
catalogue's GPU cards both read with.

:func:`load_yaml` parses a regular file of bounded size with PyYAML's safe loader under
bounds on nesting, values (aliases expanded, shared by a :class:`Budget` across the files
of one load) and integer length; base-60 numbers are not read; a key given twice is refused
at its line; merge keys (``<<``) follow the YAML rules. It returns the data and the
``file:line`` of every field path (:data:`Origins`), so that a message can point at the
line that wrote a value. :func:`parse_text` does the same for text (a ``--set`` value).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

from kvsim.errors import InputError, shown
from kvsim.files import MAX_CONFIG_BYTES, read_text

Path_ = tuple[Any, ...]
Origins = dict[Path_, str]  # field path -> "file:line" (or "--set expr")


MAX_YAML_DEPTH = 40  # nesting levels (a scenario uses about 5)
MAX_YAML_VALUES = 100_000  # values in a document and its extends chain, aliases expanded
MAX_INT_CHARS = 400  # an integer literal longer than this is a typo, not a setting
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


def parse_text(text: str, where: str, *, lines: bool = True, budget: Budget | None = None) -> Any:
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
        data = unshared(loader.construct_document(node))
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


def unshared(value: Any) -> Any:
    """A copy in which no mapping or list appears twice: an alias becomes a copy of its
    anchor, so that an override of one place (``--set tiers.nvme.capacity=...`` where
    ``nvme: *host``) never changes another. Bounded by :func:`_measure`."""
    if isinstance(value, dict):
        return {k: unshared(v) for k, v in value.items()}
    if isinstance(value, list):
        return [unshared(v) for v in value]
    return value


def load_yaml(path: str | os.PathLike[str], budget: Budget | None = None) -> tuple[Any, Origins]:
    """Safely parse a YAML file (a regular file of bounded size, bounded nesting and
    values, aliases included); return the data and the line of every node in it."""
    p = Path(path)
    text = read_text(p, what="YAML file", max_bytes=MAX_CONFIG_BYTES)
    node, data, origins = parse_text(text, str(p), budget=budget)
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
                f"{dotted((*path, key))}: duplicate key", where=loader.at(key_node.start_mark)
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


def dotted(path: Iterable[Any]) -> str:
    parts: list[str] = []
    for p in path:
        if isinstance(p, int) and parts:
            parts[-1] += f"[{p}]"
        else:
            text = str(p)
            parts.append(text if len(text) <= 60 else text[:57] + "...")
    return ".".join(parts) or "(top level)"
