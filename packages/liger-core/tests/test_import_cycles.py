"""liger-core's modules import one another without circles, counting the imports inside functions.

A function-local import or a lazy module ``__getattr__`` lets a circle load, but the modules in it
still depend on each other: none can be read, tested or changed alone. This test reads every
module's source (no imports run), builds the module import graph from every ``import`` and
``from ... import`` statement wherever it sits (module level, functions, ``TYPE_CHECKING`` blocks),
and fails listing each circle.

Edges: ``import a.b`` -> ``a.b``; ``from a import b`` -> ``a.b`` where ``b`` is a module, else ->
``a`` (the name comes from ``a``'s body, ``__init__.py`` for a package); ``import_module("a.b")``
with a literal name -> ``a.b``. A package's ``__init__``
run on the way to a submodule is not counted as an edge: it is Python's loading order, not a
dependency the importing module chose.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
ROOT_PACKAGE = "liger_core"


def module_files(src: Path = SRC, root: str = ROOT_PACKAGE) -> dict[str, Path]:
    """Module name -> its file, for every module of ``root`` (a package's name maps to its __init__)."""
    modules = {}
    for path in sorted((src / root).rglob("*.py")):
        parts = list(path.relative_to(src).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


def _resolve_relative(module: str, is_package: bool, level: int, target: str | None) -> str:
    base = module.split(".") if is_package else module.split(".")[:-1]
    if level > 1:
        base = base[: len(base) - (level - 1)]
    return ".".join(base + ([target] if target else []))


def import_graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> the modules of the same root it imports anywhere in its source."""
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name in modules:
                        graph[name].add(alias.name)
            elif (
                isinstance(node, ast.Call)
                and getattr(node.func, "attr", getattr(node.func, "id", None)) == "import_module"
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and node.args[0].value in modules
            ):
                graph[name].add(node.args[0].value)  # importlib.import_module("liger_core.x")
            elif isinstance(node, ast.ImportFrom):
                source = node.module or ""
                if node.level:
                    source = _resolve_relative(name, is_package, node.level, node.module)
                if source not in modules:
                    continue
                for alias in node.names:
                    submodule = f"{source}.{alias.name}"
                    graph[name].add(submodule if submodule in modules else source)
    for name in graph:
        graph[name].discard(name)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted, and
    for each a shortest circle through its first module (to show how the modules close the loop)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    counter = 0

    def visit(start: str) -> None:
        nonlocal counter
        # Iterative Tarjan (the graph is small, but recursion depth should not depend on it).
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                    advanced = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    components.append(sorted(component))

    for name in sorted(graph):
        if name not in index:
            visit(name)
    return sorted(components)


def shortest_circle(graph: dict[str, set[str]], component: list[str]) -> list[str]:
    """A shortest path from the component's first module back to itself, inside the component."""
    members = set(component)
    start = component[0]
    previous: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for child in sorted(graph[node] & members):
                if child == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(previous[path[-1]])
                    return [start, *reversed(path[:-1]), start] if node != start else [start, start]
                if child not in previous:
                    previous[child] = node
                    following.append(child)
        frontier = following
    return component


def test_the_checker_sees_function_local_and_relative_imports(tmp_path: Path) -> None:
    """The graph counts imports inside functions and ``from . import x``: a circle hidden that way is found."""
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("def f():\n    from pkg.sub import b\n")
    (package / "sub" / "__init__.py").write_text("")
    (package / "sub" / "b.py").write_text("from .. import c\n")
    (package / "c.py").write_text("import importlib\n\nimportlib.import_module('pkg.a')\n")
    (package / "d.py").write_text("from pkg import c\n")  # into the circle, not part of it
    graph = import_graph(module_files(tmp_path, "pkg"))
    assert graph["pkg.a"] == {"pkg.sub.b"}
    assert graph["pkg.sub.b"] == {"pkg.c"}
    assert cycles(graph) == [["pkg.a", "pkg.c", "pkg.sub.b"]]
    assert shortest_circle(graph, ["pkg.a", "pkg.c", "pkg.sub.b"]) == ["pkg.a", "pkg.sub.b", "pkg.c", "pkg.a"]


def test_liger_core_has_no_import_circles() -> None:
    graph = import_graph(module_files())
    found = cycles(graph)
    report = "\n".join(
        f"- {len(c)} modules: {', '.join(c)}\n  e.g. {' -> '.join(shortest_circle(graph, c))}" for c in found
    )
    assert not found, f"{len(found)} import circle(s) among liger_core's modules:\n{report}"
