"""`gaffer pause --note --until`, `resume --note`, `--actor` and `gaffer audit` through the
real click group, a real app and real databases."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone

import pytest
from celery import Celery

from celery_gaffer import ScheduleStore, every
from celery_gaffer.store.audit import default_actor

from ..support import gaffer_cli, noop_app


@pytest.fixture
def app(database_url: str) -> Iterator[Celery]:
    with noop_app("cli-audit-test", database_url) as app:
        ScheduleStore(app, actor="setup").add("nightly-billing", "t.noop", every(3600))
        yield app


def audit_json(app: Celery, *args: str) -> list[dict[str, object]]:
    result = gaffer_cli(app, "audit", *args, "--json")
    assert result.exit_code == 0, result.stderr
    entries = json.loads(result.stdout)
    assert isinstance(entries, list)
    return entries


def test_pause_with_a_note_and_a_duration_then_resume_shows_in_audit_json(app: Celery) -> None:
    before = datetime.now(timezone.utc)
    result = gaffer_cli(
        app, "pause", "nightly-billing", "--note", "bank migration", "--until", "2h",
        "--actor", "alice",
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    assert result.stdout.startswith("paused nightly-billing until ")
    stored = ScheduleStore(app).get("nightly-billing")
    assert stored.paused_note == "bank migration"
    assert stored.paused_until is not None
    assert timedelta(hours=2) <= stored.paused_until - before <= timedelta(hours=2, minutes=1)

    assert gaffer_cli(app, "resume", "nightly-billing", "--note", "done").exit_code == 0
    newest, paused, added = audit_json(app, "nightly-billing")
    assert set(newest) == {"at", "actor", "source", "action", "schedule", "note", "changes"}
    assert (newest["action"], newest["actor"], newest["source"], newest["note"]) == (
        "resume",
        default_actor(),
        "cli",
        "done",
    )
    assert (paused["action"], paused["actor"], paused["source"], paused["note"]) == (
        "pause",
        "alice",
        "cli",
        "bank migration",
    )
    assert paused["changes"] == {
        "enabled": [True, False],
        "paused_note": [None, "bank migration"],
        "paused_until": [None, stored.paused_until.isoformat()],
    }
    assert (added["actor"], added["source"]) == ("setup", "code")
    assert datetime.fromisoformat(str(newest["at"])) >= before


def test_pause_until_an_iso_time_and_a_bad_until_is_one_line_exit_2(app: Celery) -> None:
    result = gaffer_cli(app, "pause", "nightly-billing", "--until", "2020-01-01T00:00+00:00")
    assert result.exit_code == 2
    assert result.stderr.count("\n") == 1
    assert "until" in result.stderr
    result = gaffer_cli(app, "pause", "nightly-billing", "--until", "soon")
    assert result.exit_code == 2
    assert "--until" in result.stderr
    assert audit_json(app, "nightly-billing")[0]["action"] == "add"
    later = (datetime.now(timezone.utc) + timedelta(days=3)).replace(microsecond=0)
    result = gaffer_cli(app, "pause", "nightly-billing", "--until", later.isoformat())
    assert result.exit_code == 0, result.stderr
    assert ScheduleStore(app).get("nightly-billing").paused_until == later


def test_every_writing_command_records_its_actor(app: Celery) -> None:
    commands = [
        ("update", "nightly-billing", "--every", "600"),
        ("trigger", "nightly-billing"),
        ("add", "other", "t.noop", "--every", "60"),
        ("remove", "other"),
    ]
    for command in commands:
        result = gaffer_cli(app, *command, "--actor", "deploy-bot")
        assert result.exit_code == 0, (command, result.stderr)
    entries = audit_json(app, "--limit", "4")
    assert [(e["action"], e["actor"], e["source"]) for e in entries] == [
        ("remove", "deploy-bot", "cli"),
        ("add", "deploy-bot", "cli"),
        ("trigger", "deploy-bot", "cli"),
        ("update", "deploy-bot", "cli"),
    ]


def test_audit_text_is_one_line_per_entry_newest_first(app: Celery) -> None:
    gaffer_cli(app, "pause", "nightly-billing", "--note", "why\x1b[31m", "--actor", "alice")
    result = gaffer_cli(app, "audit", "nightly-billing")
    assert result.exit_code == 0, result.stderr
    header, pause, add = result.stdout.splitlines()
    assert header.split() == ["AT", "ACTOR", "SOURCE", "ACTION", "SCHEDULE", "NOTE", "CHANGES"]
    assert "alice" in pause
    assert " pause " in pause
    assert "why\\x1b[31m" in pause  # escaped, never interpreted
    assert "enabled: true -> false" in pause
    assert " add " in add
    assert gaffer_cli(app, "audit", "--since", "1h").stdout.count("\n") == 3
    assert audit_json(app, "--since", "2999-01-01") == []
