"""Celery loads the ``gaffer`` group for every ``celery`` command: the group, and the
package, import almost nothing until a command runs, and a command imports only what it
needs. ``gaffer --help`` lists every command, as it did when they were all imported."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path

import click
import pytest

import celery_gaffer
from celery_gaffer.cli import COMMANDS, IMPORT_COMMANDS, gaffer

ROOT = Path(__file__).resolve().parents[2]
# Every module the group's commands are defined in (each adds its own to the registry).
COMMAND_MODULES = ("calendars", "explain", "import_django", "import_redbeat", "imports", "observe")
COMMAND_MODULES += ("schedules", "simulate", "update", "web")
HEAVY = ("sqlalchemy", "alembic", "mako", "redis", "django", "starlette", "psycopg", "kombu")


def imported_after(statement: str) -> list[str]:
    """The modules a fresh interpreter has imported after ``statement``."""
    probe = f"import json, sys\n{statement}\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    return list(json.loads(out.strip().splitlines()[-1]))


def tops(modules: list[str]) -> set[str]:
    return {name.split(".")[0] for name in modules}


def test_importing_the_package_or_the_group_imports_no_dependency_but_click() -> None:
    for statement in ("import celery_gaffer", "from celery_gaffer.cli import gaffer"):
        modules = imported_after(statement)
        assert not tops(modules) & {*HEAVY, "celery"}, statement
        ours = {name for name in modules if name.startswith("celery_gaffer")}
        assert ours <= {"celery_gaffer", "celery_gaffer.exceptions", "celery_gaffer.cli"}


def test_the_status_command_imports_no_migration_tool_importer_or_web_framework() -> None:
    modules = imported_after("import celery_gaffer.cli.observe")
    # (Celery's kombu imports a part of Django when it is installed.)
    assert not tops(modules) & {"alembic", "mako", "redis", "starlette", "django_celery_beat"}
    assert not [name for name in modules if name.startswith("celery_gaffer.importers")]
    assert not [name for name in modules if name.startswith("celery_gaffer.web")]


def test_the_public_names_load_on_first_use() -> None:
    for name in celery_gaffer.__all__:
        assert getattr(celery_gaffer, name) is not None
    assert celery_gaffer.ScheduleStore.__name__ == "ScheduleStore"
    assert set(celery_gaffer.__all__) <= set(dir(celery_gaffer))
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        _ = celery_gaffer.nothing  # type: ignore[attr-defined]


def eager() -> click.Group:
    """The registry the command modules add their commands to, every module imported."""
    for module in COMMAND_MODULES:
        importlib.import_module(f"celery_gaffer.cli.{module}")
    from celery_gaffer.cli.base import gaffer as registry

    return registry


@pytest.mark.parametrize("path", [(), ("import",)])
def test_the_map_names_every_command_with_its_module_and_its_help(path: tuple[str, ...]) -> None:
    registry: click.Group = eager()
    lazy: click.Group = gaffer
    table = COMMANDS
    for name in path:
        registry = registry.commands[name]  # type: ignore[assignment]
        lazy = lazy.commands[name]  # type: ignore[assignment]
        table = IMPORT_COMMANDS
    assert set(table) | set(lazy.commands) == set(registry.commands)
    context = click.Context(lazy)
    for name, (_, help_text) in table.items():
        command = lazy.get_command(context, name)
        assert command is registry.commands[name]
        stand_in = click.Command(name, help=help_text)
        for limit in range(20, 140, 7):
            assert stand_in.get_short_help_str(limit) == command.get_short_help_str(limit)


@pytest.mark.parametrize("path", [(), ("import",)])
@pytest.mark.parametrize("width", [60, 80, 120])
def test_help_lists_the_commands_as_the_eager_group_did(path: tuple[str, ...], width: int) -> None:
    registry: click.Group = eager()
    lazy: click.Group = gaffer
    for name in path:
        registry = registry.commands[name]  # type: ignore[assignment]
        lazy = lazy.commands[name]  # type: ignore[assignment]

    def shown(group: click.Group) -> str:
        context = click.Context(group, info_name="gaffer", terminal_width=width)
        return group.get_help(context)

    assert shown(lazy) == shown(registry)
    assert "Commands:" in shown(lazy)


def test_an_unknown_command_is_one_line_and_exit_2() -> None:
    from click.testing import CliRunner

    result = CliRunner().invoke(gaffer, ["nothing"])
    assert result.exit_code == 2
    assert result.output.count("\n") == 1
    assert "No such command 'nothing'" in result.output
