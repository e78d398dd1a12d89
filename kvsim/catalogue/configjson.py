"""One config.json read safely: a JSON object whose key given twice is refused at its
line (as YAML, CSV and GPU cards refuse theirs), no NaN or Infinity, and
:class:`ConfigReader`, typed access to its keys with every error naming the file and key."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from kvsim.errors import InputError, shown
from kvsim.files import read_text


class ConfigReader:
    """Typed access to one config.json's keys, every error naming the file and the key."""

    def __init__(self, doc: dict[str, Any], where: str) -> None:
        self.doc = doc
        self.where = where

    def fail(self, key: str, what: str) -> InputError:
        return InputError(f"{key}: {what}", where=self.where)

    def has(self, key: str) -> bool:
        return self.doc.get(key) is not None

    def first(self, *keys: str) -> str | None:
        """The first of ``keys`` present with a non-null value."""
        for k in keys:
            if self.has(k):
                return k
        return None

    def num(self, key: str, need: str, *, default: int | None = None, zero: bool = False) -> int:
        if not self.has(key):
            if default is not None:
                return default
            raise self.fail(key, f"missing (needed for {need})")
        v = self.doc[key]
        if isinstance(v, bool) or not isinstance(v, int):
            raise self.fail(key, f"expected an integer, got {shown(v)}")
        if v < 0 or (v == 0 and not zero):
            raise self.fail(key, f"must be {'>= 0' if zero else 'positive'}, got {v}")
        if v > 1 << 40:
            raise self.fail(key, f"implausibly large ({v:,})")
        return v

    def flag(self, key: str, default: bool) -> bool:
        if not self.has(key):
            return default
        v = self.doc[key]
        if not isinstance(v, bool):
            raise self.fail(key, f"expected true or false, got {shown(v)}")
        return v

    def text(self, key: str) -> str | None:
        if not self.has(key):
            return None
        v = self.doc[key]
        if not isinstance(v, str):
            raise self.fail(key, f"expected a string, got {shown(v)}")
        return v


def _reject_constant(name: str) -> float:
    raise ValueError(f"{name} is not a JSON number")


class _DuplicateKey(ValueError):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """json's object hook: an object with a key given twice is refused (json keeps the
    last silently), as YAML, CSV and GPU cards refuse theirs."""
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise _DuplicateKey(k)
        out[k] = v
    return out


_JSON_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|[{}\[\]:]')


def _duplicate_line(text: str, key: str) -> int | None:
    """The line of ``key``'s second occurrence in one JSON object (a token scan keeping one
    set of keys per open object), for the error message."""
    stack: list[set[str] | None] = []
    tokens = list(_JSON_TOKEN.finditer(text))
    for i, m in enumerate(tokens):
        tok = m.group()
        if tok == "{":
            stack.append(set())
        elif tok == "[":
            stack.append(None)
        elif tok in "}]":
            if stack:
                stack.pop()
        elif tok.startswith('"') and i + 1 < len(tokens) and tokens[i + 1].group() == ":":
            seen = stack[-1] if stack else None
            if seen is None:
                continue
            try:
                name = json.loads(tok)
            except ValueError:
                continue
            if name == key and name in seen:
                return text.count("\n", 0, m.start()) + 1
            seen.add(name)
    return None


def load_config_json(path: Path, where: str) -> dict[str, Any]:
    text = read_text(path, what="model config")
    try:
        doc = json.loads(text, parse_constant=_reject_constant, object_pairs_hook=_no_duplicates)
    except json.JSONDecodeError as e:
        raise InputError(f"not valid JSON ({e.msg})", where=f"{where}:{e.lineno}") from None
    except _DuplicateKey as e:
        line = _duplicate_line(text, e.key)
        at = f"{where}:{line}" if line else where
        raise InputError(f"{e.key}: duplicate key", where=at) from None
    except (ValueError, RecursionError) as e:
        raise InputError(f"not valid JSON ({e})", where=where) from None
    if not isinstance(doc, dict):
        raise InputError(f"expected a JSON object, got {type(doc).__name__}", where=where)
    return doc
