"""`celery -A proj gaffer migrate` as a user runs it: a real celery process."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import inspect, text
from sqlalchemy.engine import make_url

from celery_gaffer.settings import parse_database_url
from celery_gaffer.store import get_engine, head_revision, models_for

ROOT = Path(__file__).resolve().parents[2]


def _celery(tmp_path: Path, database_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "proj.py").write_text(
        "from celery import Celery\n"
        "app = Celery('proj', broker='memory://')\n"
        f"app.conf.gaffer_database_url = {database_url!r}\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    return subprocess.run(
        [sys.executable, "-m", "celery", "-A", "proj", "gaffer", *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture(params=["sqlite", "postgresql"])
def empty_database(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'fresh.sqlite3'}"
    # trust auth ignores the password; it is here to prove the CLI masks it.
    url = make_url(str(request.getfixturevalue("empty_postgres_url")))
    return url.set(password="topsecret").render_as_string(hide_password=False)


def test_migrate_twice_creates_every_table_then_changes_nothing(
    tmp_path: Path, empty_database: str
) -> None:
    first = _celery(tmp_path, empty_database, "migrate")
    assert first.returncode == 0, first.stderr
    assert "migrated from empty to revision" in first.stdout
    assert "topsecret" not in first.stdout + first.stderr

    engine = get_engine(parse_database_url(empty_database))
    tables = set(inspect(engine).get_table_names())
    models = models_for("gaffer_")
    assert {t.name for t in models.metadata.sorted_tables} | {models.version_table} <= tables

    second = _celery(tmp_path, empty_database, "migrate")
    assert second.returncode == 0, second.stderr
    assert "nothing to do" in second.stdout
    assert "topsecret" not in second.stdout + second.stderr
    assert set(inspect(engine).get_table_names()) == tables


def test_migrate_reports_an_unreachable_database_with_its_password_masked(tmp_path: Path) -> None:
    result = _celery(tmp_path, "postgresql+psycopg://u:hunter2@127.0.0.1:1/nowhere", "migrate")
    assert result.returncode != 0
    assert "cannot reach the Gaffer database" in result.stderr
    assert "hunter2" not in result.stdout + result.stderr


def _one_error_line(result: subprocess.CompletedProcess[str]) -> str:
    """The CLI failed the way every CLI failure must: exit 2, one line on stderr."""
    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ")
    return lines[0]


@pytest.mark.parametrize("command", [["status"], ["runs"], ["schedules"], ["pause", "x"]])
def test_a_read_on_a_missing_sqlite_database_is_one_line_and_creates_nothing(
    tmp_path: Path, command: list[str]
) -> None:
    database = tmp_path / "never.sqlite3"
    line = _one_error_line(_celery(tmp_path, f"sqlite:///{database}", *command))
    assert "gaffer migrate" in line
    assert not database.exists()
    assert not (tmp_path / "gaffer.sqlite3").exists()


def test_status_on_an_unmigrated_database_asks_for_migrate(
    tmp_path: Path, empty_database: str
) -> None:
    line = _one_error_line(_celery(tmp_path, empty_database, "status"))
    if empty_database.startswith("postgresql"):
        assert "is not migrated: run `celery -A <app> gaffer migrate`" in line
        assert "topsecret" not in line


def test_a_revision_this_version_does_not_know_is_named_and_downgrade_works(
    tmp_path: Path, empty_database: str
) -> None:
    assert _celery(tmp_path, empty_database, "migrate").returncode == 0
    engine = get_engine(parse_database_url(empty_database))
    version_table = models_for("gaffer_").version_table
    with engine.begin() as conn:
        conn.execute(text(f"UPDATE {version_table} SET version_num = 'f00dfeed'"))
    line = _one_error_line(_celery(tmp_path, empty_database, "status"))
    assert "at revision f00dfeed, which celery-gaffer" in line
    assert "does not know" in line
    with engine.begin() as conn:
        conn.execute(
            text(f"UPDATE {version_table} SET version_num = :head"), {"head": head_revision()}
        )
    down = _celery(tmp_path, empty_database, "migrate", "--to", "base")
    assert down.returncode == 0, down.stderr
    assert "to revision base" in down.stdout
    models = models_for("gaffer_")
    assert not {t.name for t in models.metadata.sorted_tables} & set(
        inspect(engine).get_table_names()
    )
    assert _celery(tmp_path, empty_database, "migrate").returncode == 0
    assert _celery(tmp_path, empty_database, "status").returncode == 0
    unknown = _one_error_line(_celery(tmp_path, empty_database, "migrate", "--to", "nope"))
    assert "unknown revision 'nope'" in unknown


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("postgresql+psycopg://u:hunter2@127.0.0.1:1/nowhere", "refused"),
        ("postgresql+psycopg://u@127.0.0.1:1/nowhere?password=hunter2", "refused"),
        ("postgresql+psycopg://postgres:hunter2@127.0.0.1:5432/no_such_db_x", "does not exist"),
        ("postgresql+psycopg://no_such_role:hunter2@127.0.0.1:5432/test", "no_such_role"),
    ],
)
def test_an_unreachable_database_gives_the_drivers_reason_masked(
    tmp_path: Path, url: str, reason: str
) -> None:
    for command in (["status"], ["migrate"]):
        line = _one_error_line(_celery(tmp_path, url, *command))
        assert "cannot reach the Gaffer database at" in line
        assert reason in line
        assert "hunter2" not in line


def test_a_malformed_url_never_shows_its_password(tmp_path: Path) -> None:
    line = _one_error_line(
        _celery(tmp_path, "postgresql+psycopg://alice:p@ss@word@127.0.0.1/db", "status")
    )
    assert "%40" in line
    for part in ("p@ss", "ss@word", "word@"):
        assert part not in line


def test_status_shows_a_poisoned_schedule_with_its_reason_and_exits_1(
    tmp_path: Path, empty_database: str
) -> None:
    assert _celery(tmp_path, empty_database, "migrate").returncode == 0
    for name in ("healthy", "poisoned"):
        added = _celery(tmp_path, empty_database, "add", name, "proj.nothing", "--every", "60")
        assert added.returncode == 2  # the task is not registered with this app
    engine = get_engine(parse_database_url(empty_database))
    from celery import Celery

    from celery_gaffer import ScheduleStore, every

    app = Celery("seed", set_as_current=False)
    app.conf.gaffer_database_url = empty_database
    store = ScheduleStore(app, check_tasks=False)
    store.add("healthy", "proj.nothing", every(3600))
    store.add("poisoned", "proj.nothing", every(3600))
    with engine.begin() as conn:
        conn.execute(text("UPDATE gaffer_schedules SET catchup = 'bogus' WHERE name = 'poisoned'"))
        conn.execute(
            text("UPDATE gaffer_schedules SET error = :e WHERE name = 'poisoned'"),
            {"e": "gaffer.catchup: 'bogus' is not one of latest, all, skip"},
        )
    app.close()
    result = _celery(tmp_path, empty_database, "status")
    assert result.returncode == 1, result.stderr
    [line] = [row for row in result.stdout.splitlines() if row.startswith("poisoned")]
    assert "error" in line
    assert "gaffer.catchup: 'bogus' is not one of" in line
    [healthy] = [row for row in result.stdout.splitlines() if row.startswith("healthy")]
    assert " ok " in f"{healthy} "
    assert "topsecret" not in result.stdout + result.stderr
