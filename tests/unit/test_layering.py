"""The package keeps its layering: no import against it, no cycle, SQL only in ``store``."""

from __future__ import annotations

from pathlib import Path

import pytest

import celery_gaffer

from ..architecture import check, layer_of, modules

PACKAGE = Path(celery_gaffer.__file__).parent


def test_the_package_keeps_its_layering_has_no_cycle_and_builds_sql_only_in_store() -> None:
    violations = check(PACKAGE)
    assert not violations, "\n".join(str(v) for v in violations)


def test_every_module_belongs_to_a_layer() -> None:
    for name in modules(PACKAGE):
        layer_of(name)  # raises for a module the layering does not name


def _package(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "celery_gaffer"
    for name, text in {"__init__.py": "", **files}.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        init = path.parent / "__init__.py"
        if not init.exists():
            init.write_text("")
    return root


def test_the_check_finds_sql_built_outside_store(tmp_path: Path) -> None:
    root = _package(
        tmp_path,
        {
            "beat/tick.py": (
                "from sqlalchemy import Connection, select, update\n"
                "from ..store.models import table_of\n"
                "def f(conn, table):\n"
                "    conn.exec_driver_sql('DELETE FROM x')\n"
                "    return select(table.c.name)\n"
            ),
            "store/models.py": "from sqlalchemy import select\ndef table_of(m): ...\n",
        },
    )
    found = {(v.module, v.rule, v.detail) for v in check(root)}
    assert ("beat.tick", "sql", "sqlalchemy.select") in found
    assert ("beat.tick", "sql", "sqlalchemy.update") in found
    assert ("beat.tick", "sql", "imports table_of") in found
    assert ("beat.tick", "sql", "column access .c.name") in found
    assert ("beat.tick", "sql", "exec_driver_sql(...) runs SQL text") in found
    assert not any(module.startswith("store") for module, _, _ in found)


def test_the_check_finds_a_cycle_and_an_import_against_the_layering(tmp_path: Path) -> None:
    root = _package(
        tmp_path,
        {
            "runs/recorder.py": "from ..task import GafferTask\n",
            "task.py": "from .runs.recorder import connect\n",
            "store/runs.py": "from ..fencing.leases import Lease\n",
            "fencing/leases.py": "from ..beat import tick\n",
            "beat/tick.py": "",
        },
    )
    violations = check(root)
    rules = {(v.module, v.rule) for v in violations}
    assert ("runs.recorder", "layering") in rules  # runs (3) imports task (4)
    assert ("store.runs", "layering") in rules  # store (2) imports fencing (3)
    assert ("fencing.leases", "layering") in rules  # fencing and beat do not cross
    [cycle] = [v for v in violations if v.rule == "cycle"]
    assert cycle.detail == "runs.recorder -> task -> runs.recorder"


@pytest.mark.parametrize("name", ["", "beat.tick", "store.fires", "protocol", "schedules.spec"])
def test_known_modules_have_their_layer(name: str) -> None:
    expected = {"": 4, "beat.tick": 3, "store.fires": 2, "protocol": 0, "schedules.spec": 1}
    assert layer_of(name)[0] == expected[name]


def test_the_console_never_imports_the_command_line(tmp_path: Path) -> None:
    root = _package(
        tmp_path,
        {
            "web/present.py": "from ..cli.observe import run_reason\n",
            "cli/observe.py": "from ..readable import run_reason\n",
            "cli/web.py": "def serve():\n    from ..web import app\n",
            "web/app.py": "",
            "readable.py": "",
        },
    )
    found = {(v.module, v.rule) for v in check(root)}
    assert ("web.present", "layering") in found
    assert not any(module.startswith("cli") for module, _ in found)
