"""`gaffer import redbeat` through the real click group, a real app and real databases,
reading entries that celery-redbeat itself wrote into the test Redis; fire times are
compared with the schedules redbeat loads back (Celery's crontab and schedule, dateutil's
rrule)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any
from zoneinfo import ZoneInfo

import celery
import pytest
import redis
from celery import Celery
from celery.schedules import crontab, schedule, solar
from redbeat.schedulers import RedBeatSchedulerEntry
from redbeat.schedules import rrule

import celery_gaffer.cli.import_redbeat  # noqa: F401 - registers `import redbeat`
from celery_gaffer import ScheduleStore, at, cron, every
from celery_gaffer.schedules.kinds import Every

from ..support import empty_redis
from .import_support import insert_refused
from .test_cli_update import error_line, gaffer_cli

UTC = timezone.utc
LONDON = ZoneInfo("Europe/London")
YEAR_START = datetime(2027, 1, 1, tzinfo=UTC)
YEAR_END = datetime(2028, 1, 1, tzinfo=UTC)
LAST_RUN = datetime(2026, 11, 30, 10, 0, 7, tzinfo=UTC)
# A bounded rrule: every two hours from 09:00 +01:00, five occurrences.
BOUNDED_START = datetime(2027, 1, 4, 9, 0, tzinfo=timezone(timedelta(hours=1)))


@pytest.fixture
def app(database_url: str, redis_url: str) -> Iterator[Celery]:
    app = Celery("redbeat-import-test", broker=redis_url, set_as_current=False)
    app.conf.gaffer_database_url = database_url
    app.conf.redbeat_redis_url = redis_url
    app.conf.timezone = "Europe/London"

    @app.task(name="t.report", shared=False)
    def report(*args: Any, **kwargs: Any) -> None:
        return None

    yield app
    app.close()
    empty_redis(redis_url)


def save(app: Celery, name: str, value: Any, **kwargs: Any) -> RedBeatSchedulerEntry:
    """An entry saved by redbeat itself (as its API, or its Beat for static entries, does)."""
    task = kwargs.pop("task", "t.report")
    return RedBeatSchedulerEntry(name, task, value, app=app, **kwargs).save()


def redbeat_entries(app: Celery) -> None:
    save(
        app,
        "nightly",
        crontab(minute=30, hour=1),
        args=["daily"],
        options={"queue": "reports", "priority": 5},
    )
    save(app, "often", timedelta(minutes=5)).reschedule(last_run_at=LAST_RUN)
    save(app, "paused", crontab(minute=0, hour=9), enabled=False)
    once = datetime(2027, 6, 1, 9, 0, tzinfo=timezone(timedelta(hours=1)))
    save(app, "once", rrule("MINUTELY", dtstart=once, count=1))
    save(app, "bounded", rrule("HOURLY", interval=2, dtstart=BOUNDED_START, count=5))
    save(app, "workdays", rrule("DAILY", byweekday=[0, 1, 2, 3, 4], byhour=9))
    save(app, "hourly-relative", schedule(timedelta(hours=1), relative=True))
    save(app, "ghost", timedelta(minutes=1), task="t.missing")


def lines_of(stdout: str) -> dict[str, str]:
    lines = stdout.strip().splitlines()
    return {line.split(":", 1)[0]: line for line in lines[:-1]} | {"summary": lines[-1]}


def test_redbeat_cannot_store_a_solar_and_a_foreign_one_is_not_mapped(
    app: Celery, redis_url: str
) -> None:
    sunset = solar.__new__(solar)  # solar's __init__ needs ephem; redbeat fails before it
    with pytest.raises(TypeError, match="solar is not JSON serializable"):
        save(app, "sunset", sunset, last_run_at=LAST_RUN)
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    assert client.exists("redbeat:sunset") == 0  # nothing written
    # One written by something else (or by hand), and one whose JSON does not parse.
    client.hset(
        "redbeat:sunset",
        "definition",
        '{"name": "sunset", "task": "t.report", '
        '"schedule": {"__type__": "solar", "event": "sunset"}}',
    )
    client.hset("redbeat:broken", "definition", "{not json")
    client.zadd("redbeat::schedule", {"redbeat:sunset": 1, "redbeat:broken": 2})
    client.close()
    result = gaffer_cli(app, "import", "redbeat", "--dry-run")
    assert result.exit_code == 1, (result.stdout, result.stderr)
    lines = lines_of(result.stdout)
    assert lines["sunset"] == (
        "sunset: cannot be mapped: schedule: not a redbeat schedule: 'solar' "
        "(redbeat's encoder has no solar: it cannot store one)"
    )
    assert lines["broken"].startswith(
        "broken: cannot be mapped: definition: not valid JSON (Expecting property name"
    )


def test_dry_run_prints_the_diff_and_writes_nothing(app: Celery) -> None:
    redbeat_entries(app)
    result = gaffer_cli(app, "import", "redbeat", "--dry-run")
    assert result.exit_code == 1, (result.stdout, result.stderr)
    lines = lines_of(result.stdout)
    assert lines["nightly"].startswith("nightly: added: t.report, cron('30 1 * * *', tz='Europe")
    assert (
        "from redbeat (note: touches local times that clock changes in Europe/London"
        in (lines["nightly"])
    )
    assert lines["often"] == (
        "often: added: t.report, every(300, anchor='2026-11-30T10:00:07+00:00'), last run "
        "2026-11-30T10:00:07+00:00 from redbeat (note: anchored at redbeat's last run "
        "2026-11-30T10:00:07+00:00: redbeat runs each interval from its last send "
        "(drifting by Beat's delay), Gaffer keeps that phase)"
    )
    assert lines["paused"].startswith("paused: added: t.report, cron('0 9 * * *'")
    assert lines["once"].startswith("once: added: t.report, at('2027-06-01T08:00:00+00:00')")
    assert lines["bounded"].startswith(
        "bounded: added: t.report, every(7200, anchor='2027-01-04T08:00:00+00:00')"
    )
    assert lines["bounded"].endswith(
        "(note: rrule HOURLY interval 2 is elapsed time (redbeat stores dtstart as a fixed "
        "UTC offset): from start_at 2027-01-04T08:00:00+00:00 to end_at "
        "2027-01-04T16:00:00+00:00)"
    )
    assert lines["workdays"] == (
        "workdays: cannot be mapped: schedule: rrule byweekday, byhour is a calendar rule "
        "Gaffer cannot express exactly (mapped: a single occurrence, or SECONDLY to "
        "WEEKLY without by-rules)"
    )
    assert lines["hourly-relative"].startswith(
        "hourly-relative: cannot be mapped: schedule: relative=True: Celery rounds each "
    )
    assert lines["ghost"] == (
        "ghost: cannot be mapped: task: 't.missing' is not a task registered with this app"
    )
    assert lines["summary"] == (
        "8 entries: 5 added, 0 changed, 0 unchanged, 3 cannot be mapped (dry run: nothing written)"
    )
    assert ScheduleStore(app).list() == []


def test_apply_writes_a_second_run_changes_nothing_and_a_change_names_its_fields(
    app: Celery,
) -> None:
    redbeat_entries(app)
    first = gaffer_cli(app, "import", "redbeat")
    assert first.exit_code == 1, (first.stdout, first.stderr)
    assert lines_of(first.stdout)["summary"] == (
        "8 entries: 5 added, 0 changed, 0 unchanged, 3 cannot be mapped"
    )
    stored = {s.name: s for s in ScheduleStore(app).list()}
    assert set(stored) == {"nightly", "often", "paused", "once", "bounded"}
    assert stored["nightly"].schedule == cron("30 1 * * *", "Europe/London")
    assert stored["nightly"].args == ["daily"]
    assert stored["nightly"].options == {"queue": "reports", "priority": 5}
    assert stored["often"].schedule == every(300, anchor=LAST_RUN)
    assert stored["often"].watermark_at == LAST_RUN  # last_run_at: the watermark
    assert stored["often"].next_fire_at == LAST_RUN + timedelta(minutes=5)
    assert (stored["paused"].enabled, stored["nightly"].enabled) == (False, True)
    assert stored["once"].schedule == at(datetime(2027, 6, 1, 8, 0, tzinfo=UTC))
    bounds = stored["bounded"].policy.bounds
    assert (bounds.start_at, bounds.end_at) == (
        BOUNDED_START,
        BOUNDED_START + timedelta(hours=8),  # the fifth occurrence, inclusive
    )
    assert {s.source for s in stored.values()} == {"db"}

    # redbeat's Beat runs "often" twice more: its last run moves, its phase does not.
    RedBeatSchedulerEntry.from_key("redbeat:often", app=app).reschedule(
        last_run_at=LAST_RUN + timedelta(minutes=10)
    )
    second = gaffer_cli(app, "import", "redbeat")
    assert second.exit_code == 1, second.stderr
    lines = lines_of(second.stdout)
    assert lines["often"].startswith("often: unchanged")
    assert lines["summary"] == "8 entries: 0 added, 0 changed, 5 unchanged, 3 cannot be mapped"
    assert {s.name: s for s in ScheduleStore(app).list()} == stored  # nothing rewritten

    save(
        app,
        "nightly",
        crontab(minute=30, hour=1),
        args=["weekly"],
        options={"queue": "reports", "priority": 5},
    )
    save(app, "paused", crontab(minute=0, hour=10), enabled=True)
    preview = gaffer_cli(app, "import", "redbeat", "--dry-run")
    lines = lines_of(preview.stdout)
    assert lines["nightly"].startswith("nightly: changed: args (note: ")
    assert lines["paused"] == (
        "paused: changed: schedule, gaffer "
        "(note: paused here, enabled in the source: resumed from now)"
    )
    assert ScheduleStore(app).get("nightly").args == ["daily"]
    third = gaffer_cli(app, "import", "redbeat")
    assert lines_of(third.stdout)["paused"] == (
        "paused: changed: schedule, gaffer "
        "(note: paused here, enabled in the source: resumed from now)"
    )
    assert ScheduleStore(app).get("nightly").args == ["weekly"]
    assert ScheduleStore(app).get("paused").enabled is True


def redbeat_fires(app: Celery, name: str, start: datetime, end: datetime) -> list[datetime]:
    """The instants redbeat's Beat would send ``name`` at, from ``start`` to ``end``: the
    entry loaded back by redbeat, each next due time from its schedule's own
    ``remaining_estimate`` (a Beat without delay: each send's last_run_at is its due time)."""
    value = RedBeatSchedulerEntry.from_key(f"redbeat:{name}", app=app).schedule
    now = [start]
    value.nowfun = lambda: now[0]
    fires = []
    t = start
    while True:
        now[0] = t
        remaining = value.remaining_estimate(t)
        if remaining is None:  # an rrule with no occurrence left
            return fires
        t = (t + remaining).astimezone(UTC)
        if t > end:
            return fires
        fires.append(t)


def gaffer_fires(app: Celery, name: str, start: datetime, end: datetime) -> list[datetime]:
    """The fires of the imported schedule in ``(start, end]``, through its bounds."""
    row = ScheduleStore(app).get(name)
    assert row.schedule is not None
    window = row.policy.bounds.window(row.schedule, fired=0, watermark=start)
    return list(window.fires_between(start, end))


def test_imported_schedules_fire_when_redbeat_would(app: Celery) -> None:
    redbeat_entries(app)
    # A daily rrule from a London winter morning, until June: redbeat stores dtstart as
    # its UTC offset, so its Beat runs it at 09:00Z all year (10:00 BST in summer).
    winter = datetime(2027, 1, 4, 9, 0, tzinfo=LONDON)
    june = datetime(2027, 6, 1, tzinfo=LONDON)
    save(app, "daily", rrule("DAILY", dtstart=winter, until=june))
    assert gaffer_cli(app, "import", "redbeat").exit_code == 1

    # Interval: the same instants, from redbeat's last run on.
    day_end = LAST_RUN + timedelta(days=2)
    often = redbeat_fires(app, "often", LAST_RUN, day_end)
    assert len(often) == 576
    assert gaffer_fires(app, "often", LAST_RUN, day_end) == often

    # rrule: every occurrence, and nothing after the last one (count=5).
    before = BOUNDED_START - timedelta(days=1)
    bounded = redbeat_fires(app, "bounded", before, YEAR_END)
    assert bounded == [BOUNDED_START + timedelta(hours=2 * k) for k in range(5)]
    assert gaffer_fires(app, "bounded", before, YEAR_END) == bounded
    once = redbeat_fires(app, "once", YEAR_START, YEAR_END)
    assert once == [datetime(2027, 6, 1, 8, 0, tzinfo=UTC)]
    assert gaffer_fires(app, "once", YEAR_START, YEAR_END) == once

    daily = redbeat_fires(app, "daily", YEAR_START, YEAR_END)
    assert len(daily) == 148
    assert {fire.time().isoformat() for fire in daily} == {"09:00:00"}
    assert gaffer_fires(app, "daily", YEAR_START, YEAR_END) == daily

    # Crontab in the app's zone: the same instants on every day of 2027 but the two on
    # which London's clock changes at 01:00, as the import's note said.
    theirs = set(redbeat_fires(app, "nightly", YEAR_START, YEAR_END))
    ours = set(gaffer_fires(app, "nightly", YEAR_START, YEAR_END))
    assert len(ours) == 365
    if CELERY_VERSION >= (5, 5):
        # Celery 5.4 (make test-lowest) evaluates a crontab in a non-UTC app zone as if
        # in UTC all summer: 217 days apart, its own bug, which 5.5 fixed.
        assert sorted(theirs - ours) == CELERY_ONLY
        assert sorted(ours - theirs) == GAFFER_ONLY
        paused = set(redbeat_fires(app, "paused", YEAR_START, YEAR_END))
        assert paused == set(gaffer_fires(app, "paused", YEAR_START, YEAR_END))


# 28 March 2027: 01:30 does not exist in London (01:00 GMT -> 02:00 BST). Celery's
# crontab fires an hour after the gap's start, at 02:30 BST (01:30Z); Gaffer fires when
# the gap ends, 02:00 BST (01:00Z), per docs/dst.md. 31 October 2027: 01:30 happens twice
# (BST, then GMT); both fire once, at the first (00:30Z).
CELERY_VERSION = tuple(int(part) for part in celery.__version__.split(".")[:2])
CELERY_ONLY = [datetime(2027, 3, 28, 1, 30, tzinfo=UTC)]
GAFFER_ONLY = [datetime(2027, 3, 28, 1, 0, tzinfo=UTC)]


def test_unreachable_redis_is_one_line_with_the_password_masked(app: Celery) -> None:
    result = gaffer_cli(app, "import", "redbeat", "--redis-url", "redis://:s3cret@127.0.0.1:1/12")
    line = error_line(result)
    assert line.startswith(
        "error: redis_url: cannot read redbeat's schedule at redis://:***@127.0.0.1:1/12: "
        "ConnectionError: "
    )
    assert "s3cret" not in result.stdout + result.stderr
    assert ScheduleStore(app).list() == []

    app.conf.redbeat_redis_url = None
    app.conf.broker_url = "amqp://guest:hunter2@127.0.0.1:5672//"
    line = error_line(gaffer_cli(app, "import", "redbeat"))
    assert line == (
        "error: redis_url: amqp://guest:***@127.0.0.1:5672// is not a redis:// or rediss:// "
        "URL (redbeat's sentinel and cluster URLs are not read: pass --redis-url of the master)"
    )


def test_the_key_prefix_is_read_as_redbeat_builds_its_keys(app: Celery, redis_url: str) -> None:
    app.conf.redbeat_key_prefix = "jobs"
    save(app, "often", timedelta(minutes=5))
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    # redbeat appends ":schedule" to the prefix as given, and the name to the prefix.
    assert sorted(client.keys("jobs*")) == ["jobs:schedule", "jobsoften"]
    client.close()
    result = gaffer_cli(app, "import", "redbeat", "--dry-run")
    assert lines_of(result.stdout)["often"].startswith("often: added: t.report, every(300")
    line = error_line(gaffer_cli(app, "import", "redbeat", "--key-prefix", "jobs:", "--dry-run"))
    assert line == (
        "error: key_prefix: no redbeat schedule 'jobs::schedule', but 'jobs:schedule' exists: "
        "pass --key-prefix 'jobs' (redbeat appends ':schedule' to the prefix as given)"
    )
    empty = gaffer_cli(app, "import", "redbeat", "--key-prefix", "other:", "--dry-run")
    assert empty.stdout.strip() == ("no entries in redbeat's 'other::schedule': nothing to import")


def test_an_entry_that_never_ran_and_a_last_run_ahead_of_this_clock(
    app: Celery, redis_url: str
) -> None:
    save(app, "fresh", timedelta(minutes=5))
    client = redis.Redis.from_url(redis_url)
    client.hdel("redbeat:fresh", "meta")  # as redbeat reads it: last_run_at None
    client.close()
    ahead = datetime.now(UTC) + timedelta(hours=1)  # another machine's clock
    save(app, "skewed", timedelta(minutes=5)).reschedule(last_run_at=ahead)
    result = gaffer_cli(app, "import", "redbeat")
    assert result.exit_code == 0, (result.stdout, result.stderr)
    lines = lines_of(result.stdout)
    assert lines["fresh"] == (
        "fresh: added: t.report, every(300) (note: redbeat runs an interval from its last "
        "run; this entry never ran, so it fires at Gaffer's phase (multiples of the "
        "interval from the epoch))"
    )
    assert "is after this clock: starts now)" in lines["skewed"]
    skewed = ScheduleStore(app).get("skewed")
    assert skewed.schedule == every(300, anchor=ahead)
    assert skewed.watermark_at <= datetime.now(UTC)  # not after now: the store refuses that


def test_bad_entries_are_refused_one_by_one_and_the_good_ones_imported(
    app: Celery, redis_url: str
) -> None:
    """Members its Beat could not load, among entries redbeat saved: each is "cannot be
    mapped" with its reason, only it; the others are imported; exit status 1."""
    save(app, "first", timedelta(minutes=5))
    client = redis.Redis.from_url(redis_url)
    definition = (
        b'{"name": "%s", "task": "t.report", "schedule": {"__type__": "interval", "every": 60}}'
    )
    client.hset(b"redbeat:\xff\xfe-latin", "definition", definition % b"latin")
    client.set("redbeat:plain", "a string, not a hash")
    client.hset("redbeat:binary", "definition", b"\x80\x81\xfe binary")
    deep = b'{"name": "deep", "task": "t.report", "args": ' + b"[" * 50_000 + b"]" * 50_000 + b"}"
    client.hset("redbeat:deep", "definition", deep)
    client.hset("redbeat:evil\x1b[2J", "definition", b"{\x1b[31m")
    members = [b"redbeat:\xff\xfe-latin", b"redbeat:plain", b"redbeat:binary", b"redbeat:deep"]
    client.zadd("redbeat::schedule", {member: 10 + i for i, member in enumerate(members)})
    client.zadd("redbeat::schedule", {"redbeat:evil\x1b[2J": 20})
    client.close()
    save(app, "last", crontab(minute=0, hour=4))
    result = gaffer_cli(app, "import", "redbeat")
    assert result.exit_code == 1, (result.stdout, result.stderr)
    assert "\x1b" not in result.stdout
    lines = lines_of(result.stdout)
    assert lines["\\xff\\xfe-latin"] == (
        "\\xff\\xfe-latin: cannot be mapped: key: not UTF-8 text (invalid start byte at "
        "byte 8): not written by redbeat"
    )
    assert (
        lines["plain"]
        == "plain: cannot be mapped: key: the member is a Redis string, not redbeat's hash"
    )
    assert lines["binary"] == (
        "binary: cannot be mapped: definition: a binary value, not redbeat's JSON "
        "(not UTF-8: invalid start byte at byte 0)"
    )
    assert lines["deep"] == "deep: cannot be mapped: definition: JSON nested deeper than 64 levels"
    assert lines["evil\\x1b[2J"].startswith(
        "evil\\x1b[2J: cannot be mapped: definition: not valid JSON (Expecting"
    )
    assert lines["summary"] == "7 entries: 2 added, 0 changed, 0 unchanged, 5 cannot be mapped"
    assert {s.name for s in ScheduleStore(app).list()} == {"first", "last"}


def test_nothing_is_written_when_the_write_fails(app: Celery, database_url: str) -> None:
    for name in ("first", "second", "refused_here"):
        save(app, name, timedelta(minutes=5))
    with insert_refused(database_url, "refused_here"):
        result = gaffer_cli(app, "import", "redbeat")
    assert "refused by the test" in error_line(result)
    assert ScheduleStore(app).list() == []  # not even the two before it


def test_two_entries_of_one_name_import_the_first_and_refuse_the_second(
    app: Celery, redis_url: str
) -> None:
    save(app, "often", timedelta(minutes=5))
    client = redis.Redis.from_url(redis_url)
    client.hset(
        "redbeat:copy",
        "definition",
        '{"name": "often", "task": "t.report", "schedule": {"__type__": "interval", "every": 60}}',
    )
    client.zadd("redbeat::schedule", {"redbeat:copy": 2**40})  # due after the first
    client.close()
    result = gaffer_cli(app, "import", "redbeat")
    assert result.exit_code == 1, (result.stdout, result.stderr)
    lines = result.stdout.splitlines()
    assert lines[0].startswith("often: added: t.report, every(300")
    assert lines[1] == (
        "often: cannot be mapped: name: another entry of this import has the same name"
    )
    stored = ScheduleStore(app).get("often").schedule
    assert isinstance(stored, Every)
    assert stored.interval == 300
