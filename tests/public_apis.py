"""The package's use of its dependencies, checked for private API (used by
tests/unit/test_public_apis.py).

Three rules, checked on the package's syntax tree (docstrings and comments aside):

* no import of a dependency's private module or name (a dotted part or a name that
  starts with an underscore, or a module its authors keep undocumented);
* no access to an underscore attribute the package does not define itself: the
  package's own names (functions, classes, attributes it assigns, ``__slots__``,
  parameters) are known, so ``self._lock`` passes and ``conn._handle_dbapi_exception``
  does not;
* no patching: no ``vars(x).update(...)`` nor another object's ``__dict__``, no
  ``setattr`` on anything but ``self`` (other than an attribute of the package's own,
  named ``gaffer_...``), no assignment to an attribute of an imported module.

The package's own attribute names are trusted wherever they are read (the check has no
types): a dependency's private attribute that happens to share a name with one of the
package's is not caught.

Some libraries document underscore names as their public API, to keep them apart from
user-defined ones (SQLAlchemy's ``Row._mapping``, named tuples' ``_asdict``): those are
listed in :data:`DOCUMENTED`.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "celery_gaffer"
#: Public-looking modules that their authors do not document (psycopg's internals).
UNDOCUMENTED = {"psycopg.generators", "psycopg.waiting", "psycopg.pq.misc", "psycopg.types.array"}
#: Underscore names that are documented public API (``Row._mapping``: SQLAlchemy's
#: "Working with Rows"; the rest: named tuples, which SQLAlchemy's ``Row`` follows).
DOCUMENTED = {"_mapping", "_asdict", "_fields", "_replace", "_make", "_tuple", "_t"}


@dataclass(frozen=True)
class Finding:
    path: str
    line: int
    what: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.what}"


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _gaffer_name(node: ast.expr, constants: set[str]) -> bool:
    """Whether ``node`` names an attribute of the package's own (``"gaffer_..."``, or a
    module constant the package defines as such)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value.startswith("gaffer_")
    return isinstance(node, ast.Name) and node.id in constants


def _constants(trees: list[tuple[str, ast.Module]]) -> set[str]:
    """Module-level names bound to a ``"gaffer_..."`` string."""
    found: set[str] = set()
    for _, tree in trees:
        for node in tree.body:
            if (
                isinstance(node, ast.Assign)
                and isinstance(node.value, ast.Constant)
                and isinstance(node.value.value, str)
                and node.value.value.startswith("gaffer_")
            ):
                found.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return found


def _trees(package: Path) -> Iterator[tuple[str, ast.Module]]:
    for path in sorted(package.rglob("*.py")):
        yield str(path.relative_to(package.parent)), ast.parse(path.read_text(), str(path))


def _own_names(trees: list[tuple[str, ast.Module]]) -> set[str]:
    """Every attribute name the package defines itself: methods and class attributes,
    attributes it assigns, ``__slots__``."""
    names: set[str] = set()
    for _, tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                for item in node.body:
                    if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                        names.add(item.name)
                    elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                        names.add(item.target.id)
                    elif isinstance(item, ast.Assign):
                        names.update(t.id for t in item.targets if isinstance(t, ast.Name))
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                names.add(node.attr)
            elif isinstance(node, ast.Assign) and any(
                isinstance(target, ast.Name) and target.id == "__slots__" for target in node.targets
            ):
                for constant in ast.walk(node.value):
                    if isinstance(constant, ast.Constant) and isinstance(constant.value, str):
                        names.add(constant.value)
    return names


def _own_modules(tree: ast.Module) -> set[str]:
    """Local names bound to the package's own modules (``from ..store import keys``)."""
    bound: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (
            node.level > 0 or (node.module or "").startswith("celery_gaffer")
        ):
            bound.update(alias.asname or alias.name for alias in node.names)
    return bound


def _imported_modules(tree: ast.Module) -> set[str]:
    """Local names bound to a module of a dependency (``import psycopg``)."""
    bound: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if not alias.name.startswith("celery_gaffer"):
                    bound.add(alias.asname or alias.name.split(".")[0])
    return bound


def check(package: Path = PACKAGE) -> list[Finding]:
    """Every use of a dependency's private API in ``package``."""
    trees = list(_trees(package))
    own, constants = _own_names(trees), _constants(trees)
    findings: list[Finding] = []
    for path, tree in trees:
        modules = _imported_modules(tree)
        ours = own | {
            node.attr
            for node in ast.walk(tree)
            if isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in _own_modules(tree)
        }
        for node in ast.walk(tree):
            found = _finding(node, ours, modules, constants)
            if found is not None:
                findings.append(Finding(path, getattr(node, "lineno", 0), found))
    return findings


def _finding(node: ast.AST, own: set[str], modules: set[str], constants: set[str]) -> str | None:
    if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
        parts = node.module.split(".")
        if parts[0] == "celery_gaffer":
            return None
        if any(_private(part) for part in parts) or node.module in UNDOCUMENTED:
            return f"imports the private module {node.module}"
        private = [alias.name for alias in node.names if _private(alias.name)]
        undocumented = [
            alias.name for alias in node.names if f"{node.module}.{alias.name}" in UNDOCUMENTED
        ]
        if private or undocumented:
            return f"imports private {', '.join(private + undocumented)} from {node.module}"
    if isinstance(node, ast.Import):
        for alias in node.names:
            if any(_private(part) for part in alias.name.split(".")) or alias.name in UNDOCUMENTED:
                return f"imports the private module {alias.name}"
    if (
        isinstance(node, ast.Attribute)
        and _private(node.attr)
        and node.attr not in own
        and node.attr not in DOCUMENTED
    ):
        return f"uses the private attribute {node.attr}"
    if (
        isinstance(node, ast.Attribute)
        and node.attr == "__dict__"
        and not (isinstance(node.value, ast.Name) and node.value.id in {"self", "cls"})
    ):
        return "reaches into another object's __dict__"
    if isinstance(node, ast.Call):
        func = node.func
        if (
            isinstance(func, ast.Attribute)
            and func.attr == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
            and any(_private(part) for part in node.args[0].value.split("."))
        ):
            return f"imports the private module {node.args[0].value}"
        if isinstance(func, ast.Name) and func.id in {"getattr", "hasattr"} and len(node.args) >= 2:
            target, name = node.args[0], node.args[1]
            own_target = isinstance(target, ast.Name) and target.id in {"self", "cls"}
            if (
                not own_target
                and isinstance(name, ast.Constant)
                and isinstance(name.value, str)
                and _private(name.value)
                and name.value not in own
            ):
                return f"reads the private attribute {name.value} with {func.id}"
        if (
            isinstance(func, ast.Attribute)
            and func.attr == "update"
            and isinstance(func.value, ast.Call)
            and isinstance(func.value.func, ast.Name)
            and func.value.func.id == "vars"
        ):
            return "patches an object through vars(...).update"
        if isinstance(func, ast.Name) and func.id == "setattr" and len(node.args) >= 2:
            target, name = node.args[0], node.args[1]
            own_target = isinstance(target, ast.Name) and target.id in {"self", "cls"}
            if not own_target and not _gaffer_name(name, constants):
                return "sets an attribute on another object with setattr"
    if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        for target in targets:
            root = target
            while isinstance(root, ast.Attribute):
                root = root.value
            if (
                isinstance(target, ast.Attribute)
                and isinstance(root, ast.Name)
                and root.id in modules
            ):
                return f"assigns to an attribute of the module {root.id}"
    return None
