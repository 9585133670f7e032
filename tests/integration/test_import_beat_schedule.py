"""`gaffer import beat-schedule` through the real click group, a real app and real
databases, with a shelve written by Celery's own PersistentScheduler."""

from __future__ import annotations

import os
import shelve
import shlex
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from celery import Celery
from celery.beat import PersistentScheduler
from celery.schedules import crontab, schedule, solar

from celery_gaffer import ScheduleStore, cron, every
from celery_gaffer.exceptions import InvalidInput, ScheduleExists

from .import_support import insert_refused
from .test_cli_update import error_line, gaffer_cli

UTC = timezone.utc


@pytest.fixture
def app(database_url: str, redis_url: str) -> Iterator[Celery]:
    app = Celery("import-test", broker=redis_url, set_as_current=False)
    app.conf.gaffer_database_url = database_url
    app.conf.timezone = "Europe/London"

    @app.task(name="t.report", shared=False)
    def report(*args: Any, **kwargs: Any) -> None:
        return None

    yield app
    app.close()


def a_solar() -> solar:
    """A Celery solar schedule; built without ``__init__``, which needs ``ephem``."""
    return solar.__new__(solar)


def beat_schedule() -> dict[str, Any]:
    return {
        "nightly": {
            "task": "t.report",
            "schedule": crontab(minute=30, hour=3),
            "args": ["daily"],
            "options": {"queue": "reports", "priority": 5, "expires": 600},
        },
        "often": {"task": "t.report", "schedule": timedelta(minutes=5)},
        "hourly": {
            "task": "t.report",
            "schedule": schedule(run_every=timedelta(hours=1)),
            "kwargs": {"full": True},
        },
        "early": {"task": "t.report", "schedule": crontab(minute=30, hour=1)},
        "sunset": {"task": "t.report", "schedule": a_solar()},
        "first-monday": {
            "task": "t.report",
            "schedule": crontab(minute=0, hour=9, day_of_month="1-7", day_of_week="mon"),
        },
        "countdown": {"task": "t.report", "schedule": 60, "options": {"countdown": 5}},
    }


def lines_of(stdout: str) -> dict[str, str]:
    lines = stdout.strip().splitlines()
    return {line.split(":", 1)[0]: line for line in lines[:-1]} | {"summary": lines[-1]}


def test_dry_run_prints_the_diff_and_writes_nothing(app: Celery) -> None:
    app.conf.beat_schedule = beat_schedule()
    result = gaffer_cli(app, "import", "beat-schedule", "--dry-run")
    assert result.exit_code == 1, (result.stdout, result.stderr)
    lines = lines_of(result.stdout)
    assert lines["nightly"].startswith("nightly: added: t.report, cron('30 3 * * *'")
    assert "note" not in lines["nightly"]
    assert lines["often"].startswith("often: added: t.report, every(300")
    assert lines["early"].startswith("early: added: t.report, cron('30 1 * * *'")
    assert "(note: touches local times that clock changes in Europe/London skip" in lines["early"]
    assert lines["sunset"] == "sunset: cannot be mapped: solar events are not supported"
    assert "first-monday: cannot be mapped: Celery's crontab matches" in lines["first-monday"]
    assert "AND" in lines["first-monday"]
    assert lines["countdown"].startswith("countdown: cannot be mapped: options.countdown")
    assert lines["summary"] == (
        "7 entries: 4 added, 0 changed, 0 unchanged, 3 cannot be mapped (dry run: nothing written)"
    )
    assert ScheduleStore(app).list() == []


def test_apply_writes_db_schedules_and_a_second_run_changes_nothing(app: Celery) -> None:
    app.conf.beat_schedule = beat_schedule()
    first = gaffer_cli(app, "import", "beat-schedule")
    assert first.exit_code == 1, (first.stdout, first.stderr)
    assert lines_of(first.stdout)["summary"] == (
        "7 entries: 4 added, 0 changed, 0 unchanged, 3 cannot be mapped"
    )
    stored = {s.name: s for s in ScheduleStore(app).list()}
    assert set(stored) == {"nightly", "often", "hourly", "early"}  # nothing refused written
    assert stored["nightly"].schedule == cron("30 3 * * *", "Europe/London")
    assert stored["nightly"].args == ["daily"]
    assert stored["nightly"].options == {"queue": "reports", "priority": 5, "expires": 600}
    assert stored["often"].schedule == every(300)
    assert stored["hourly"].schedule == every(3600)
    assert stored["hourly"].kwargs == {"full": True}
    assert {s.source for s in stored.values()} == {"db"}

    second = gaffer_cli(app, "import", "beat-schedule")
    assert second.exit_code == 1, second.stderr
    lines = lines_of(second.stdout)
    assert lines["nightly"] == "nightly: unchanged"
    assert lines["summary"] == "7 entries: 0 added, 0 changed, 4 unchanged, 3 cannot be mapped"
    again = {s.name: s for s in ScheduleStore(app).list()}
    assert again == stored  # not even updated_at moved

    app.conf.beat_schedule["nightly"]["args"] = ["weekly"]
    app.conf.beat_schedule["often"]["schedule"] = timedelta(minutes=10)
    preview = gaffer_cli(app, "import", "beat-schedule", "--dry-run")
    assert lines_of(preview.stdout)["nightly"] == "nightly: changed: args"
    assert ScheduleStore(app).get("nightly").args == ["daily"]
    third = gaffer_cli(app, "import", "beat-schedule")
    lines = lines_of(third.stdout)
    assert lines["nightly"] == "nightly: changed: args"
    assert lines["often"] == "often: changed: schedule"
    assert ScheduleStore(app).get("nightly").args == ["weekly"]
    assert ScheduleStore(app).get("often").schedule == every(600)


def test_a_config_schedule_in_error_becomes_the_imported_db_schedule(app: Celery) -> None:
    entry = beat_schedule()["nightly"]
    # Celery evaluates an unbound crontab in current_app's zone: this app is not current.
    entry["schedule"] = crontab(minute=30, hour=3, app=app)
    app.conf.beat_schedule = {"nightly": entry}
    ScheduleStore(app, source="config").sync_config(app.conf.beat_schedule)
    error = str(ScheduleStore(app).get("nightly").error)
    assert 'use cron("30 3 * * *", "Europe/London") instead of crontab(minute=30, hour=3)' in error
    result = gaffer_cli(app, "import", "beat-schedule")
    assert (
        lines_of(result.stdout)["nightly"]
        == "nightly: changed: schedule, args, options, source, error"
    )
    stored = ScheduleStore(app).get("nightly")
    assert (stored.source, stored.error) == ("db", None)


def test_last_runs_from_a_persistent_scheduler_shelve_become_watermarks(
    app: Celery, tmp_path: Path
) -> None:
    app.conf.beat_schedule = {
        name: beat_schedule()[name] for name in ("nightly", "often", "hourly")
    }
    path = tmp_path / "celerybeat-schedule"
    beat = PersistentScheduler(app=app, schedule_filename=str(path), lazy=False)
    now = datetime.now(UTC).replace(microsecond=0)
    nightly_run = now - timedelta(days=2)
    often_run = (now - timedelta(minutes=17)).astimezone(timezone(timedelta(hours=2)))
    beat.schedule["nightly"].last_run_at = nightly_run
    beat.schedule["often"].last_run_at = often_run
    beat.sync()
    beat.close()
    hourly_run = datetime.now(UTC)

    result = gaffer_cli(app, "import", "beat-schedule", "--shelve", str(path))
    assert result.exit_code == 0, (result.stdout, result.stderr)
    assert f"last run {nightly_run.isoformat()} from the shelve" in result.stdout
    nightly = ScheduleStore(app).get("nightly")
    assert nightly.watermark_at == nightly_run
    # Catch-up continues from the last run: the next fire is the first after it.
    assert nightly.next_fire_at == cron("30 3 * * *", "Europe/London").next_after(nightly_run)
    assert nightly.next_fire_at is not None
    assert nightly.next_fire_at < now
    often = ScheduleStore(app).get("often")
    assert often.watermark_at == often_run.astimezone(UTC)
    # An entry the shelve holds with Celery's default (its creation) still imports.
    assert ScheduleStore(app).get("hourly").watermark_at <= hourly_run


def test_an_unreadable_shelve_is_one_error_line_and_nothing_written(
    app: Celery, tmp_path: Path
) -> None:
    app.conf.beat_schedule = {"often": beat_schedule()["often"]}
    missing = tmp_path / "nope"
    result = gaffer_cli(app, "import", "beat-schedule", "--shelve", str(missing))
    assert error_line(result) == f"error: shelve: no file {str(missing)!r}"
    assert ScheduleStore(app).list() == []


def test_add_refuses_a_naive_or_future_watermark_and_writes_nothing(app: Celery) -> None:
    store = ScheduleStore(app)
    now = datetime.now(UTC)
    for bad in (now.replace(tzinfo=None) - timedelta(hours=1), now + timedelta(hours=1)):
        with pytest.raises(InvalidInput) as info:
            store.add("often", "t.report", every(60), watermark_at=bad)
        assert info.value.field == "watermark_at"
    assert store.list() == []


def test_a_re_import_of_an_enabled_entry_resumes_a_paused_schedule_from_now(
    app: Celery,
) -> None:
    app.conf.beat_schedule = {"often": {"task": "t.report", "schedule": timedelta(minutes=5)}}
    assert gaffer_cli(app, "import", "beat-schedule").exit_code == 0
    ScheduleStore(app).pause("often")
    preview = gaffer_cli(app, "import", "beat-schedule", "--dry-run")
    assert lines_of(preview.stdout)["often"] == (
        "often: changed: gaffer (note: paused here, enabled in the source: resumed from now)"
    )
    assert not ScheduleStore(app).get("often").enabled
    before = datetime.now(UTC)
    assert gaffer_cli(app, "import", "beat-schedule").exit_code == 0
    resumed = ScheduleStore(app).get("often")
    assert resumed.enabled
    assert resumed.watermark_at >= before.replace(microsecond=0)  # nothing of the pause


class Touch:
    """Pickles as a call of ``os.system`` that creates ``path``."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, (f"touch {shlex.quote(str(self.path))}",))


@pytest.mark.parametrize("dry_run", [[], ["--dry-run"]], ids=["apply", "dry-run"])
def test_a_shelve_that_would_run_code_is_refused_and_nothing_runs(
    app: Celery, tmp_path: Path, dry_run: list[str]
) -> None:
    app.conf.beat_schedule = {"often": beat_schedule()["often"]}
    marker = tmp_path / "pwned"
    path = tmp_path / "celerybeat-schedule"
    with shelve.open(str(path), flag="c") as db:
        db["entries"] = {"often": Touch(marker)}
    result = gaffer_cli(app, "import", "beat-schedule", "--shelve", str(path), *dry_run)
    assert error_line(result) == (
        f"error: shelve: refused to load {os.system.__module__}.system from {str(path)!r}: "
        "not a celerybeat-schedule file of Celery's (nothing was read from it)"
    )
    assert not marker.exists()
    assert ScheduleStore(app).list() == []


def nested(depth: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(depth):
        value = [value]
    return value


def test_an_entry_that_fails_unexpectedly_is_refused_alone(app: Celery) -> None:
    app.conf.beat_schedule = {
        "often": beat_schedule()["often"],
        "deep": {"task": "t.report", "schedule": 60, "args": nested(50_000)},
        "odd\x1b[2J" + "x" * 5000: {"task": "t.report", "schedule": object()},
    }
    result = gaffer_cli(app, "import", "beat-schedule")
    assert result.exit_code == 1, (result.stdout, result.stderr)
    lines = result.stdout.splitlines()
    assert lines[0].startswith("often: added")
    assert lines[1].startswith("deep: cannot be mapped: ")
    assert lines[2].startswith(
        "odd\\x1b[2J" + "x" * 193 + "…(4807 more characters): cannot be mapped: "
    )
    assert "\x1b" not in result.stdout
    assert max(len(line) for line in lines) < 1000
    assert lines[-1] == "3 entries: 1 added, 0 changed, 0 unchanged, 2 cannot be mapped"
    assert [s.name for s in ScheduleStore(app).list()] == ["often"]


def test_nothing_is_written_when_the_write_fails(app: Celery, database_url: str) -> None:
    every_minute = {"task": "t.report", "schedule": 60}
    app.conf.beat_schedule = {name: every_minute for name in ("first", "second", "refused_here")}
    with insert_refused(database_url, "refused_here"):
        result = gaffer_cli(app, "import", "beat-schedule")
    assert "refused by the test" in error_line(result)
    assert ScheduleStore(app).list() == []  # not even the two before it


def test_add_all_writes_every_entry_or_none(app: Celery) -> None:
    store = ScheduleStore(app)
    store.add("taken", "t.report", every(60))
    entries = [
        {"name": "new", "task": "t.report", "schedule": every(120)},
        {"name": "taken", "task": "t.report", "schedule": every(300)},
    ]
    with pytest.raises(ScheduleExists):
        store.add_all(entries)
    assert [s.name for s in store.list()] == ["taken"]  # "new" rolled back with it
    entries[1]["replace"] = True
    written = store.add_all(entries)
    assert [(s.name, s.schedule) for s in written] == [("new", every(120)), ("taken", every(300))]
