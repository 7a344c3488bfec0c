"""No import circle anywhere in the Python tree, between modules or between packages.

import-linter's contracts hold the layers; they do not see a circle inside one layer, nor one
kept alive by an import inside a function. This walks every ``import`` statement of every
module (function-level ones included) and looks for strongly connected groups: a reader who
wants to understand one module of a circle has to understand all of them.

Rules: ``from pkg import name`` points at ``pkg.name`` when that is a module, else at ``pkg``;
a package's ``__init__`` importing its own submodules (re-exports) is not counted; at package
level each module stands for the package that holds it, and a package is not counted against
its own subpackages.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOURCE_ROOTS = ("sdk", "services", "shim/python")


def modules_under(root: Path) -> dict[str, Path]:
    found: dict[str, Path] = {}
    for path in root.rglob("*.py"):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if parts and all(part.isidentifier() for part in parts):
            found[".".join(parts)] = path
    return found


def imported(name: str, path: Path, known: set[str]) -> set[str]:
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                child = f"{base}.{alias.name}"
                targets.add(child if child in known else base)
    edges = {t for t in (_nearest_known(t, known) for t in targets) if t and t != name}
    if path.name == "__init__.py":
        edges = {t for t in edges if not t.startswith(name + ".")}
    return edges


def _nearest_known(target: str, known: set[str]) -> str | None:
    while target and target not in known:
        target = target.rpartition(".")[0]
    return target or None


def circles(graph: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one node (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph.get(start, ()))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    group = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        group.append(member)
                        if member == node:
                            break
                    if len(group) > 1:
                        found.append(sorted(group))
            elif child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(graph.get(child, ())))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return found


def module_graph() -> dict[str, set[str]]:
    paths: dict[str, Path] = {}
    for root in SOURCE_ROOTS:
        paths.update(modules_under(ROOT / root))
    known = set(paths)
    return {name: imported(name, path, known) for name, path in paths.items()}


def package_of(name: str, graph: Mapping[str, object]) -> str:
    return name if any(other.startswith(name + ".") for other in graph) else name.rpartition(".")[0]


def package_graph(graph: Mapping[str, set[str]]) -> dict[str, set[str]]:
    packages: dict[str, set[str]] = {}
    for name, targets in graph.items():
        source = package_of(name, graph)
        for target in targets:
            other = package_of(target, graph)
            related = other.startswith(source + ".") or source.startswith(other + ".")
            if other and source and other != source and not related:
                packages.setdefault(source, set()).add(other)
    return packages


def test_the_walker_finds_a_circle_when_there_is_one() -> None:
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_no_module_imports_itself_through_others() -> None:
    assert circles(module_graph()) == []


def test_no_package_imports_itself_through_others() -> None:
    assert circles(package_graph(module_graph())) == []
