"""`celery -A proj gaffer pause / resume / audit` as a user runs them: a real celery
process on a real SQLite file and PostgreSQL database, its actor the OS user."""

from __future__ import annotations

import getpass
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from celery_gaffer import every

from .test_cli_runs import Project

pytestmark = pytest.mark.acceptance


@pytest.fixture
def project(tmp_path: Path, database_url: str) -> Iterator[Project]:
    project = Project(tmp_path, database_url)
    yield project
    project.app.close()


def test_a_pause_by_the_cli_is_in_audit_json_with_the_os_user_as_actor(project: Project) -> None:
    project.store().add("nightly-billing", "proj.report", every(3600))
    project.ok("pause", "nightly-billing", "--note", "bank migration", "--until", "30m")
    project.ok("resume", "nightly-billing", "--actor", "alice")
    entries = json.loads(project.ok("audit", "nightly-billing", "--json"))
    assert [list(entry) for entry in entries] == [
        ["at", "actor", "source", "action", "schedule", "note", "changes"]
    ] * 3
    resumed, paused, _ = entries
    assert (paused["actor"], paused["source"], paused["action"]) == (
        getpass.getuser(),
        "cli",
        "pause",
    )
    assert paused["note"] == "bank migration"
    assert paused["changes"]["enabled"] == [True, False]
    assert (resumed["actor"], resumed["action"]) == ("alice", "resume")
    assert resumed["changes"]["paused_until"][1] is None
