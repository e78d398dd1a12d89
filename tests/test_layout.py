"""The package's shape (issue 40): no import circles, no hidden imports, no long files.

The import graph is built from the source with :mod:`ast`, not by importing: every
``import kvsim...`` and ``from kvsim... import ...`` statement is an edge, at module level,
under ``if TYPE_CHECKING:`` and inside functions alike, so a circle cannot hide behind a
type-only or function-local import. ``from package import name`` is an edge to the
submodule when ``name`` is one, else to the package's ``__init__``. A package's own
``__init__`` being run first when a submodule loads is Python's doing, not an import
statement, so it is not an edge (a circle through an ``__init__`` shows up as soon as a
module imports a name from it).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent / "kvsim"
MAX_LINES = 800
# function-local imports of kvsim's own modules: none, except the package's lazy entry
# points (``import kvsim`` stays cheap: the simulator loads on first ``kvsim.run``)
LAZY_OK = {"kvsim"}


def _modules() -> dict[str, Path]:
    out = {}
    for p in sorted(ROOT.rglob("*.py")):
        parts = list(p.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = p
    return out


MODULES = _modules()


def _imports(name: str, path: Path) -> Iterator[tuple[str, int, bool]]:
    """(imported kvsim module, line, inside a function) for each import statement."""
    tree = ast.parse(path.read_text(), str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]

    def walk(node: ast.AST, local: bool) -> Iterator[tuple[str, int, bool]]:
        for child in ast.iter_child_nodes(node):
            inner = local or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef)
            if isinstance(child, ast.Import):
                for alias in child.names:
                    if alias.name in MODULES:
                        yield alias.name, child.lineno, local
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    parts = package.split(".")[: len(package.split(".")) - child.level + 1]
                    base = ".".join([*parts, base] if base else parts)
                for alias in child.names:
                    sub = f"{base}.{alias.name}"
                    target = sub if sub in MODULES else base
                    if target in MODULES:
                        yield target, child.lineno, local
            yield from walk(child, inner)

    yield from walk(tree, False)


def _graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {m: set() for m in MODULES}
    for name, path in MODULES.items():
        for target, _line, _local in _imports(name, path):
            if target != name:
                graph[name].add(target)
    return graph


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        found.append(sorted(comp))
    return found


def test_circle_finder_finds_a_circle() -> None:
    # the finder itself: a -> b -> c -> a is one circle, d alone is none
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _circles(graph) == [["a", "b", "c"]]
    assert _circles({"a": {"b"}, "b": set()}) == []


def test_no_import_circles() -> None:
    circles = _circles(_graph())
    assert not circles, (
        "import circles (type-only and function-local imports count):\n"
        + "\n".join(" <-> ".join(c) for c in circles)
    )


def test_no_function_local_imports_of_kvsim() -> None:
    hidden = [
        f"{path.relative_to(ROOT.parent)}:{line} imports {target}"
        for name, path in MODULES.items()
        if name not in LAZY_OK
        for target, line, local in _imports(name, path)
        if local
    ]
    assert not hidden, "function-local imports of kvsim modules:\n" + "\n".join(hidden)


@pytest.mark.parametrize("name", sorted(MODULES))
def test_module_is_short_and_says_what_it_owns(name: str) -> None:
    path = MODULES[name]
    text = path.read_text()
    lines = text.count("\n")
    assert lines <= MAX_LINES, (
        f"{path.relative_to(ROOT.parent)}: {lines} lines (at most {MAX_LINES})"
    )
    if text.strip():
        doc = ast.get_docstring(ast.parse(text))
        assert doc and len(doc.split()) >= 4, f"{path.relative_to(ROOT.parent)}: no docstring"
