"""`celery -A proj gaffer import beat-schedule` as a user runs it: a real celery process,
a shelve that would run a command, and the exit status of a partial import."""

from __future__ import annotations

import os
import shelve
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]

PROJECT = """\
from datetime import timedelta
from celery import Celery
from celery.schedules import solar
app = Celery('proj', broker='memory://')
app.conf.gaffer_database_url = {database_url!r}
app.conf.timezone = 'UTC'

@app.task(name='t.report')
def report():
    return None

app.conf.beat_schedule = {{
    'often': {{'task': 't.report', 'schedule': timedelta(minutes=5)}},
    'sunset': {{'task': 't.report', 'schedule': solar.__new__(solar)}},
}}
"""


class Touch:
    """Pickles as a call of ``os.system`` that creates ``path``."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, (f"touch {shlex.quote(str(self.path))}",))


def celery(tmp_path: Path, project: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``celery -A proj gaffer ARGS`` with ``proj.py`` holding ``project``."""
    (tmp_path / "proj.py").write_text(project)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    return subprocess.run(
        [sys.executable, "-m", "celery", "-A", "proj", "gaffer", *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize("dry_run", [[], ["--dry-run"]], ids=["apply", "dry-run"])
def test_a_shelve_that_would_run_a_command_is_refused_and_the_command_never_runs(
    tmp_path: Path, sqlite_url: str, dry_run: list[str]
) -> None:
    marker = tmp_path / "pwned"
    path = tmp_path / "celerybeat-schedule"
    with shelve.open(str(path), flag="c") as db:
        db["entries"] = {"often": Touch(marker)}
    project = PROJECT.format(database_url=sqlite_url)
    result = celery(tmp_path, project, "import", "beat-schedule", "--shelve", str(path), *dry_run)
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert result.stderr.strip().splitlines() == [
        f"error: shelve: refused to load {os.system.__module__}.system from {str(path)!r}: "
        "not a celerybeat-schedule file of Celery's (nothing was read from it)"
    ]
    assert result.stdout == ""
    assert not marker.exists()


def test_a_partial_import_exits_1_and_a_complete_one_0(tmp_path: Path, sqlite_url: str) -> None:
    project = PROJECT.format(database_url=sqlite_url)
    partial = celery(tmp_path, project, "import", "beat-schedule")
    assert partial.returncode == 1, (partial.stdout, partial.stderr)
    assert partial.stdout.splitlines()[-1] == (
        "2 entries: 1 added, 0 changed, 0 unchanged, 1 cannot be mapped"
    )
    without_sunset = "\n".join(line for line in project.splitlines() if "sunset" not in line)
    complete = celery(tmp_path, without_sunset, "import", "beat-schedule")
    assert complete.returncode == 0, (complete.stdout, complete.stderr)
    assert complete.stdout.splitlines() == [
        "often: unchanged",
        "1 entries: 0 added, 0 changed, 1 unchanged, 0 cannot be mapped",
    ]
