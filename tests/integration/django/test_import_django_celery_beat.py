"""`gaffer import django-celery-beat` through the real click group: django-celery-beat's
tables migrated by Django on a fresh PostgreSQL database and filled through its own
models; the imported schedules fire when its own Beat (its ModelEntry, on a simulated
clock) would have, through Gaffer's real Beat and a real Redis broker."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any
from zoneinfo import ZoneInfo

import celery
import pytest
import redis
from celery import Celery

from celery_gaffer import Scheduler, ScheduleStore, at, cron, every
from celery_gaffer.cli import import_django  # noqa: F401  # registers the command

from ...support import FrozenClock, gaffer_cli, message_headers
from ..import_support import insert_refused
from ..test_cli_update import error_line
from ..test_import_beat_schedule import lines_of

UTC = timezone.utc
BERLIN = ZoneInfo("Europe/Berlin")


@pytest.fixture(scope="module")
def django_databases(django_project: dict[str, Any]) -> dict[str, str]:
    """django-celery-beat's tables, migrated by Django (project.py) on a fresh PostgreSQL
    database (``default``) and a SQLite file (``lite``), Django configured in this
    process to write them (USE_TZ, the default). Their SQLAlchemy URLs."""
    return {"postgresql": django_project["postgresql"], "sqlite": django_project["sqlite"]}


@pytest.fixture
def django_url(django_databases: dict[str, str]) -> str:
    return django_databases["postgresql"]


@pytest.fixture
def app(database_url: str, redis_url: str, django_url: str) -> Iterator[Celery]:
    app = Celery("import-django-test", broker=redis_url, set_as_current=False)
    app.conf.gaffer_database_url = database_url

    @app.task(name="t.report", shared=False)
    def report(*args: Any, **kwargs: Any) -> None:
        return None

    m = models()
    for model in (m.PeriodicTask, m.CrontabSchedule, m.IntervalSchedule, m.ClockedSchedule):
        model.objects.all().delete()
    m.SolarSchedule.objects.all().delete()
    yield app
    app.close()


def models() -> Any:
    from django_celery_beat import models

    return models


def fill(now: datetime) -> dict[str, Any]:
    """One periodic task of each kind, through django-celery-beat's own models."""
    m = models()
    new_york = m.CrontabSchedule.objects.create(
        minute="15", hour="*/3", timezone="America/New_York"
    )
    berlin = m.CrontabSchedule.objects.create(minute="30", hour="2", timezone="Europe/Berlin")
    hourly = m.CrontabSchedule.objects.create(minute="0", timezone="UTC")
    ninety = m.IntervalSchedule.objects.create(every=90, period=m.IntervalSchedule.MINUTES)
    two_hours = m.IntervalSchedule.objects.create(every=2, period=m.IntervalSchedule.HOURS)
    soon = m.ClockedSchedule.objects.create(
        clocked_time=(now + timedelta(hours=5, seconds=7)).replace(microsecond=0)
    )
    sunset = m.SolarSchedule.objects.create(event="sunset", latitude=51.5, longitude=-0.12)
    last_ny = cron("15 */3 * * *", "America/New_York").last_at_or_before(now)
    tasks = {
        "ny-report": m.PeriodicTask.objects.create(
            name="ny-report",
            task="t.report",
            crontab=new_york,
            args='["daily"]',
            kwargs='{"full": true}',
            queue="reports",
            priority=5,
            headers='{"tenant": "acme"}',
            expire_seconds=600,
            last_run_at=last_ny,
        ),
        "berlin-night": m.PeriodicTask.objects.create(
            name="berlin-night", task="t.report", crontab=berlin
        ),
        "hourly-until": m.PeriodicTask.objects.create(
            name="hourly-until",
            task="t.report",
            crontab=hourly,
            expires=now + timedelta(hours=20),
        ),
        "poll": m.PeriodicTask.objects.create(
            name="poll",
            task="t.report",
            interval=ninety,
            last_run_at=(now - timedelta(minutes=20)).replace(microsecond=0),
        ),
        "once-later": m.PeriodicTask.objects.create(
            name="once-later",
            task="t.report",
            interval=two_hours,
            one_off=True,
            start_time=(now + timedelta(hours=1)).replace(microsecond=0),
        ),
        "clocked": m.PeriodicTask.objects.create(
            name="clocked", task="t.report", clocked=soon, one_off=True
        ),
        "paused": m.PeriodicTask.objects.create(
            name="paused", task="t.report", interval=ninety, enabled=False
        ),
        "sunset": m.PeriodicTask.objects.create(name="sunset", task="t.report", solar=sunset),
        "unknown-task": m.PeriodicTask.objects.create(
            name="unknown-task", task="t.nope", interval=ninety
        ),
        "bad-args": m.PeriodicTask.objects.create(
            name="bad-args", task="t.report", interval=ninety, args="[1,"
        ),
    }
    return tasks


def test_dry_run_prints_the_diff_and_writes_nothing(app: Celery, django_url: str) -> None:
    now = datetime.now(UTC)
    fill(now)
    result = gaffer_cli(
        app, "import", "django-celery-beat", "--database-url", django_url, "--dry-run"
    )
    assert result.exit_code == 1, (result.stdout, result.stderr)
    lines = lines_of(result.stdout)
    assert lines["ny-report"].startswith(
        "ny-report: added: t.report, cron('15 */3 * * *', tz='America/New_York'), last run "
    )
    assert "from django-celery-beat" in lines["ny-report"]
    assert lines["berlin-night"].startswith("berlin-night: added: t.report, cron('30 2 * * *'")
    assert "clock changes in Europe/Berlin skip 02:00-03:00" in lines["berlin-night"]
    assert "repeat 02:00-03:00" in lines["berlin-night"]
    assert "(never ran: date_changed, where its Beat starts)" in lines["berlin-night"]
    assert lines["poll"].startswith("poll: added: t.report, every(5400, anchor=")
    assert "(note: anchored at its last run" in lines["poll"]
    assert lines["clocked"].startswith("clocked: added: t.report, at(")
    assert lines["paused"].endswith("; disabled: imported paused)")
    assert lines["sunset"] == (
        "sunset: cannot be mapped: solar: solar events are not supported "
        "(sunset at 51.500000, -0.120000)"
    )
    assert lines["unknown-task"] == (
        "unknown-task: cannot be mapped: task: 't.nope' is not a task registered with this app"
    )
    assert lines["bad-args"].startswith("bad-args: cannot be mapped: args: not valid JSON")
    assert lines["summary"] == (
        "10 entries: 7 added, 0 changed, 0 unchanged, 3 cannot be mapped (dry run: nothing written)"
    )
    assert ScheduleStore(app).list() == []


def test_apply_writes_and_a_second_apply_changes_nothing(app: Celery, django_url: str) -> None:
    now = datetime.now(UTC)
    rows = fill(now)
    first = gaffer_cli(app, "import", "django-celery-beat", "--database-url", django_url)
    assert first.exit_code == 1, (first.stdout, first.stderr)
    assert lines_of(first.stdout)["summary"] == (
        "10 entries: 7 added, 0 changed, 0 unchanged, 3 cannot be mapped"
    )
    stored = {s.name: s for s in ScheduleStore(app).list()}
    assert set(stored) == {
        "ny-report",
        "berlin-night",
        "hourly-until",
        "poll",
        "once-later",
        "clocked",
        "paused",
    }
    ny = stored["ny-report"]
    assert ny.schedule == cron("15 */3 * * *", "America/New_York")
    assert (ny.args, ny.kwargs) == (["daily"], {"full": True})
    assert ny.options == {
        "queue": "reports",
        "priority": 5,
        "expires": 600,
        "headers": {"tenant": "acme", "periodic_task_name": "ny-report"},
    }
    assert ny.watermark_at == rows["ny-report"].last_run_at
    poll_run = rows["poll"].last_run_at
    assert stored["poll"].schedule == every(5400, anchor=poll_run)
    assert stored["poll"].watermark_at == poll_run
    assert stored["clocked"].schedule == at(rows["clocked"].clocked.clocked_time)
    assert not stored["paused"].enabled
    assert {s.source for s in stored.values()} == {"db"}
    policies = {name: s.policy for name, s in stored.items()}
    once = policies["once-later"]
    assert (once.bounds.start_at, once.bounds.max_runs) == (rows["once-later"].start_time, 1)
    until = policies["hourly-until"].bounds
    assert until.end_at == rows["hourly-until"].expires - timedelta(microseconds=1)

    second = gaffer_cli(app, "import", "django-celery-beat", "--database-url", django_url)
    assert second.exit_code == 1, second.stderr
    lines = lines_of(second.stdout)
    assert lines["ny-report"].startswith("ny-report: unchanged")
    assert lines["summary"] == "10 entries: 0 added, 0 changed, 7 unchanged, 3 cannot be mapped"
    assert {s.name: s for s in ScheduleStore(app).list()} == stored  # nothing rewritten

    task = rows["ny-report"]
    task.args = '["weekly"]'
    task.crontab = models().CrontabSchedule.objects.create(
        minute="45", hour="*/3", timezone="America/New_York"
    )
    task.save()
    preview = gaffer_cli(
        app, "import", "django-celery-beat", "--database-url", django_url, "--dry-run"
    )
    assert lines_of(preview.stdout)["ny-report"] == "ny-report: changed: schedule, args"
    assert ScheduleStore(app).get("ny-report").args == ["daily"]
    third = gaffer_cli(app, "import", "django-celery-beat", "--database-url", django_url)
    assert lines_of(third.stdout)["ny-report"] == "ny-report: changed: schedule, args"
    assert ScheduleStore(app).get("ny-report").schedule == cron("45 */3 * * *", "America/New_York")


def their_fires(
    model: Any,
    app: Celery,
    start: datetime,
    end: datetime,
    last_run_at: datetime | None = None,
    max_interval: float = 600,
) -> list[datetime]:
    """When django-celery-beat's own Beat sends ``model`` between start and end: its
    ModelEntry's is_due (start_time, expires, one_off, the schedule's is_due) asked on a
    simulated clock, sending when due as its scheduler does, and asking again after the
    wait is_due gives, at most ``max_interval`` (its DatabaseScheduler's is 5 s). Rolled
    back after."""
    from django.db import transaction
    from django_celery_beat.schedulers import ModelEntry

    clock = FrozenClock(start)

    def entry_of(model: Any) -> Any:
        entry = ModelEntry(model, app=app)
        entry._default_now = lambda: clock.now.astimezone(app.timezone)
        zone = getattr(entry.schedule, "tz", UTC) if hasattr(entry.schedule, "nowfunc") else UTC
        entry.schedule.nowfun = lambda: clock.now.astimezone(zone)
        return entry

    fires: list[datetime] = []
    with transaction.atomic():
        model = type(model).objects.get(pk=model.pk)
        if last_run_at is not None:
            model.last_run_at = last_run_at
        if model.enabled:  # its scheduler loads enabled rows only
            entry = entry_of(model)
            while clock.now < end:
                due, wait = entry.is_due()
                if due:
                    fires.append(_second(clock.now))
                    entry = entry_of(next(entry).model)
                    continue
                clock.advance(min(max(wait, 0.001), max_interval))
        transaction.set_rollback(True)
    return fires


def all_headers(redis_url: str) -> list[dict[str, Any]]:
    """The headers of every message in every queue (kombu keeps each priority of a queue
    in a list of its own: ``reports\\x06\\x166``)."""
    client = redis.Redis.from_url(redis_url)
    try:
        lists = [key for key in client.scan_iter() if client.type(key) == b"list"]
    finally:
        client.close()
    return [h for key in lists for h in message_headers(redis_url, key.decode())]


def gaffer_fires(
    app: Celery, redis_url: str, theirs: dict[str, list[datetime]], start: datetime, end: datetime
) -> dict[str, list[datetime]]:
    """The nominal times Gaffer's real Beat sends each schedule of ``theirs`` between
    start and end, ticked at each of their fires, each of its own and every hour."""
    stored = {s.name: s for s in ScheduleStore(app).list() if s.name in theirs}
    moments = {start + timedelta(hours=h) for h in range(int((end - start) / timedelta(hours=1)))}
    moments |= {fire for fires in theirs.values() for fire in fires}
    for schedule in stored.values():
        assert schedule.schedule is not None
        moments |= set(schedule.schedule.fires_between(start, end))
    clock = FrozenClock(start)
    beat = Scheduler(app, clock=clock)
    for moment in sorted(m for m in moments if start <= m <= end):
        clock.now = moment
        beat.tick()
    sent: dict[str, list[datetime]] = {name: [] for name in theirs}
    for headers in all_headers(redis_url):
        nominal = headers["gaffer_nominal_at"].replace("Z", "+00:00")
        if headers["gaffer_schedule"] in sent:
            sent[headers["gaffer_schedule"]].append(datetime.fromisoformat(nominal))
    return {name: sorted(fires) for name, fires in sent.items()}


def _second(moment: datetime) -> datetime:
    return (moment + timedelta(microseconds=500_000)).replace(microsecond=0).astimezone(UTC)


def test_imported_schedules_fire_when_its_beat_would_have(
    app: Celery, django_url: str, redis_url: str
) -> None:
    now = datetime.now(UTC)
    rows = fill(now)
    result = gaffer_cli(app, "import", "django-celery-beat", "--database-url", django_url)
    assert result.exit_code == 1, result.stderr
    start = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=1)
    end = start + timedelta(hours=36)
    app.conf.timezone = "UTC"
    # berlin-night differs on DST days (asserted in the next test): left out here, so
    # that this test holds on any date.
    theirs = {
        name: their_fires(model, app, start, end)
        for name, model in rows.items()
        if name in {s.name for s in ScheduleStore(app).list()} - {"berlin-night"}
    }
    assert gaffer_fires(app, redis_url, theirs, start, end) == theirs
    # The window holds what each row is about.
    assert 11 <= len(theirs["ny-report"]) <= 13  # 12, but on a New York DST day
    assert len(theirs["poll"]) == 24
    assert theirs["clocked"] == [rows["clocked"].clocked.clocked_time]
    assert theirs["once-later"] == [rows["once-later"].start_time]
    assert len(theirs["hourly-until"]) in (19, 20)
    assert theirs["paused"] == []


CELERY_VERSION = tuple(int(part) for part in celery.__version__.split(".")[:2])


def test_a_dst_day_where_gaffer_and_its_beat_differ(app: Celery, django_url: str) -> None:
    """02:30 Europe/Berlin. On the spring-forward day (2027-03-28) 02:30 does not exist:
    its Beat (Celery's crontab) fires at 03:30 CEST, Gaffer at 03:00 CEST, the first
    instant after the gap (docs/dst.md); the import's note says so. On the fall-back day
    (2027-10-31) 02:30 happens twice: both fire once, at the first."""
    rows = fill(datetime.now(UTC))
    result = gaffer_cli(app, "import", "django-celery-beat", "--database-url", django_url)
    assert (
        "clock changes in Europe/Berlin skip 02:00-03:00" in lines_of(result.stdout)["berlin-night"]
    )
    ours = ScheduleStore(app).get("berlin-night").schedule
    assert ours is not None

    def both(start: datetime) -> tuple[list[datetime], list[datetime]]:
        end = start + timedelta(days=3)
        theirs = their_fires(rows["berlin-night"], app, start, end, last_run_at=start)
        return theirs, list(ours.fires_between(start, end))

    def local(day: int, hour: int, month: int = 3) -> datetime:
        return datetime(2027, month, day, hour, 30, tzinfo=BERLIN).astimezone(UTC)

    theirs, gaffers = both(datetime(2027, 3, 27, tzinfo=UTC))
    assert gaffers == [local(27, 2), local(28, 3) - timedelta(minutes=30), local(29, 2)]
    if CELERY_VERSION >= (5, 5):
        assert theirs == [local(27, 2), local(28, 3), local(29, 2)]
    else:  # Celery 5.4 (make test-lowest) lands on the gap's end too
        assert theirs == gaffers
    theirs, gaffers = both(datetime(2027, 10, 30, tzinfo=UTC))
    first_0230 = datetime(2027, 10, 31, 0, 30, tzinfo=UTC)  # 02:30 CEST, before 02:30 CET
    assert theirs == gaffers == [local(30, 2, 10), first_0230, local(1, 2, 11)]


def test_a_start_time_where_its_beat_sends_one_early_fire(
    app: Celery, django_url: str, redis_url: str
) -> None:
    """A crontab task that never ran, with a start_time: its Beat treats it as overdue
    (last run 30 years back) and sends it once as soon as start_time passes, between two
    crontab times; Gaffer's first fire is the first crontab time at or after start_at."""
    m = models()
    start = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=1)
    begins = start + timedelta(hours=1, seconds=17)
    if begins.hour == 3:  # not near its crontab time (03:07), where the early fire is it
        begins += timedelta(hours=1)
    daily = m.CrontabSchedule.objects.create(minute="7", hour="3", timezone="UTC")
    m.PeriodicTask.objects.create(name="later", task="t.report", crontab=daily, start_time=begins)
    result = gaffer_cli(app, "import", "django-celery-beat", "--database-url", django_url)
    assert result.exit_code == 0, result.stderr
    app.conf.timezone = "UTC"
    end = start + timedelta(hours=26)
    row = m.PeriodicTask.objects.get(name="later")
    theirs = their_fires(row, app, start, end, max_interval=5)
    crontab_times = list(cron("7 3 * * *").fires_between(begins, end))
    assert crontab_times
    assert len(theirs) == 1 + len(crontab_times)
    assert begins <= theirs[0] <= begins + timedelta(seconds=5)  # its next check after it
    assert theirs[1:] == crontab_times
    assert gaffer_fires(app, redis_url, {"later": theirs}, start, end) == {"later": crontab_times}


def test_its_cleanup_entry_and_a_one_off_that_ran_fire_as_with_its_beat(
    app: Celery, django_url: str, redis_url: str
) -> None:
    """The ``celery.backend_cleanup`` row its Beat writes (install_default_entries) imports
    like any other; a one-off that already ran (its Beat disables it at the next check)
    keeps its enabled flag and ends at its last run, so it never fires again."""
    from celery.schedules import crontab
    from django_celery_beat.schedulers import ModelEntry

    app.conf.timezone = "UTC"
    ModelEntry.from_entry(
        "celery.backend_cleanup",
        app=app,
        task="celery.backend_cleanup",
        schedule=crontab("0", "4", "*", app=app),
        options={"expire_seconds": 12 * 3600},
    )
    m = models()
    now = datetime.now(UTC)
    ran = (now - timedelta(minutes=10)).replace(microsecond=0)
    hourly = m.IntervalSchedule.objects.create(every=1, period=m.IntervalSchedule.HOURS)
    m.PeriodicTask.objects.create(
        name="ran-once", task="t.report", interval=hourly, one_off=True, last_run_at=ran
    )
    m.PeriodicTask.objects.filter(name="ran-once").update(total_run_count=1)
    result = gaffer_cli(app, "import", "django-celery-beat", "--database-url", django_url)
    assert result.exit_code == 0, result.stderr
    lines = lines_of(result.stdout)
    assert lines["celery.backend_cleanup"].startswith(
        "celery.backend_cleanup: added: celery.backend_cleanup, cron('0 4 * * *'"
    )
    assert "one_off that already ran: ends at its last run" in lines["ran-once"]
    cleanup = ScheduleStore(app).get("celery.backend_cleanup")
    assert cleanup.options == {
        "expires": 43200,
        "headers": {"periodic_task_name": "celery.backend_cleanup"},
    }
    once = ScheduleStore(app).get("ran-once")
    assert once.enabled
    assert (once.policy.bounds.max_runs, once.policy.bounds.end_at) == (1, ran)
    start = now.replace(microsecond=0) + timedelta(seconds=1)
    end = start + timedelta(days=2)
    theirs = {
        name: their_fires(m.PeriodicTask.objects.get(name=name), app, start, end)
        for name in ("celery.backend_cleanup", "ran-once")
    }
    assert len(theirs["celery.backend_cleanup"]) == 2
    assert theirs["ran-once"] == []
    assert gaffer_fires(app, redis_url, theirs, start, end) == theirs


def test_a_sqlite_database_holds_naive_utc_times(
    app: Celery, django_databases: dict[str, str]
) -> None:
    """Django (USE_TZ) stores naive UTC in SQLite: read back as the same instants."""
    m = models()
    for model in (m.PeriodicTask, m.IntervalSchedule):
        model.objects.using("lite").all().delete()
    ran = (datetime.now(UTC) - timedelta(minutes=3)).replace(microsecond=0)
    interval = m.IntervalSchedule(every=10, period=m.IntervalSchedule.MINUTES)
    interval.save(using="lite")
    until = ran + timedelta(days=3, microseconds=250)
    m.PeriodicTask(
        name="lite-poll", task="t.report", interval=interval, last_run_at=ran, expires=until
    ).save(using="lite")
    url = django_databases["sqlite"]
    result = gaffer_cli(app, "import", "django-celery-beat", "--database-url", url)
    assert result.exit_code == 0, result.stderr
    assert lines_of(result.stdout)["summary"] == (
        "1 entries: 1 added, 0 changed, 0 unchanged, 0 cannot be mapped"
    )
    stored = ScheduleStore(app).get("lite-poll")
    assert stored.schedule == every(600, anchor=ran)
    assert stored.watermark_at == ran
    assert stored.policy.bounds.end_at == until - timedelta(microseconds=1)


def test_an_unreachable_url_is_one_line_with_the_password_masked(app: Celery) -> None:
    url = "postgresql+psycopg://gaffer:s3cret@127.0.0.1:1/nope"
    line = error_line(gaffer_cli(app, "import", "django-celery-beat", "--database-url", url))
    assert line.startswith(
        "error: --database-url: cannot read django-celery-beat's tables from "
        "postgresql+psycopg://gaffer:***@127.0.0.1:1/nope: "
    )
    assert "s3cret" not in line
    assert ScheduleStore(app).list() == []


def test_a_database_without_its_tables_says_so(app: Celery, tmp_path: Any) -> None:
    empty = tmp_path / "empty.sqlite3"
    empty.write_bytes(b"")
    line = error_line(
        gaffer_cli(app, "import", "django-celery-beat", "--database-url", f"sqlite:///{empty}")
    )
    assert "django-celery-beat tables not found in sqlite:///" in line
    assert line.endswith(": run its migrations or check the URL")
    missing = tmp_path / "missing.sqlite3"
    line = error_line(
        gaffer_cli(app, "import", "django-celery-beat", "--database-url", f"sqlite:///{missing}")
    )
    assert "cannot read django-celery-beat's tables" in line
    assert not missing.exists()  # never created


def raw_sql(alias: str, *statements: str) -> None:
    """Statements through Django's own connection (what no model save would write)."""
    from django.db import connections

    with connections[alias].cursor() as cursor:
        for statement in statements:
            cursor.execute(statement)


DEEP_ARGS = "[" * 50_000 + "]" * 50_000


def test_bad_rows_are_refused_one_by_one_and_the_good_ones_imported(
    app: Celery, django_url: str
) -> None:
    """Rows its Beat would choke on, among good ones: each is "cannot be mapped" with its
    reason, only it; the others are imported; exit status 1."""
    m = models()
    hourly = m.CrontabSchedule.objects.create(minute="0", timezone="UTC")
    doubled = m.CrontabSchedule.objects.create(minute="1,,2", timezone="UTC")
    no_minute = m.CrontabSchedule.objects.create(minute="5", timezone="UTC")
    ten = m.IntervalSchedule.objects.create(every=10, period=m.IntervalSchedule.MINUTES)
    no_every = m.IntervalSchedule.objects.create(every=3, period=m.IntervalSchedule.MINUTES)
    m.PeriodicTask.objects.create(name="good-cron", task="t.report", crontab=hourly)
    m.PeriodicTask.objects.create(name="doubled-comma", task="t.report", crontab=doubled)
    m.PeriodicTask.objects.create(name="null-minute", task="t.report", crontab=no_minute)
    m.PeriodicTask.objects.create(name="null-every", task="t.report", interval=no_every)
    m.PeriodicTask.objects.create(name="deep-args", task="t.report", interval=ten, args=DEEP_ARGS)
    m.PeriodicTask.objects.create(
        name="escape\x1b[2J", task="t.report", interval=ten, kwargs="{\x1b[31m"
    )
    m.PeriodicTask.objects.create(name="good-interval", task="t.report", interval=ten)
    # Django never writes NULL there: as a hand edit (or another tool) would leave them.
    crontab_table = m.CrontabSchedule._meta.db_table
    interval_table = m.IntervalSchedule._meta.db_table
    raw_sql(
        "default",
        f"ALTER TABLE {crontab_table} ALTER COLUMN minute DROP NOT NULL",
        f"ALTER TABLE {interval_table} ALTER COLUMN every DROP NOT NULL",
        f"UPDATE {crontab_table} SET minute = NULL WHERE id = {no_minute.id}",
        f"UPDATE {interval_table} SET every = NULL WHERE id = {no_every.id}",
    )
    try:
        result = gaffer_cli(app, "import", "django-celery-beat", "--database-url", django_url)
    finally:
        m.PeriodicTask.objects.all().delete()
        raw_sql(
            "default",
            f"DELETE FROM {crontab_table}",
            f"DELETE FROM {interval_table}",
            f"ALTER TABLE {crontab_table} ALTER COLUMN minute SET NOT NULL",
            f"ALTER TABLE {interval_table} ALTER COLUMN every SET NOT NULL",
        )
    assert result.exit_code == 1, (result.stdout, result.stderr)
    assert "\x1b" not in result.stdout
    lines = lines_of(result.stdout)
    assert lines["doubled-comma"] == (
        "doubled-comma: cannot be mapped: crontab: minute '1,,2': empty part"
    )
    assert lines["null-minute"] == "null-minute: cannot be mapped: crontab: minute None is not text"
    assert lines["null-every"] == (
        "null-every: cannot be mapped: interval: every None is not a whole number"
    )
    assert lines["deep-args"] == (
        "deep-args: cannot be mapped: args: JSON nested deeper than 64 levels"
    )
    assert lines["escape\\x1b[2J"].startswith(
        "escape\\x1b[2J: cannot be mapped: kwargs: not valid JSON"
    )
    assert lines["good-cron"].startswith("good-cron: added: t.report, cron('0 * * * *'")
    assert lines["summary"] == "7 entries: 2 added, 0 changed, 0 unchanged, 5 cannot be mapped"
    assert {s.name for s in ScheduleStore(app).list()} == {"good-cron", "good-interval"}


def test_an_unparseable_sqlite_date_refuses_only_its_row(
    app: Celery, django_databases: dict[str, str]
) -> None:
    m = models()
    tables = [model._meta.db_table for model in (m.PeriodicTask, m.IntervalSchedule)]
    tables.append(m.ClockedSchedule._meta.db_table)
    # Raw deletes: Django itself cannot load a row whose date does not parse.
    raw_sql("lite", *(f"DELETE FROM {table}" for table in tables))
    interval = m.IntervalSchedule(every=10, period=m.IntervalSchedule.MINUTES)
    interval.save(using="lite")
    clocked = m.ClockedSchedule(clocked_time=datetime.now(UTC) + timedelta(days=1))
    clocked.save(using="lite")
    for name in ("bad-date", "good", "bad-clock"):
        task = m.PeriodicTask(name=name, task="t.report", interval=interval)
        if name == "bad-clock":
            task = m.PeriodicTask(name=name, task="t.report", clocked=clocked, one_off=True)
        task.save(using="lite")
    raw_sql(
        "lite",
        "UPDATE django_celery_beat_periodictask SET last_run_at = 'last tuesday' "
        "WHERE name = 'bad-date'",
        f"UPDATE django_celery_beat_clockedschedule SET clocked_time = '2027-13-45 99:00' "
        f"WHERE id = {clocked.id}",
    )
    url = django_databases["sqlite"]
    try:
        result = gaffer_cli(app, "import", "django-celery-beat", "--database-url", url)
    finally:
        raw_sql("lite", *(f"DELETE FROM {table}" for table in tables))
    assert result.exit_code == 1, (result.stdout, result.stderr)
    lines = lines_of(result.stdout)
    assert lines["bad-date"] == (
        "bad-date: cannot be mapped: last_run_at: not a date: 'last tuesday'"
    )
    assert lines["bad-clock"] == (
        "bad-clock: cannot be mapped: clocked_time: not a date: '2027-13-45 99:00'"
    )
    assert lines["summary"] == "3 entries: 1 added, 0 changed, 0 unchanged, 2 cannot be mapped"
    assert [s.name for s in ScheduleStore(app).list()] == ["good"]


def test_nothing_is_written_when_the_write_fails(
    app: Celery, django_url: str, database_url: str
) -> None:
    m = models()
    ten = m.IntervalSchedule.objects.create(every=10, period=m.IntervalSchedule.MINUTES)
    for name in ("first", "second", "refused_here"):
        m.PeriodicTask.objects.create(name=name, task="t.report", interval=ten)
    with insert_refused(database_url, "refused_here"):
        result = gaffer_cli(app, "import", "django-celery-beat", "--database-url", django_url)
    assert "refused by the test" in error_line(result)
    assert ScheduleStore(app).list() == []  # not even the two before it
