"""gradfuse's import graph, read with `ast`: the layers import downwards only, and there
is no import cycle.

    dialects  <-  passes  <-  backend  <-  profiler  <-  frontend, tools
    (each may import the ones to its left, and gradfuse's top-level helpers)

Every import counts, a function-local one too (it is a dependency all the same); only
imports under `if TYPE_CHECKING:` are left out, since they never run.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "gradfuse"
FORBIDDEN = {
    "dialects": {"passes", "frontend", "backend", "profiler", "tools"},
    "passes": {"frontend", "backend", "profiler", "tools"},
    "backend": {"frontend", "profiler", "tools"},
    "profiler": {"frontend", "tools"},
}


def modules() -> dict[str, Path]:
    """Every module of gradfuse by dotted name (a package by its own name)."""
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def _runtime_nodes(tree: ast.AST) -> list[ast.AST]:
    """The import statements that run (not those under `if TYPE_CHECKING:`)."""
    out: list[ast.AST] = []
    todo = [tree]
    while todo:
        node = todo.pop()
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            todo.extend(node.orelse)
            continue
        if isinstance(node, ast.Import | ast.ImportFrom):
            out.append(node)
        todo.extend(ast.iter_child_nodes(node))
    return out


def imports() -> dict[str, set[str]]:
    """Module -> the gradfuse modules it imports."""
    mods = modules()
    graph: dict[str, set[str]] = {name: set() for name in mods}
    for name, path in mods.items():
        for node in _runtime_nodes(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative: from the module's package
                    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
                    for _ in range(node.level - 1):
                        package = package.rpartition(".")[0]
                    base = f"{package}.{base}" if base else package
                wanted = [f"{base}.{a.name}" for a in node.names] + [base]
            else:
                wanted = [a.name for a in node.names]
            for target in wanted:
                if target in mods and target != name:
                    graph[name].add(target)
                    break
    return graph


LAYERS = {"dialects", "passes", "backend", "profiler", "frontend", "tools"}


def layer(module: str) -> str:
    """`gradfuse.passes.tg.fuse` -> "passes"; a top-level helper (`gradfuse.affine`) -> ""."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in LAYERS else ""


def cycles(graph: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, children = work[-1]
            w = next(children, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                component = set()
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    component.add(w)
                    if w == v:
                        break
                if len(component) > 1:
                    found.append(component)
    return found


def test_layers_import_downwards_only() -> None:
    graph = imports()
    wrong = sorted(
        f"{a} imports {b}"
        for a, targets in graph.items()
        for b in targets
        if layer(b) in FORBIDDEN.get(layer(a), set())
    )
    assert not wrong, "\n".join(wrong)


def test_no_import_cycle() -> None:
    found = [sorted(c) for c in cycles(imports())]
    assert not found, f"import cycles: {found}"


def test_layers_of_modules() -> None:
    assert [
        layer(m) for m in ("gradfuse.frontend", "gradfuse.backend.c.host", "gradfuse.affine")
    ] == ["frontend", "backend", ""]
    assert imports()["gradfuse.backend.cuda.compiler"] >= {"gradfuse.backend.cstyle"}


def test_the_cycle_finder_finds_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [{"a", "b", "c"}]


INTERPRETERS = {
    "gradfuse.backend.interpreters.tg", "gradfuse.backend.interpreters.tg_ops",
    "gradfuse.backend.interpreters.tg_conv", "gradfuse.backend.interpreters.tg_sparse",
    "gradfuse.backend.interpreters.kernel", "gradfuse.backend.interpreters.lowered",
    "gradfuse.backend.interpreters.lowered_ops", "gradfuse.backend.interpreters.lowered_lockstep",
}  # fmt: skip


def test_the_compiled_runtimes_import_no_interpreter() -> None:
    """c and cuda share only `backend.runner` (the protocol, `RunResult`, `RunState`)."""
    graph = imports()
    compiled = [m for m in graph if m.startswith(("gradfuse.backend.c", "gradfuse.backend.cuda"))]
    assert "gradfuse.backend.c.host" in compiled and "gradfuse.backend.cuda.runtime" in compiled
    wrong = sorted(f"{m} imports {t}" for m in compiled for t in graph[m] & INTERPRETERS)
    assert not wrong, "\n".join(wrong)
