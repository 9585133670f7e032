"""The package's import graph, checked against its layering (used by tests/unit/test_layering.py).

Layers, lowest first; a module may import its own layer and the layers below it:

0. core: ``exceptions``, ``clock``, ``settings``, ``django_database``, ``protocol``,
   ``signals``, ``runtime``, ``outbound``, ``text``, ``readable``, ``traces``
1. ``schedules`` (pure: no I/O)
2. ``store`` (the only package that builds SQL)
3. ``fencing``, ``runs``, ``beat`` (``runs`` may use ``fencing``; nothing else crosses)
4. adapters: ``task``, ``scheduler``, ``schedule_store``, ``schedule_sync``, ``cli``,
   ``web``, ``importers``, ``contrib`` (the Django app), ``wiring``, ``testing`` and
   ``pytest_plugin`` (the ``gaffer_beat`` fixture), ``__init__``. The
   console (``web``) never imports the command line (``cli``): what both need lives in a
   lower layer (``readable``, ``schedules.display``). The command line may import the
   console, to serve it.

Three rules: no import against the layering (nor across a barrier between adapters), no
import cycle between modules, and no SQL built outside ``store`` (only driver-neutral
names may be imported from SQLAlchemy elsewhere: connections, sessions, events and
exceptions; no ``table.c.column``).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

CORE = {
    "exceptions",
    "clock",
    "settings",
    "protocol",
    "signals",
    "runtime",
    "outbound",
    "text",
    "readable",
    "django_database",
    "traces",
}
MIDDLE = {"fencing", "runs", "beat"}
ADAPTERS = {
    "task",
    "scheduler",
    "schedule_store",
    "schedule_reads",
    "schedule_calendars",
    "schedule_sync",
    "cli",
    "wiring",
    "web",
    "importers",
    "contrib",
    "testing",
    "pytest_plugin",
    "",
}
#: Allowed imports between middle-layer packages: (importer, imported).
MIDDLE_CROSSINGS = {("runs", "fencing")}
#: Forbidden imports between adapters of the same layer: (importer, imported).
ADAPTER_BARRIERS = {("web", "cli")}

#: What code outside ``store`` may import from SQLAlchemy: nothing that builds a statement.
SQLALCHEMY_ALLOWED = {
    "sqlalchemy": {"Connection", "Engine", "event"},
    "sqlalchemy.orm": {"Session", "sessionmaker"},
    "sqlalchemy.engine": {"URL", "make_url"},
    "sqlalchemy.exc": None,  # any exception
}
#: Methods that run SQL text directly.
RAW_SQL_CALLS = {"exec_driver_sql", "text"}


@dataclass(frozen=True, slots=True)
class Violation:
    module: str
    line: int
    rule: str
    detail: str

    def __str__(self) -> str:
        return f"{self.module}:{self.line}: {self.rule}: {self.detail}"


def modules(root: Path) -> dict[str, Path]:
    """Dotted module names (relative to the package; ``""`` for its ``__init__``) -> file."""
    found = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def _is_package(name: str, known: dict[str, Path]) -> bool:
    return name == "" or known[name].name == "__init__.py"


def _imports(
    name: str, tree: ast.AST, known: dict[str, Path], package: str
) -> Iterator[tuple[int, str | None, str, list[str]]]:
    """``(line, imported module in the package or None, absolute module, names)``."""
    here = name.split(".") if name else []
    base = here if _is_package(name, known) else here[:-1]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                inside = None
                if alias.name == package or alias.name.startswith(package + "."):
                    inside = alias.name[len(package) + 1 :]
                yield node.lineno, inside, alias.name, []
        elif isinstance(node, ast.ImportFrom):
            names = [alias.name for alias in node.names]
            if node.level == 0:
                target = node.module or ""
                if not (target == package or target.startswith(package + ".")):
                    yield node.lineno, None, target, names
                    continue
                parts = target.split(".")[1:]
            else:
                parts = base[: len(base) - (node.level - 1)] + (
                    node.module.split(".") if node.module else []
                )
            target = ".".join(parts)
            # ``from package import submodule`` depends on the submodule itself.
            submodules = [f"{target}.{n}".lstrip(".") for n in names]
            inner = [sub for sub in submodules if sub in known]
            for sub in inner:
                yield node.lineno, sub, f"{package}.{sub}", []
            if len(inner) < len(names):
                yield node.lineno, target, f"{package}.{target}".rstrip("."), names


def layer_of(name: str) -> tuple[int, str]:
    """``(layer, group)`` of a module (see the module's docstring)."""
    top = name.split(".")[0]
    if top in CORE:
        return 0, top
    if top == "schedules":
        return 1, top
    if top == "store":
        return 2, top
    if top in MIDDLE:
        return 3, top
    if top in ADAPTERS:
        return 4, top
    raise ValueError(f"module {name!r} belongs to no layer: add it to tests/architecture.py")


def check(root: Path, package: str = "celery_gaffer") -> list[Violation]:
    """Every violation of the three rules in the package at ``root``."""
    known = modules(root)
    violations: list[Violation] = []
    graph: dict[str, set[str]] = {name: set() for name in known}
    for name, path in known.items():
        tree = ast.parse(path.read_text(), str(path))
        layer, group = layer_of(name)
        in_store = group == "store"
        for line, inside, absolute, names in _imports(name, tree, known, package):
            if inside is not None:
                if inside in known and inside != name:
                    graph[name].add(inside)
                their_layer, their_group = layer_of(inside)
                crossing = (
                    their_layer == layer == 3
                    and group != their_group
                    and (group, their_group) not in MIDDLE_CROSSINGS
                ) or (group, their_group) in ADAPTER_BARRIERS
                if their_layer > layer or crossing:
                    violations.append(
                        Violation(name, line, "layering", f"{group} imports {inside or package}")
                    )
            elif not in_store and absolute.split(".")[0] == "sqlalchemy":
                allowed = SQLALCHEMY_ALLOWED.get(absolute, set())
                if not names:
                    violations.append(Violation(name, line, "sql", f"import {absolute}"))
                elif allowed is not None:
                    for bad in sorted(set(names) - allowed):
                        violations.append(Violation(name, line, "sql", f"{absolute}.{bad}"))
        if not in_store:
            violations.extend(_sql_built(name, tree))
    violations.extend(
        Violation(cycle[0], 0, "cycle", " -> ".join([*cycle, cycle[0]])) for cycle in cycles(graph)
    )
    return violations


def _sql_built(name: str, tree: ast.AST) -> Iterator[Violation]:
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Attribute)
            and node.value.attr == "c"
        ):
            yield Violation(name, node.lineno, "sql", f"column access .c.{node.attr}")
        if isinstance(node, ast.Call):
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if called in RAW_SQL_CALLS:
                yield Violation(name, node.lineno, "sql", f"{called}(...) runs SQL text")
        if isinstance(node, ast.ImportFrom) and "table_of" in {a.name for a in node.names}:
            yield Violation(name, node.lineno, "sql", "imports table_of")


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import cycles of ``graph``: one per strongly connected component of two or more
    modules (Tarjan's algorithm), each as a shortest loop through its first module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(_shortest_loop(graph, set(component)))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def _shortest_loop(graph: dict[str, set[str]], members: set[str]) -> list[str]:
    """A shortest import path from the first member of a cycle back to itself."""
    start = min(members)
    paths = {start: [start]}
    queue = [start]
    while queue:
        node = queue.pop(0)
        for nxt in sorted(graph.get(node, set()) & members):
            if nxt == start:
                return paths[node]
            if nxt not in paths:
                paths[nxt] = [*paths[node], nxt]
                queue.append(nxt)
    return sorted(members)  # not reached: every member of a component is on a loop
