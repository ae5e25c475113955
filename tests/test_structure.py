"""The package's shape (issue 31): rules a reader relies on, checked on the source.

- no module over ``MAX_LINES`` lines;
- no import cycle between the package's modules (imports run at import time: the module's
  top level, ``if TYPE_CHECKING:`` blocks left out, imports inside functions left out, as
  they run later);
- no database driver imported outside the engine packages (``store/postgres``,
  ``store/sqlite``);
- no engine's name compared outside the engine packages (callers branch on
  ``Capabilities``).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "kombu_alkstore"
MAX_LINES = 600
ENGINE_PACKAGES = ("store/postgres/", "store/sqlite/")
DRIVERS = frozenset({"psycopg", "psycopg_pool", "psycopg2", "sqlite3"})
ENGINE_NAMES = frozenset({"postgresql", "postgres", "sqlite"})


def _modules() -> dict[str, Path]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


MODULES = _modules()


def _rel(path: Path) -> str:
    return path.relative_to(PACKAGE).as_posix()


def _in_engine_package(path: Path) -> bool:
    return _rel(path).startswith(ENGINE_PACKAGES)


def _top_level_imports(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    """Import statements run when the module is imported (not in functions, not in
    ``if TYPE_CHECKING:``)."""
    found: list[ast.Import | ast.ImportFrom] = []

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, ast.Import | ast.ImportFrom):
                found.append(node)
            elif isinstance(node, ast.If):
                if "TYPE_CHECKING" not in ast.unparse(node.test):
                    visit(node.body)
                visit(node.orelse)
            elif isinstance(node, ast.Try):
                visit(node.body)
                for handler in node.handlers:
                    visit(handler.body)
                visit(node.orelse)
                visit(node.finalbody)
            elif isinstance(node, ast.With):
                visit(node.body)

    visit(tree.body)
    return found


def _imported(name: str, path: Path, node: ast.Import | ast.ImportFrom) -> list[str]:
    """The package's modules an import statement of module ``name`` loads by name."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names if a.name in MODULES]
    if node.level:
        package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        base = ".".join(package[: len(package) - node.level + 1])
        target = f"{base}.{node.module}" if node.module else base
    else:
        target = node.module or ""
    out = []
    for alias in node.names:
        sub = f"{target}.{alias.name}"
        if sub in MODULES:
            out.append(sub)
        elif target in MODULES:
            out.append(target)
    return out


def _graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for name, path in MODULES.items():
        tree = ast.parse(path.read_text(), str(path))
        edges = set()
        for node in _top_level_imports(tree):
            edges.update(t for t in _imported(name, path, node) if t != name)
        graph[name] = edges
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def strong(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            strong(v)
    return out


def test_no_module_is_over_the_line_limit():
    over = {
        _rel(p): n for p in MODULES.values() if (n := len(p.read_text().splitlines())) > MAX_LINES
    }
    assert not over, f"modules over {MAX_LINES} lines: {over}"


def test_no_import_cycle():
    assert not _cycles(_graph())


def test_the_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_driver_imported_outside_the_engine_packages():
    found = []
    for path in MODULES.values():
        if _in_engine_package(path):
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            else:
                continue
            found += [
                f"{_rel(path)}:{node.lineno} {n}" for n in names if n.split(".")[0] in DRIVERS
            ]
    assert not found


def _compares_an_engine_name(node: ast.AST) -> bool:
    if isinstance(node, ast.Compare):
        sides = [node.left, *node.comparators]
        for side in sides:
            if isinstance(side, ast.Constant) and side.value in ENGINE_NAMES:
                return True
            if isinstance(side, ast.Tuple | ast.List | ast.Set) and any(
                isinstance(e, ast.Constant) and e.value in ENGINE_NAMES for e in side.elts
            ):
                return True
            if isinstance(side, ast.Attribute) and side.attr == "engine":
                return True
    return isinstance(node, ast.MatchValue) and getattr(node.value, "value", None) in ENGINE_NAMES


def test_no_engine_name_tested_outside_the_engine_packages():
    found = []
    for path in MODULES.values():
        if _in_engine_package(path):
            continue
        tree = ast.parse(path.read_text(), str(path))
        found += [
            f"{_rel(path)}:{n.lineno} {ast.unparse(n)}"
            for n in ast.walk(tree)
            if _compares_an_engine_name(n) and not isinstance(n, ast.MatchValue)
        ]
    assert not found


@pytest.mark.parametrize(
    "source, expected",
    [
        ('if store.engine == "sqlite": pass', True),
        ('if kind in ("postgresql", "x"): pass', True),
        ("if a.engine != b.engine: pass", True),
        ("if caps.listen: pass", False),
    ],
)
def test_the_engine_name_check_sees_a_comparison(source, expected):
    tree = ast.parse(source)
    assert any(_compares_an_engine_name(n) for n in ast.walk(tree)) is expected
