"""The README's quickstart, run as written: its files and its commands, on real services.

The ``# proj/...`` Python blocks of the Quickstart section are written verbatim into a
fresh folder, and every line of its console block is run there, in order: one-shot
commands to completion, ``beat`` and ``worker`` as real processes. The only substitution
is the one the quickstart documents: ``CELERY_BROKER_URL`` and ``GAFFER_DATABASE_URL``
point at the test's Redis database and a brand-new PostgreSQL database.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import redis
from sqlalchemy import func, select, text

from celery_gaffer.settings import parse_database_url
from celery_gaffer.store import get_engine, models_for

from ..processes import CeleryProcess, celery_processes, project_env

ROOT = Path(__file__).resolve().parents[2]
SCHEDULE = "settle-open-invoices"
TASK = "proj.tasks.settle_open"
INVOICES = 3

pytestmark = pytest.mark.acceptance


@dataclass
class Quickstart:
    """The README's Quickstart section, taken apart."""

    prose: str
    files: dict[str, str] = field(default_factory=dict)  # relative path -> source
    commands: list[str] = field(default_factory=list)


def read_quickstart(readme: Path = ROOT / "README.md") -> Quickstart:
    match = re.search(r"^## Quickstart\b.*?(?=^## )", readme.read_text(), re.DOTALL | re.MULTILINE)
    assert match, "README.md has no '## Quickstart' section"
    section = match.group(0)
    quickstart = Quickstart(prose=section)
    for lang, body in re.findall(r"^```(\w+)\n(.*?)^```", section, re.DOTALL | re.MULTILINE):
        if lang == "python":
            marker = re.match(r"# (proj/\S+\.py)\n", body)
            assert marker, f"a quickstart Python block does not start with '# proj/...':\n{body}"
            quickstart.files[marker.group(1)] = body
        elif lang == "console":
            for line in body.splitlines():
                words = shlex.split(line, comments=True)
                if words:
                    quickstart.commands.append(shlex.join(words))
    return quickstart


def test_the_quickstart_is_one_project_and_one_list_of_commands() -> None:
    quickstart = read_quickstart()
    assert set(quickstart.files) == {"proj/celery.py", "proj/models.py", "proj/tasks.py"}
    assert "empty `proj/__init__.py`" in quickstart.prose
    # The substitution this test makes must be one the reader's project honours.
    celery_py = quickstart.files["proj/celery.py"]
    assert 'os.environ.get("CELERY_BROKER_URL"' in celery_py
    assert 'os.environ.get("GAFFER_DATABASE_URL"' in celery_py
    assert quickstart.commands[0] == "pip install celery-gaffer"


def _settled(database: str) -> tuple[int, int]:
    """(invoices settled, succeeded runs of the every-10-s schedule's task)."""
    runs = models_for("gaffer_").JobRun
    with get_engine(parse_database_url(database)).connect() as conn:
        settled = conn.scalar(text("SELECT count(*) FROM invoices WHERE status = 'settled'"))
        succeeded = conn.scalar(
            select(func.count())
            .select_from(runs)
            .where(runs.task_name == TASK, runs.schedule == SCHEDULE, runs.state == "succeeded")
        )
    return int(settled or 0), int(succeeded or 0)


def _wait_for_the_schedule(database: str, processes: list[CeleryProcess]) -> None:
    deadline = time.monotonic() + 45
    while time.monotonic() < deadline:
        settled, succeeded = _settled(database)
        if settled == INVOICES and succeeded >= 1:
            return
        for process in processes:
            assert process.process.poll() is None, (
                f"{process.log_path.name} exited:\n{process.log()}"
            )
        time.sleep(0.5)
    logs = "\n".join(f"--- {p.log_path.name}\n{p.log()[-3000:]}" for p in processes)
    raise AssertionError(
        f"{SCHEDULE} did not settle the invoices within 45 s: {_settled(database)}\n{logs}"
    )


def _run(project: Path, words: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        words, cwd=project, env=project_env(project), capture_output=True, text=True, timeout=60
    )


def test_the_readme_quickstart_runs_as_written(
    tmp_path: Path,
    redis_url: str,
    empty_postgres_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    quickstart = read_quickstart()
    project = tmp_path
    (project / "proj").mkdir()
    (project / "proj" / "__init__.py").write_text("")
    for path, source in quickstart.files.items():
        (project / path).write_text(source)
    monkeypatch.setenv("CELERY_BROKER_URL", redis_url)
    monkeypatch.setenv("GAFFER_DATABASE_URL", empty_postgres_url)

    outputs: dict[str, subprocess.CompletedProcess[str]] = {}
    with celery_processes() as started:
        waited = False
        for command in quickstart.commands:
            words = shlex.split(command)
            if words[:2] == ["pip", "install"]:
                continue  # the package under test is this source tree (on PYTHONPATH)
            if words[:2] == ["python", "-m"]:
                result = _run(project, [sys.executable, *words[1:]])
            elif words[:3] == ["celery", "-A", "proj"] and words[3] in {"beat", "worker"}:
                started.append(CeleryProcess(project, "proj", words[3:], name=words[3]))
                continue
            elif words[:3] == ["celery", "-A", "proj"]:
                if started and not waited:
                    _wait_for_the_schedule(empty_postgres_url, started)
                    waited = True
                result = _run(project, [sys.executable, "-m", "celery", *words[1:]])
            else:
                raise AssertionError(
                    f"the quickstart runs a command this test does not know: {command}"
                )
            assert result.returncode == 0, f"{command}\n{result.stdout}\n{result.stderr}"
            outputs[command] = result
        assert waited, "the quickstart never asks for status or runs after starting Beat"

        status_json = _run(
            project, [sys.executable, "-m", "celery", "-A", "proj", "gaffer", "status", "--json"]
        )
        assert status_json.returncode == 0, status_json.stdout + status_json.stderr

    # migrate created the tables in the brand-new database; models created the invoices.
    migrate = outputs["celery -A proj gaffer migrate"].stdout
    assert "migrated from empty to revision" in migrate

    # status, as the README runs it: the every-10-s schedule ok with a last success.
    status = outputs["celery -A proj gaffer status"].stdout
    rows = {line.split()[0]: line.split() for line in status.splitlines() if line.strip()}
    assert rows[SCHEDULE][1] == "ok", status
    assert re.search(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}", " ".join(rows[SCHEDULE][2:])), status
    assert rows["nightly-report"][1] == "ok", status
    healths = {h["schedule"]: h for h in map(json.loads, status_json.stdout.splitlines())}
    assert healths[SCHEDULE]["state"] == "ok"
    assert healths[SCHEDULE]["last_success_at"] is not None

    # runs, as the README runs it: the schedule's run succeeded, and settle ran.
    runs = outputs["celery -A proj gaffer runs --limit 20"].stdout
    scheduled = [line for line in runs.splitlines() if line.startswith(SCHEDULE)]
    assert any(TASK in line and " succeeded " in line for line in scheduled), runs
    assert any("proj.tasks.settle " in line and " succeeded " in line for line in runs.splitlines())

    # The broker really was the test's Redis database (not the README's default).
    client = redis.Redis.from_url(redis_url)
    try:
        assert client.keys("_kombu.binding.*"), "nothing used the test's Redis database"
    finally:
        client.close()
