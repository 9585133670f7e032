"""`celery -A proj gaffer migrate` as a user runs it: a real celery process."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import inspect
from sqlalchemy.engine import make_url

from celery_gaffer.settings import parse_database_url
from celery_gaffer.store import get_engine, models_for

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
