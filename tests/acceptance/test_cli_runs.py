"""`celery -A proj gaffer runs / status / schedules / add / backfill / update` as a user
runs them: a real celery process on a real SQLite file and PostgreSQL database."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from celery import Celery
from sqlalchemy import select

from celery_gaffer import Scheduler, ScheduleStore, cron, every
from celery_gaffer.store import database_for
from celery_gaffer.store.runs import insert_runs

from ..support import FrozenClock

pytestmark = pytest.mark.acceptance

ROOT = Path(__file__).resolve().parents[2]
UTC = timezone.utc
LONDON = ZoneInfo("Europe/London")


class Project:
    """A project file with two tasks, its database, and a client app for seeding."""

    def __init__(self, tmp_path: Path, database_url: str) -> None:
        self.path = tmp_path
        self.database_url = database_url
        (tmp_path / "proj.py").write_text(
            "from celery import Celery\n"
            "app = Celery('proj', broker='memory://')\n"
            f"app.conf.gaffer_database_url = {database_url!r}\n"
            "@app.task(name='proj.report')\n"
            "def report():\n"
            "    return None\n"
            "@app.task(name='proj.settle')\n"
            "def settle(invoice_id):\n"
            "    return None\n"
        )
        self.app = Celery("seed", broker="memory://", set_as_current=False)
        self.app.conf.gaffer_database_url = database_url
        for name in ("proj.report", "proj.settle"):
            self.app.task(name=name, shared=False)(_stub)

    def celery(self, *args: str) -> subprocess.CompletedProcess[str]:
        paths = [str(self.path), str(ROOT), os.environ.get("PYTHONPATH", "")]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}
        return subprocess.run(
            [sys.executable, "-m", "celery", "-A", "proj", "gaffer", *args],
            cwd=self.path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )

    def ok(self, *args: str) -> str:
        result = self.celery(*args)
        assert result.returncode == 0, (result.stdout, result.stderr)
        return result.stdout

    def store(self, clock: FrozenClock | None = None) -> ScheduleStore:
        if clock is None:
            return ScheduleStore(self.app)
        return ScheduleStore(self.app, clock=clock)


def _stub(*args: Any, **kwargs: Any) -> None:
    return None


@pytest.fixture
def project(tmp_path: Path, database_url: str) -> Iterator[Project]:
    project = Project(tmp_path, database_url)
    yield project
    project.app.close()


def one_error_line(result: subprocess.CompletedProcess[str]) -> str:
    """The CLI failed the way every CLI failure must: exit 2, one line on stderr."""
    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ")
    return lines[0]


def line_of(output: str, start: str) -> str:
    [line] = [row for row in output.splitlines() if row.startswith(start)]
    return line


NOMINAL = datetime(2026, 11, 30, 2, 30, tzinfo=UTC)
RUN = {
    "task_id": None,
    "task_name": "proj.report",
    "schedule": None,
    "nominal_at": None,
    "key": None,
    "attempt": 1,
    "state": None,
    "started_at": NOMINAL,
    "finished_at": NOMINAL + timedelta(seconds=2),
    "duration": None,
    "items": None,
    "fence": None,
    "worker": None,
    "error_type": None,
    "error_message": None,
}


def seed_runs(project: Project) -> None:
    """Runs as the recorder writes them: a success, a skip and a duplicate (reason in
    ``error_message``, no ``error_type``), a failure, and a run of a removed schedule."""
    store = project.store()
    store.add("nightly", "proj.report", cron("30 2 * * *", "Europe/London"))
    store.add("tick", "proj.report", every(60))
    runs = [
        {
            "task_id": "id-ok",
            "schedule": "nightly",
            "nominal_at": NOMINAL,
            "key": "nightly@2026-11-30T02:30:00Z",
            "state": "succeeded",
            "duration": 2.0,
            "items": 17,
            "fence": 41,
            "worker": "w1@host",
        },
        {
            "task_id": "id-skip",
            "schedule": "nightly",
            "nominal_at": NOMINAL,
            "key": "nightly@2026-11-30T02:30:00Z",
            "state": "skipped",
            "error_message": "overlap=forbid: another run holds the lease",
        },
        {
            "task_id": "id-dup",
            "task_name": "proj.settle",
            "key": "invoice.settled:11",
            "state": "duplicate",
            "error_message": "key invoice.settled:11 was already completed",
        },
        {
            "task_id": "id-fail",
            "schedule": "tick",
            "nominal_at": NOMINAL,
            "key": "tick@2026-11-30T02:30:00Z",
            "state": "failed",
            "attempt": 2,
            "error_type": "ValueError",
            "error_message": "bad\ninput",
        },
        {
            "task_id": "id-gone",
            "schedule": "removed",
            "nominal_at": datetime(2027, 3, 28, 2, 30, tzinfo=UTC),
            "key": "removed@2027-03-28T02:30:00Z",
            "state": "missed",
            "error_message": "older than its starting deadline",
        },
    ]
    database = database_for(project.app)
    now = datetime.now(UTC)
    with database.begin() as conn:
        insert_runs(conn, database.models, [{**RUN, **run, "updated_at": now} for run in runs])


def test_runs_shows_key_and_reason_and_a_zoned_schedule_in_its_zone(project: Project) -> None:
    seed_runs(project)
    out = project.ok("runs")
    header = out.splitlines()[0].split()
    assert header == ["SCHEDULE", "NOMINAL", "TASK", "STATE", "ITEMS", "DURATION", "KEY", "REASON"]
    ok = line_of(out, "nightly   2026-11-30 02:30 GMT (02:30Z)  proj.report  succeeded")
    assert "nightly@2026-11-30T02:30:00Z" in ok
    assert " 17 " in ok
    skipped = line_of(out, "nightly   2026-11-30 02:30 GMT (02:30Z)  proj.report  skipped")
    assert skipped.endswith("overlap=forbid: another run holds the lease")
    duplicate = line_of(out, "-         -")
    assert "duplicate" in duplicate
    assert "invoice.settled:11" in duplicate
    assert duplicate.endswith("key invoice.settled:11 was already completed")
    failed = line_of(out, "tick")
    assert "2026-11-30 02:30:00Z" in failed  # an every schedule: UTC
    assert failed.endswith("ValueError: bad input")  # one line
    # A run whose schedule was removed falls back to UTC (its zone is unknown).
    assert "2027-03-28 02:30:00Z" in line_of(out, "removed")
    # Narrow by default: no task id, fence or worker.
    assert "id-ok" not in out
    assert "w1@host" not in out


def test_runs_wide_utc_and_json_show_every_column(project: Project) -> None:
    seed_runs(project)
    wide = project.ok("runs", "--wide", "--schedule", "nightly")
    assert wide.splitlines()[0].split() == [
        *("SCHEDULE", "NOMINAL", "TASK", "STATE", "ITEMS", "DURATION", "KEY"),
        *("TASK", "ID", "FENCE", "WORKER", "STARTED", "FINISHED", "ATTEMPT", "REASON"),
    ]
    ok = line_of(wide, "nightly   2026-11-30 02:30 GMT (02:30Z)  proj.report  succeeded")
    assert "  id-ok  " in ok
    assert "  41  " in ok
    assert "w1@host" in ok
    assert "2026-11-30 02:30:02 GMT (02:30:02Z)" in ok  # finished
    assert "removed" not in wide  # --schedule

    utc = project.ok("runs", "--utc")
    assert "GMT" not in utc
    assert "nightly   2026-11-30 02:30:00Z" in utc

    rows = [json.loads(line) for line in project.ok("runs", "--json").splitlines()]
    by_id = {row["task_id"]: row for row in rows}
    assert by_id["id-ok"]["key"] == "nightly@2026-11-30T02:30:00Z"
    assert by_id["id-ok"]["fence"] == 41
    assert by_id["id-ok"]["zone"] == "Europe/London"
    assert by_id["id-ok"]["nominal_at"] == "2026-11-30T02:30:00+00:00"
    assert by_id["id-skip"]["reason"] == "overlap=forbid: another run holds the lease"
    assert by_id["id-dup"]["reason"] == "key invoice.settled:11 was already completed"
    assert by_id["id-fail"]["reason"] == "ValueError: bad input"
    assert by_id["id-gone"]["zone"] == "UTC"
    assert {"task_id", "worker", "attempt", "started_at", "finished_at", "error_type"} <= set(
        by_id["id-ok"]
    )
    assert "schedule_definition" not in by_id["id-ok"]


def _clear_of_the_hour() -> None:
    """Wait, if need be, until the latest whole hour is 90 s past and the next is more
    than a minute away. ``gaffer status`` reads the real clock, and which fire of an
    hourly schedule is the late one changes a grace (60 s) after each whole hour; the
    fire the catch-up tick just sent is not due before then, and the fires it dropped
    are not in the ledger, so in that minute the schedule is not late yet."""
    now = datetime.now(UTC)
    into = now.minute * 60 + now.second
    if into < 90 or into > 3540:
        clear = now.replace(minute=1, second=30, microsecond=0)
        if into > 3540:
            clear += timedelta(hours=1)
        time.sleep((clear - now).total_seconds())


def test_status_shows_the_late_fire_in_the_zone_and_the_validation_error(
    project: Project,
) -> None:
    _clear_of_the_hour()
    now = datetime.now(UTC)
    past = FrozenClock(now - timedelta(hours=3))
    project.store(past).add("hourly", "proj.report", cron("0 * * * *", "Europe/London"))
    # Beat's app does not know this task: its tick puts the schedule in error.
    seed = ScheduleStore(project.app, clock=past, check_tasks=False)
    seed.add("orphan", "proj.missing", every(60))
    Scheduler(project.app, clock=FrozenClock(now)).tick()

    result = project.celery("status")
    assert result.returncode == 1, result.stderr
    [late] = [
        json.loads(line)
        for line in project.celery("status", "--json").stdout.splitlines()
        if json.loads(line)["schedule"] == "hourly"
    ]
    due = datetime.fromisoformat(late["late_since"])
    local = due.astimezone(LONDON)
    shown = f"{local:%Y-%m-%d %H:%M} {local.tzname()} ({due:%H:%M}Z)"
    hourly = line_of(result.stdout, "hourly")
    assert " late " in hourly
    assert hourly.endswith(f"the fire of {shown} has not succeeded")
    orphan = line_of(result.stdout, "orphan")
    assert " error " in orphan
    assert orphan.endswith("task: 'proj.missing' is not registered with this Beat's app")

    in_utc = project.celery("status", "--utc")
    assert in_utc.returncode == 1
    assert line_of(in_utc.stdout, "hourly").endswith(
        f"the fire of {due:%Y-%m-%d %H:%M:%S}Z has not succeeded"
    )


def test_schedules_show_next_fire_in_the_zone_unless_utc(project: Project) -> None:
    added = project.ok(
        "add", "nightly", "proj.report", "--cron", "30 2 * * *", "--tz", "Europe/London"
    )
    stored = project.store().get("nightly")
    assert stored.next_fire_at is not None
    local = stored.next_fire_at.astimezone(LONDON)
    shown = f"{local:%Y-%m-%d} 02:30 {local.tzname()} ({stored.next_fire_at:%H:%M}Z)"
    assert added.strip().endswith(f"next fire {shown}")
    assert shown in line_of(project.ok("schedules"), "nightly")
    assert f"{stored.next_fire_at:%Y-%m-%d %H:%M:%S}Z" in line_of(
        project.ok("schedules", "--utc"), "nightly"
    )


def test_add_of_an_existing_name_names_the_real_flag(project: Project) -> None:
    project.ok("add", "x", "proj.report", "--every", "60")
    line = one_error_line(project.celery("add", "x", "proj.report", "--every", "30"))
    assert "schedule 'x' already exists: pass --replace to overwrite it" in line
    assert "gaffer update x" in line
    assert "replace=True" not in line
    project.ok("add", "x", "proj.report", "--every", "30", "--replace")
    assert project.store().get("x").schedule == every(30)


def _ledger(project: Project) -> list[datetime]:
    database = database_for(project.app)
    fire = database.models.Fire
    with database.read() as conn:
        return list(conn.execute(select(fire.nominal_at).order_by(fire.nominal_at)).scalars())


@pytest.mark.parametrize(
    ("start", "end"),
    [
        ("2026-11-30 21:30", "2026-11-30 23:30"),
        ("2026-11-30T21:30", "2026-11-30T23:30:00"),
        ("2026-11-30T22:30+01:00", "2026-11-30T23:30Z"),
    ],
)
def test_backfill_reads_iso_times_from_exclusive_to_inclusive(
    project: Project, start: str, end: str
) -> None:
    project.store().add("half-hourly", "proj.report", cron("*/30 * * * *"))
    out = project.ok("backfill", "half-hourly", "--from", start, "--to", end)
    # 21:30 is excluded, 23:30 included.
    assert "sent 4 fires of half-hourly" in out
    assert "(2026-11-30 21:30:00Z, 2026-11-30 23:30:00Z]" in out
    assert [f.replace(tzinfo=UTC) for f in _ledger(project)] == [
        datetime(2026, 11, 30, 22, 0, tzinfo=UTC) + timedelta(minutes=30 * i) for i in range(4)
    ]


def test_backfill_takes_plain_dates_and_refuses_bad_times_in_one_line(project: Project) -> None:
    project.store().add("daily", "proj.report", cron("0 0 * * *"))
    out = project.ok("backfill", "daily", "--from", "2026-11-28", "--to", "2026-11-30")
    assert "sent 2 fires of daily" in out  # 29th and 30th; the 28th is excluded
    for args, words in [
        (("--from", "2026-11-30 9pm", "--to", "2026-11-30"), "is not an ISO time"),
        (("--from", "2026-13-01", "--to", "2026-11-30"), "month must be in 1..12"),
        (("--from", "2026-11-30", "--to", "2026-11-29"), "must be later than --from"),
        (("--from", "2026-11-30"), "Missing option '--to'"),
    ]:
        line = one_error_line(project.celery("backfill", "daily", *args))
        assert words in line


def test_update_changes_the_zone_only_and_shows_the_next_fires(project: Project) -> None:
    project.ok("add", "nightly", "proj.report", "--cron", "30 2 * * *", "--args", "[1]")
    out = project.ok("update", "nightly", "--tz", "Europe/London")
    assert "schedule: cron '30 2 * * *' UTC -> cron '30 2 * * *' Europe/London" in out
    stored = project.store().get("nightly")
    assert stored.schedule == cron("30 2 * * *", "Europe/London")
    assert stored.args == [1]
    assert stored.next_fire_at is not None
    fires = [stored.next_fire_at]
    for _ in range(2):
        following = stored.schedule.next_after(fires[-1])
        assert following is not None
        fires.append(following)
    lines = out.splitlines()
    assert lines[-4] == "next 3 fires:"
    for line, fire in zip(lines[-3:], fires, strict=True):
        local = fire.astimezone(LONDON)
        assert line == f"  {local:%Y-%m-%d} 02:30 {local.tzname()} ({fire:%H:%M}Z)"

    assert "tz: a zone applies only to a cron schedule" in one_error_line(
        project.celery("update", "nightly", "--every", "60", "--tz", "UTC")
    )
    project.ok("add", "beat", "proj.report", "--every", "60")
    line = one_error_line(project.celery("update", "beat", "--tz", "Europe/London"))
    assert "schedule 'beat' is an every schedule" in line
    assert project.store().get("beat").schedule == every(60)
    assert "no schedule named 'nope'" in one_error_line(
        project.celery("update", "nope", "--tz", "UTC")
    )
    assert "nothing to change" in one_error_line(project.celery("update", "beat"))


def test_backfill_dry_run_lists_in_the_zone_what_backfill_then_sends(project: Project) -> None:
    project.ok("add", "nightly", "proj.report", "--cron", "30 2 * * *", "--tz", "Europe/London")
    args = ("backfill", "nightly", "--from", "2026-10-20", "--to", "2026-10-30")
    out = project.ok(*args, "--dry-run")
    assert _ledger(project) == []  # nothing sent, nothing written
    lines = out.splitlines()
    # London leaves summer time on 25 October: 02:30 is 01:30Z before, 02:30Z after.
    assert lines[:2] == [
        "backfill sends 10 fires (2026-10-20 02:30 BST (01:30Z) ... 2026-10-29 02:30 GMT "
        "(02:30Z)); none is already in the ledger",
        "fires it sends:",
    ]
    assert lines[-1] == "dry run: nothing was changed"

    assert "sent 10 fires of nightly" in project.ok(*args)
    sent = [fire.replace(tzinfo=UTC) for fire in _ledger(project)]
    expected = []
    for fire in sent:
        local = fire.astimezone(LONDON)
        expected.append(f"  {local:%Y-%m-%d} 02:30 {local.tzname()} ({fire:%H:%M}Z)")
    assert lines[2:-1] == expected
    again = project.ok(*args, "--dry-run").splitlines()
    assert again == [
        "backfill sends nothing: the range's 10 fires are in the ledger already",
        "dry run: nothing was changed",
    ]
