"""What the CLI prints from the database reaches the terminal escaped and cut: a schedule
name or a run error holding an escape sequence (a row edited by hand, an imported name, a
task's exception message) is shown as ``\\x1b[31m``, never sent to the terminal raw, and a
huge value echoed in an error is cut."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from celery import Celery
from sqlalchemy import update

from celery_gaffer import ScheduleStore, every
from celery_gaffer.store import database_for
from celery_gaffer.store.runs import insert_runs

from ..support import gaffer_cli, noop_app

RED = "\x1b[31m"
NAME = f"red{RED}name"
ERROR = f"boom{RED}\x1b]0;owned\x07\x9b2J"
NOMINAL = datetime(2026, 11, 30, 2, 30, tzinfo=timezone.utc)


@pytest.fixture
def app(database_url: str) -> Iterator[Celery]:
    with noop_app("printable-test", database_url) as app:
        yield app


def _raw_controls(text: str) -> list[str]:
    return [
        char
        for char in text
        if (ord(char) < 0x20 and char not in "\n") or 0x7F <= ord(char) <= 0x9F
    ]


def _seed(app: Celery) -> None:
    """A schedule whose name and error hold escape sequences (written past the API, as a
    hand-edited row is), and a failed run of it whose error holds more."""
    ScheduleStore(app).add("plain", "t.noop", every(60))
    database = database_for(app)
    schedules = database.models.Schedule
    run: dict[str, Any] = {
        "task_id": "id-fail",
        "task_name": "t.noop",
        "schedule": NAME,
        "nominal_at": NOMINAL,
        "key": f"{NAME}@2026-11-30T02:30:00Z",
        "attempt": 1,
        "state": "failed",
        "started_at": NOMINAL,
        "finished_at": NOMINAL + timedelta(seconds=1),
        "duration": 1.0,
        "items": None,
        "fence": None,
        "worker": None,
        "error_type": "ValueError",
        "error_message": ERROR,
        "updated_at": datetime.now(timezone.utc),
    }
    with database.begin() as conn:
        conn.execute(
            update(schedules).where(schedules.name == "plain").values(name=NAME, error=ERROR)
        )
        insert_runs(conn, database.models, [run])


@pytest.mark.parametrize("command", ["schedules", "runs", "status"])
def test_names_and_errors_holding_escape_sequences_are_printed_escaped(
    app: Celery, command: str
) -> None:
    _seed(app)
    result = gaffer_cli(app, command)
    output = result.stdout + result.stderr
    assert result.exit_code in (0, 1), output
    assert _raw_controls(output) == []
    assert "red\\x1b[31mname" in output
    if command != "schedules":
        assert "boom\\x1b[31m\\x1b]0;owned\\x07\\x9b2J" in output


def test_a_schedule_in_error_is_reported_escaped_on_stderr(app: Celery) -> None:
    _seed(app)
    result = gaffer_cli(app, "schedules")
    assert _raw_controls(result.stderr) == []
    assert "error in red\\x1b[31mname: boom\\x1b[31m\\x1b]0;owned\\x07\\x9b2J" in result.stderr


def test_a_huge_value_echoed_in_an_error_is_cut_to_one_readable_line(app: Celery) -> None:
    huge = "n" * 1_000_000
    result = gaffer_cli(app, "add", "nightly", "t.noop", "--every", "60", "--catchup", huge)
    assert result.exit_code == 2
    [line] = result.stderr.splitlines()
    assert line.startswith("error: Invalid value for '--catchup': 'nnn")
    assert len(line) < 1_200
    assert "…(999802 more characters)" in line


def test_an_escape_sequence_echoed_in_an_error_is_escaped(app: Celery) -> None:
    result = gaffer_cli(app, "add", "nightly", "t.noop", "--every", "60", "--catchup", RED)
    assert result.exit_code == 2
    assert _raw_controls(result.stderr) == []
    assert "\\x1b[31m" in result.stderr


def test_imported_names_holding_escape_sequences_or_a_megabyte_are_printed_escaped_and_cut(
    app: Celery,
) -> None:
    huge = "h" * 1_000_000
    app.conf.beat_schedule = {
        NAME: {"task": "t.noop", "schedule": 60.0},
        huge: {"task": "t.noop", "schedule": 60.0},
        "fine": {"task": "t.noop", "schedule": 60.0},
    }
    result = gaffer_cli(app, "import", "beat-schedule", "--dry-run")
    assert _raw_controls(result.stdout + result.stderr) == []
    assert "red\\x1b[31mname" in result.stdout
    assert max(len(line) for line in result.stdout.splitlines()) < 1_200
